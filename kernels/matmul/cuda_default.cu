// matmul, CUDA default: cuBLAS with its default heuristics, the way production engines run.
//
// Why it is NOT batch-invariant (on purpose; this is the honest baseline): cuBLAS picks the kernel,
// tile shape and split-K factor from (M, N, K), so row 0 of a product can get different bits at
// M = 1 than at M = 64. Math mode stays CUBLAS_DEFAULT_MATH (no TF32 unless the user's
// environment asks for it, e.g. NVIDIA_TF32_OVERRIDE).
//
// Weights in a stored type: F16 and BF16 through cublasGemmEx on 16-bit inputs (the activations
// are rounded to the weight's type first, nearest even, as engines that keep 16-bit activations
// feed the GEMM; f32 accumulation and output, CUBLAS_GEMM_DEFAULT); the block formats (Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K) are dequantized a chunk of weight rows at a time into f32 scratch of at
// most kDequantChunkBytes (the chunk depends on K only) and each chunk goes through sgemm, as
// llama.cpp's CUDA backend does for batches. The weights stay in their stored type; only the
// chunk being multiplied exists in f32, and only for the call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "../cuda/check.cuh"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) to_16bit_kernel(const float* x, T* out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (std::is_same_v<T, __half>)
    out[i] = __float2half_rn(x[i]);
  else
    out[i] = __float2bfloat16_rn(x[i]);
}

// Row-major y[M][N] = x[M][K] w[N][K]^T is column-major y^T[N][M]: C(N x M) = op(A)(N x K) op(B)(K x M)
// with A = w stored K x N column-major (transposed) and B = x stored K x M column-major (as is).
void sgemm(const float* d_x, const float* d_w, int ldw, float* d_y, int ldy, int M, int N, int K) {
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t handle = detail::cublas();  // throws when cuBLAS cannot be loaded
  REPRO_CUDA_CHECK(
      detail::cublas_api()->sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, d_w, ldw, d_x, K, &zero, d_y, ldy));
}

}  // namespace

void matmul_default(const float* d_x, const float* d_w, float* d_y, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  sgemm(d_x, d_w, K, d_y, N, M, N, K);
}

void matmul_default_stored(const float* d_x, const StoredWeight& w, float* d_y, int M, int N, int K,
                           MatmulScratch& scratch) {
  if (M <= 0 || N <= 0) return;
  if (w.type == DType::F16 || w.type == DType::BF16) {
    const size_t n = static_cast<size_t>(M) * K;
    void* x16 = scratch.get(n * 2);
    const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    const bool half = w.type == DType::F16;
    if (half)
      to_16bit_kernel<<<blocks, kThreads>>>(d_x, static_cast<__half*>(x16), n);
    else
      to_16bit_kernel<<<blocks, kThreads>>>(d_x, static_cast<__nv_bfloat16*>(x16), n);
    REPRO_CUDA_LAUNCHED("to_16bit_kernel");
    const cudaDataType_t t = half ? CUDA_R_16F : CUDA_R_16BF;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t handle = detail::cublas();
    REPRO_CUDA_CHECK(detail::cublas_api()->gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w.data, t,
                                                   static_cast<int>(w.row_bytes / 2), x16, t, K, &zero, d_y,
                                                   CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  // Block formats: chunks of weight rows (the chunk size depends on K only).
  const int chunk = static_cast<int>(std::max<size_t>(1, kDequantChunkBytes / (sizeof(float) * std::max(K, 1))));
  const int rows = std::min(N, chunk);
  float* wf = static_cast<float*>(scratch.get(static_cast<size_t>(rows) * K * sizeof(float)));
  for (int n0 = 0; n0 < N; n0 += rows) {
    const int nc = std::min(rows, N - n0);
    dequantize_rows(w, n0, nc, K, wf);
    sgemm(d_x, wf, K, d_y + n0, N, M, nc, K);
  }
}

}  // namespace repro::kernels::cuda
