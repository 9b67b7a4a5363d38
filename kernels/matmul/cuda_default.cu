// matmul, CUDA default: cuBLAS sgemm with its default heuristics, the way production engines run.
//
// Why it is NOT batch-invariant (on purpose; this is the honest baseline): cuBLAS picks the kernel,
// tile shape and split-K factor from (M, N, K), so row 0 of a product can get different bits at
// M = 1 than at M = 64. Math mode stays CUBLAS_DEFAULT_MATH (no TF32 unless the user's
// environment asks for it, e.g. NVIDIA_TF32_OVERRIDE).
#include "../cuda/check.cuh"
#include "../cuda.hpp"

namespace repro::kernels::cuda {

void matmul_default(const float* d_x, const float* d_w, float* d_y, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  const float one = 1.0f, zero = 0.0f;
  // Row-major y[M][N] = x[M][K] w[N][K]^T is column-major y^T[N][M] = w^T... : C(N x M) =
  // op(A)(N x K) op(B)(K x M) with A = w stored K x N column-major (transposed) and B = x stored
  // K x M column-major (as is).
  cublasHandle_t handle = detail::cublas();  // throws when cuBLAS cannot be loaded
  REPRO_CUDA_CHECK(detail::cublas_api()->sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, d_w, K, d_x, K, &zero,
                                               d_y, N));
}

}  // namespace repro::kernels::cuda
