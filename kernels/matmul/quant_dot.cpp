// matmul with Q8_0, Q4_K, Q5_K and Q6_K weights on 8-bit activations (definitions in
// kernels/matmul_quant.hpp, plain loops in quant_reference.cpp): the AVX2 kernels.
//
// Why they give the reference's bits: the activations are quantized by the same code
// (quantize_act_block, compiled here for AVX2: IEEE division, round half to even, compares); the
// integer products of a block are summed with maddubs/madd in int32, exactly, into the same 8 lanes
// the reference forms (lane l holds elements 4l..4l+3 of each 32); each lane then takes one fma per
// block in increasing block order, and hsum8 is tree8. A tile of rows only shares the weight loads:
// every (row, column) has its own accumulators. Threads split the columns (N) only, never K.
#include <algorithm>
#include <cstring>

#include "../common.hpp"
#include "quant_dot.hpp"
#include "repro/common/quant.hpp"

namespace repro::kernels::detail {
namespace {

__attribute__((always_inline)) inline void quantize_acts_body(quant::Format wf, const float* x, int M, int K,
                                                              QuantActs& a) {
  const int blk = act_block(wf);
  for (int m = 0; m < M; ++m) {
    const float* xr = x + static_cast<size_t>(m) * K;
    int8_t* qr = a.q.data() + static_cast<size_t>(m) * K;
    float* dr = a.d.data() + static_cast<size_t>(m) * a.blocks;
    int16_t* br = a.bsum.empty() ? nullptr : a.bsum.data() + static_cast<size_t>(m) * a.sub;
    for (int b = 0; b < a.blocks; ++b)
      quantize_act_block(xr + b * blk, blk, qr + b * blk, dr + b, br ? br + b * (blk / 32) : nullptr);
  }
}

void quantize_acts_plain(quant::Format wf, const float* x, int M, int K, QuantActs& a) {
  quantize_acts_body(wf, x, M, K, a);
}

#if REPRO_X86
#define REPRO_QDOT __attribute__((target("avx2,fma,f16c")))

REPRO_QDOT void quantize_acts_avx2(quant::Format wf, const float* x, int M, int K, QuantActs& a) {
  quantize_acts_body(wf, x, M, K, a);
}

REPRO_QDOT inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
REPRO_QDOT inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// R activation rows (m0..m0+R) against one Q8_0 weight row.
template <int R>
REPRO_QDOT void q8_0_tile(const uint8_t* w, const QuantActs& a, int m0, float* y, int ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  const int8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    xq[r] = a.qrow(m0 + r);
    xd[r] = a.drow(m0 + r);
  }
  for (int b = 0; b < a.blocks; ++b) {
    const uint8_t* blk = w + 34 * b;
    const __m256i wv = load256(blk + 2);
    const __m256i aw = _mm256_abs_epi8(wv);  // |w| as unsigned bytes (128 for -128)
    const float dw = half(blk);
    for (int r = 0; r < R; ++r) {
      const __m256i sx = _mm256_sign_epi8(load256(xq[r] + 32 * b), wv);  // x * sign(w), |x| <= 127
      // pairs: |w| * |x| * 2 <= 128 * 127 * 2 < 2^15, no saturation
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd[r][b]), _mm256_cvtepi32_ps(p), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[static_cast<size_t>(r) * ldy] = simd::hsum(acc[r]);
}

// R (<= 4) activation rows against one Q4_K (Q5 false) or Q5_K (Q5 true) weight row. The mins term
// of the R rows shares one 4-lane accumulator (lane r is row r's accm: the same single fma per
// block). Q5_K adds each element's fifth bit (bit s of qh[j], j < 32 its place in sub-block s).
template <int R, bool Q5>
REPRO_QDOT void k45_tile(const uint8_t* w, const QuantActs& a, int m0, float* y, int ldy) {
  static_assert(R >= 1 && R <= 4);
  constexpr int kBytes = Q5 ? 176 : 144, kQs = Q5 ? 48 : 16;
  const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  __m256 acc[R];
  __m128 accm = _mm_setzero_ps();
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* xb[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    xq[r] = a.qrow(m0 + r);
    xd[r] = a.drow(m0 + r);
    xb[r] = a.brow(m0 + r);
  }
  for (int b = 0; b < a.blocks; ++b) {
    const uint8_t* blk = w + kBytes * b;
    // The 8 scales and mins (6 bits each) of the 12 packed bytes, four at a time in 32-bit words.
    uint32_t u[3];
    std::memcpy(u, blk + 4, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    const uint32_t mn_lo = u[1] & 0x3f3f3f3fu, mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(mn_hi), static_cast<int>(mn_lo)));
    // The 8 scales as int16 in both 128-bit halves; scale s is broadcast by a byte shuffle.
    const __m256i scv = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo))));
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    [[maybe_unused]] const __m256i qh = Q5 ? load256(blk + 16) : _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i qv = load256(blk + kQs + 32 * g);
      __m256i lo = _mm256_and_si256(qv, low4), hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4);
      if constexpr (Q5) {  // fifth bits: bit 2g (first 32 elements) and 2g + 1 (next 32) of qh, as 16
        const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one);
        const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
      }
      const __m256i s0 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * 2 * g)));
      const __m256i s1 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * g + 1))));
      for (int r = 0; r < R; ++r) {
        const int8_t* xg = xq[r] + 256 * b + 64 * g;
        // pairs: 31 * 127 * 2 < 2^15; madd by the scale: 4 products * 63 per lane, exact in int32
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xg)), s0);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xg + 32)), s1);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(plo, phi));
      }
    }
    const float dw = half(blk), mw = half(blk + 2);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd[r][b]), _mm256_cvtepi32_ps(isum[r]), acc[r]);
    // imin of each row: 8 bsums times 8 mins, summed in int32 (exact, any order).
    // (lanes >= R stay 0; built in registers, no store and reload)
    __m128i t[4];
    for (int r = 0; r < 4; ++r)
      t[r] = r < R ? _mm_madd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb[r < R ? r : 0] + 8 * b)), mins)
                   : _mm_setzero_si128();
    const __m128i imin = _mm_hadd_epi32(_mm_hadd_epi32(t[0], t[1]), _mm_hadd_epi32(t[2], t[3]));
    const __m128 xdv = _mm_setr_ps(xd[0][b], R > 1 ? xd[R > 1 ? 1 : 0][b] : 0.0f, R > 2 ? xd[R > 2 ? 2 : 0][b] : 0.0f,
                                   R > 3 ? xd[R > 3 ? 3 : 0][b] : 0.0f);
    accm = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(mw), xdv), _mm_cvtepi32_ps(imin), accm);
  }
  alignas(16) float am[4];
  _mm_store_ps(am, accm);
  for (int r = 0; r < R; ++r) y[static_cast<size_t>(r) * ldy] = simd::hsum(acc[r]) - am[r];
}

