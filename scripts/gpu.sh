#!/usr/bin/env bash
# keisan on a GPU host that has no Rust. Build here, run there:
#
#   scripts/gpu.sh build        # here: release binary + test executables into gpu/ (git-ignored)
#   gpu/gpu.sh test             # there, from the repository root: every test executable,
#                               #   the CUDA tests included (KEISAN_BIN points the CLI tests at gpu/keisan)
#   gpu/gpu.sh bench            # there: info --probe, bench jacobi (f64, f32), bench heat (f32, f64),
#                               #   model heat, the seed run and the study-size heat examples
#   gpu/gpu.sh tune             # there: heat kernel launch shapes and tiles (KEISAN_HEAT_* overrides)
#   gpu/gpu.sh es               # there: bench electrostatics (f32, f64, time to solution)
#   gpu/gpu.sh es-tune          # there: electrostatics launch shapes (KEISAN_ES_* overrides)
#   gpu/gpu.sh es-bits          # there: the CUDA-vs-CPU test (4-bit class codes included),
#                               #   then bench electrostatics with 4- and 8-bit codes (f32, f64, Poisson)
#   gpu/gpu.sh multi            # there: bench advection on slabs over DEVICES (default 0,1)
#   gpu/gpu.sh heat-multi       # there: heat 3D on slabs, weak and strong scaling (STEPS=2000)
#   gpu/gpu.sh es-multi         # there: electrostatics on slabs, weak and strong scaling
#   gpu/gpu.sh es-mpi           # there (mpi build): electrostatics, 2 GPU ranks against one process
#                               #   (whole files, pieces, a restart from per-rank checkpoints)
#   gpu/gpu.sh nbody-mpi        # there (mpi build): N-body, 2 ranks on 2 GPUs against one process
#   gpu/gpu.sh pieces           # there (mpi build): pieces and per-rank checkpoints on GPU ranks
#   gpu/gpu.sh mpi              # there, after FEATURES="--features mpi" scripts/gpu.sh build:
#                               #   mpirun -np 2 against one process (files, contest 5 time)
#   gpu/gpu.sh nccl             # there (mpi build, 2+ GPUs): halos over NCCL against peer copies
#                               #   and MPI: the same files, contest 5 and the slab benches timed
#   gpu/gpu.sh memcheck         # there: compute-sanitizer memcheck of small slab runs (every
#                               #   decomposing solver, two GPUs where there are, two slabs of one)
#                               #   and of advection's tests (narrow passes, bulk-copy steps)
#   gpu/gpu.sh next             # there (x2 host, mpi build): the two-GPU figures issue 13 lacks
#                               #   (heat, jacobi, electrostatics on 0,1), the tests, N-body ranks
#   gpu/gpu.sh overlap          # there (DEVICES, default 0,1): bench heat, electrostatics, jacobi
#                               #   on slabs with KEISAN_PASS_TRACE=1, the copy stream's priority
#                               #   and the bands' placement varied (when each pass's halo is ready)
#   gpu/gpu.sh four             # there (x2/x4 host): N-body, slabs and the diagnosis knobs on all and 2 GPUs
#   gpu/gpu.sh slabs            # there (x2/x4 host): each GPU alone, then electrostatics and heat slabs
#                               #   on all and on 2 GPUs (pass trace, bands first), the slab tests
#   gpu/gpu.sh pulls            # there (x2/x4 host): electrostatics and heat slabs with the halo pulled three ways
#   gpu/gpu.sh scale            # there (x2/x4/x8 host, mpi build): issue 15's scaling, 1 -> 2 -> 4
#                               #   (-> 8) GPUs in one process and by MPI ranks, equality with one GPU
#   gpu/gpu.sh all              # there: test, then bench
#
# Logs and JSON reports land in $OUT (default gpu-out/); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
K=gpu/keisan
export KEISAN_BIN=$PWD/gpu/keisan

