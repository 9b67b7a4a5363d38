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
//
// Q8_0, Q4_K, Q5_K and Q6_K weights take the CPU's integer path instead (kernels/matmul/cuda_int_dot.hpp): each
// activation row is quantized to int8 on its own, one thread per block, then one 8-lane group per
// output sums exact int32 block products and combines them in the CPU's fixed float order; the
// launch shape (256 threads, 32 outputs per block) is one constant.
//
// Weights in another stored type (F16, BF16, Q4_0) take the same kernel: each element is
// turned into f32 in registers as the chunk is staged (kernels/matmul/cuda_dequant.hpp, the bits of
// quant::dequantize_row), so every output is detail::dot_lanes(x[m], dequantize(w[n]), K): the
// order of matmul_q_reference for these types, hence cpu-batch-invariant's bits. The weights stay
// on the device in their stored size.
#include "../cuda/check.cuh"
#include "cuda_dequant.hpp"
#include "cuda_int_dot.hpp"
#include "cuda_tile.hpp"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
namespace {

template <class W>
__global__ void __launch_bounds__(mm::kThreads) matmul_invariant_kernel(const float* __restrict__ x, W w,
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

template <class W>
void launch(const float* d_x, W w, float* d_y, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  // The grid covers the output; the block shape is fixed (see cuda_tile.hpp).
  const dim3 grid((N + mm::BN - 1) / mm::BN, (M + mm::BM - 1) / mm::BM);
  if (K <= 0) {
    REPRO_CUDA_CHECK(cudaMemset(d_y, 0, static_cast<size_t>(M) * N * sizeof(float)));
    return;
  }
  matmul_invariant_kernel<<<grid, mm::kThreads>>>(d_x, w, d_y, M, N, K);
  REPRO_CUDA_LAUNCHED("matmul_invariant_kernel");
}

// ---- Q8_0 and the K formats: quantized activations, exact integer block sums ----
constexpr int kIntThreads = 256;  // 32 groups of 8 lanes: 32 outputs per block

// One thread per (row m, activation block b).
__global__ void __launch_bounds__(kIntThreads) quantize_acts_kernel(const float* __restrict__ x, int M, int K,
                                                                    int blk, int8_t* __restrict__ q,
                                                                    float* __restrict__ d,
                                                                    int16_t* __restrict__ bsum) {
  const int nb = K / blk;
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(M) * nb) return;
  const long off = t * blk;  // = m * K + b * blk
  idot::quantize_block(x + off, blk, q + off, d + t, bsum ? bsum + t * (blk / 32) : nullptr);
}

// One aligned 8-lane group per output o = m * N + n.
template <DType T>
__global__ void __launch_bounds__(kIntThreads) int_dot_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                              const int8_t* __restrict__ q,
                                                              const float* __restrict__ d,
                                                              const int16_t* __restrict__ bsum,
                                                              float* __restrict__ y, int M, int N, int K) {
  const long o = static_cast<long>(blockIdx.x) * (kIntThreads / kLanes) + threadIdx.x / kLanes;
  const int l = threadIdx.x % kLanes;
  const bool live = o < static_cast<long>(M) * N;
  const long oc = live ? o : 0;  // every lane takes part in the shuffles
  const int m = static_cast<int>(oc / N), n = static_cast<int>(oc % N);
  const uint8_t* wr = w + static_cast<size_t>(n) * row_bytes;
  const int8_t* qr = q + static_cast<long>(m) * K;
  const int blk = idot::act_block(T);
  const bool mins = idot::act_bsum(T);
  float accm = 0.0f;
  float acc = idot::int_lane(T, wr, qr, d + static_cast<long>(m) * (K / blk),
                             mins ? bsum + static_cast<long>(m) * (K / 32) : nullptr, K, l, accm);
  acc = group_tree(acc);
  if (live && l == 0) y[o] = mins ? acc - accm : acc;
}

void int_dot(const float* d_x, const StoredWeight& w, float* d_y, int M, int N, int K, MatmulScratch& scratch) {
  const bool mins = idot::act_bsum(w.type);
  const int blk = idot::act_block(w.type), nb = K / blk;
  // Scratch: d [M][K / blk] f32, bsum [M][K / 32] int16 (Q4_K, Q5_K), q [M][K] int8.
  const size_t dn = static_cast<size_t>(M) * nb, bn = mins ? static_cast<size_t>(M) * (K / 32) : 0;
  char* base = static_cast<char*>(scratch.get(dn * 4 + bn * 2 + static_cast<size_t>(M) * K));
  float* d = reinterpret_cast<float*>(base);
  int16_t* bsum = mins ? reinterpret_cast<int16_t*>(base + dn * 4) : nullptr;
  int8_t* q = reinterpret_cast<int8_t*>(base + dn * 4 + bn * 2);
  if (dn > 0) {
    quantize_acts_kernel<<<static_cast<unsigned>((dn + kIntThreads - 1) / kIntThreads), kIntThreads>>>(d_x, M, K, blk,
                                                                                                     q, d, bsum);
    REPRO_CUDA_LAUNCHED("quantize_acts_kernel");
  }
  const long outs = static_cast<long>(M) * N, per = kIntThreads / kLanes;
  const unsigned blocks = static_cast<unsigned>((outs + per - 1) / per);
  switch (w.type) {
    case DType::Q8_0:
      int_dot_kernel<DType::Q8_0><<<blocks, kIntThreads>>>(w.data, w.row_bytes, q, d, bsum, d_y, M, N, K);
      break;
    case DType::Q4_K:
      int_dot_kernel<DType::Q4_K><<<blocks, kIntThreads>>>(w.data, w.row_bytes, q, d, bsum, d_y, M, N, K);
      break;
    case DType::Q5_K:
      int_dot_kernel<DType::Q5_K><<<blocks, kIntThreads>>>(w.data, w.row_bytes, q, d, bsum, d_y, M, N, K);
      break;
    default:
      int_dot_kernel<DType::Q6_K><<<blocks, kIntThreads>>>(w.data, w.row_bytes, q, d, bsum, d_y, M, N, K);
      break;
  }
  REPRO_CUDA_LAUNCHED("int_dot_kernel");
}

}  // namespace

void matmul_invariant(const float* d_x, const float* d_w, float* d_y, int M, int N, int K) {
  launch(d_x, mm::F32Rows{d_w, K}, d_y, M, N, K);
}

void matmul_invariant_stored(const float* d_x, const StoredWeight& w, float* d_y, int M, int N, int K,
                             MatmulScratch& scratch) {
  if (!dq::invariant_reads(w.type) || w.type == DType::F32)
    throw BackendError(std::string("matmul_invariant_stored: no CUDA batch-invariant kernel reads ") +
                       dtype_name(w.type) + " weights");
  if (M <= 0 || N <= 0) return;
  if (w.type == DType::Q8_0 || w.type == DType::Q4_K || w.type == DType::Q5_K || w.type == DType::Q6_K)
    return int_dot(d_x, w, d_y, M, N, K, scratch);
  dq::with_rows(w.type, w.data, w.row_bytes, [&](auto rows) { launch(d_x, rows, d_y, M, N, K); });
}

}  // namespace repro::kernels::cuda
