// matmul invariant: the batch-invariant fast path (AVX2+FMA or AVX-512 register tiles, cache
// blocking, threads over output columns), bitwise equal to matmul_reference.
//
// Why it is batch-invariant: every output element y[m][n] is accumulated in the order
// matmul_reference defines (8 lanes over k = j mod 8 in increasing k with fma, K zero-padded to a
// multiple of 8 through masked loads, then the fixed tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)))
// whatever tile, block or thread it falls in: a tile only decides WHICH elements are computed
// together, never how one element is summed. There is no split-K. The tile shape may depend on M
// (speed only); the accumulation order depends on K alone. Threads split N (output columns).
// Without AVX2 the portable path runs the reference order with std::fma: same bits.
#include <algorithm>

#include "../kernels.hpp"
#include "tiles.hpp"

namespace repro::kernels {
namespace {

using detail::MatmulArgs;
using detail::m_block_rows;
using detail::portable_range;

using detail::tiles;

REPRO_LANES void lanes_range(const MatmulArgs& a, int n0, int n1) {
  if (a.M == 1) {
    // One row: 16 columns at a time (16 independent accumulators to hide the FMA latency; the
    // weight loads fold into the FMAs). 8 left the row at ~85% of the default GEMV's speed.
    tiles<1, 16>(a, 0, 1, n0, n1);
    return;
  }
  const int mb = m_block_rows(a.K);
  for (int m0 = 0; m0 < a.M; m0 += mb) tiles<4, 3>(a, m0, std::min(a.M, m0 + mb), n0, n1);
}

#if REPRO_X86
// Two rows and more: the AVX-512 tiles (one row stays on AVX2's 1 x 16 tile, bound by memory).
REPRO_AVX512 void avx512_range(const MatmulArgs& a, int n0, int n1) {
  if (a.M == 1) return lanes_range(a, n0, n1);
  detail::tiles512_blocks(a, n0, n1);
}
#endif

void run_range(const MatmulArgs& a, int n0, int n1, bool lanes) {
#if REPRO_X86
  if (lanes && use_avx512()) return avx512_range(a, n0, n1);
#endif
  if (lanes) return lanes_range(a, n0, n1);
  portable_range(a, n0, n1);
}

}  // namespace

void matmul_invariant(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
  const MatmulArgs a{x, w, y, M, N, K};
  const bool lanes = use_lanes();
  // Threads take contiguous ranges of output columns (units of 16); small products stay on the
  // calling thread, where a dispatch would cost more than it saves. Neither choice changes bits.
  const double flops = 2.0 * M * N * (double)K;
  if (pool.size() == 1 || flops < 2e5) return run_range(a, 0, N, lanes);
  constexpr int kUnit = 16;
  const int units = (N + kUnit - 1) / kUnit;
  struct Ctx {
    const MatmulArgs* a;
    bool lanes;
  } ctx{&a, lanes};
  const Ctx* c = &ctx;
  pool.parallel_for(units, [c](int b, int e) {
    run_range(*c->a, b * kUnit, std::min(c->a->N, e * kUnit), c->lanes);
  });
}

}  // namespace repro::kernels
