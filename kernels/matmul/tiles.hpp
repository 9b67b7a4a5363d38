// Private to the matmul kernels: the register tiles of the batch-invariant f32 matmul, shared by
// matmul_invariant (f32 weights) and the quantized-weight matmuls (which dequantize a panel of
// weight rows to f32 and run these tiles on it). Every output element follows the lane order of
// detail::dot_lanes whatever tile it falls in (see invariant.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

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

// One MR x NR register tile: rows x[0..MR) against w rows w[0..NR), every accumulator follows the
// lane order of detail::dot_lanes; the K tail uses masked loads (zeros), as the zero padding.
template <int MR, int NR>
REPRO_LANES inline void tile(const float* x, const float* w, float* y, int ldy, int K) {
  simd::f32x8 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = simd::zero();
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8) {
    simd::f32x8 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = simd::load(w + (long)j * K + k);
    for (int i = 0; i < MR; ++i) {
      simd::f32x8 xv = simd::load(x + (long)i * K + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = simd::fma(xv, wv[j], acc[i][j]);
    }
  }
  if (K8 < K) {
    simd::mask8 mask = simd::tail(K - K8);
    simd::f32x8 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = simd::load(w + (long)j * K + K8, mask);
    for (int i = 0; i < MR; ++i) {
      simd::f32x8 xv = simd::load(x + (long)i * K + K8, mask);
      for (int j = 0; j < NR; ++j) acc[i][j] = simd::fma(xv, wv[j], acc[i][j]);
    }
  }
  if constexpr (MR == 4 && NR < 4) {
    // Four rows of one column reduced together (same tree per element, fewer shuffles).
    for (int j = 0; j < NR; ++j) {
      float r[4];
      simd::hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], r);
      for (int i = 0; i < 4; ++i) y[(long)i * ldy + j] = r[i];
    }
    return;
  }
  for (int i = 0; i < MR; ++i) {
    float* yr = y + (long)i * ldy;
    if constexpr (NR == 8) {
      simd::store(yr, simd::hsum8(acc[i][0], acc[i][1], acc[i][2], acc[i][3], acc[i][4],
                                           acc[i][5], acc[i][6], acc[i][7]));
    } else if constexpr (NR == 16) {
      simd::store(yr, simd::hsum8(acc[i][0], acc[i][1], acc[i][2], acc[i][3], acc[i][4],
                                           acc[i][5], acc[i][6], acc[i][7]));
      simd::store(yr + 8, simd::hsum8(acc[i][8], acc[i][9], acc[i][10], acc[i][11], acc[i][12],
                                               acc[i][13], acc[i][14], acc[i][15]));
    } else if constexpr (NR == 4) {
      simd::hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], yr);
    } else {
      for (int j = 0; j < NR; ++j) yr[j] = simd::hsum(acc[i][j]);
    }
  }
}

// All rows [m0, m1) against columns [n0, n1) with tiles of at most MR x NR.
template <int MR, int NR>
REPRO_LANES inline void tiles(const MatmulArgs& a, int m0, int m1, int n0, int n1) {
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

#if REPRO_X86
// The AVX-512 tiles: MR rows of x against 8 rows (columns of y) of w. Each 512-bit accumulator
// holds two outputs, columns 2p (low 8 lanes) and 2p + 1 (high 8 lanes), each in the 8-lane order
// of detail::dot_lanes: the x row's 8 values are broadcast to both halves, and every lane sees
// exactly the fma the AVX2 tile gives it. The halves are reduced with the AVX2 trees, so the bits
// are the AVX2 tiles' bits. 32 registers hold a 6 x 8 tile (24 accumulators), against 4 x 3 in
// AVX2's 16.
//
// The 8 w rows are first packed into a panel, block by block of 8 k: [k / 8][column][8], the tail
// zero-padded as the masked loads pad it. A tile then reads one w stream instead of 8: with rows
// K floats apart, 8 w rows and 6 x rows are 14 streams that, when K * 4 is a multiple of 4 KiB
// (K = 2048), all fall into the same sets of the 8-way L1 cache and evict each other.

// v in both 256-bit halves, and the two halves of v. (Not _mm512_broadcast_f32x8 and
// _mm512_castps512_ps256 / extracts: GCC 12's headers build those on an uninitialized value and
// warn under -Werror. The halves go through 64 bytes of stack once per output row of a tile.)
REPRO_AVX512 inline __m512 broadcast8(__m256 v) { return _mm512_insertf32x8(_mm512_castps256_ps512(v), v, 1); }
REPRO_AVX512 inline void halves(__m512 v, __m256& lo, __m256& hi) {
  alignas(64) float b[16];
  _mm512_store_ps(b, v);
  lo = _mm256_load_ps(b);
  hi = _mm256_load_ps(b + 8);
}

// Floats in the packed panel of 8 w rows of K: ceil(K / 8) blocks of 64.
inline size_t panel8_floats(int K) { return static_cast<size_t>((K + 7) / 8) * 64; }

// w rows [0, 8) (K floats apart) into `out` as [k / 8][row][8], zeros past K.
REPRO_AVX2 inline void pack_panel8(const float* w, int K, float* out) {
  const int K8 = K & ~7;
  for (int c = 0; c < 8; ++c) {
    const float* src = w + (long)c * K;
    float* dst = out + c * 8;
    for (int k = 0; k < K8; k += 8) _mm256_storeu_ps(dst + (long)k * 8, _mm256_loadu_ps(src + k));
    if (K8 < K) _mm256_storeu_ps(dst + (long)K8 * 8, _mm256_maskload_ps(src + K8, simd::tail(K - K8)));
  }
}

// MR rows of x (K floats apart) against 8 w rows: a packed panel (Packed) or the rows themselves,
// K floats apart (the two rows of each register loaded into its halves); y rows ldy apart.
template <int MR, bool Packed>
REPRO_AVX512 inline void tile512(const float* x, const float* w, float* y, int ldy, int K) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < 4; ++p) acc[i][p] = _mm512_setzero_ps();
  const int K8 = K & ~7;
  auto load_w = [&](int k, __m512 wv[4], const __m256i* mask) REPRO_AVX512 {
    for (int p = 0; p < 4; ++p) {
      if constexpr (Packed) {
        wv[p] = _mm512_loadu_ps(w + (long)k * 8 + 16 * p);
      } else {
        const float* r0 = w + (long)(2 * p) * K + k;
        const float* r1 = r0 + K;
        wv[p] = mask ? _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskload_ps(r0, *mask)),
                                          _mm256_maskload_ps(r1, *mask), 1)
                     : _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(r0)), _mm256_loadu_ps(r1), 1);
      }
    }
  };
  for (int k = 0; k < K8; k += 8) {
    __m512 wv[4];
    load_w(k, wv, nullptr);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = broadcast8(_mm256_loadu_ps(x + (long)i * K + k));
      for (int p = 0; p < 4; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
    }
  }
  if (K8 < K) {
    const __m256i mask = simd::tail(K - K8);
    __m512 wv[4];
    load_w(K8, wv, &mask);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = broadcast8(_mm256_maskload_ps(x + (long)i * K + K8, mask));
      for (int p = 0; p < 4; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    __m256 h[8];
    for (int p = 0; p < 4; ++p) halves(acc[i][p], h[2 * p], h[2 * p + 1]);
    _mm256_storeu_ps(y + (long)i * ldy, simd::hsum8(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]));
  }
}

