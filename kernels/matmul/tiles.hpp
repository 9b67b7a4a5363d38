// Private to the matmul kernels: the register tiles of the batch-invariant f32 matmul, shared by
// matmul_invariant (f32 weights) and the quantized-weight matmuls (which dequantize a panel of
// weight rows to f32 and run these tiles on it). Every output element follows the lane order of
// detail::dot_lanes whatever tile it falls in (see invariant.cpp).
#pragma once
#include <algorithm>

#include "../common.hpp"

namespace repro::kernels::detail {

// y[m * N + n] = dot(x[m], w[n]) for the (m, n) a range asks for; x rows and w rows have K floats.
struct MatmulArgs {
  const float* x;
  const float* w;
  float* y;
  int M, N, K;
};

// Rows of x kept hot (in L2) per block: depends only on K (rows * K * 4 bytes <= 512 KiB).
inline int m_block_rows(int K) { return std::max(4, (512 * 1024) / (4 * std::max(K, 1)) / 4 * 4); }

inline void portable_range(const MatmulArgs& a, int n0, int n1) {
  for (int m = 0; m < a.M; ++m)
    for (int n = n0; n < n1; ++n)
      a.y[(long)m * a.N + n] = detail::dot_lanes(a.x + (long)m * a.K, a.w + (long)n * a.K, a.K);
}

#if REPRO_X86
// One MR x NR register tile: rows x[0..MR) against w rows w[0..NR), every accumulator follows the
// lane order of detail::dot_lanes; the K tail uses masked loads (zeros), as the zero padding.
template <int MR, int NR>
REPRO_AVX2 inline void tile(const float* x, const float* w, float* y, int ldy, int K) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + (long)j * K + k);
    for (int i = 0; i < MR; ++i) {
      __m256 xv = _mm256_loadu_ps(x + (long)i * K + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (K8 < K) {
    __m256i mask = detail::tail_mask(K - K8);
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(w + (long)j * K + K8, mask);
    for (int i = 0; i < MR; ++i) {
      __m256 xv = _mm256_maskload_ps(x + (long)i * K + K8, mask);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if constexpr (MR == 4 && NR < 4) {
    // Four rows of one column reduced together (same tree per element, fewer shuffles).
    for (int j = 0; j < NR; ++j) {
      alignas(16) float r[4];
      _mm_store_ps(r, detail::hsum8x4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
      for (int i = 0; i < 4; ++i) y[(long)i * ldy + j] = r[i];
    }
    return;
  }
  for (int i = 0; i < MR; ++i) {
    float* yr = y + (long)i * ldy;
    if constexpr (NR == 8) {
      _mm256_storeu_ps(yr, detail::hsum8x8(acc[i][0], acc[i][1], acc[i][2], acc[i][3], acc[i][4],
                                           acc[i][5], acc[i][6], acc[i][7]));
    } else if constexpr (NR == 4) {
      _mm_storeu_ps(yr, detail::hsum8x4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    } else {
      for (int j = 0; j < NR; ++j) yr[j] = detail::hsum8(acc[i][j]);
    }
  }
}

// All rows [m0, m1) against columns [n0, n1) with tiles of at most MR x NR.
template <int MR, int NR>
REPRO_AVX2 inline void tiles(const MatmulArgs& a, int m0, int m1, int n0, int n1) {
  const int K = a.K;
  int n = n0;
  for (; n + NR <= n1; n += NR) {
    const float* w = a.w + (long)n * K;
    int m = m0;
    for (; m + MR <= m1; m += MR) tile<MR, NR>(a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
    for (; m < m1; ++m) tile<1, NR>(a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
  }
  for (; n < n1; ++n) {
    const float* w = a.w + (long)n * K;
    int m = m0;
    for (; m + 4 <= m1; m += 4) tile<4, 1>(a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
    for (; m < m1; ++m) tile<1, 1>(a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
  }
}
#endif

}  // namespace repro::kernels::detail
