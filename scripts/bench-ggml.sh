#!/usr/bin/env bash
# Side by side, in one run: the engine's matmul (both tables) against ggml's CPU MUL_MAT, the
# kernels llama.cpp runs, at the shape of ggml's own perf cases (weights 4096 x 14336, f32
# activations of M rows) for F32, Q8_0, Q4_K, Q5_K and Q6_K weights, at 2 threads.
#
#   scripts/bench-ggml.sh GGML_BUILD_DIR [ROUNDS]
#
# GGML_BUILD_DIR: a CPU build of ggml (github.com/ggml-org/ggml) with its test-backend-ops, e.g.
#   cmake -S ggml -B ggml/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=ON
#   cmake --build ggml/build --target test-backend-ops
# Not needed by the build or the test suite. ggml times each case as the mean over >= 1 s of runs
# after one warm-up run, using as many threads as the machine has cores; the engine's side
# (tests/unit-kernels-bench.cpp, REPRO_BENCH_GGML_SHAPE=1) does the same with REPRO_BENCH_THREADS
# (default 2). Rounds alternate ggml and the engine; each cell keeps its best round. Run it on an
# idle machine: the figures mean nothing under load (the load average is printed before and after).
set -euo pipefail
ggml=${1:?usage: scripts/bench-ggml.sh GGML_BUILD_DIR [ROUNDS]}
rounds=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
tbo="$ggml/bin/test-backend-ops"
tests="$root/build/repro-tests"
[ -x "$tbo" ] || { echo "error: $tbo not found: build ggml's test-backend-ops first (see the top of this script)" >&2; exit 2; }
[ -x "$tests" ] || { echo "error: $tests not found: build the project first (cmake --build build)" >&2; exit 2; }
rows=${REPRO_BENCH_ROWS:-1,8,512}
threads=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# load average at start: $(cat /proc/loadavg)"
echo "# ggml $(git -C "$ggml/.." rev-parse HEAD 2>/dev/null || echo '(commit unknown)'), repro-audit $(git -C "$root" rev-parse --short HEAD)"
for r in $(seq 1 "$rounds"); do
  "$tbo" perf -o MUL_MAT -b CPU \
    -p "type_a=(f32|q8_0|q4_K|q5_K|q6_K),type_b=f32,m=4096,n=(${rows//,/|}),k=14336,bs=\[1,1\],nr=\[1,1\],per=\[0,1,2,3\]" \
    > "$out/ggml.$r" 2>&1
  REPRO_BENCH_GGML_SHAPE=1 REPRO_BENCH_ROWS="$rows" REPRO_BENCH_THREADS="$threads" \
    "$tests" --test-case="bench: matmul at ggml*" > "$out/repro.$r" 2>&1
done
echo "# load average at end: $(cat /proc/loadavg)"
python3 - "$out" "$rounds" "$threads" <<'EOF'
import re, sys, glob
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ggml, inv, dflt = {}, {}, {}
def keep(d, k, v): d[k] = min(d.get(k, 1e30), v)
for f in glob.glob(out + "/ggml.*"):
    for line in open(f):
        m = re.search(r"MUL_MAT\(type_a=(\w+),type_b=f32,m=4096,n=(\d+),k=14336,.*?([\d.]+) us/run", line)
        if m: keep(ggml, (m.group(1).upper(), int(m.group(2))), float(m.group(3)))
for f in glob.glob(out + "/repro.*"):
    for line in open(f):
        m = re.search(r"ggml-shape type=(\w+) threads=\d+ M=(\d+) .*invariant_us=([\d.]+) default_us=([\d.]+)", line)
        if m:
            k = (m.group(1).upper(), int(m.group(2)))
            keep(inv, k, float(m.group(3))); keep(dflt, k, float(m.group(4)))
print(f"# {threads} threads, best of {rounds} rounds; ratio = ggml us / engine us (above 1: the engine is faster)")
print("| weights | M | ggml us | batch-invariant us | default us | invariant / ggml | default / ggml |")
print("|---|---|---|---|---|---|---|")
for k in sorted(inv, key=lambda k: (["F32", "Q8_0", "Q4_K", "Q5_K", "Q6_K"].index(k[0]), k[1])):
    g = ggml.get(k)
    if g is None: continue
    print(f"| {k[0]} | {k[1]} | {g:.0f} | {inv[k]:.0f} | {dflt[k]:.0f} | {g / inv[k]:.2f}x | {g / dflt[k]:.2f}x |")
EOF
