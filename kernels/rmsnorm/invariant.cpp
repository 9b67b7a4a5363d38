// RMSNorm invariant: the batch-invariant fast path (AVX2+FMA, threads over rows), bitwise equal
// to rmsnorm_reference.
//
// Why it is batch-invariant: one reduction strategy for every row, fixed by D alone: the sum of
// squares runs the 8-lane fma order of detail::dot_lanes in one ymm accumulator (D zero-padded
// with masked loads), reduced by the fixed hadd tree; scale and the elementwise products are
// single IEEE operations. There is no split of a row across threads: threads take whole rows.
#include <algorithm>
#include <cmath>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {
namespace {

struct NormArgs {
  const float* x;
  const float* g;
  float* y;
  int D;
  float eps;
};

void portable_rows(const NormArgs& a, int m0, int m1) {
  rmsnorm_reference(a.x + (long)m0 * a.D, a.g, a.y + (long)m0 * a.D, m1 - m0, a.D, a.eps);
}

#if REPRO_X86
REPRO_AVX2 void avx2_rows(const NormArgs& a, int m0, int m1) {
  const int D = a.D, D8 = D & ~7;
  const __m256i mask = detail::tail_mask(D - D8);
  for (int m = m0; m < m1; ++m) {
    const float* xr = a.x + (long)m * D;
    float* yr = a.y + (long)m * D;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < D8; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (D8 < D) {
      __m256 v = _mm256_maskload_ps(xr + D8, mask);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    const float ss = detail::hsum8(acc);
    const float scale = math::rms_scale(ss, D, a.eps);
    const __m256 s = _mm256_set1_ps(scale);
    for (int i = 0; i < D8; i += 8)
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), s),
                                             _mm256_loadu_ps(a.g + i)));
    for (int i = D8; i < D; ++i) yr[i] = (xr[i] * scale) * a.g[i];
  }
}
#endif

void run_rows(const NormArgs& a, int m0, int m1, bool avx2) {
#if REPRO_X86
  if (avx2) return avx2_rows(a, m0, m1);
#endif
  portable_rows(a, m0, m1);
}

}  // namespace

void rmsnorm_invariant(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool) {
  if (M <= 0) return;
  const NormArgs a{x, g, y, D, eps};
  const bool avx2 = use_avx2();
  // Whole rows per thread, and threads only for large batches (bits unchanged either way).
  parallel_rows(pool, M, D, [&a, avx2](int b, int e) { run_rows(a, b, e, avx2); });
}

}  // namespace repro::kernels
