// matmul with quantized weights, reference: plain loops that DEFINE the batch-invariant order.
//
// Why it is batch-invariant: y[m][n] = detail::dot_lanes(x[m], dequantize(w[n]), K). Weight row n
// is dequantized element by element as quant::dequantize_row defines it (a function of the stored
// bytes alone), and the dot product follows the f32 lane order (8 lanes over k mod 8, fma, zero
// padding, fixed tree), which depends on K only. Nothing depends on M, on the other rows, on the
// row's position or on threads. matmul_q_invariant reproduces these bits exactly.
#include <vector>

#include "../common.hpp"
#include "repro/kernels/matmul_quant.hpp"

namespace repro::kernels {

void matmul_q_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K) {
  std::vector<float> row(static_cast<size_t>(K));
  for (int n = 0; n < N; ++n) {
    quant::dequantize_row(w.format, w.data + static_cast<size_t>(n) * w.row_bytes, row.data(), K);
    for (int m = 0; m < M; ++m) y[(long)m * N + n] = detail::dot_lanes(x + (long)m * K, row.data(), K);
  }
}

}  // namespace repro::kernels
