#!/usr/bin/env bash
# Final heat round on the GPU host (after scripts/gpu-build.sh): every test executable,
# `bench heat` at its defaults (f32, then f64), a small tile sweep around the default,
# the model sweep and the study-sized examples. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u
for t in gpu/tests/*; do
  echo "== $t"; timeout 300 "$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "result|panicked|FAILED|skipped" | head -5
done
show() { python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); print('copy %.1f GB/s'%(r['ceilings']['copy_bandwidth']/1e9))
for c in r['cases']: print('  %-44s %-16s %4d steps %8.4f s %7.1f Gcell/s %6.1f%%'%(c['name'], 'x'.join(map(str,c['shape'])), c['steps'], c['seconds'], c['gcells_per_s'], 100*c['fraction_of_floor']), {k: c['layout'].get(k) for k in ['decomposition','pyramid_height','tasks','predicted_s']} if 'out-of-core' in c['name'] else '')
" "$1"; }
echo "== bench heat (defaults)"; date -u
timeout 300 gpu/keisan bench heat --json > "$OUT/bench-heat.json" && show "$OUT/bench-heat.json"
echo "== bench heat f64"
timeout 200 gpu/keisan bench heat --precision f64 --skip-out-of-core --json > "$OUT/bench-heat-f64.json" && show "$OUT/bench-heat-f64.json"
echo "== 256^3 and 1024^3 in-core"
timeout 100 gpu/keisan bench heat --skip-out-of-core --size-3d 256x256x256 --size-2d 4096x4096 --json > "$OUT/bench-small.json" && show "$OUT/bench-small.json"
timeout 200 gpu/keisan bench heat --skip-out-of-core --size-3d 1024x1024x1024 --size-2d "" --steps 20 --repetitions 3 --json > "$OUT/bench-1024.json" && show "$OUT/bench-1024.json"
echo "== tile sweep (3D 512^3, f32)"
export KEISAN_TRACE=1
for cfg in "3x16x2 3" "3x16x2 5" "3x16x2 6" "2x24x2 4" "3x20x2 4" "4x12x2 4"; do
  set -- $cfg
  KEISAN_HEAT_TB3=$1 timeout 100 gpu/keisan bench heat --skip-out-of-core --size-2d "" --repetitions 5 --temporal-block $2 --json 2>/tmp/err > /tmp/b.json && echo "$cfg" && show /tmp/b.json | tail -1; grep -h "temporal block" /tmp/err
done
KEISAN_HEAT_TB_CHUNK=96 timeout 100 gpu/keisan bench heat --skip-out-of-core --size-2d "" --repetitions 5 --json 2>/dev/null > /tmp/b.json && echo "chunk 96" && show /tmp/b.json | tail -1
unset KEISAN_TRACE
echo "== model"
timeout 200 gpu/keisan model heat examples/heat-ooc-1024.toml --heights 8,16,24,32 2>&1 | tail -8
echo "== examples (study sizes)"
for e in heat-2d-16384 heat-3d-640; do
  gpu/keisan run examples/$e.toml -q --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('$e', {k: round(v,4) for k,v in s['timings'].items()}, s.get('solution_error'))"
done
date -u
