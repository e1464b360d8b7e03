#!/usr/bin/env bash
# Second tuning round: the register-tiled 3D temporal-blocking kernel (exact update, and
# the fused-multiply-add update behind KEISAN_HEAT_FUSED for comparison).
set -uo pipefail
export KEISAN_BIN=$PWD/gpu/keisan
for t in heat_cuda; do
  echo "== $t"; timeout 300 gpu/tests/$t --test-threads=1 2>&1 | grep -E "^test |result|panicked|differ|skipped"
done
b() {
  local label=$1; shift
  timeout 120 gpu/keisan bench heat --skip-out-of-core --repetitions 3 --size-2d "" --json "$@" 2>/tmp/err | python3 -c "
import json,sys; r=json.load(sys.stdin); bw=r['ceilings']['copy_bandwidth']/1e9
print('%-24s'%'$label', '  '.join('%s %.1f (%.0f%%)'%(c['name'].replace('in-core 3D ',''), c['gcells_per_s'], 100*c['fraction_of_floor']) for c in r['cases']), ' copy %.0f'%bw)
" || { echo "$label FAILED"; tail -3 /tmp/err; }
  grep -h "temporal block:" /tmp/err | sed "s/^/      /"
}
export KEISAN_TRACE=1
for fused in "" 1; do
  if [ -n "$fused" ]; then export KEISAN_HEAT_FUSED=1; echo "== fused"; else echo "== exact"; fi
  for t in 3 4 5 6 8; do b tb-$t --temporal-block $t; done
  for cfg in "4x8x2 4" "2x8x4 4" "2x8x4 3" "1x32x2 4" "2x32x2 4" "4x16x2 4" "2x32x2 6" "4x16x2 6" "2x32x2 8"; do
    set -- $cfg; KEISAN_HEAT_TB3=$1 b tile-$1-t$2 --temporal-block $2
  done
  for c in 64 256; do KEISAN_HEAT_TB_CHUNK=$c b chunk-$c-t4 --temporal-block 4; done
done
unset KEISAN_HEAT_FUSED
echo "== 256^3"
for t in 2 4 6; do b small-tb-$t --size-3d 256x256x256 --temporal-block $t; done
