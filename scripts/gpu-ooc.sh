#!/usr/bin/env bash
# Out-of-core checks and figures on the GPU host (after scripts/gpu-build.sh here):
# CUDA pyramid tests, the heat bench, the model sweep, one traced pass with the grid
# pinned and one staged.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
ulimit -l
[ -n "${SKIP_TESTS:-}" ] || for t in heat_pyramid; do echo "== $t"; timeout 200 gpu/tests/$t --test-threads=1 2>&1 | tail -12; done
echo "== bench heat"
timeout 240 gpu/keisan bench heat --json ${BENCH_ARGS:-} > "$OUT/bench-heat.json"; python3 -c "
import json; r=json.load(open('$OUT/bench-heat.json'))
print('copy GB/s', r['ceilings']['copy_bandwidth']/1e9)
for c in r['cases']:
  l=c['layout']; print(c['name'], c['shape'], c['steps'], '%.4f s'%c['seconds'], '%.1f Gcell/s'%c['gcells_per_s'], '%.1f%%'%(100*c['fraction_of_floor']), l.get('decomposition'), l.get('pyramid_height'), l.get('tasks'), l.get('predicted_s'), l.get('bound'), 'direct', l.get('direct'), 'pin s', l.get('pin_seconds'))
"
echo "== model"
timeout 200 gpu/keisan model heat examples/heat-ooc-1024.toml --heights ${HEIGHTS:-8,16,24,32} 2>&1 | tail -12
echo "== traced, pinned and staged"
for pin in true false; do
  KEISAN_TRACE=1 timeout 100 gpu/keisan run examples/heat-ooc-1024.toml --set heat.steps=32 \
    --set heat.pin_host_grid=$pin 2>&1 | grep -E "pyramid|layout|time |note" | head
done
