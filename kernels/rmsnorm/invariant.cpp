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

REPRO_LANES void lanes_rows(const NormArgs& a, int m0, int m1) {
  const int D = a.D, D8 = D & ~7;
  const simd::mask8 mask = simd::tail(D - D8);
  for (int m = m0; m < m1; ++m) {
    const float* xr = a.x + (long)m * D;
    float* yr = a.y + (long)m * D;
    simd::f32x8 acc = simd::zero();
    for (int i = 0; i < D8; i += 8) {
      simd::f32x8 v = simd::load(xr + i);
      acc = simd::fma(v, v, acc);
    }
    if (D8 < D) {
      simd::f32x8 v = simd::load(xr + D8, mask);
      acc = simd::fma(v, v, acc);
    }
    const float ss = simd::hsum(acc);
    const float scale = math::rms_scale(ss, D, a.eps);
    const simd::f32x8 s = simd::set1(scale);
    for (int i = 0; i < D8; i += 8)
      simd::store(yr + i, simd::mul(simd::mul(simd::load(xr + i), s),
                                             simd::load(a.g + i)));
    for (int i = D8; i < D; ++i) yr[i] = (xr[i] * scale) * a.g[i];
  }
}

void run_rows(const NormArgs& a, int m0, int m1, bool lanes) {
  if (lanes) return lanes_rows(a, m0, m1);
  portable_rows(a, m0, m1);
}

}  // namespace

void rmsnorm_invariant(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool) {
  if (M <= 0) return;
  const NormArgs a{x, g, y, D, eps};
  const bool lanes = use_lanes();
  // Whole rows per thread, and threads only for large batches (bits unchanged either way).
  parallel_rows(pool, M, D, [&a, lanes](int b, int e) { run_rows(a, b, e, lanes); });
}

}  // namespace repro::kernels
