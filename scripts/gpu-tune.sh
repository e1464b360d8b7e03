#!/usr/bin/env bash
# Heat kernel tuning round on the GPU host (after scripts/gpu-build.sh): the CUDA heat
# tests, then `bench heat` in-core over the step kernels' launch shapes and the 3D
# temporal-blocking tiles (KEISAN_HEAT_* overrides, src/solvers/heat/step_kernel.rs).
set -uo pipefail
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for t in heat_cuda heat_pyramid; do
  echo "== $t"; timeout 300 gpu/tests/$t --test-threads=1 2>&1 | grep -E "^test |result|panicked|differ|skipped"
done
b() { # label, then bench arguments; prints one line per case
  local label=$1; shift
  timeout 120 gpu/keisan bench heat --skip-out-of-core --repetitions 3 --json "$@" 2>/tmp/err | python3 -c "
import json,sys; r=json.load(sys.stdin); bw=r['ceilings']['copy_bandwidth']/1e9
for c in r['cases']: print('%-28s %-34s %7.1f Gcell/s %6.1f%%  (copy %.0f GB/s)'%('$label', c['name'], c['gcells_per_s'], 100*c['fraction_of_floor'], bw))
" || { echo "$label FAILED"; tail -3 /tmp/err; }
  grep -h "temporal block:" /tmp/err | sed "s/^/   $label /"
}
export KEISAN_TRACE=1
echo "== single-step 3D 512^3 and 2D 16384^2"
KEISAN_HEAT_VEC=0 b scalar --temporal-block 1
b vec-default --temporal-block 1
for blk in 32x4 32x16 64x4 64x2 128x2; do KEISAN_HEAT_VEC_BLOCK=$blk b vec-$blk --size-2d "" --temporal-block 1; done
for blk in 32x1 64x1 256x1 512x1; do KEISAN_HEAT_VEC_BLOCK=$blk b vec-$blk --size-3d "" --temporal-block 1; done
for m in 8 16 64 128; do KEISAN_HEAT_MARCH=$m b march-$m --temporal-block 1; done
for g in 1 4; do KEISAN_HEAT_VGROUP=$g b group-$g --temporal-block 1; done
echo "== temporal 3D 512^3 (default tiles)"
for t in 2 3 4 5 6 8; do b tb-$t --size-2d "" --temporal-block $t; done
echo "== temporal 3D tiles (rows x warps x values per thread)"
for cfg in "4x8x2 4" "5x8x2 4" "4x10x2 4" "4x12x2 4" "2x24x2 4" "3x16x2 3" "3x16x2 5" "2x16x2 6"; do
  set -- $cfg; KEISAN_HEAT_TB3=$1 b tile-$1-t$2 --size-2d "" --temporal-block $2
done
for c in 64 96 256; do KEISAN_HEAT_TB_CHUNK=$c b chunk-$c --size-2d "" --temporal-block 4; done
echo "== temporal 3D 256^3 and f64"
for t in 2 4 6; do b small-tb-$t --size-3d 256x256x256 --size-2d "" --temporal-block $t; done
for t in 2 3 4 5 6; do b f64-tb-$t --precision f64 --size-2d "" --temporal-block $t; done
