// Private to the CUDA attention kernels: one (row, head) block attends to KV positions
// [t_begin, t_end) in chunks of att::kChunk starting at t_begin, in attention_reference's order
// (see cuda_chunk.hpp). The batch-invariant kernel calls it with the whole context [0, n_ctx); the
// default split-KV kernel with one split's range, which moves the chunk boundaries with the split
// count (and so with the batch).
#pragma once
#include "../cuda/check.cuh"
#include "cuda_chunk.hpp"
#include "../kernels.hpp"

namespace repro::kernels::cuda::att {

struct State {
  float m = 0.0f, l = 0.0f;
  float o[kMaxDimsPerThread] = {0.0f, 0.0f};
  bool any = false;  // at least one chunk folded
};

struct Shared {
  float q[kMaxHeadDim];
  float sc[kChunk];
  float mc, lc;
};

__device__ inline State attend_range(const AttentionRow& row, int h, const AttentionShape& s, float scale,
                                     int t_begin, int t_end, Shared& sh) {
  const int tid = threadIdx.x, lane = tid % kLanes, group = tid / kLanes, hd = s.head_dim;
  const int kvh = h / (s.n_heads / s.n_kv_heads), P = n_vacc(hd);
  const float* q = row.q + static_cast<long>(h) * hd;
  for (int d = tid; d < hd; d += kThreads) sh.q[d] = q[d];
  __syncthreads();
  State st;
  for (int t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int n = min(kChunk, t_end - t0);
    const float* kb = row.k + static_cast<long>(t0) * s.kv_stride + static_cast<long>(kvh) * hd;
    const float* vb = row.v + static_cast<long>(t0) * s.kv_stride + static_cast<long>(kvh) * hd;
    for (int tb = 0; tb < n; tb += kGroups) {  // uniform trip count: every lane joins the shuffles
      const int t = tb + group;
      const bool valid = t < n;
      float p = valid ? lane_dot(sh.q, kb + static_cast<long>(t) * s.kv_stride, hd, lane) : 0.0f;
      p = group_tree(p);
      if (valid && lane == 0) sh.sc[t] = p * scale;
    }
    __syncthreads();
    if (tid == 0) sh.mc = chunk_max(sh.sc, n);
    __syncthreads();
    const float mc = sh.mc;
    for (int t = tid; t < n; t += kThreads) sh.sc[t] = math::softmax_weight(sh.sc[t], mc);
    __syncthreads();
    if (tid < 32) {
      const float v = group_tree(tid < kLanes ? lane_sum(sh.sc, n, tid) : 0.0f);
      if (tid == 0) sh.lc = v;
    }
    __syncthreads();
    const float lc = sh.lc;
    float a = 1.0f, b = 1.0f;
    if (st.any) fold(st.m, st.l, mc, lc, a, b);
#pragma unroll
    for (int j = 0; j < kMaxDimsPerThread; ++j) {
      const int d = tid + j * kThreads;
      if (d < hd) {
        const float oc = v_dim(sh.sc, vb, s.kv_stride, n, d, P);
        st.o[j] = st.any ? fold_o(st.o[j], oc, a, b) : oc;
      }
    }
    if (!st.any) st.m = mc, st.l = lc, st.any = true;
    __syncthreads();  // sc is rewritten by the next chunk
  }
  return st;
}

}  // namespace repro::kernels::cuda::att
