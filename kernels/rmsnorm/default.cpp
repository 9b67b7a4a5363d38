// RMSNorm default: the fastest straightforward path: four independent 8-lane accumulators
// (32 lanes) for the sum of squares, so the fma chain is four times shorter, threads over rows.
//
// Batch variance: none in practice (a row is never split), but its order differs from the
// invariant kernel's (32 lanes instead of 8), so its bits differ from rmsnorm_reference; the
// lane count depends on D only. Nothing is perturbed on purpose.
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
  const int D = a.D;
  for (int m = m0; m < m1; ++m) {
    const float* xr = a.x + (long)m * D;
    float* yr = a.y + (long)m * D;
    float acc[32] = {};
    int i = 0;
    for (; i + 32 <= D; i += 32)
      for (int j = 0; j < 32; ++j) acc[j] = std::fma(xr[i + j], xr[i + j], acc[j]);
    for (int j = 0; i + j < D; ++j) acc[j] = std::fma(xr[i + j], xr[i + j], acc[j]);
    float ss = 0;
    for (int j = 0; j < 32; ++j) ss += acc[j];
    const float scale = 1.0f / std::sqrt(ss / (float)D + a.eps);
    for (int k = 0; k < D; ++k) yr[k] = (xr[k] * scale) * a.g[k];
  }
}

#if REPRO_X86
REPRO_AVX2 void avx2_rows(const NormArgs& a, int m0, int m1) {
  const int D = a.D, D8 = D & ~7;
  const __m256i mask = detail::tail_mask(D - D8);
  for (int m = m0; m < m1; ++m) {
    const float* xr = a.x + (long)m * D;
    float* yr = a.y + (long)m * D;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= D8; i += 32) {
      __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
      __m256 v2 = _mm256_loadu_ps(xr + i + 16), v3 = _mm256_loadu_ps(xr + i + 24);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
      a2 = _mm256_fmadd_ps(v2, v2, a2);
      a3 = _mm256_fmadd_ps(v3, v3, a3);
    }
    for (; i < D8; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    if (D8 < D) {
      __m256 v = _mm256_maskload_ps(xr + D8, mask);
      a1 = _mm256_fmadd_ps(v, v, a1);
    }
    const float ss = detail::hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    const float scale = 1.0f / std::sqrt(ss / (float)D + a.eps);
    const __m256 s = _mm256_set1_ps(scale);
    for (int k = 0; k < D8; k += 8)
      _mm256_storeu_ps(yr + k, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + k), s),
                                             _mm256_loadu_ps(a.g + k)));
    for (int k = D8; k < D; ++k) yr[k] = (xr[k] * scale) * a.g[k];
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

void rmsnorm_default(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool) {
  if (M <= 0) return;
  const NormArgs a{x, g, y, D, eps};
  const bool avx2 = use_avx2();
  // Whole rows per thread, and threads only for large batches (bits unchanged either way).
  parallel_rows(pool, M, D, [&a, avx2](int b, int e) { run_rows(a, b, e, avx2); });
}

}  // namespace repro::kernels
