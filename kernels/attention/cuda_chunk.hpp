// The per-thread work of the CUDA attention kernels (kernels/attention/cuda_invariant.cu and
// cuda_default.cu), as host-callable functions shared with the CPU emulation test
// (tests/unit-cuda-emulation.cpp).
//
// Decomposition of one (query row, head) block of 128 threads = 16 groups of 8 lanes, per chunk
// of KV positions [t0, t0 + n) (n <= detail::kKvChunk = 256), in attention_reference's order:
//   scores  group g computes positions t = g, g + 16, ...: lane l runs lane l of dot_lanes(q, k_t)
//           (lane_dot), the group's xor tree gives tree8, times scale -> sc[t]
//   max     thread 0, sequentially over t (chunk_max): mc = sc[0]; mc = mc < sc[t] ? sc[t] : mc
//   exp     every thread, e_t = exp(sc[t] - mc) (math::softmax_weight), in place
//   sum     lanes 0..7 of group 0: lane l adds e_t for t = l (mod 8) in increasing t (lane_sum),
//           then the xor tree: the reference's 8 lanes and tree8
//   V       thread d (and d + 128) owns output dims: n_vacc(head_dim) partial fma chains over
//           t mod P, combined pairwise (v_dim)
//   fold    every thread folds the chunk into its running (m, l, o[d]) exactly as the reference
// Nothing depends on the number of rows, the row's position or the grid.
#pragma once
#include "../cuda/lanes.hpp"

namespace repro::kernels::cuda::att {

constexpr int kThreads = 128;
constexpr int kGroups = kThreads / kLanes;
constexpr int kChunk = 256;           // = detail::kKvChunk, the fixed split SIZE along KV
constexpr int kMaxDimsPerThread = 2;  // head_dim <= 256
constexpr int kMaxHeadDim = kThreads * kMaxDimsPerThread;

// = detail::n_vacc: partial accumulators of the V sum, by head_dim only.
REPRO_HD int n_vacc(int head_dim) { return head_dim <= 8 ? 4 : (head_dim <= 16 ? 2 : 1); }

REPRO_HD float chunk_max(const float* sc, int n) {
  float m = sc[0];
  for (int t = 0; t < n; ++t) m = m < sc[t] ? sc[t] : m;
  return m;
}

REPRO_HD float lane_sum(const float* e, int n, int lane) {
  float acc = 0.0f;
  for (int t = lane; t < n; t += kLanes) acc += e[t];
  return acc;
}

// Output dim d of the chunk: sum_t e_t * v_t[d] with P partial fma chains over t mod P.
// v points at position t0 of this KV head (v[t * kv_stride + d]).
REPRO_HD float v_dim(const float* e, const float* v, long kv_stride, int n, int d, int P) {
  float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int t = 0; t < n; ++t) part[t % P] = fmaf(e[t], v[t * kv_stride + d], part[t % P]);
  return P == 1 ? part[0] : P == 2 ? part[0] + part[1] : (part[0] + part[1]) + (part[2] + part[3]);
}

// Fold factors of chunk (mc, lc) into the running (m, l): updates m and l, returns a and b for
// o = o * a + oc * b.
REPRO_HD void fold(float& m, float& l, float mc, float lc, float& a, float& b) {
  const float mn = m < mc ? mc : m;
  a = math::exp(m - mn);
  b = math::exp(mc - mn);
  const float la = l * a, lb = lc * b;
  l = la + lb;
  m = mn;
}
REPRO_HD float fold_o(float o, float oc, float a, float b) {
  const float oa = o * a, ob = oc * b;
  return oa + ob;
}

}  // namespace repro::kernels::cuda::att
