#!/usr/bin/env bash
# Out-of-core with several-step box passes: the heat CUDA tests, `bench heat` (in-core
# and out-of-core), the model sweep and the 90.9 GB run. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
date -u
for t in heat_cuda heat_pyramid kernels_compile; do
  echo "== $t"; timeout 300 gpu/tests/$t --test-threads=1 2>&1 | grep -E "^test |result|panicked|differ" | head -20
done
echo "== bench heat"; date -u
KEISAN_TRACE=1 timeout 300 gpu/keisan bench heat --size-2d "" 2>&1 | grep -vE "^\s*$" | grep -v "pyramid pass" | tail -22
echo "== bench heat, box passes off (temporal block 1 for the out-of-core cases only is not a flag: in-core too)"
timeout 300 gpu/keisan bench heat --size-2d "" --temporal-block 1 2>&1 | grep -E "out-of-core|pyramid /" | head -6
echo "== model"
timeout 200 gpu/keisan model heat examples/heat-ooc-1024.toml --heights 8,16,24,32,48 2>&1 | tail -9
echo "== huge"; date -u
/usr/bin/time -v gpu/keisan run examples/heat-3d-huge.toml -q --json > "$OUT/huge.json" 2> "$OUT/huge.err"
python3 -c "
import json; s=json.load(open('$OUT/huge.json')); print({k: round(v,3) for k,v in s['timings'].items()}); l=s['layout']; print({k: l.get(k) for k in ['decomposition','pyramid_height','tasks','predicted_s','bound','costs']})"
grep -E "Maximum resident|Elapsed" "$OUT/huge.err"; date -u
