// RMSNorm, CUDA batch-invariant: bitwise equal to rmsnorm_reference (hence to the CPU
// batch-invariant path) for every row, whatever M.
//
// Why it is batch-invariant and why it equals the CPU order: a row is normalised by one 8-lane
// group from its own D values only. The sum of squares is dot_lanes(x, x, D): lane l takes
// i = l (mod 8) in increasing i with fma and zero padding, the xor-shuffle tree 1, 2, 4 gives
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); scale = 1 / sqrtf(ss / D + eps) (math::rms_scale, IEEE
// division and sqrt) and y = (x * scale) * g. The order depends on D alone; rows per block only
// choose which rows run side by side. Per-thread steps: cuda_rows.hpp.
#include "../cuda/check.cuh"
#include "cuda_rows.hpp"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
namespace {

__global__ void __launch_bounds__(rms::kThreads) rmsnorm_invariant_kernel(const float* __restrict__ x,
                                                                          const float* __restrict__ g,
                                                                          float* __restrict__ y, int M, int D,
                                                                          float eps) {
  const int lane = threadIdx.x % kLanes;
  const int row = blockIdx.x * rms::kRowsPerBlock + threadIdx.x / kLanes;
  const bool valid = row < M;
  const float* xr = x + static_cast<long>(valid ? row : 0) * D;
  // Every lane of the warp joins the shuffles; lanes of rows past M carry zeros.
  const float ss = group_tree(valid ? lane_dot(xr, xr, D, lane) : 0.0f);
  if (!valid) return;
  rms::store_lane(xr, g, y + static_cast<long>(row) * D, D, lane, math::rms_scale(ss, D, eps));
}

}  // namespace

void rmsnorm_invariant(const float* d_x, const float* d_g, float* d_y, int M, int D, float eps) {
  if (M <= 0 || D <= 0) return;
  const int blocks = (M + rms::kRowsPerBlock - 1) / rms::kRowsPerBlock;
  rmsnorm_invariant_kernel<<<blocks, rms::kThreads>>>(d_x, d_g, d_y, M, D, eps);
  REPRO_CUDA_LAUNCHED("rmsnorm_invariant_kernel");
}

}  // namespace repro::kernels::cuda