// R (<= 4) activation rows against one Q6_K weight row. Each chunk c of 32 elements is unpacked once
// to unsigned 6-bit bytes u = v + 32; per row, maddubs(u, x) - maddubs(32, x) gives the int16 pair
// sums of v * x exactly (|pair| <= 2 * 32 * 127), and madd by the chunk's two sub-block scales (8
// int16 each) gives lane l's sc * (its 4 products), as in dot_q6_k_reference.
template <int R>
REPRO_QDOT void q6_k_tile(const uint8_t* w, const QuantActs& a, int m0, float* y, int ldy) {
  static_assert(R >= 1 && R <= 4);
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03), k32 = _mm256_set1_epi8(32);
  __m256 acc[R];
  const int8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    xq[r] = a.qrow(m0 + r);
    xd[r] = a.drow(m0 + r);
  }
  for (int b = 0; b < a.blocks; ++b) {
    const uint8_t* blk = w + 210 * b;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(blk + 64 * h), ql1 = load256(blk + 64 * h + 32), qh = load256(blk + 128 + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const int c = 4 * h + k;
        const __m256i src = k & 1 ? ql1 : ql0;
        const __m256i lo = _mm256_and_si256(k < 2 ? src : _mm256_srli_epi16(src, 4), low4);
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2), 4);
        const __m256i u = _mm256_or_si256(lo, hi);
        const __m256i scv = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * c]), _mm_set1_epi16(sc[2 * c + 1]));
        for (int r = 0; r < R; ++r) {
          const __m256i xv = load256(xq[r] + 256 * b + 32 * c);
          const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, xv), _mm256_maddubs_epi16(k32, xv));
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, scv));
        }
      }
    }
    const float dw = half(blk + 208);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd[r][b]), _mm256_cvtepi32_ps(isum[r]), acc[r]);
  }
  for (int r = 0; r < R; ++r) y[static_cast<size_t>(r) * ldy] = simd::hsum(acc[r]);
}

