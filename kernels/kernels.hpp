// The three kernels whose reduction order decides batch variance: matmul, RMSNorm, attention.
// Each has (kernels/<op>/):
//   *_reference  plain loops; defines the batch-invariant reduction order exactly
//   *_default    the fastest path per shape, as production engines run (a GEMV at one row, register
//                tiles for few rows, OpenBLAS cblas_sgemm for many, split-KV attention when there
//                are few rows, ...). Never perturbed on purpose.
//   *_invariant  the batch-invariant fast path (SIMD, blocking, threads over outputs); bitwise
//                equal to *_reference for every row, whatever the batch size, batch mates,
//                position in batch or thread count.
// Private to kernels/ (and the kernel tests): the engine does not call these, the CPU op tables
// (kernels/ops_cpu.cpp) do, behind the op table of repro/kernels/ops.hpp.
#pragma once
#include "repro/common/threadpool.hpp"

namespace repro::kernels {

// ---- matmul: y[M][N] = x[M][K] * w[N][K]^T (w row-major [out][in], as model weights are) ----
void matmul_reference(const float* x, const float* w, float* y, int M, int N, int K);
// From this many rows on, matmul_default calls OpenBLAS cblas_sgemm; below, its own GEMV (one row)
// or register tiles (kernels/matmul/default.cpp). Measured on the project machine (f32, shapes
// 768x768, 2048x768, 768x2048, 1 and 2 threads): the tiles were faster up to 64 rows, sgemm from
// about 96 to 128 rows on.
constexpr int kSgemmMinRows = 96;
void matmul_default(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool& pool);
void matmul_invariant(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool& pool);

// ---- RMSNorm: y[m] = x[m] / sqrt(mean(x[m]^2) + eps) * g, rows of length D ----
void rmsnorm_reference(const float* x, const float* g, float* y, int M, int D, float eps);
void rmsnorm_default(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool);
void rmsnorm_invariant(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool& pool);

// ---- attention (softmax inside), one query row per entry, causal over its own KV cache ----
struct AttentionRow {
  const float* q;  // [n_heads * head_dim]
  const float* k;  // [n_ctx][kv_stride]: this sequence's K cache for this layer
  const float* v;  // [n_ctx][kv_stride]
  int n_ctx;       // positions attended (pos + 1)
  float* out;      // [n_heads * head_dim]
};
struct AttentionShape {
  int n_heads;
  int n_kv_heads;  // GQA: query head h reads KV head h / (n_heads / n_kv_heads)
  int head_dim;
  int kv_stride;   // floats between consecutive positions in k / v (= n_kv_heads * head_dim)
};
// Scores scaled by 1/sqrt(head_dim).
void attention_reference(const AttentionRow* rows, int n_rows, const AttentionShape& s);
void attention_default(const AttentionRow* rows, int n_rows, const AttentionShape& s, ThreadPool& pool);
void attention_invariant(const AttentionRow* rows, int n_rows, const AttentionShape& s, ThreadPool& pool);

// cpu_has_avx2_fma(), cpu_has_avx512(), cpu_kernels_isa(): repro/kernels/backends.hpp (through common.hpp).

}  // namespace repro::kernels
