#!/usr/bin/env bash
# Third tuning round: taller register tiles (5 or 6 rows), and the fused update.
set -uo pipefail
export KEISAN_BIN=$PWD/gpu/keisan KEISAN_TRACE=1
b() {
  local label=$1; shift
  timeout 120 gpu/keisan bench heat --skip-out-of-core --repetitions 5 --size-2d "" --json "$@" 2>/tmp/err | python3 -c "
import json,sys; r=json.load(sys.stdin); bw=r['ceilings']['copy_bandwidth']/1e9
print('%-24s'%'$label', '  '.join('%s %.1f (%.0f%%)'%(c['name'].replace('in-core 3D ',''), c['gcells_per_s'], 100*c['fraction_of_floor']) for c in r['cases']), ' copy %.0f'%bw)
" || { echo "$label FAILED"; tail -3 /tmp/err; }
  grep -h "temporal block:" /tmp/err | sed "s/^/      /"
}
for fused in "" 2; do
  if [ -n "$fused" ]; then export KEISAN_HEAT_FUSED=$fused; echo "== fused $fused"; else echo "== exact"; fi
  for cfg in "4x8x2 4" "5x8x2 4" "5x8x2 5" "4x10x2 4" "6x8x2 4" "6x8x2 5" "3x16x2 4" "3x16x2 5"; do
    set -- $cfg; KEISAN_HEAT_TB3=$1 b tile-$1-t$2 --temporal-block $2
  done
  for c in 96 192; do KEISAN_HEAT_TB3=5x8x2 KEISAN_HEAT_TB_CHUNK=$c b 5x8x2-chunk-$c --temporal-block 4; done
done
