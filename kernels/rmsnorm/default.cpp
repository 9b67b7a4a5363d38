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

REPRO_LANES void lanes_rows(const NormArgs& a, int m0, int m1) {
  const int D = a.D, D8 = D & ~7;
  const simd::mask8 mask = simd::tail(D - D8);
  for (int m = m0; m < m1; ++m) {
    const float* xr = a.x + (long)m * D;
    float* yr = a.y + (long)m * D;
    simd::f32x8 a0 = simd::zero(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= D8; i += 32) {
      simd::f32x8 v0 = simd::load(xr + i), v1 = simd::load(xr + i + 8);
      simd::f32x8 v2 = simd::load(xr + i + 16), v3 = simd::load(xr + i + 24);
      a0 = simd::fma(v0, v0, a0);
      a1 = simd::fma(v1, v1, a1);
      a2 = simd::fma(v2, v2, a2);
      a3 = simd::fma(v3, v3, a3);
    }
    for (; i < D8; i += 8) {
      simd::f32x8 v = simd::load(xr + i);
      a0 = simd::fma(v, v, a0);
    }
    if (D8 < D) {
      simd::f32x8 v = simd::load(xr + D8, mask);
      a1 = simd::fma(v, v, a1);
    }
    const float ss = simd::hsum(simd::add(simd::add(a0, a1), simd::add(a2, a3)));
    const float scale = 1.0f / std::sqrt(ss / (float)D + a.eps);
    const simd::f32x8 s = simd::set1(scale);
    for (int k = 0; k < D8; k += 8)
      simd::store(yr + k, simd::mul(simd::mul(simd::load(xr + k), s),
                                             simd::load(a.g + k)));
    for (int k = D8; k < D; ++k) yr[k] = (xr[k] * scale) * a.g[k];
  }
}

void run_rows(const NormArgs& a, int m0, int m1, bool lanes) {
  if (lanes) return lanes_rows(a, m0, m1);
  portable_rows(a, m0, m1);
}

}  // namespace

void rmsnorm_default(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool) {
  if (M <= 0) return;
  const NormArgs a{x, g, y, D, eps};
  const bool lanes = use_lanes();
  // Whole rows per thread, and threads only for large batches (bits unchanged either way).
  parallel_rows(pool, M, D, [&a, lanes](int b, int e) { run_rows(a, b, e, lanes); });
}

}  // namespace repro::kernels
