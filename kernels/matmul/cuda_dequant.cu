// Weights in their stored type, dequantized on the GPU: the embedding lookup of a stored table
// (gather_rows_stored) and chunks of weight rows for the default matmul (dequantize_rows).
//
// Why the embedding is batch-invariant and equals the CPU: each output element is one element of
// one table row, dequantized alone by dq::element (kernels/matmul/cuda_dequant.hpp: the bits of
// quant::dequantize_row); no reduction, so no order to keep.
#include "../cuda/check.cuh"
#include "../cuda.hpp"
#include "cuda_dequant.hpp"

namespace repro::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <class W>
__global__ void __launch_bounds__(kThreads) gather_stored_kernel(W w, const int* idx, int n, int width, float* dst) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long>(n) * width) return;
  const int j = static_cast<int>(e / width), c = static_cast<int>(e % width);
  dst[e] = w(idx[j], c);
}

template <class W>
__global__ void __launch_bounds__(kThreads) dequantize_rows_kernel(W w, int n0, int rows, int K, float* dst) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long>(rows) * K) return;
  dst[e] = w(n0 + static_cast<int>(e / K), static_cast<int>(e % K));
}

[[noreturn]] void unread(const char* what, DType t) {
  throw BackendError(std::string(what) + ": no CUDA kernel reads " + dtype_name(t) + " weights");
}

}  // namespace

void gather_rows_stored(const StoredWeight& table, const int* d_idx, int n, int width, float* d_dst) {
  const size_t total = static_cast<size_t>(n) * width;
  if (!total) return;
  if (!dq::with_rows(table.type, table.data, table.row_bytes, [&](auto rows) {
        gather_stored_kernel<<<blocks_for(total), kThreads>>>(rows, d_idx, n, width, d_dst);
      }))
    unread("gather_rows_stored", table.type);
  REPRO_CUDA_LAUNCHED("gather_stored_kernel");
}

void dequantize_rows(const StoredWeight& w, int n0, int rows, int K, float* d_dst) {
  const size_t total = static_cast<size_t>(rows) * K;
  if (!total) return;
  if (!dq::with_rows(w.type, w.data, w.row_bytes, [&](auto r) {
        dequantize_rows_kernel<<<blocks_for(total), kThreads>>>(r, n0, rows, K, d_dst);
      }))
    unread("dequantize_rows", w.type);
  REPRO_CUDA_LAUNCHED("dequantize_rows_kernel");
}

}  // namespace repro::kernels::cuda
