#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for t in heat_cuda heat_pyramid; do echo "== $t"; timeout 200 gpu/tests/$t --test-threads=1 2>&1 | tail -15; done
echo "== bench heat"
timeout 240 gpu/keisan bench heat --json > "$OUT/bench-heat.json"; python3 -c "
import json; r=json.load(open('$OUT/bench-heat.json'))
print(r['ceilings']['copy_bandwidth']/1e9)
for c in r['cases']: print(c['name'], c['shape'], c['steps'], '%.4f s'%c['seconds'], '%.1f Gcell/s'%c['gcells_per_s'], '%.1f%%'%(100*c['fraction_of_floor']), c['layout'].get('decomposition'), c['layout'].get('pyramid_height'), c['layout'].get('tasks'), c['layout'].get('predicted_s'), c['layout'].get('bound'), c['layout'].get('costs'))
"
echo "== model"
timeout 200 gpu/keisan model heat examples/heat-ooc-1024.toml --heights 4,8,16,24,32,48 2>&1 | tail -20
echo "== examples (study sizes)"
gpu/keisan run examples/heat-2d-16384.toml -q --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('2d16384', s['timings'])"
gpu/keisan run examples/heat-3d-640.toml -q --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('3d640', s['timings'], s['solution_error'])"
