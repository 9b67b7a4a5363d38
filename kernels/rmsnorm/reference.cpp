// RMSNorm reference: plain loops that DEFINE the batch-invariant order.
//
// Why it is batch-invariant: each row is normalised from its own D values only. The sum of
// squares uses detail::dot_lanes(x, x, D) (8 lanes over i = j mod 8 with fma, zero padding, the
// fixed tree), then scale = 1 / sqrt(ss / D + eps) and y = (x * scale) * g, all correctly rounded
// IEEE operations: the order depends on D alone, never on M, row position or threads.
#include <cmath>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {

void rmsnorm_reference(const float* x, const float* g, float* y, int M, int D, float eps) {
  for (int m = 0; m < M; ++m) {
    const float* xr = x + (long)m * D;
    float* yr = y + (long)m * D;
    float ss = detail::dot_lanes(xr, xr, D);
    float scale = math::rms_scale(ss, D, eps);
    for (int i = 0; i < D; ++i) yr[i] = (xr[i] * scale) * g[i];
  }
}

}  // namespace repro::kernels
