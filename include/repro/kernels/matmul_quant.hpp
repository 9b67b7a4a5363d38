// Matmul with weights kept in their stored block format (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K;
// layouts in repro/common/quant.hpp): y[M][N] = x[M][K] * w[N][K]^T, x and y in f32.
//
// Activations are never quantized: a weight row is dequantized to f32 exactly as
// quant::dequantize_row defines each element (single f32 operations, no fma), and the dot product
// runs in f32. (llama.cpp instead quantizes each activation row to 8 bits for its integer dot
// products; that too would be row-local, hence batch-invariant, but it loses precision this tool
// has no reason to lose.)
//
//   matmul_q_reference  plain loops that DEFINE the batch-invariant order: for every (m, n),
//                       detail::dot_lanes(x[m], dequantize(w[n]), K): 8 lanes over k mod 8 with
//                       fma, zero padding, fixed tree. It depends on K and the format only, so
//                       the result is bitwise the f32 reference matmul on the dequantized matrix.
//   matmul_q_invariant  fast path, bitwise equal to the reference for every row whatever the
//                       batch size, batch mates, position or thread count: threads take panels of
//                       weight rows, dequantize each panel once into f32 scratch and run the
//                       AVX2 register tiles of the f32 invariant matmul over all M rows.
//   matmul_q_default    the fastest path per shape: the invariant panel kernel for small M;
//                       for M >= kQuantSgemmMinRows, weight rows are dequantized in chunks
//                       (threads over rows) and handed to OpenBLAS cblas_sgemm, whose blocking
//                       and thread split depend on the shape (not batch-invariant).
#pragma once
#include <cstddef>
#include <cstdint>

#include "repro/common/quant.hpp"
#include "repro/common/threadpool.hpp"

namespace repro::kernels {

// A weight matrix in its stored format: row n (K elements) at data + n * row_bytes.
struct QuantWeight {
  quant::Format format;
  const uint8_t* data;
  size_t row_bytes;  // quant::row_bytes(format, K) for a dense tensor
};

// From this batch size on, matmul_q_default dequantizes and calls sgemm. Measured on the project
// machine (2048x768 weights in F16, Q8_0 and Q4_K, 1 and 2 threads): the panel kernel was faster
// or equal up to 128 rows (at 64 rows by 1.1-1.9x), the two about even at 256 and 512 rows
// (dequantizing the whole matrix to f32 costs what sgemm saves), so only long prefills take sgemm.
constexpr int kQuantSgemmMinRows = 256;

void matmul_q_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K);
void matmul_q_invariant(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);
void matmul_q_default(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);

}  // namespace repro::kernels
