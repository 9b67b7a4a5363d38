// matmul default: the fastest path per shape, as a production CPU engine runs it.
//
//   M == 1                     GEMV: threads over output columns; each dot product keeps four
//                              8-lane accumulators over k (steps of 32), added pairwise and then
//                              across lanes, the way ggml's f32 dot product runs. Reading the
//                              weights once is all that matters at one row; OpenBLAS sgemm packs
//                              the weight matrix first and was measured 3-20x slower here, sgemv
//                              about as fast on small matrices and 1.4x slower on the 32000-row
//                              classifier.
//   2 <= M < kSgemmMinRows     the AVX2 register tiles of matmul_invariant (kernels/matmul/tiles.hpp):
//                              at few rows the cost is streaming the weights, which these tiles do
//                              once per block of rows; sgemm was measured 1.5-10x slower at 2..32
//                              rows (its packing does not pay off).
//   M >= kSgemmMinRows         OpenBLAS cblas_sgemm, whose kernel, blocking and thread split depend
//                              on M, N, K and the thread count.
//
// NOT batch-invariant: a row's reduction order differs between the three paths (a row computed
// alone takes the GEMV, the same row in a batch of 96 takes sgemm), and sgemm's order also depends
// on M and the thread count. Nothing is perturbed on purpose: each path is chosen for speed.
#include <cblas.h>

#include <algorithm>
#include <atomic>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {
namespace {

void gemv_portable(const float* x, const float* w, float* y, int n0, int n1, int K) {
  for (int n = n0; n < n1; ++n) {
    const float* wr = w + (long)n * K;
    float acc[32] = {};
    int k = 0;
    for (; k + 32 <= K; k += 32)
      for (int j = 0; j < 32; ++j) acc[j] = std::fma(x[k + j], wr[k + j], acc[j]);
    float lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = (acc[j] + acc[8 + j]) + (acc[16 + j] + acc[24 + j]);
    for (; k + 8 <= K; k += 8)
      for (int j = 0; j < 8; ++j) lanes[j] = std::fma(x[k + j], wr[k + j], lanes[j]);
    float r = detail::tree8(lanes);
    for (; k < K; ++k) r = std::fma(x[k], wr[k], r);
    y[n] = r;
  }
}

REPRO_LANES void gemv_lanes(const float* x, const float* w, float* y, int n0, int n1, int K) {
  for (int n = n0; n < n1; ++n) {
    const float* wr = w + (long)n * K;
    simd::f32x8 a0 = simd::zero(), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
      a0 = simd::fma(simd::load(x + k), simd::load(wr + k), a0);
      a1 = simd::fma(simd::load(x + k + 8), simd::load(wr + k + 8), a1);
      a2 = simd::fma(simd::load(x + k + 16), simd::load(wr + k + 16), a2);
      a3 = simd::fma(simd::load(x + k + 24), simd::load(wr + k + 24), a3);
    }
    simd::f32x8 s = simd::add(simd::add(a0, a1), simd::add(a2, a3));
    for (; k + 8 <= K; k += 8) s = simd::fma(simd::load(x + k), simd::load(wr + k), s);
    float r = simd::hsum(s);
    for (; k < K; ++k) r = std::fma(x[k], wr[k], r);
    y[n] = r;
  }
}

void gemv_range(const float* x, const float* w, float* y, int n0, int n1, int K, bool lanes) {
  if (lanes) return gemv_lanes(x, w, y, n0, n1, K);
  gemv_portable(x, w, y, n0, n1, K);
}

void gemv(const float* x, const float* w, float* y, int N, int K, ThreadPool& pool) {
  const bool lanes = use_lanes();
  if (pool.size() == 1 || 2.0 * N * (double)K < 2e5) return gemv_range(x, w, y, 0, N, K, lanes);
  constexpr int kUnit = 16;  // output columns per unit of work
  const int units = (N + kUnit - 1) / kUnit;
  pool.parallel_for(units, [&](int b, int e) { gemv_range(x, w, y, b * kUnit, std::min(N, e * kUnit), K, lanes); });
}

}  // namespace

void matmul_default(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
  if (M == 1) return gemv(x, w, y, N, K, pool);
  if (M < kSgemmMinRows) return matmul_invariant(x, w, y, M, N, K, pool);
  static std::atomic<int> blas_threads{0};
  const int t = pool.size();
  if (blas_threads.load(std::memory_order_relaxed) != t) {
    openblas_set_num_threads(t);
    blas_threads.store(t, std::memory_order_relaxed);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
}

}  // namespace repro::kernels
