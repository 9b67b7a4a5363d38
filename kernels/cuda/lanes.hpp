// Host-callable building blocks of the CUDA batch-invariant kernels: one lane of the fixed lane
// dot (kernels/common.hpp, detail::dot_lanes) and one step of the 8-lane xor-shuffle tree. The
// kernels call them on the GPU; tests/unit-cuda-emulation.cpp calls them on the CPU.
#pragma once
#include "../elementwise_math.hpp"

namespace repro::kernels::cuda {

constexpr int kLanes = 8;

// Lane l (0..7) of dot_lanes(a, b, n): elements k = l (mod 8) in increasing k, acc = fma(a, b, acc),
// over the zero-padded length ceil(n / 8) * 8 (a padding step is fma(0, 0, acc), as in the reference).
REPRO_HD float lane_dot(const float* a, const float* b, int n, int lane) {
  const int npad = (n + 7) / 8 * 8;
  float acc = 0.0f;
  for (int k = lane; k < npad; k += kLanes) {
    const float av = k < n ? a[k] : 0.0f, bv = k < n ? b[k] : 0.0f;
    acc = fmaf(av, bv, acc);
  }
  return acc;
}

// One step of the tree: the lane's value plus its partner's (lane ^ 1, then ^ 2, then ^ 4) gives
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) in every lane (IEEE addition is commutative).
REPRO_HD float tree_step(float mine, float partner) { return mine + partner; }

#if defined(__CUDACC__)
// The tree across the 8 lanes of an aligned group of a warp; every lane of the warp must call it.
__device__ __forceinline__ float group_tree(float v) {
  v = tree_step(v, __shfl_xor_sync(0xffffffffu, v, 1, kLanes));
  v = tree_step(v, __shfl_xor_sync(0xffffffffu, v, 2, kLanes));
  v = tree_step(v, __shfl_xor_sync(0xffffffffu, v, 4, kLanes));
  return v;
}
#endif

// The tree emulated on the CPU: the value lane 0 holds after the three shuffles; *same_in_all_lanes
// tells whether every lane ended with lane 0's bits (it must: lanes store the result).
inline float emulate_group_tree(const float (&lanes)[kLanes], bool* same_in_all_lanes = nullptr) {
  float v[kLanes], t[kLanes];
  for (int l = 0; l < kLanes; ++l) v[l] = lanes[l];
  for (int off = 1; off < kLanes; off *= 2) {
    for (int l = 0; l < kLanes; ++l) t[l] = tree_step(v[l], v[l ^ off]);
    for (int l = 0; l < kLanes; ++l) v[l] = t[l];
  }
  if (same_in_all_lanes) {
    *same_in_all_lanes = true;
    for (int l = 1; l < kLanes; ++l) *same_in_all_lanes = *same_in_all_lanes && memcmp(&v[l], &v[0], 4) == 0;
  }
  return v[0];
}

}  // namespace repro::kernels::cuda
