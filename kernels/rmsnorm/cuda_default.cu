// RMSNorm, CUDA default: one block of 256 threads per row, each thread a strided partial sum of
// squares, then a warp-shuffle and shared-memory tree across the block: the usual fast layout.
//
// Its order is fixed by D and the block size, not by M, but it is NOT the CPU reference order
// (strided partials, a 256-way tree): the default table makes no cross-device promise.
#include "../cuda/check.cuh"
#include "../cuda.hpp"
#include "../elementwise_math.hpp"

namespace repro::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rmsnorm_default_kernel(const float* __restrict__ x,
                                                                   const float* __restrict__ g,
                                                                   float* __restrict__ y, int D, float eps) {
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale_s;
  const float* xr = x + static_cast<long>(blockIdx.x) * D;
  float* yr = y + static_cast<long>(blockIdx.x) * D;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < D; i += kThreads) ss = fmaf(xr[i], xr[i], ss);
  for (int off = 16; off > 0; off /= 2) ss += __shfl_down_sync(0xffffffffu, ss, off);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int off = 4; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x == 0) scale_s = math::rms_scale(v, D, eps);
  }
  __syncthreads();
  const float scale = scale_s;
  for (int i = threadIdx.x; i < D; i += kThreads) yr[i] = math::rms_apply(xr[i], scale, g[i]);
}

}  // namespace

void rmsnorm_default(const float* d_x, const float* d_g, float* d_y, int M, int D, float eps) {
  if (M <= 0 || D <= 0) return;
  rmsnorm_default_kernel<<<M, kThreads>>>(d_x, d_g, d_y, D, eps);
  REPRO_CUDA_LAUNCHED("rmsnorm_default_kernel");
}

}  // namespace repro::kernels::cuda
