#!/usr/bin/env bash
# Traced out-of-core passes (KEISAN_TRACE) for a few layouts of examples/heat-ooc-1024.toml.
set -uo pipefail
for args in "--set heat.decomposition=\"2d\" --set heat.pyramid_height=16" \
            "--set heat.decomposition=\"1d\" --set heat.pyramid_height=8" \
            "--set heat.decomposition=\"2d\" --set heat.pyramid_height=16 --set heat.pin_host_grid=false" \
            ${EXTRA:-}; do
  echo "== $args"
  eval KEISAN_TRACE=1 timeout 100 gpu/keisan run examples/heat-ooc-1024.toml --set heat.steps=48 $args 2>&1 \
    | grep -E "pyramid pass|layout|time |note|error" | head
done
