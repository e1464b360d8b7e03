#!/usr/bin/env bash
# Temporal blocking round: CUDA heat tests, then bench heat in-core (f32 default, f64 sweep).
set -uo pipefail
export KEISAN_BIN=$PWD/gpu/keisan
for t in heat_cuda heat_pyramid kernels_compile; do echo "== $t"; timeout 200 gpu/tests/$t --test-threads=1 2>&1 | grep -E "^test |result|panicked|differ" ; done
echo "== bench f32"; timeout 200 gpu/keisan bench heat --skip-out-of-core
for tb in 4 8; do echo "== bench f64 tb $tb"; timeout 100 gpu/keisan bench heat --skip-out-of-core --precision f64 --temporal-block $tb --repetitions 3; done
echo "== bench f32 tb 3"; timeout 100 gpu/keisan bench heat --skip-out-of-core --size-2d 4096x4096 --temporal-block 3 --repetitions 3
