// ctest-labels: slow
// Kernel microbenchmark (not a timed test: nothing is asserted about speed). For each shape it
// first validates the batch-invariant matmul against the reference (bitwise, on a column subset)
// and the OpenBLAS default against it (tolerance), then times both side by side in the same run
// and prints GFLOP/s and the ratio invariant / default. Shapes: the ~100M model's matmuls
// (dim 768, hidden 2048, vocab 32000) at M in {1, 8, 32, 64}, threads 1 and 2. A second case
// times, for Q8_0 and Q4_K weights of a 1.1B model's shapes, the integer dot-product path against
// the f32 panel path (and sgemm from kQuantSgemmMinRows rows), which sets quant_int_max_rows. A
// third, on an AVX-512 CPU, times the batch-invariant matmul's AVX-512 tiles against its AVX2 tiles
// (same bits, checked first). A fourth, only with REPRO_BENCH_GGML_SHAPE=1 (scripts/bench-ggml.sh
// runs it), times both tables' matmul at the shape of ggml's MUL_MAT perf cases (4096 x 14336
// weights) with ggml's method (mean over >= 1 s of calls after one warm-up call), so that the two
// can be compared side by side.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../kernels/matmul/quant_dot.hpp"
#include "kernel_paths.hpp"
#include "repro/common/quant.hpp"
#include "../kernels/kernels.hpp"
#include "../kernels/matmul_quant.hpp"

using namespace repro;
using namespace repro::kernels;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Best seconds per call of f and of g, timed in alternating rounds (each round >= ~30 ms of calls)
// so that both see the same machine load; the best round of each counts.
template <class F, class G>
void best_seconds(F&& f, G&& g, double& tf, double& tg) {
  using clk = std::chrono::steady_clock;
  auto calls_for = [](auto& fn) {
    fn();  // warm up
    int reps = 1;
    for (;;) {
      auto t0 = clk::now();
      for (int i = 0; i < reps; ++i) fn();
      if (std::chrono::duration<double>(clk::now() - t0).count() > 0.03 || reps > (1 << 20)) return reps;
      reps *= 2;
    }
  };
  const int rf = calls_for(f), rg = calls_for(g);
  tf = tg = 1e30;
  for (int round = 0; round < 7; ++round) {
    auto t0 = clk::now();
    for (int i = 0; i < rf; ++i) f();
    tf = std::min(tf, std::chrono::duration<double>(clk::now() - t0).count() / rf);
    t0 = clk::now();
    for (int i = 0; i < rg; ++i) g();
    tg = std::min(tg, std::chrono::duration<double>(clk::now() - t0).count() / rg);
  }
}

}  // namespace

TEST_CASE("bench: matmul invariant vs OpenBLAS default (GFLOP/s, ratio)") {
  struct NK {
    int N, K;
  };
  const NK shapes[] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
  const int Ms[] = {1, 8, 32, 64};
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("CPU AVX2+FMA: %s, OPENBLAS_CORETYPE=%s\n", cpu_has_avx2_fma() ? "yes" : "no", core ? core : "(unset)");
  std::printf("%-8s %-6s %-6s %-3s %12s %12s %8s\n", "threads", "M", "N", "K", "inv GF/s", "blas GF/s", "ratio");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const NK nk : shapes) {
      const int N = nk.N, K = nk.K;
      const auto w = random_vec((size_t)N * K, 7 + N + K);
      const auto x = random_vec((size_t)64 * K, 3 + K);
      for (int M : Ms) {
        std::vector<float> yi((size_t)M * N), yd((size_t)M * N);
        // validate: invariant == reference on the first 96 columns (bitwise); default close
        matmul_invariant(x.data(), w.data(), yi.data(), M, N, K, pool);
        matmul_default(x.data(), w.data(), yd.data(), M, N, K, pool);
        const int nc = std::min(N, 96);
        std::vector<float> ref((size_t)M * nc);
        matmul_reference(x.data(), w.data(), ref.data(), M, nc, K);
        int bad = 0;
        float err = 0;
        for (int m = 0; m < M; ++m) {
          bad += std::memcmp(yi.data() + (long)m * N, ref.data() + (long)m * nc, nc * sizeof(float)) != 0;
          for (int n = 0; n < nc; ++n) err = std::max(err, std::fabs(yd[(long)m * N + n] - ref[(long)m * nc + n]));
        }
        REQUIRE(bad == 0);
        REQUIRE(err < 1e-3f);
        double ti, td;
        best_seconds([&] { matmul_invariant(x.data(), w.data(), yi.data(), M, N, K, pool); },
                     [&] { matmul_default(x.data(), w.data(), yd.data(), M, N, K, pool); }, ti, td);
        const double flop = 2.0 * M * N * (double)K;
        std::printf("%-8d %-6d %-6d %-4d %12.1f %12.1f %8.2f\n", threads, M, N, K, flop / ti * 1e-9,
                    flop / td * 1e-9, td / ti);
        std::fflush(stdout);
      }
    }
  }
}

