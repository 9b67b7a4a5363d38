// The per-thread work of the batch-invariant CUDA RMSNorm (kernels/rmsnorm/cuda_invariant.cu), as
// host-callable functions shared with the CPU emulation test (tests/unit-cuda-emulation.cpp).
//
// Decomposition (fixed): a block of 256 threads = 32 groups of 8 lanes; group g normalises row
// blockIdx.x * 32 + g. Lane l computes lane l of dot_lanes(x, x, D) (lane_dot), the group's xor
// tree gives the reference's tree8, every lane derives the same scale (math::rms_scale), and lane
// l writes the elements i = l (mod 8) of the row.
#pragma once
#include "../cuda/lanes.hpp"

namespace repro::kernels::cuda::rms {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kLanes;

// Lane `lane`'s share of y = (x * scale) * g for one row.
REPRO_HD void store_lane(const float* x, const float* g, float* y, int D, int lane, float scale) {
  for (int i = lane; i < D; i += kLanes) y[i] = math::rms_apply(x[i], scale, g[i]);
}

}  // namespace repro::kernels::cuda::rms
