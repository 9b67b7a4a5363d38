// Matmul with weights kept in their stored block format (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K;
// layouts in repro/common/quant.hpp): y[M][N] = x[M][K] * w[N][K]^T, x and y in f32.
//
// Q8_0 and the K formats (Q4_K, Q5_K, Q6_K): integer dot products on 8-bit activations. Each
// activation row is quantized ON ITS OWN (row-local, so batch-invariant by construction), in blocks
// of the weight's block size: 32 elements for Q8_0, 256 for the K formats. Per block: amax = max |x|
// (NaN ignored), one f32 scale d = amax / 127, q = clamp(nearbyint(x / d), -127, 127) in int8 (round
// half to even; amax 0 gives d = 0 and q = 0); for Q4_K and Q5_K also the integer sum of each 32 q
// values (for the mins term). A block's products are summed in int32, exactly (the bounds are in
// kernels/matmul/quant_reference.cpp), so AVX2 (maddubs/madd) and plain loops agree; the float
// combination is fixed by K and the format:
//   Q8_0  lane l < 8 of block b: isum = sum_{i<4} qw[32b+4l+i] * q[32b+4l+i];
//         acc_l = fma(d_w(b) * d_x(b), (float)isum, acc_l) over b in increasing order; y = tree8(acc)
//   Q4_K  lane l < 8 of block b: isum = sum_{s<8} sc_s * sum_{i<4} qw[32s+4l+i] * q[32s+4l+i],
//   Q5_K  imin = sum_{s<8} m_s * bsum_s; acc_l = fma(d_w * d_x, (float)isum, acc_l),
//         accm = fma(dmin_w * d_x, (float)imin, accm); y = tree8(acc) - accm (qw: 4 or 5 bits)
//   Q6_K  lane l < 8 of block b: isum = sum_{c<8} sc_{2c+l/4} * sum_{i<4} (qw-32)[32c+4l+i] * q[32c+4l+i];
//         acc_l = fma(d_w * d_x, (float)isum, acc_l); y = tree8(acc)
// (tree8 as in detail::dot_lanes). The activation rounding costs precision (about 1/254 of each
// block's largest element per element), as it does in llama.cpp, whose CPU dot products for these
// formats also run on 8-bit activations.
//
// Other formats (F16, BF16, Q4_0): activations stay f32: a weight row is dequantized to f32 exactly
// as quant::dequantize_row defines each element and the dot product runs in f32.
//
//   matmul_q_reference  plain loops that DEFINE the batch-invariant order: the integer path above
//                       for Q8_0 and the K formats; else for every (m, n), detail::dot_lanes(x[m],
//                       dequantize(w[n]), K): 8 lanes over k mod 8 with fma, zero padding, fixed
//                       tree (bitwise the f32 reference matmul on the dequantized matrix).
//   matmul_q_invariant  fast path, bitwise equal to the reference for every row whatever the
//                       batch size, batch mates, position or thread count. Q8_0 and K formats:
//                       the AVX2 integer kernels (plain loops without AVX2), threads over weight
//                       rows.
//                       Others: threads take panels of weight rows, dequantize each panel once
//                       into f32 scratch and run the AVX2 register tiles of the f32 invariant
//                       matmul over all M rows.
//   matmul_q_default    the fastest path per shape: Q8_0 and the K formats take the integer kernels below
//                       quant_int_max_rows(format) rows; then (and for the other formats) the
//                       f32 panel kernel; for M >= kQuantSgemmMinRows, weight rows are
//                       dequantized in chunks (threads over rows) and handed to OpenBLAS
//                       cblas_sgemm, whose blocking and thread split depend on the shape (not
//                       batch-invariant). So the default table's integer-path numbers change with M
//                       (f32 activations from quant_int_max_rows(format) rows on).
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

// From this batch size on, matmul_q_default leaves the integer path (0: a format without one).
// Measured on the project machine (1.1B-model shapes 2048x2048, 5632x2048, 2048x5632, 1 and 2
// threads, tests/unit-kernels-bench.cpp): Q4_K integer kernels were faster than the f32 panels at
// every M up to 255 (1.1-2x from 8 rows, 3-6x at 1 row); Q8_0 ones faster up to 32 rows and
// 0.7-0.9x of the f32 panels from 64 rows on. Q5_K and Q6_K: see docs/BENCHMARKS.md.
inline int quant_int_max_rows(quant::Format f) {
  using quant::Format;
  return f == Format::Q4_K || f == Format::Q5_K || f == Format::Q6_K ? kQuantSgemmMinRows
         : f == Format::Q8_0                                         ? 64
                                                                     : 0;
}

// True for the formats with the integer dot-product path (Q8_0, Q4_K, Q5_K, Q6_K).
bool has_int_dot(quant::Format f);
// One activation row of K elements (a multiple of the format's block) quantized as above for
// weights of format wf (one with the integer path): K int8 values, K/32 (Q8_0) or K/256 (K formats)
// scales, and for Q4_K and Q5_K K/32 sums of 32 values (bsum is not written for Q8_0 and Q6_K). The plain loops of the
// reference.
void quantize_act_row_reference(quant::Format wf, const float* x, int K, int8_t* q, float* d, int16_t* bsum);

void matmul_q_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K);
void matmul_q_invariant(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);
void matmul_q_default(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);

}  // namespace repro::kernels
