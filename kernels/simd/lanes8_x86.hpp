// The 8-lane layer (lanes8.hpp) on x86: AVX2 + FMA, one ymm register per f32x8. The reductions
// are the hadd trees whose order is detail::tree8's: two _mm256_hadd_ps give (l0 + l1) + (l2 + l3)
// in the low half and (l4 + l5) + (l6 + l7) in the high half, one add joins them.
#pragma once
#include <immintrin.h>

#include "../elementwise_math.hpp"

#define REPRO_LANES __attribute__((target("avx2,fma")))
#define REPRO_LANES_ISA "avx2+fma"

namespace repro::kernels::simd {

using f32x8 = __m256;
using mask8 = __m256i;

// The CPU has AVX2 and FMA (libgcc's probe also checks that the OS saves the ymm state).
inline bool lanes_available() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

REPRO_LANES inline f32x8 zero() { return _mm256_setzero_ps(); }
REPRO_LANES inline f32x8 set1(float x) { return _mm256_set1_ps(x); }
REPRO_LANES inline f32x8 load(const float* p) { return _mm256_loadu_ps(p); }
REPRO_LANES inline void store(float* p, f32x8 v) { _mm256_storeu_ps(p, v); }
REPRO_LANES inline mask8 tail(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
REPRO_LANES inline f32x8 load(const float* p, mask8 m) { return _mm256_maskload_ps(p, m); }
REPRO_LANES inline void store(float* p, mask8 m, f32x8 v) { _mm256_maskstore_ps(p, m, v); }
REPRO_LANES inline f32x8 keep(f32x8 v, mask8 m) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }

REPRO_LANES inline f32x8 add(f32x8 a, f32x8 b) { return _mm256_add_ps(a, b); }
REPRO_LANES inline f32x8 sub(f32x8 a, f32x8 b) { return _mm256_sub_ps(a, b); }
REPRO_LANES inline f32x8 mul(f32x8 a, f32x8 b) { return _mm256_mul_ps(a, b); }
REPRO_LANES inline f32x8 div(f32x8 a, f32x8 b) { return _mm256_div_ps(a, b); }
REPRO_LANES inline f32x8 max(f32x8 a, f32x8 b) { return _mm256_max_ps(a, b); }
REPRO_LANES inline f32x8 neg(f32x8 a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
REPRO_LANES inline f32x8 fma(f32x8 a, f32x8 b, f32x8 c) { return _mm256_fmadd_ps(a, b, c); }

// math::exp on 8 lanes, bit for bit: the same range reduction, polynomial and scaling.
REPRO_LANES inline f32x8 exp(f32x8 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(math::kExpLo), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(math::kExpHi), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(math::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-math::kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-math::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(math::kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kP5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 y = _mm256_fmadd_ps(p, r2, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(zero_mask, y);
}

REPRO_LANES inline float hsum(f32x8 a) {
  __m256 t = _mm256_hadd_ps(a, a);
  t = _mm256_hadd_ps(t, t);
  const __m128 r = _mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  return _mm_cvtss_f32(r);
}
REPRO_LANES inline void hsum4(f32x8 a, f32x8 b, f32x8 c, f32x8 d, float* out) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
REPRO_LANES inline f32x8 hsum8(f32x8 a, f32x8 b, f32x8 c, f32x8 d, f32x8 e, f32x8 f, f32x8 g, f32x8 h) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  const __m256 v = _mm256_hadd_ps(_mm256_hadd_ps(e, f), _mm256_hadd_ps(g, h));
  return _mm256_add_ps(_mm256_permute2f128_ps(u, v, 0x20), _mm256_permute2f128_ps(u, v, 0x31));
}

}  // namespace repro::kernels::simd
