// matmul with quantized weights, batch-invariant fast path: bitwise equal to matmul_q_reference.
//
// Q8_0, Q4_K, Q5_K and Q6_K weights take the integer dot-product kernels (quant_dot.cpp: row-local
// activation quantization, exact integer block sums, one fixed float order per K and format).
//
// The other formats (F16, BF16, Q4_0), f32 panels. Why they are batch-invariant: threads take
// contiguous ranges of weight rows (output columns) in panels of kPanel rows; a panel is dequantized once into f32 scratch (the same element values as
// quant::dequantize_row, whatever the panel) and the f32 invariant register tiles run over all M
// rows of x. A tile only decides which elements are computed together, never how one is summed:
// each element follows detail::dot_lanes over K. Panel width, tile shape and thread split change
// speed only; the order depends on K and the format alone. No split-K.
#include <algorithm>
#include <vector>

#include "../kernels.hpp"
#include "../matmul_quant.hpp"
#include "quant_dot.hpp"
#include "tiles.hpp"

namespace repro::kernels {
namespace {

// Weight rows dequantized together: a multiple of the 4x3 and 1x8 tile widths.
constexpr int kPanel = 24;

std::vector<float>& panel_scratch(size_t n) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch;
}

REPRO_LANES void panel_tiles(const detail::MatmulArgs& a, int pw) {
  if (a.M == 1) return detail::tiles<1, 8>(a, 0, 1, 0, pw);
  const int mb = detail::m_block_rows(a.K);
  for (int m0 = 0; m0 < a.M; m0 += mb) detail::tiles<4, 3>(a, m0, std::min(a.M, m0 + mb), 0, pw);
}

#if REPRO_X86
REPRO_AVX512 void panel_tiles512(const detail::MatmulArgs& a, int pw) {
  if (a.M == 1) return panel_tiles(a, pw);
  detail::tiles512_blocks(a, 0, pw);
}
#endif

void run_range(const float* x, const QuantWeight& w, float* y, int M, int N, int K, int n0, int n1, bool lanes) {
  std::vector<float>& scratch = panel_scratch(static_cast<size_t>(kPanel) * K);
#if REPRO_X86
  const bool avx512 = lanes && use_avx512();
#endif
  for (int p0 = n0; p0 < n1; p0 += kPanel) {
    const int pw = std::min(kPanel, n1 - p0);
    for (int j = 0; j < pw; ++j)
      quant::dequantize_row(w.format, w.data + static_cast<size_t>(p0 + j) * w.row_bytes,
                            scratch.data() + static_cast<size_t>(j) * K, K);
    // Columns [p0, p0 + pw) of y: the panel's rows stand at w[0..pw), y is offset by p0 with row
    // stride N.
    const detail::MatmulArgs a{x, scratch.data(), y + p0, M, N, K};
#if REPRO_X86
    if (avx512) {
      panel_tiles512(a, pw);
      continue;
    }
#endif
    if (lanes) {
      panel_tiles(a, pw);
      continue;
    }
    detail::portable_range(a, 0, pw);
  }
}

}  // namespace

void detail::matmul_q_panels(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
  const bool lanes = use_lanes();
  const double flops = 2.0 * M * N * (double)K;
  if (pool.size() == 1 || flops < 2e5) return run_range(x, w, y, M, N, K, 0, N, lanes);
  const int units = (N + kPanel - 1) / kPanel;
  pool.parallel_for(units, [&](int b, int e) {
    run_range(x, w, y, M, N, K, b * kPanel, std::min(N, e * kPanel), lanes);
  });
}

void matmul_q_invariant(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (has_int_dot(w.format)) return detail::matmul_q_int(x, w, y, M, N, K, pool);
  detail::matmul_q_panels(x, w, y, M, N, K, pool);
}

}  // namespace repro::kernels
