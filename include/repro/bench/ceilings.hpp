// The two ceilings of this machine that bound the engine's throughput, measured where it runs
// (`repro-audit bench` measures them before its cells; repro/bench/perf_model.hpp turns them
// into tokens/s per cell):
//   memory bandwidth  a STREAM-style triad a[i] = b[i] + s * c[i] over three arrays of doubles,
//                     split into contiguous chunks over the engine's ThreadPool (each thread
//                     first touches its own chunk). GB/s counts 24 bytes per element, as STREAM
//                     does: two 8-byte reads (b, c) and one 8-byte write (a). A write-allocate
//                     cache also reads a[i] before writing it, which this count leaves out, so
//                     the traffic the memory sees can be up to 4/3 of the figure.
//   compute peak      OpenBLAS cblas_sgemm on an n x n x n product, called as the engine's default
//                     matmul calls it (row-major, B transposed), with OpenBLAS set to the thread
//                     count; GFLOP/s counts 2 n^3 flops per call.
// Each is the best of `repeats` timed runs after one untimed warm-up run.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

namespace repro::bench {

struct TriadResult {
  int threads = 0;
  double gb_per_s = 0;            // best of runs
  std::vector<double> runs;       // GB/s of each timed run
};
// One result per entry of thread_counts (each >= 1, checked like --threads), measured on the same
// three arrays of array_bytes bytes each (rounded down to whole doubles, at least one per thread).
// Throws std::runtime_error when a checked element of the result is wrong (a miscompiled loop).
std::vector<TriadResult> measure_triad(const std::vector<int>& thread_counts, size_t array_bytes, int repeats);

struct SgemmResult {
  int threads = 0;
  double gflop_per_s = 0;         // best of runs
  std::vector<double> runs;       // GFLOP/s of each timed run
};
// One result per entry of thread_counts. OpenBLAS's thread count is restored afterwards, so the
// engine's matmul (which remembers the count it last set) stays right.
std::vector<SgemmResult> measure_sgemm(const std::vector<int>& thread_counts, int n, int repeats);

// Size of the largest CPU cache the kernel reports (Linux sysfs, cpu0); 0 when unknown. A model
// whose weights fit in it is not bound by the triad's memory bandwidth.
size_t last_level_cache_bytes();

// This machine's ceilings at one thread count.
struct MachineCeiling {
  int threads = 0;
  double gb_per_s = 0, gflop_per_s = 0;
};
struct MachineCeilings {
  std::vector<MachineCeiling> per_threads;  // in the order of the thread counts asked for
  nlohmann::json json;                      // the "ceilings" block of `bench --json`
  const MachineCeiling* at(int threads) const;  // nullptr when not measured at that count
};
// The triad over three arrays of triad_mib MiB and the sgemm of n = sgemm_size at every thread
// count, each the best of `repeats` runs.
MachineCeilings measure_ceilings(const std::vector<int>& threads, int triad_mib, int sgemm_size, int repeats);

}  // namespace repro::bench