// The last rows (fewer than 6) of a column block, with the AVX-512 tile of that height.
template <bool Packed>
REPRO_AVX512 inline void tile512_rows(int rows, const float* x, const float* w, float* y, int ldy, int K) {
  switch (rows) {
    case 5: return tile512<5, Packed>(x, w, y, ldy, K);
    case 4: return tile512<4, Packed>(x, w, y, ldy, K);
    case 3: return tile512<3, Packed>(x, w, y, ldy, K);
    case 2: return tile512<2, Packed>(x, w, y, ldy, K);
    default: return tile512<1, Packed>(x, w, y, ldy, K);
  }
}

// How the AVX-512 tiles read w (speed only; the bits are the same every way). Rows K floats apart
// are read in place unless K * 4 bytes is a multiple of 4 KiB: then the 14 streams of a tile alias
// in L1, and the tiles read a packed panel when there are rows enough (32) to repay the copy, and
// below that the AVX2 tiles (7 streams) run instead.
enum class W512 { avx2, in_place, packed };
inline W512 w512_plan(int M, int K) {
  if (K % 1024 != 0) return W512::in_place;
  return M >= 32 ? W512::packed : W512::avx2;
}

// All rows [m0, m1) against columns [n0, n1): per 8 columns, 6 x 8 tiles down the rows, reading
// w as w512_plan says for the whole M (a packed panel goes in `scratch`, at least
// panel8_floats(K) floats); the columns left over (fewer than 8) with the AVX2 tiles.
REPRO_AVX512 inline void tiles512(const MatmulArgs& a, int m0, int m1, int n0, int n1, float* scratch) {
  constexpr int MR = 6;
  const int K = a.K;
  const W512 plan = w512_plan(a.M, K);
  if (plan == W512::avx2) return tiles<4, 3>(a, m0, m1, n0, n1);
  int n = n0;
  for (; n + 8 <= n1; n += 8) {
    const float* w = a.w + (long)n * K;
    int m = m0;
    if (plan == W512::packed) {
      pack_panel8(w, K, scratch);
      for (; m + MR <= m1; m += MR) tile512<MR, true>(a.x + (long)m * K, scratch, a.y + (long)m * a.N + n, a.N, K);
      if (m < m1) tile512_rows<true>(m1 - m, a.x + (long)m * K, scratch, a.y + (long)m * a.N + n, a.N, K);
    } else {
      for (; m + MR <= m1; m += MR) tile512<MR, false>(a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
      if (m < m1) tile512_rows<false>(m1 - m, a.x + (long)m * K, w, a.y + (long)m * a.N + n, a.N, K);
    }
  }
  if (n < n1) tiles<4, 3>(a, m0, m1, n, n1);
}

// The calling thread's panel buffer for tiles512 (grown as K needs, kept between calls).
inline float* panel8_scratch(int K) {
  thread_local std::vector<float> buf;
  if (buf.size() < panel8_floats(K)) buf.resize(panel8_floats(K));
  return buf.data();
}

// Every row of `a` against columns [n0, n1) with the AVX-512 tiles, in blocks of m_block_rows(K)
// rows kept hot in L2.
REPRO_AVX512 inline void tiles512_blocks(const MatmulArgs& a, int n0, int n1) {
  const int mb = m_block_rows(a.K);
  float* panel = panel8_scratch(a.K);
  for (int m0 = 0; m0 < a.M; m0 += mb) tiles512(a, m0, std::min(a.M, m0 + mb), n0, n1, panel);
}
#endif

}  // namespace repro::kernels::detail