// R activation rows against one weight row of format f.
template <int R>
REPRO_QDOT void int_tile(quant::Format f, const uint8_t* w, const QuantActs& a, int m0, float* y, int ldy) {
  switch (f) {
    case quant::Format::Q8_0: return q8_0_tile<R>(w, a, m0, y, ldy);
    case quant::Format::Q4_K: return k45_tile<R, false>(w, a, m0, y, ldy);
    case quant::Format::Q5_K: return k45_tile<R, true>(w, a, m0, y, ldy);
    default: return q6_k_tile<R>(w, a, m0, y, ldy);
  }
}

REPRO_QDOT void range_avx2(const QuantWeight& w, const QuantActs& a, float* y, int M, int N, int n0, int n1) {
  const quant::Format f = w.format;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = w.data + static_cast<size_t>(n) * w.row_bytes;
    int m0 = 0;
    for (; m0 + 4 <= M; m0 += 4) int_tile<4>(f, wr, a, m0, y + static_cast<size_t>(m0) * N + n, N);
    float* yo = y + static_cast<size_t>(m0) * N + n;
    switch (M - m0) {
      case 3: int_tile<3>(f, wr, a, m0, yo, N); break;
      case 2: int_tile<2>(f, wr, a, m0, yo, N); break;
      case 1: int_tile<1>(f, wr, a, m0, yo, N); break;
      default: break;
    }
  }
}
#endif

QuantActs& acts_scratch() {
  thread_local QuantActs a;
  return a;
}

}  // namespace

void quantize_acts(quant::Format wf, const float* x, int M, int K, QuantActs& a, bool simd) {
  const int blk = act_block(wf);
  a.K = K;
  a.blocks = K / blk;
  a.sub = K / 32;
  a.q.resize(static_cast<size_t>(M) * K);
  a.d.resize(static_cast<size_t>(M) * a.blocks);
  a.bsum.resize(act_bsum(wf) ? static_cast<size_t>(M) * a.sub : 0);
#if REPRO_X86
  if (simd) return quantize_acts_avx2(wf, x, M, K, a);
#else
  (void)simd;
#endif
  quantize_acts_plain(wf, x, M, K, a);
}

void int_dot_range(const QuantWeight& w, const QuantActs& a, float* y, int M, int N, int n0, int n1, bool avx2) {
#if REPRO_X86
  if (avx2) return range_avx2(w, a, y, M, N, n0, n1);
#else
  (void)avx2;
#endif
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = w.data + static_cast<size_t>(n) * w.row_bytes;
    for (int m = 0; m < M; ++m)
      y[static_cast<size_t>(m) * N + n] =
          dot_int_reference(w.format, wr, a.qrow(m), a.drow(m), a.bsum.empty() ? nullptr : a.brow(m), a.K);
  }
}

void matmul_q_int(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
#if REPRO_X86
  const bool avx2 = use_lanes() && quant::cpu_has_f16c();
#else
  const bool avx2 = false;
#endif
  QuantActs& a = acts_scratch();
  quantize_acts(w.format, x, M, K, a, avx2);
  const double ops = 2.0 * M * N * static_cast<double>(K);
  if (pool.size() == 1 || ops < 2e5) return int_dot_range(w, a, y, M, N, 0, N, avx2);
  pool.parallel_for(N, [&](int b, int e) { int_dot_range(w, a, y, M, N, b, e, avx2); });
}

}  // namespace repro::kernels::detail