TEST_CASE("bench: batch-invariant matmul, AVX-512 tiles vs AVX2 tiles (GFLOP/s, ratio)") {
  if (!cpu_has_avx512()) {
    MESSAGE("skipped: this CPU has no AVX-512 (F, DQ, VL)");
    return;
  }
  struct NK {
    int N, K;
  };
  const NK shapes[] = {{2048, 768}, {768, 2048}};
  std::printf("%-8s %-6s %-6s %-4s %14s %12s %8s\n", "threads", "M", "N", "K", "avx512 GF/s", "avx2 GF/s", "ratio");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const NK nk : shapes) {
      const int N = nk.N, K = nk.K;
      const auto w = random_vec((size_t)N * K, 9 + N + K);
      const auto x = random_vec((size_t)128 * K, 5 + K);
      for (int M : {2, 8, 32, 64, 128}) {
        std::vector<float> a((size_t)M * N), b((size_t)M * N);
        matmul_invariant(x.data(), w.data(), a.data(), M, N, K, pool);
        {
          test::ForceAvx2 avx2(true);
          matmul_invariant(x.data(), w.data(), b.data(), M, N, K, pool);
        }
        REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        double t512, t2;
        best_seconds([&] { matmul_invariant(x.data(), w.data(), a.data(), M, N, K, pool); },
                     [&] {
                       test::ForceAvx2 avx2(true);
                       matmul_invariant(x.data(), w.data(), b.data(), M, N, K, pool);
                     },
                     t512, t2);
        const double flop = 2.0 * M * N * (double)K;
        std::printf("%-8d %-6d %-6d %-4d %14.1f %12.1f %8.2f\n", threads, M, N, K, flop / t512 * 1e-9,
                    flop / t2 * 1e-9, t2 / t512);
        std::fflush(stdout);
      }
    }
  }
}

