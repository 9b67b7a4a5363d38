// attention, CUDA batch-invariant: causal attention with softmax inside, one block per (query row,
// head), bitwise equal to attention_reference (hence to the CPU batch-invariant path).
//
// Why it is batch-invariant and why it equals the CPU order: a block attends only to its row's own
// KV cache; the KV axis is cut into chunks of the FIXED SIZE 256 (never a fixed count) from
// position 0, and the block folds them in increasing order itself, so no reduction is split across
// blocks. Inside a chunk every step follows the reference (cuda_chunk.hpp): scores by lane dot and
// xor tree, a sequential max, exp from the shared math::exp, the sum over 8 lanes by t mod 8 and
// its tree, the V sum with n_vacc(head_dim) fma chains, the fold with exp, products and one add.
// The caller writes the KV cache (the new position included) before attention runs.
#include "cuda_attend.cuh"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
AttentionScratch::~AttentionScratch() {
  for (void* b : buf_)
    if (b) cudaFree(b);  // from a destructor: a failing cudaFree at teardown is not worth an abort
}

void* AttentionScratch::grow(int which, size_t bytes) {
  if (bytes > cap_[which]) {
    if (buf_[which]) REPRO_CUDA_CHECK(cudaFree(buf_[which]));
    buf_[which] = nullptr;
    cap_[which] = 0;
    REPRO_CUDA_CHECK(cudaMalloc(&buf_[which], bytes));
    cap_[which] = bytes;
  }
  return buf_[which];
}

namespace {

__global__ void __launch_bounds__(att::kThreads) attention_invariant_kernel(const AttentionRow* rows,
                                                                            AttentionShape s, float scale) {
  __shared__ att::Shared sh;
  const int r = blockIdx.x / s.n_heads, h = blockIdx.x % s.n_heads;
  const AttentionRow row = rows[r];
  const att::State st = att::attend_range(row, h, s, scale, 0, row.n_ctx, sh);
  float* out = row.out + static_cast<long>(h) * s.head_dim;
#pragma unroll
  for (int j = 0; j < att::kMaxDimsPerThread; ++j) {
    const int d = threadIdx.x + j * att::kThreads;
    if (d < s.head_dim) out[d] = row.n_ctx > 0 ? st.o[j] / st.l : 0.0f;
  }
}

}  // namespace

void check_attention_shape(const AttentionShape& s) {
  if (s.head_dim > att::kMaxHeadDim || s.head_dim <= 0 || s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0)
    throw BackendError("CUDA attention: unsupported shape (head_dim " + std::to_string(s.head_dim) + ", " +
                       std::to_string(s.n_heads) + " heads, " + std::to_string(s.n_kv_heads) +
                       " KV heads): head_dim must be 1.." + std::to_string(att::kMaxHeadDim) +
                       " and heads a multiple of KV heads");
}

void attention_invariant(const AttentionRow* rows, int n_rows, const AttentionShape& s, AttentionScratch& scratch) {
  if (n_rows <= 0) return;
  check_attention_shape(s);
  auto* d_rows = static_cast<AttentionRow*>(scratch.rows(sizeof(AttentionRow) * n_rows));
  REPRO_CUDA_CHECK(cudaMemcpy(d_rows, rows, sizeof(AttentionRow) * n_rows, cudaMemcpyHostToDevice));
  // The same expression as attention_reference, evaluated on the host: the same bits.
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  attention_invariant_kernel<<<n_rows * s.n_heads, att::kThreads>>>(d_rows, s, scale);
  REPRO_CUDA_LAUNCHED("attention_invariant_kernel");
}

}  // namespace repro::kernels::cuda