build() {
  set -e
  cargo build --release ${FEATURES:-}
  rm -rf gpu && mkdir -p gpu/tests
  cp target/release/keisan gpu/
  cargo test --release ${FEATURES:-} --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["profile"]["test"]:
        name = m["target"]["name"] if m["target"]["kind"] != ["lib"] else "lib"
        shutil.copy(exe, "gpu/tests/" + name)
'
  strip gpu/keisan gpu/tests/*  # the device call carries at most 64 MiB
  cp scripts/gpu.sh gpu/
  ls -la gpu gpu/tests
}

device() { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u; }

tests() {
  device; mkdir -p "$OUT"
  local status=0
  for t in gpu/tests/*; do
    local log="$OUT/test-$(basename "$t").log"
    timeout 400 "$t" --test-threads=1 > "$log" 2>&1 || status=1
    echo "$(basename "$t"): $(grep -E '^test result' "$log" | tail -1) ($(grep -c '^skipped' "$log") skipped)"
    grep -E "FAILED|panicked" "$log" | head -5
  done
  return $status
}

# One line per case of a `bench heat --json` report.
heat_table() { python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); print('  copy %.1f GB/s'%(r['ceilings']['copy_bandwidth']/1e9))
for c in r['cases']:
  l=c['layout']; print('  %-40s %-16s %4d steps %8.4f s %7.1f Gcell/s %6.1f%%'%(c['name'], 'x'.join(map(str,c['shape'])), c['steps'], c['seconds'], c['gcells_per_s'], 100*c['fraction_of_floor']), (l.get('decomposition'), l.get('pyramid_height'), l.get('tasks'), l.get('predicted_s')) if 'out-of-core' in c['name'] else '')
" "$1"; }

bench() {
  device; mkdir -p "$OUT"
  $K info --probe | tee "$OUT/info.txt"
  echo "== bench jacobi f64"; $K bench jacobi --json > "$OUT/bench-jacobi-f64.json"; $K bench jacobi
  echo "== bench jacobi f32"; $K bench jacobi --precision f32
  echo "== bench heat f32"; timeout 300 $K bench heat --json > "$OUT/bench-heat.json" && heat_table "$OUT/bench-heat.json"
  echo "== bench heat f64"; timeout 200 $K bench heat --precision f64 --skip-out-of-core --json > "$OUT/bench-heat-f64.json" && heat_table "$OUT/bench-heat-f64.json"
  echo "== model heat"; timeout 200 $K model heat examples/heat-ooc-1024.toml --heights ${HEIGHTS:-8,16,24,32} 2>/dev/null
  echo "== seed run"
  for i in 1 2 3; do $K run examples/jacobi-seed.toml --quiet --json --out "$OUT/seed-$i" > "$OUT/seed-run-$i.json"; done
  python3 - "$OUT" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/seed-run-*.json")):
    s = json.load(open(f)); t = s["timings"]
    print(f.split("/")[-1], "study %.1f ms" % (t["study_s"]*1e3), "solve %.1f ms" % (t["solve_s"]*1e3),
          "context %.1f ms" % (t["context_s"]*1e3), "resid %.6e err %.6e" % (s["final_residual"], s["solution_error"]))
PY
  rm -rf "$OUT"/seed-[0-9]
  echo "== study-size heat examples"
  for e in heat-2d-16384 heat-3d-640; do
    $K run examples/$e.toml -q --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('$e', {k: round(v,4) for k,v in s['timings'].items()}, s.get('solution_error'))"
  done
}

es() {
  device; mkdir -p "$OUT"
  echo "== bench electrostatics f32"; $K bench electrostatics --json > "$OUT/bench-es-f32.json"; $K bench electrostatics
  echo "== bench electrostatics f64"; $K bench electrostatics --precision f64
  echo "== electrostatics time to solution f64"; $K bench electrostatics --poisson --precision f64 --repetitions 5
  $K bench electrostatics --poisson --precision f64 --repetitions 5 --json > "$OUT/bench-es-poisson.json"
  echo "== electrostatics CPU, 1 and 2 threads (96^3 cells)"
  for t in 1 2; do $K --threads $t bench electrostatics --backend cpu | grep Gnode; done
}

# 4-bit class codes (opt-in until this passes): their test, then both code widths timed.
es_bits() {
  device
  timeout 600 gpu/tests/electrostatics_cuda 2>&1 | grep -E "^test |test result|panicked"
  for bits in 4 8; do
    for prec in f32 f64; do
      echo "$bits-bit $prec: $(KEISAN_ES_CLASS_BITS=$bits $K bench electrostatics --kernel per-colour --precision $prec | grep -E 'per iteration|B/node' | tr -s ' ' | tr '\n' ' ')"
    done
    echo "$bits-bit Poisson: $(KEISAN_ES_CLASS_BITS=$bits $K bench electrostatics --poisson --precision f64 --repetitions 5 | grep 'to solution')"
  done
}

es_tune() {
  device
  for prec in f32 f64; do
    for minb in 4 6 8; do
      for blk in 32x8 32x4 64x4; do
        for planes in 16 64; do
          echo "$prec minb $minb block $blk planes $planes: $(KEISAN_ES_MINB=$minb KEISAN_ES_BLOCK=$blk KEISAN_ES_PLANES=$planes $K bench electrostatics --precision $prec --repetitions 3 --iterations 100 | grep Gnode)"
        done
      done
    done
  done
}

tune() {
  device
  b() { # label, then bench arguments; one line per case
    local label=$1; shift
    timeout 120 $K bench heat --skip-out-of-core --repetitions 3 --json "$@" 2>/tmp/err > /tmp/b.json \
      && heat_table /tmp/b.json | tail -n +2 | sed "s/^/$label /" || { echo "$label FAILED"; tail -3 /tmp/err; }
  }
  echo "== single-step launch shapes"
  KEISAN_HEAT_VEC=0 b scalar --temporal-block 1
  for blk in 32x4 64x4 128x2; do KEISAN_HEAT_VEC_BLOCK=$blk b vec-$blk --size-2d "" --temporal-block 1; done
  for m in 16 64; do KEISAN_HEAT_MARCH=$m b march-$m --temporal-block 1; done
  echo "== 3D temporal blocking: steps per pass and tiles (rows x warps x values per thread)"
  for t in 2 3 4 5 6; do b tb-$t --size-2d "" --temporal-block $t; done
  for cfg in "4x8x2 4" "2x24x2 4" "3x16x2 5"; do
    set -- $cfg; KEISAN_HEAT_TB3=$1 b tile-$1-t$2 --size-2d "" --temporal-block $2
  done
}

# Decomposed runs over every GPU of the host (slabs; the x2 host): bench advection on
# the listed devices against the first alone.
multi() {
  device; nvidia-smi topo -m | head -4
  local d=${DEVICES:-0,1}
  for args in "" "--velocity kernel" "--precision f64"; do
    echo "== bench advection --devices $d $args"; timeout 150 $K bench advection --devices $d $args | tail -3
  done
  echo "== bench advection --devices 0,0 (two slabs on one device)"; timeout 150 $K bench advection --devices 0,0 | tail -2
}

# Heat 3D on slabs, from the run summaries: weak (512³ per GPU) and strong scaling.
heat_multi() {
  device
  local steps=${STEPS:-2000}
  t() { $K run examples/heat-3d-640.toml --set "heat.shape=$1" --set heat.dt=2e-7 \
        --set heat.steps=$steps --quiet --json "${@:2}" |
        python3 -c "import json,sys; print('solve %.3f s' % json.load(sys.stdin)['timings']['solve_s'])"; }
  for cfg in "[512,512,512]|--devices 0" "[1024,512,512]|--devices 0,1" "[1024,512,512]|--devices 0" \
             "[512,512,512]|--devices 0,0" "[512,512,512]|--devices 0,1"; do
    local shape=${cfg%%|*} args=${cfg#*|}
    echo "== heat 3D $shape f32 $steps steps $args: $(t "$shape" $args)"
  done
}

# Electrostatics under mpirun on GPUs (FEATURES=--features mpi build): 2 ranks against one
# process on the microstrip example; V.npy must be the same bytes, the iterations equal.
es_mpi() {
  device
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local k=$PWD/$K ex=$PWD/examples/electrostatics-microstrip.toml w; w=$(mktemp -d)
  (cd "$w" && $k run "$ex" -q --out one && timeout 200 mpirun -np 2 $k run "$ex" -q --out two)
  cmp -s "$w/one/V.npy" "$w/two/V.npy" && echo "es V.npy same" || echo "es V.npy DIFFERS"
  # One piece per GPU rank, and a per-rank checkpoint restarted on 2 ranks.
  (cd "$w" && timeout 200 mpirun -np 2 $k run "$ex" -q --out pieces --set 'output.pieces="per-rank"' &&
     timeout 200 mpirun -np 2 $k run "$ex" -q --out half --set 'output.pieces="per-rank"' \
       --set electrostatics.max_iterations=1000 --checkpoint-every 1000 &&
     timeout 200 mpirun -np 2 $k run "$ex" -q --out rest --restart half/checkpoint.keisan)
  python3 - "$w" <<'PY'
import struct, sys, os
w = sys.argv[1]
def payload(p):
    b = open(os.path.join(w, p), 'rb').read(); n = struct.unpack('<H', b[8:10])[0]
    return b[10 + n:]
whole = payload('one/V.npy')
print('es pieces put together', 'the same bytes' if payload('pieces/V_r0000.npy') + payload('pieces/V_r0001.npy') == whole else 'DIFFER')
print('es restart from per-rank checkpoint', 'the same bytes' if payload('rest/V.npy') == whole else 'DIFFERS')
PY
  for d in one two pieces rest; do
    python3 -c "import json; s=json.load(open('$w/$d/summary.json')); print('$d', s['device'][:60], s['iterations'], s['status'], s['final_residual'])"
  done
}

# Pieces and per-rank checkpoints on GPU ranks (mpi build; 2 ranks sharing the GPU or one
# each): heat 3D, advection, Jacobi and electrostatics against one process on the GPU.
# (Not indented: its problem files are here-documents.)
pieces() {
device
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
k=$PWD/gpu/keisan; w=$(mktemp -d); ex=$PWD/examples
date -u +%H:%M:%S
cat > $w/heat.toml <<'T'
solver = "heat"
precision = "f32"
[heat]
shape = [130, 64, 128]
dt = 1e-5
steps = 40
initial = { preset = "hot_box" }
[output]
every = 20
T
cat > $w/adv.toml <<'T'
solver = "advection"
[advection]
nx = 1024
ny = 777
steps = 64
cfl = 0.9
velocity = { kind = "rotation" }
initial = { preset = "zalesak" }
[output]
every = 32
T
cd $w
P='output.pieces="per-rank"'
for case in "heat.toml u heat.steps 20" "adv.toml f advection.steps 32" "$ex/jacobi-seed.toml u jacobi.max_iterations 50" "$ex/electrostatics-microstrip.toml V electrostatics.max_iterations 1000"; do
  set -- $case; f=$1; field=$2; key=$3; half=$4; name=$(basename $f .toml)
  $k run $f -q --out $name-one || echo "$name one FAILED"
  timeout 200 mpirun -np 2 $k run $f -q --out $name-pieces --set "$P" || echo "$name pieces FAILED"
  timeout 200 mpirun -np 2 $k run $f -q --out $name-ck --set "$P" --set $key=$half --checkpoint-every $half || echo "$name ck FAILED"
  timeout 200 mpirun -np 2 $k run $f -q --out $name-rest --restart $name-ck/checkpoint.keisan 2>&1 | tail -2
  python3 - $name $field <<'PY'
import struct, sys, os
name, field = sys.argv[1], sys.argv[2]
def payload(p):
    b = open(p, 'rb').read(); n = struct.unpack('<H', b[8:10])[0]
    return b[10 + n:]
whole = payload(f'{name}-one/{field}.npy')
pieces = payload(f'{name}-pieces/{field}_r0000.npy') + payload(f'{name}-pieces/{field}_r0001.npy')
rest = payload(f'{name}-rest/{field}.npy') if os.path.exists(f'{name}-rest/{field}.npy') else b''
print(name, 'pieces', 'same bytes' if pieces == whole else 'DIFFER', '| restart from per-rank checkpoint', 'same bytes' if rest == whole else 'DIFFERS')
PY
done
cd - >/dev/null || true
}

# N-body under mpirun (mpi build), one rank per GPU: 2 ranks against one process (the
# particles, and two 2-rank runs against each other), then timings at N = 2^16 and 2^20
# against one GPU and against one process on both GPUs.
nbody_mpi() {
  device
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local k=$PWD/$K ex=$PWD/examples/nbody-plummer.toml w; w=$(mktemp -d)
  local small="--set nbody.n=5000 --set nbody.end_time=0.25"
  (cd "$w" && $k run "$ex" -q $small --out one && timeout 120 mpirun -np 2 $k run "$ex" -q $small --out two &&
     timeout 120 mpirun -np 2 $k run "$ex" -q $small --out again)
  python3 - "$w" <<'PY'
import glob, struct, sys, os
def npy(path):
    b = open(path, 'rb').read(); n = struct.unpack('<H', b[8:10])[0]
    return struct.unpack('<%dd' % ((len(b) - 10 - n) // 8), b[10 + n:])
w = sys.argv[1]
last = lambda d: sorted(glob.glob(os.path.join(w, d, 'particles_*.npy')))[-1]
a, b, c = npy(last('one')), npy(last('two')), npy(last('again'))
print('2 ranks vs one process: max |diff| %.2e over %d values; two 2-rank runs %s' %
      (max(abs(x - y) for x, y in zip(a, b)), len(a), 'the same bytes' if b == c else 'DIFFER'))
PY
  solve() { python3 -c "import json,sys; d=json.load(sys.stdin); print('$1: solve %.3f s' % d['timings']['solve_s'])"; }
  for cfg in "65536 1" "1048576 0.04"; do
    set -- $cfg
    local args="--set nbody.n=$1 --set nbody.end_time=$2"
    echo "== N = $1, end_time $2"
    (cd "$w" && $k run "$ex" -q --json $args --devices 0 | solve "one process, GPU 0")
    (cd "$w" && timeout 300 mpirun -np 2 $k run "$ex" -q --json $args | solve "2 ranks, one GPU each")
    (cd "$w" && $k run "$ex" -q --json $args --devices 0,1 | solve "one process, GPUs 0 and 1")
  done
}

# Electrostatics on slabs: weak (512³ per GPU) and strong scaling, f32 and f64, from the
# run summaries (the grounded-box Poisson example, a fixed number of iterations).
es_multi() {
  device
  t() { $K run examples/electrostatics-poisson-128.toml --set electrostatics.x.cells=511 \
        --set electrostatics.y.cells=511 --set "electrostatics.z.cells=$1" \
        --set electrostatics.tolerance=0 --set "electrostatics.max_iterations=$3" \
        --precision "$2" --quiet --json "${@:4}" |
        python3 -c "import json,sys; d=json.load(sys.stdin); s=d['timings']['solve_s']; print('solve %.3f s, %.1f us/iteration' % (s, 1e6*s/d['iterations']))"; }
  for prec in "f32 300" "f64 150"; do
    set -- $prec
    for cfg in "511|--devices 0" "1023|--devices 0,1" "1023|--devices 0" "511|--devices 0,1" "511|--devices 0,0"; do
      local cells=${cfg%%|*} args=${cfg#*|}
      echo "== electrostatics 512x512x$((cells + 1)) $1 $2 iterations $args: $(t "$cells" "$1" "$2" $args)"
    done
  done
}

# MPI on GPUs (binary built with FEATURES=--features mpi): 2 ranks against one process,
# the same files, and contest 5 for 512 steps timed three times.
mpi_gpu() {
  device
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local k=$PWD/$K w; w=$(mktemp -d)
  printf 'solver = "advection"\n[advection]\nnx = 1024\nny = 777\nsteps = 64\ncfl = 0.9\nvelocity = { kind = "rotation" }\ninitial = { preset = "zalesak" }\n[output]\nevery = 32\n' > "$w/a.toml"
  printf 'solver = "heat"\nprecision = "f32"\n[heat]\nshape = [130, 64, 128]\ndt = 2e-6\nsteps = 40\ninitial = { preset = "hot_box" }\n[output]\nevery = 20\n' > "$w/h.toml"
  for f in a h; do
    (cd "$w" && $k run $f.toml -q --out one-$f && timeout 120 mpirun -np 2 $k run $f.toml -q --out two-$f)
    for x in $(cd "$w/one-$f" && ls *.npy diagnostics.csv); do
      cmp -s "$w/one-$f/$x" "$w/two-$f/$x" && echo "$f $x same" || echo "$f $x DIFFERS"
    done
  done
  solve() { python3 -c "import json,sys; print('$1 solve %.3f s' % json.load(sys.stdin)['timings']['solve_s'])"; }
  for n in 1 2 3; do
    $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 | solve "one process"
    timeout 200 mpirun -np 2 $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 | solve "2 ranks"
  done
  $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 --devices 0,1 | solve "1 process, 2 GPUs"
}

# Halo blocks over NCCL (--halo nccl; mpi build, a host with two GPUs or more): the NCCL
# test, 2 GPU ranks with NCCL against one process (the same files, examples too), the
# contest-5 time with either transport, and the slab benches with each.
nccl() {
  device
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout 300 gpu/tests/nccl --test-threads=1 2>&1 | grep -vE "^(running|$)" | tail -20
  local k=$PWD/$K w; w=$(mktemp -d)
  printf 'solver = "advection"\n[advection]\nnx = 1024\nny = 777\nsteps = 64\ncfl = 0.9\nvelocity = { kind = "rotation" }\ninitial = { preset = "zalesak" }\n[output]\nevery = 32\n' > "$w/a.toml"
  printf 'solver = "heat"\nprecision = "f32"\n[heat]\nshape = [130, 64, 128]\ndt = 2e-6\nsteps = 40\ninitial = { preset = "hot_box" }\n[output]\nevery = 20\n' > "$w/h.toml"
  cp examples/electrostatics-microstrip.toml "$w/e.toml"
  for f in a h e; do
    (cd "$w" && $k run $f.toml -q --out one-$f && timeout 200 mpirun -np 2 $k run $f.toml -q --halo nccl --out two-$f)
    for x in $(cd "$w/one-$f" && ls *.npy *.csv); do
      cmp -s "$w/one-$f/$x" "$w/two-$f/$x" && echo "$f $x same (2 ranks, NCCL)" || echo "$f $x DIFFERS"
    done
  done
  # Residual histories: one process against 2 ranks over MPI and over NCCL.
  (cd "$w" && timeout 200 mpirun -np 2 $k run e.toml -q --out mpi-e)
  python3 -c "
import csv,sys
def r(d): return [[float(x) for x in row[1:]] for row in list(csv.reader(open(d+'/residuals.csv')))[1:]]
a=r(sys.argv[1]+'/one-e')
for n in ('mpi-e','two-e'):
  b=r(sys.argv[1]+'/'+n); d=max(abs(x-y)/max(abs(x),1e-300) for ra,rb in zip(a,b) for x,y in zip(ra,rb))
  print('residuals.csv, 2 ranks (%s): %d rows against %d, largest relative difference %.2e'%(n,len(b),len(a),d))
" "$w"
  solve() { python3 -c "import json,sys; print('$1 solve %.3f s' % json.load(sys.stdin)['timings']['solve_s'])"; }
  for n in 1 2; do
    $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 | solve "one process"
    timeout 200 mpirun -np 2 $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 | solve "2 ranks, MPI"
    timeout 200 mpirun -np 2 $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 --halo nccl | solve "2 ranks, NCCL"
    timeout 200 mpirun -np 2 $K run examples/gpu-challenge-5.toml -q --json --halo nccl | solve "2 ranks, NCCL, 2048 steps"
    timeout 200 mpirun -np 2 $K run examples/gpu-challenge-5.toml -q --json | solve "2 ranks, MPI, 2048 steps"
    for h in auto nccl; do
      $K run examples/gpu-challenge-5.toml -q --json --set advection.steps=512 --devices 0,1 --halo $h | solve "1 process, 2 GPUs, --halo $h"
    done
  done
  for h in auto nccl; do
    echo "== --halo $h"
    timeout 90 $K bench advection --devices 0,1 --halo $h 2>&1 | tail -4
    timeout 90 $K bench heat --devices 0,1 --steps 300 --size-2d "" --halo $h 2>&1 | grep -E "weak|strong|beyond"
    timeout 90 $K bench electrostatics --devices 0,1 --iterations 200 --halo $h 2>&1 | grep -E "weak,|strong,|beyond"
  done
}

# compute-sanitizer's memcheck over small slab runs of every decomposing solver, on
# DEVICES (default 0,1 where there are two GPUs, else 0,0) and on two slabs of GPU 0: a
# read outside a buffer that happens to land in mapped memory shows here, not in the
# results (the advection slab fault of 2026-11-26 failed only on a second GPU).
memcheck() {
  device
  local n d w; n=$(nvidia-smi -L | wc -l); d=${DEVICES:-$([ "$n" -gt 1 ] && echo 0,1 || echo 0,0)}
  w=$(mktemp -d)
  printf 'solver = "advection"\n[advection]\nnx = 40\nny = 31\nsteps = 6\ncfl = 0.9\nboundary = "periodic"\nvelocity = { kind = "rotation" }\ninitial = { preset = "zalesak" }\n' > "$w/a.toml"
  printf 'solver = "heat"\n[heat]\nshape = [20, 18, 40]\ndt = 1e-5\nsteps = 9\n' > "$w/h.toml"
  printf 'solver = "jacobi"\n[jacobi]\nn = 64\nm = 50\nmax_iterations = 30\ntolerance = 0.0\n' > "$w/j.toml"
  printf 'solver = "electrostatics"\n[electrostatics]\nx = { range = [0.0, 1.0], cells = 12 }\ny = { range = [0.0, 1.0], cells = 10 }\nz = { range = [0.0, 1.0], cells = 20 }\npermittivities = [4.0]\nmax_iterations = 50\ntolerance = 1e-30\n[electrostatics.faces]\nz_min = 1.0\nz_max = 0.0\n' > "$w/e.toml"
  for p in a h j e; do
    for dd in $(printf "%s\n" "$d" 0,0 | sort -u); do
      (cd "$w" && timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$KEISAN_BIN" run $p.toml -q --devices $dd --out o > s.log 2>&1)
      echo "memcheck $p.toml --devices $dd: rc $? $(grep -E 'ERROR SUMMARY' "$w/s.log" | tail -1)"
    done
  done
  # Advection's passes on narrow grids (a 61-column grid's tiles read past the padding
  # until 2026-11-26) and its bulk-copy single steps (64 and 136 columns), from the tests.
  for t in "advection_cuda several_steps" "advection_cuda single_steps_from_bulk" \
           "advection_slabs cuda_slabs_on_one"; do
    set -- $t
    [ -x "gpu/tests/$1" ] || continue
    timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 "gpu/tests/$1" "$2" > "$w/s.log" 2>&1
    echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY' "$w/s.log" | tail -1)"
  done
}

# The checks of the work in progress (keep only the test executables it runs in gpu/tests:
# the device call carries at most 64 MiB): on a host with two GPUs (nvidia-h200-x2), the
# figures issue 13 still lacks — weak and strong scaling with the exchange, exposed and
# hidden, for heat (f32, f64), Jacobi (two-sweep slabs) and electrostatics on devices 0,1,
# then N-body on two GPUs of one process and on two GPU ranks (mpi build). About 7 minutes.
next() {
  device; mkdir -p "$OUT"
  for prec in f32 f64; do
    echo "== bench heat --devices 0,1 --precision $prec"
    timeout 200 $K bench heat --devices 0,1 --precision $prec --steps 500 --repetitions 3 | grep -E "weak|strong|exchange|model"
  done
  for prec in f64 f32; do
    echo "== bench jacobi --devices 0,1 --precision $prec"
    timeout 120 $K bench jacobi --devices 0,1 --precision $prec | tail -6
  done
  echo "== jacobi 16384^2, 500 sweeps: devices 0 / 0,1"
  for d in 0 0,1; do
    $K run examples/jacobi-seed.toml --devices $d --set jacobi.n=16384 --set jacobi.m=16384 \
      --set jacobi.max_iterations=500 -q --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('$d', s['timings']['solve_s'])"
  done
  for prec in f32 f64; do
    echo "== bench electrostatics --devices 0,1 --precision $prec"
    timeout 200 $K bench electrostatics --devices 0,1 --precision $prec | tail -6
  done
  echo "== bench nbody --devices 0,1 (issue 14: >= 1.9x one GPU at 2^20, each pair once on both)"
  timeout 300 $K bench nbody --devices 0,1 --n 262144,1048576 --repetitions 3 | grep "N ="
  [ -d gpu/tests ] && tests
  nbody_mpi  # needs the mpi build (FEATURES="--features mpi" scripts/gpu.sh build)
}

# When the halo of each pass is ready, and what the slabs' weak scaling is, under the
# diagnosis knobs of src/parallel/distributed.rs.
overlap() {
  device
  local d=${DEVICES:-0,1}
  for cfg in "1 beside" "0 beside" "1 gated" "1 first"; do
    set -- $cfg
    local env="KEISAN_PASS_TRACE=1 KEISAN_COPY_FIRST=$1 KEISAN_BANDS=$2"
    echo "== heat f32, $env"
    env $env $K bench heat --devices "$d" --steps 500 --size-2d "" 2>&1 | grep -E "trace|weak|strong|exposed"
    echo "== electrostatics f32, $env"
    env $env $K bench electrostatics --devices "$d" --iterations 200 2>&1 |
      grep -E "trace|one device,|weak,|strong,|exposed"
  done
  echo "== heat f32, no trace (defaults)"
  $K bench heat --devices "$d" --steps 500 --size-2d "" 2>&1 | grep -E "weak|strong|exposed"
  echo "== heat f64, no trace (defaults)"
  $K bench heat --devices "$d" --steps 200 --precision f64 --size-2d "" 2>&1 | grep -E "weak|strong|exposed"
  echo "== electrostatics f32 / f64, no trace (defaults)"
  $K bench electrostatics --devices "$d" --iterations 200 2>&1 | grep -E "one device,|weak,|strong,|exposed"
  $K bench electrostatics --devices "$d" --iterations 200 --precision f64 2>&1 |
    grep -E "one device,|weak,|strong,|exposed"
  echo "== jacobi f64, trace"
  KEISAN_PASS_TRACE=1 $K bench jacobi --devices "$d" 2>&1 | grep -E "trace|devices|exposed" | head -8
  echo "== advection contest 5 f32, trace"
  KEISAN_PASS_TRACE=1 $K bench advection --devices "$d" 2>&1 | grep -E "trace|devices|exposed|speed" | head -8
}

# The device, its links, and the slab tests where gpu/tests holds them.
several_gpus() {
  device; nvidia-smi topo -m | head -6
  [ -d gpu/tests ] && for t in electrostatics_slabs jacobi_slabs heat_slabs; do
    [ -x gpu/tests/$t ] && { echo "== test $t"; gpu/tests/$t 2>&1 | grep -E "test result|FAILED|panicked"; }
  done
}

# A host with several GPUs (nvidia-h200-x4 or x2), one call of about 3 minutes (the slab
# tests first where gpu/tests holds them): N-body on all and on 2
# GPUs (issue 14: >= 3.7x / 1.9x one), the slabs of heat, electrostatics and advection on all
# and 2 (issue 13's weak scaling), Jacobi's strong scaling, then the diagnosis knobs of
# src/parallel/distributed.rs on all and electrostatics' pass trace.
four() {
  several_gpus
  local n all; n=$(nvidia-smi -L | wc -l); all=$(seq -s, 0 $((n - 1)))
  for d in $all 0,1; do
    echo "== nbody --devices $d N=2^20"
    timeout 70 $K bench nbody --devices $d --n 1048576 --repetitions 3 2>&1 | grep -E "N =|ceilings"
  done
  for d in $all 0,1; do
    echo "== heat f32 --devices $d"
    timeout 70 $K bench heat --devices $d --steps 300 --size-2d "" 2>&1 | grep -E "weak|strong|exposed|model"
    echo "== electrostatics f32 --devices $d"
    timeout 70 $K bench electrostatics --devices $d --iterations 200 2>&1 |
      grep -E "one device,|weak,|strong,|exposed|model"
    echo "== advection contest 5 f32 --devices $d"; timeout 60 $K bench advection --devices $d 2>&1 | tail -3
  done
  echo "== jacobi f64 --devices $all"; timeout 50 $K bench jacobi --devices $all 2>&1 | tail -4
  for cfg in "1 beside" "0 beside" "1 gated" "1 first"; do
    set -- $cfg
    local env="KEISAN_COPY_FIRST=$1 KEISAN_BANDS=$2"
    echo "== heat, $env"
    env $env timeout 40 $K bench heat --devices $all --steps 300 --size-2d "" 2>&1 | grep -E "weak|exposed"
    echo "== electrostatics, $env"
    env $env timeout 40 $K bench electrostatics --devices $all --iterations 200 2>&1 | grep -E "weak,|exposed"
  done
  echo "== electrostatics, pass trace"
  KEISAN_PASS_TRACE=1 timeout 40 $K bench electrostatics --devices $all --iterations 200 2>&1 | grep trace
}

# The slab benches on every GPU of an x2/x4 host and on two: each GPU's one-device
# baseline first (the weak figures divide by the first GPU's), then electrostatics and
# heat on slabs with the pass trace and the bands' placement varied.
slabs() {
  several_gpus
  local n all; n=$(nvidia-smi -L | wc -l); all=$(seq -s, 0 $((n - 1)))
  for d in $(seq 0 $((n - 1))); do
    echo "== one device: GPU $d"
    CUDA_VISIBLE_DEVICES=$d timeout 40 $K bench electrostatics --kernel per-colour --iterations 200 2>&1 | grep -E "512.*f32|per iteration" | head -2
  done
  for d in $all 0,1; do
    echo "== electrostatics f32 --devices $d"
    timeout 70 $K bench electrostatics --devices $d --iterations 200 2>&1 |
      grep -E "one device,|weak,|strong,|exposed|exchange|model"
    KEISAN_PASS_TRACE=1 timeout 40 $K bench electrostatics --devices $d --iterations 200 2>&1 | grep -E "trace|weak,"
    echo "== heat f32 --devices $d"
    timeout 70 $K bench heat --devices $d --steps 300 --size-2d "" 2>&1 | grep -E "weak|strong|exposed|exchange|model"
    echo "== heat f32 --devices $d, KEISAN_BANDS=first"
    KEISAN_BANDS=first timeout 40 $K bench heat --devices $d --steps 300 --size-2d "" 2>&1 | grep -E "weak|exposed|exchange"
  done
  echo "== jacobi f64 --devices $all"; timeout 50 $K bench jacobi --devices $all 2>&1 | tail -4
}

# Where electrostatics' exchange costs on several GPUs: the weak bench and the host's
# queuing time (KEISAN_HOST_TRACE) with the halo pulled by cuMemcpyPeerAsync, by
# cuMemcpyDtoDAsync on unified addresses and by a copy kernel (KEISAN_PULL); the
# microstrip's V.npy from each the same bytes; heat with each.
pulls() {
  device
  local n all; n=$(nvidia-smi -L | wc -l); all=$(seq -s, 0 $((n - 1)))
  mkdir -p "$OUT"
  for by in peer unified kernel; do
    echo "== microstrip --devices $all, KEISAN_PULL=$by"
    KEISAN_PULL=$by timeout 60 $K run examples/electrostatics-microstrip.toml --devices $all --out "$OUT/ms-$by" -q 2>&1 | tail -2
    cmp "$OUT/ms-peer/V.npy" "$OUT/ms-$by/V.npy" && echo "V.npy the same bytes as with peer copies"
  done
  for d in $all 0,1; do
    for by in peer unified kernel; do
      echo "== electrostatics f32 --devices $d, KEISAN_PULL=$by"
      KEISAN_PULL=$by KEISAN_HOST_TRACE=1 timeout 70 $K bench electrostatics --devices $d --iterations 200 2>&1 |
        grep -E "one device,|weak,|strong,|beyond|host trace"
    done
  done
  for by in peer kernel; do
    echo "== heat f32 --devices $all, KEISAN_PULL=$by"
    KEISAN_PULL=$by KEISAN_HOST_TRACE=1 timeout 60 $K bench heat --devices $all --steps 300 --size-2d "" 2>&1 | grep -E "weak|strong|beyond|host trace"
  done
}

# Issue 15 (built with FEATURES="--features mpi"): weak and strong scaling on 2, 4 and 8
# GPUs, as many as the host has (the benches time the first GPU alone in the same run);
# N-body weak at 2^18 particles a GPU and strong at 2^22 on all; contest 5 on 1..P MPI
# ranks; advection, heat 3D and the microstrip on all GPUs and on P ranks against one GPU,
# byte for byte; heat 3D 2048^3 f32 strong on 1 -> all.
scale() {
  device; nvidia-smi topo -m | head -9
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local n k=$PWD/$K w; n=$(nvidia-smi -L | wc -l); w=$(mktemp -d)
  solve() { python3 -c "import json,sys; print('%-32s solve %.4f s' % (sys.argv[1], json.load(sys.stdin)['timings']['solve_s']))" "$1"; }
  for p in 2 4 8; do
    [ $p -le $n ] || break
    local d; d=$(seq -s, 0 $((p - 1)))
    echo "== $p GPUs"
    timeout 120 $K bench heat --devices $d --steps 300 --size-2d "" 2>&1 | grep -E "weak|strong|beyond"
    timeout 120 $K bench electrostatics --devices $d --iterations 200 2>&1 | grep -E "one device,|weak,|strong,|beyond"
    timeout 120 $K bench advection --devices $d 2>&1 | grep -E "slabs on|weak|beyond"
    timeout 120 $K bench nbody --devices $d --n 262144,$((262144 * p)) --repetitions 2 2>&1 | grep -E "N ="
  done
  local all; all=$(seq -s, 0 $((n - 1)))
  echo "== N-body N = 2^22 on $n GPUs"; timeout 200 $K bench nbody --devices $all --n 4194304 --repetitions 1 2>&1 | grep -E "N ="
  for p in 1 2 4 8; do
    [ $p -le $n ] || break
    timeout 120 mpirun -np $p $k run examples/gpu-challenge-5.toml --set advection.steps=512 -q --json 2>/dev/null | solve "contest 5, 512 steps, $p ranks"
  done
  printf 'solver = "advection"\n[advection]\nnx = 1024\nny = 777\nsteps = 64\ncfl = 0.9\nvelocity = { kind = "rotation" }\ninitial = { preset = "zalesak" }\n' > "$w/a.toml"
  printf 'solver = "heat"\nprecision = "f32"\n[heat]\nshape = [130, 64, 128]\ndt = 2e-6\nsteps = 40\ninitial = { preset = "hot_box" }\n' > "$w/h.toml"
  cp examples/electrostatics-microstrip.toml "$w/e.toml"
  for f in a h e; do
    (cd "$w" && $k run $f.toml -q --out one-$f --devices 0 && $k run $f.toml -q --out all-$f --devices $all &&
      timeout 120 mpirun -np $n $k run $f.toml -q --out ranks-$f) > /dev/null 2>&1 || echo "$f: a run failed"
    for x in $(cd "$w/one-$f" && ls *.npy); do
      for v in all ranks; do
        cmp -s "$w/one-$f/$x" "$w/$v-$f/$x" && echo "$f $v $x same" || echo "$f $v $x DIFFERS"
      done
    done
  done
  local d=0
  while :; do
    timeout 150 $K run examples/heat-3d-640.toml --set 'heat.shape=[2048,2048,2048]' --set heat.dt=2e-8 \
      --set heat.steps=100 --devices $d -q --json 2>/dev/null | solve "heat 2048^3 on $d"
    [ "$d" = "$all" ] && break
    d=$(seq -s, 0 $(( $(echo $d | tr ',' ' ' | wc -w) * 2 - 1 )))
    [ $(echo $d | tr ',' ' ' | wc -w) -gt $n ] && d=$all
  done
}

case "${1:-}" in
  build) build ;;
  scale) scale ;;
  overlap) overlap ;;
  four) four ;;
  slabs) slabs ;;
  pulls) pulls ;;
  next) next ;;
  multi) multi ;;
  heat-multi) heat_multi ;;
  es-multi) es_multi ;;
  es-mpi) es_mpi ;;
  pieces) pieces ;;
  nbody-mpi) nbody_mpi ;;
  mpi) mpi_gpu ;;
  nccl) nccl ;;
  memcheck) memcheck ;;
  test) tests ;;
  bench) bench ;;
  tune) tune ;;
  es) es ;;
  es-tune) es_tune ;;
  es-bits) es_bits ;;
  all) tests; s=$?; bench; exit $s ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2 ;;
esac
