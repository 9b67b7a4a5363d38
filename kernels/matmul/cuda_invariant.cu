// matmul, CUDA batch-invariant: y[M][N] = x[M][K] * w[N][K]^T, bitwise equal to matmul_reference
// (hence to the CPU batch-invariant path) for every row, whatever M.
//
// Why it is batch-invariant and why it equals the CPU order: every output element is accumulated
// by one 8-lane group in exactly the reference order (lane l: elements k = l mod 8 in increasing
// k, fma, zero padding to a multiple of 8; then the tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) by
// xor-shuffles 1, 2, 4). The block tile (32 x 64 outputs, K chunks of 32) only chooses which
// elements are computed together, never how one is summed; there is no split-K, and the tile
// shape is one constant (it depends on neither the batch nor the weight shape). The per-thread
// steps live in cuda_tile.hpp, shared with the CPU emulation test. Built with --fmad=false: the
// only fmas are the written-out fmaf calls.
#include "../cuda/check.cuh"
#include "cuda_tile.hpp"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
namespace {

__global__ void __launch_bounds__(mm::kThreads) matmul_invariant_kernel(const float* __restrict__ x,
                                                                        const float* __restrict__ w,
                                                                        float* __restrict__ y, int M, int N,
                                                                        int K) {
  __shared__ mm::Smem s;
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * mm::BN, m0 = blockIdx.y * mm::BM;
  float acc[mm::RM][mm::RN];
#pragma unroll
  for (int i = 0; i < mm::RM; ++i)
#pragma unroll
    for (int j = 0; j < mm::RN; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += mm::KC) {
    mm::load_chunk(tid, x, w, M, N, K, m0, n0, k0, s);
    __syncthreads();
    mm::accumulate(tid, s, mm::chunk_steps(K, k0), acc);
    __syncthreads();
  }
  // The group's tree: xor-shuffles 1, 2, 4 within aligned groups of 8 lanes.
#pragma unroll
  for (int i = 0; i < mm::RM; ++i)
#pragma unroll
    for (int j = 0; j < mm::RN; ++j) acc[i][j] = group_tree(acc[i][j]);
  mm::store(tid, acc, y, M, N, m0, n0);
}

}  // namespace

void matmul_invariant(const float* d_x, const float* d_w, float* d_y, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  // The grid covers the output; the block shape is fixed (see cuda_tile.hpp).
  const dim3 grid((N + mm::BN - 1) / mm::BN, (M + mm::BM - 1) / mm::BM);
  if (K <= 0) {
    REPRO_CUDA_CHECK(cudaMemset(d_y, 0, static_cast<size_t>(M) * N * sizeof(float)));
    return;
  }
  matmul_invariant_kernel<<<grid, mm::kThreads>>>(d_x, d_w, d_y, M, N, K);
  REPRO_CUDA_LAUNCHED("matmul_invariant_kernel");
}

}  // namespace repro::kernels::cuda
