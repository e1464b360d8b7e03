#!/usr/bin/env bash
# Every test executable on the GPU host (CUDA tests included), then `bench heat` and the
# model sweep: the figures a heat closing note cites. Run after scripts/gpu-build.sh.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u
status=0
for t in gpu/tests/*; do
  "$t" --test-threads=1 > "$OUT/$(basename "$t").log" 2>&1 || status=1
  echo "$(basename "$t"): $(grep -E '^test result' "$OUT/$(basename "$t").log" | tail -1) $(grep -c skipped "$OUT/$(basename "$t").log") skipped"
done
SKIP_TESTS=1 OUT=$OUT HEIGHTS=8,16,24,32 bash gpu/gpu-ooc.sh 2>&1 | sed -n '/== bench heat/,$p'
exit $status