TEST_CASE("bench: matmul at ggml's MUL_MAT perf shape, both tables (us per call; REPRO_BENCH_GGML_SHAPE=1)") {
  if (!std::getenv("REPRO_BENCH_GGML_SHAPE")) {
    MESSAGE("skipped: set REPRO_BENCH_GGML_SHAPE=1 (scripts/bench-ggml.sh does) to time the ggml perf shape");
    return;
  }
  // ggml's test-backend-ops perf: MUL_MAT(type_a, f32, m = 4096, n = M, k = 14336): weights [4096][14336].
  const int N = 4096, K = 14336;
  const char* rows_env = std::getenv("REPRO_BENCH_ROWS");
  std::vector<int> Ms;
  for (const char* p = rows_env ? rows_env : "1,8,512"; *p;) {
    Ms.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  const int threads = std::getenv("REPRO_BENCH_THREADS") ? std::atoi(std::getenv("REPRO_BENCH_THREADS")) : 2;
  ThreadPool pool(threads);
  using clk = std::chrono::steady_clock;
  auto mean_us = [](auto&& fn) {  // ggml's method: one warm-up call, then calls until >= 1 s, mean
    fn();
    double total = 0;
    int runs = 0;
    while (total < 1.0) {
      const auto t0 = clk::now();
      fn();
      total += std::chrono::duration<double>(clk::now() - t0).count();
      ++runs;
    }
    return total / runs * 1e6;
  };
  const auto wf = random_vec((size_t)N * K, 4096);
  const auto x = random_vec((size_t)512 * K, 14336);
  for (quant::Format f : {quant::Format::F32, quant::Format::Q8_0, quant::Format::Q4_K, quant::Format::Q5_K,
                          quant::Format::Q6_K}) {
    const size_t rb = quant::row_bytes(f, K);
    std::vector<uint8_t> wq;
    if (f != quant::Format::F32) {
      wq.resize(rb * N);
      for (int n = 0; n < N; ++n) quant::quantize_row(f, wf.data() + (size_t)n * K, wq.data() + rb * n, K);
    }
    const QuantWeight w{f, wq.data(), rb};
    for (int M : Ms) {
      REQUIRE((M >= 1 && M <= 512));
      std::vector<float> yi((size_t)M * N), yd((size_t)M * N);
      auto inv = [&] {
        if (f == quant::Format::F32) return matmul_invariant(x.data(), wf.data(), yi.data(), M, N, K, pool);
        matmul_q_invariant(x.data(), w, yi.data(), M, N, K, pool);
      };
      auto def = [&] {
        if (f == quant::Format::F32) return matmul_default(x.data(), wf.data(), yd.data(), M, N, K, pool);
        matmul_q_default(x.data(), w, yd.data(), M, N, K, pool);
      };
      // Validate first: the invariant table equals its reference bitwise on 16 columns.
      inv();
      const int nc = 16;
      std::vector<float> ref((size_t)M * nc);
      if (f == quant::Format::F32)
        matmul_reference(x.data(), wf.data(), ref.data(), M, nc, K);
      else
        matmul_q_reference(x.data(), w, ref.data(), M, nc, K);
      int bad = 0;
      for (int m = 0; m < M; ++m) bad += std::memcmp(yi.data() + (long)m * N, ref.data() + (long)m * nc, nc * 4) != 0;
      REQUIRE(bad == 0);
      const double ti = mean_us(inv), td = mean_us(def);
      std::printf("ggml-shape type=%s threads=%d M=%d N=%d K=%d invariant_us=%.1f default_us=%.1f\n",
                  quant::format_name(f), threads, M, N, K, ti, td);
      std::fflush(stdout);
    }
  }
}

TEST_CASE("bench: quantized matmul, integer path vs f32 panels (GB/s of weights, ratio)") {
  struct NK {
    int N, K;
  };
  const NK shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}};
  std::printf("%-5s %-8s %-5s %-5s %-5s %10s %10s %8s\n", "type", "threads", "M", "N", "K", "int ms", "f32 ms",
              "f32/int");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (quant::Format f : {quant::Format::Q8_0, quant::Format::Q4_K, quant::Format::Q5_K, quant::Format::Q6_K})
      for (const NK nk : shapes) {
        const int N = nk.N, K = nk.K;
        const auto wf = random_vec((size_t)N * K, 7 + N + K);
        const size_t rb = quant::row_bytes(f, K);
        std::vector<uint8_t> wq(rb * N);
        for (int n = 0; n < N; ++n) quant::quantize_row(f, wf.data() + (size_t)n * K, wq.data() + rb * n, K);
        const QuantWeight w{f, wq.data(), rb};
        const auto x = random_vec((size_t)256 * K, 3 + K);
        for (int M : {1, 8, 32, 64, 128, 256}) {
          std::vector<float> yi((size_t)M * N), yp((size_t)M * N);
          double ti, tp;
          best_seconds([&] { detail::matmul_q_int(x.data(), w, yi.data(), M, N, K, pool); },
                       [&] {
                         if (M >= kQuantSgemmMinRows) return matmul_q_default(x.data(), w, yp.data(), M, N, K, pool);
                         detail::matmul_q_panels(x.data(), w, yp.data(), M, N, K, pool);
                       },
                       ti, tp);
          std::printf("%-5s %-8d %-5d %-5d %-5d %10.3f %10.3f %8.2f\n", quant::format_name(f), threads, M, N, K,
                      ti * 1e3, tp * 1e3, tp / ti);
          std::fflush(stdout);
        }
      }
  }
}
