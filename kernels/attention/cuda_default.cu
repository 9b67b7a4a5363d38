// attention, CUDA default: split-KV ("flash-decoding") attention with the split COUNT chosen from
// the shape, as production engines do: when rows x heads are too few blocks to fill the GPU, each
// row's KV axis is cut into S equal ranges attended by separate blocks and combined in a second
// pass. S depends on the number of rows, so a row's chunk boundaries, and its bits, change with
// its batch: this is the batch variance the default mode is there to show. Each split runs the
// same per-chunk steps as the invariant kernel (cuda_attend.cuh) from its own first position.
#include <algorithm>

#include "cuda_attend.cuh"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
void check_attention_shape(const AttentionShape& s);  // cuda_invariant.cu
namespace {

// Partial result of one (row, head, split): m, l, any, then o[head_dim].
__global__ void __launch_bounds__(att::kThreads) attention_split_kernel(const AttentionRow* rows,
                                                                        AttentionShape s, float scale,
                                                                        int splits, float* part) {
  __shared__ att::Shared sh;
  const int r = blockIdx.x / s.n_heads, h = blockIdx.x % s.n_heads, sp = blockIdx.y;
  const AttentionRow row = rows[r];
  const int len = (row.n_ctx + splits - 1) / splits;
  const int t0 = min(row.n_ctx, sp * len), t1 = min(row.n_ctx, t0 + len);
  const att::State st = att::attend_range(row, h, s, scale, t0, t1, sh);
  float* p = part + (static_cast<long>(blockIdx.x) * splits + sp) * (s.head_dim + 3);
  if (threadIdx.x == 0) p[0] = st.m, p[1] = st.l, p[2] = st.any ? 1.0f : 0.0f;
#pragma unroll
  for (int j = 0; j < att::kMaxDimsPerThread; ++j) {
    const int d = threadIdx.x + j * att::kThreads;
    if (d < s.head_dim) p[3 + d] = st.o[j];
  }
}

__global__ void attention_combine_kernel(const AttentionRow* rows, AttentionShape s, int splits,
                                         const float* part) {
  const int r = blockIdx.x / s.n_heads, h = blockIdx.x % s.n_heads;
  const AttentionRow row = rows[r];
  for (int d = threadIdx.x; d < s.head_dim; d += blockDim.x) {
    float m = 0.0f, l = 0.0f, o = 0.0f;
    bool any = false;
    for (int sp = 0; sp < splits; ++sp) {
      const float* p = part + (static_cast<long>(blockIdx.x) * splits + sp) * (s.head_dim + 3);
      if (p[2] == 0.0f) continue;
      if (!any) {
        m = p[0], l = p[1], o = p[3 + d], any = true;
      } else {
        float a, b;
        att::fold(m, l, p[0], p[1], a, b);
        o = att::fold_o(o, p[3 + d], a, b);
      }
    }
    row.out[static_cast<long>(h) * s.head_dim + d] = any ? o / l : 0.0f;
  }
}

}  // namespace

void attention_default(const AttentionRow* rows, int n_rows, const AttentionShape& s, AttentionScratch& scratch) {
  if (n_rows <= 0) return;
  check_attention_shape(s);
  int max_ctx = 0;
  for (int r = 0; r < n_rows; ++r) max_ctx = std::max(max_ctx, rows[r].n_ctx);
  // Split count by shape: enough blocks for two waves of the GPU, at least 64 positions a split.
  const long blocks = static_cast<long>(n_rows) * s.n_heads;
  const long want = (2L * detail::sm_count() + blocks - 1) / blocks;
  const int splits = static_cast<int>(std::max(1L, std::min(want, static_cast<long>((max_ctx + 63) / 64))));
  auto* d_rows = static_cast<AttentionRow*>(scratch.rows(sizeof(AttentionRow) * n_rows));
  REPRO_CUDA_CHECK(cudaMemcpy(d_rows, rows, sizeof(AttentionRow) * n_rows, cudaMemcpyHostToDevice));
  auto* part = static_cast<float*>(scratch.part(sizeof(float) * blocks * splits * (s.head_dim + 3)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  attention_split_kernel<<<dim3(static_cast<unsigned>(blocks), splits), att::kThreads>>>(d_rows, s, scale, splits,
                                                                                          part);
  REPRO_CUDA_LAUNCHED("attention_split_kernel");
  attention_combine_kernel<<<static_cast<unsigned>(blocks), 128>>>(d_rows, s, splits, part);
  REPRO_CUDA_LAUNCHED("attention_combine_kernel");
}

}  // namespace repro::kernels::cuda
