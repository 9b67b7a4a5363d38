// matmul reference: plain loops that DEFINE the batch-invariant reduction order of
// y[m][n] = sum_k x[m][k] * w[n][k].
//
// Why it is batch-invariant: each output element is computed from its own x row and w row only,
// in an order fixed by K alone: 8 lane accumulators, lane j takes k = j (mod 8) in increasing k
// with acc = fma(x, w, acc), K zero-padded to a multiple of 8, then the lanes are reduced as
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) (detail::dot_lanes). Nothing depends on M, on the other
// rows, on the row's position or on threads. matmul_invariant reproduces these bits exactly.
#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {

void matmul_reference(const float* x, const float* w, float* y, int M, int N, int K) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      y[(long)m * N + n] = detail::dot_lanes(x + (long)m * K, w + (long)n * K, K);
}

}  // namespace repro::kernels
