// Memory-bandwidth and compute ceilings of this machine (repro/bench/ceilings.hpp).
#include "repro/bench/ceilings.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "repro/common/threadpool.hpp"

namespace repro::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void triad_range(double* __restrict a, const double* __restrict b, const double* __restrict c, double s, int lo,
                 int hi) {
  for (int i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace

std::vector<TriadResult> measure_triad(const std::vector<int>& thread_counts, size_t array_bytes, int repeats) {
  std::vector<TriadResult> out;
  if (thread_counts.empty()) return out;
  for (int t : thread_counts) check_threads(t);
  const int most = *std::max_element(thread_counts.begin(), thread_counts.end());
  // parallel_for splits an int range: at most 2^31 - 1 elements (16 GiB per array).
  const size_t n_max = static_cast<size_t>(0x7fffffff);
  const int n = static_cast<int>(std::min(n_max, std::max(array_bytes / sizeof(double), static_cast<size_t>(most))));
  std::unique_ptr<double[]> a(new double[static_cast<size_t>(n)]), b(new double[static_cast<size_t>(n)]),
      c(new double[static_cast<size_t>(n)]);
  const double s = 3.0;
  {
    // Each page is first touched by the thread that streams it (with the first thread count).
    ThreadPool pool(thread_counts.front());
    pool.parallel_for(n, [&](int lo, int hi) {
      for (int i = lo; i < hi; ++i) {
        a[i] = 0.0;
        b[i] = 1.0 + (i % 7);
        c[i] = 2.0 + (i % 5);
      }
    });
  }
  const double bytes = 3.0 * sizeof(double) * static_cast<double>(n);  // 2 reads + 1 write per element
  for (int t : thread_counts) {
    ThreadPool pool(t);
    TriadResult r;
    r.threads = t;
    for (int rep = -1; rep < repeats; ++rep) {  // rep -1: warm-up, not counted
      const auto t0 = Clock::now();
      pool.parallel_for(n, [&](int lo, int hi) { triad_range(a.get(), b.get(), c.get(), s, lo, hi); });
      const double sec = seconds_since(t0);
      if (rep >= 0 && sec > 0) r.runs.push_back(bytes / sec / 1e9);
    }
    r.gb_per_s = r.runs.empty() ? 0.0 : *std::max_element(r.runs.begin(), r.runs.end());
    out.push_back(std::move(r));
  }
  // The stores happened and the loop computed what it says (integers: exact in doubles).
  for (int i : {0, n / 3, n / 2, n - 1})
    if (a[i] != b[i] + s * c[i])
      throw std::runtime_error("triad: element " + std::to_string(i) + " is wrong; the bandwidth loop is miscompiled");
  return out;
}

std::vector<SgemmResult> measure_sgemm(const std::vector<int>& thread_counts, int n, int repeats) {
  std::vector<SgemmResult> out;
  if (thread_counts.empty() || n < 1) return out;
  for (int t : thread_counts) check_threads(t);
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> A(nn), B(nn), C(nn, 0.0f);
  for (size_t i = 0; i < nn; ++i) {
    A[i] = 0.25f * static_cast<float>(i % 13) - 1.5f;
    B[i] = 0.125f * static_cast<float>(i % 11) - 0.5f;
  }
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  const int saved = openblas_get_num_threads();
  for (int t : thread_counts) {
    openblas_set_num_threads(t);
    SgemmResult r;
    r.threads = t;
    for (int rep = -1; rep < repeats; ++rep) {  // rep -1: warm-up (OpenBLAS starts its threads)
      const auto t0 = Clock::now();
      // As the engine's default matmul: y[M][N] = x[M][K] * w[N][K]^T.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(),
                  n);
      const double sec = seconds_since(t0);
      if (rep >= 0 && sec > 0) r.runs.push_back(flops / sec / 1e9);
    }
    r.gflop_per_s = r.runs.empty() ? 0.0 : *std::max_element(r.runs.begin(), r.runs.end());
    out.push_back(std::move(r));
  }
  openblas_set_num_threads(saved);
  return out;
}

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int i = 0; i < 16; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    if (!in) break;
    size_t v = 0;
    std::string unit;
    if (!(in >> v)) continue;
    std::getline(in, unit);  // "K", "M" or nothing
    if (!unit.empty() && unit[0] == 'K') v <<= 10;
    else if (!unit.empty() && unit[0] == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

const MachineCeiling* MachineCeilings::at(int threads) const {
  for (const auto& c : per_threads)
    if (c.threads == threads) return &c;
  return nullptr;
}

MachineCeilings measure_ceilings(const std::vector<int>& threads, int triad_mib, int sgemm_size, int repeats) {
  const size_t array_bytes = static_cast<size_t>(triad_mib) << 20;
  const auto triad = measure_triad(threads, array_bytes, repeats);
  const auto sgemm = measure_sgemm(threads, sgemm_size, repeats);
  MachineCeilings out;
  nlohmann::json per = nlohmann::json::array();
  for (size_t i = 0; i < threads.size(); ++i) {
    const MachineCeiling m{threads[i], triad[i].gb_per_s, sgemm[i].gflop_per_s};
    per.push_back({{"threads", m.threads},
                   {"triad_gb_per_s", m.gb_per_s},
                   {"triad_runs", triad[i].runs},
                   {"sgemm_gflop_per_s", m.gflop_per_s},
                   {"sgemm_runs", sgemm[i].runs}});
    out.per_threads.push_back(m);
  }
  out.json = {{"last_level_cache_bytes", last_level_cache_bytes()},
              {"triad_array_bytes", array_bytes},
              {"triad_bytes_per_element", 24},
              {"sgemm_size", sgemm_size},
              {"repeats", repeats},
              {"per_threads", per}};
  return out;
}

}  // namespace repro::bench
