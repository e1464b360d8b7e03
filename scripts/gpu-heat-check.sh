#!/usr/bin/env bash
# Quick heat round: the CUDA heat tests and one `bench heat` at its defaults.
set -uo pipefail
export KEISAN_BIN=$PWD/gpu/keisan
date -u
for t in heat_cuda heat_pyramid kernels_compile; do
  echo "== $t"; timeout 300 gpu/tests/$t --test-threads=1 2>&1 | grep -E "^test |result|panicked|differ" | head -20
done
echo "== bench heat"; date -u
KEISAN_TRACE=1 timeout 300 gpu/keisan bench heat 2>&1 | grep -E "temporal block|\[|pyramid /|model:|blocking /" | grep -v "pyramid pass"
date -u
