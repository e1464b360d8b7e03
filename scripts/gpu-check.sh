#!/usr/bin/env bash
# Run on the GPU host from the repository root after scripts/gpu-build.sh:
# the test executables (CUDA tests included), then the benchmarks and the seed run.
# Logs land in $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
status=0
for t in gpu/tests/*; do
  echo "== $t"
  "$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "^test |skipped|result|panicked|cuda_matches|seed" || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
echo "== info --probe"; gpu/keisan info --probe | tee "$OUT/info.txt"
echo "== bench"
gpu/keisan bench jacobi --json > "$OUT/bench-f64.json"; gpu/keisan bench jacobi
gpu/keisan bench jacobi --precision f32
echo "== seed run"
for i in 1 2 3; do /usr/bin/time -f "process wall %e s" gpu/keisan run examples/jacobi-seed.toml --quiet --json > "$OUT/seed-run-$i.json"; done
gpu/keisan run examples/jacobi-seed.toml
gpu/keisan run examples/jacobi-seed.toml --out "$OUT/seed-out" -q --json > "$OUT/seed-with-output.json"
python3 - "$OUT" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/seed-*.json")):
    s = json.load(open(f)); t = s["timings"]
    print(f.split("/")[-1], "study %.1f ms" % (t["study_s"]*1e3), "context %.1f ms" % (t["context_s"]*1e3),
          "setup %.1f solve %.1f check %.1f download %.1f write %.1f total %.1f ms" % tuple(t[k]*1e3 for k in
          ["setup_s","solve_s","check_s","download_s","write_s","total_s"]), "resid %.6e err %.6e" % (s["final_residual"], s["solution_error"]))
import numpy as np
u = np.load(sys.argv[1] + "/seed-out/u.npy"); print("numpy.load u.npy:", u.shape, u.dtype, float(u.max()))
PY
rm -rf "$OUT/seed-out"
exit $status
