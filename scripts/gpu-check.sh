#!/usr/bin/env bash
# GPU check: builds with CUDA, runs the `cuda` tests (CUDA kernels bitwise equal to the CPU
# reference for every weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, kernel by kernel
# and end to end against cpu-batch-invariant; cuBLAS differences from batch 1 counted), the
# resource and flag checks of the CUDA build (unit-cuda-resources), then the benchmarks side by
# side (repro-cuda-bench: matmul GFLOP/s invariant vs cuBLAS on f32 and on every stored type,
# decode tokens/s per mode), and prints a short table last. Meant for an NVIDIA GPU (sized to finish in under 8 minutes on an H200).
#   scripts/gpu-check.sh [build-dir]        (default: build-gpu)
# Exit status: 0 all green; 1 a test failed or the invariant kernel differed from the CPU;
# 3 no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
LOG=$BUILD/gpu-check
mkdir -p "$LOG"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "error: no NVIDIA GPU visible (nvidia-smi -L failed): run scripts/gpu-check.sh on a GPU machine" >&2
  exit 3
fi
nvidia-smi -L

echo "== configure + build (REPRO_CUDA=ON, archs 80;90)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DREPRO_CUDA=ON >"$LOG/configure.log"
cmake --build "$BUILD" -j"$JOBS" --target repro-tests repro-cuda-bench >"$LOG/build.log" 2>&1 ||
  { tail -40 "$LOG/build.log"; exit 1; }

echo "== ctest -L cuda (and the CPU emulation of the CUDA kernels)"
tests_rc=0
(cd "$BUILD" && ctest -L cuda --output-on-failure --timeout 300 -V) >"$LOG/ctest-cuda.log" 2>&1 || tests_rc=1
(cd "$BUILD" && ./repro-tests --source-file='*unit-cuda-emulation.cpp' --no-intro) >"$LOG/emulation.log" 2>&1 ||
  tests_rc=1
(cd "$BUILD" && ./repro-tests --source-file='*unit-cuda-resources.cpp' --no-intro) >"$LOG/resources.log" 2>&1 ||
  tests_rc=1
grep -E "MESSAGE|cuBLAS row 0|split-KV|skipped|tests? passed|failed" "$LOG/ctest-cuda.log" | sed 's/^[0-9]*: //' || true

echo "== benchmarks"
bench_rc=0
timeout 360 "$BUILD/repro-cuda-bench" | tee "$LOG/bench.txt" || bench_rc=$?

echo
echo "== gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))"
head -1 "$LOG/bench.txt" 2>/dev/null || true
printf '%-34s %s\n' "cuda tests (ctest -L cuda)" "$([ $tests_rc = 0 ] && echo pass || echo FAIL: see $LOG/ctest-cuda.log, emulation.log, resources.log)"
awk '/^matmul f32/{m=1} /^matmul on stored/{m=0; q=1} /^decode step/{q=0; d=1}
     m && /^ *[0-9]+x/{printf "  matmul %-12s M=%-5s inv %8s  cuBLAS %8s GFLOP/s  %s  %s\n", $1, $2, $3, $4, $5, $6}
     q && /^(F16|BF16|Q[0-9]_[0-9K]) /{printf "  matmul %-12s M=%-5s inv %8s  default %7s GFLOP/s  %s  %s\n", $1, $2, $3, $4, $5, $6}
     d && /^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x/{printf "  decode batch %-4s invariant %9s tok/s  default %9s tok/s  %s\n", $1, $2, $3, $4}
     /^summary:/{print "  " $0}' "$LOG/bench.txt" 2>/dev/null || true
[ $tests_rc = 0 ] && [ $bench_rc = 0 ]
