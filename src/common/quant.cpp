// Quantizers and dequantizers of the GGUF block formats (layouts in repro/common/quant.hpp).
//
// The quantizers are this project's own, simple and deterministic (no search for the best scale):
//   Q8_0  d = max|x| / 127, q = round(x / d)
//   Q4_0  m = the element of largest magnitude (with its sign), d = m / -8,
//         q = clamp(round(x / d) + 8, 0, 15)
//   Q4_K, Q5_K  per sub-block of 32: lo = min(0, min x), hi = max x, scale = (hi - lo) / L
//         (L = 15 or 31), min = -lo; the 8 scales and mins are quantized to 6 bits against
//         d = max scale / 63 and dmin = max min / 63, rounding up so that the sub-block's range
//         stays covered; then q = clamp(round((x + dmin*m) / (d*sc)), 0, L)
//   Q6_K  per sub-block of 16: m = the element of largest magnitude, scale = m / -32; the 16
//         scales are quantized to int8 against d = max |scale| / 127 (away from zero);
//         q = clamp(round(x / (d*sc)), -32, 31)
// Every scale is rounded to f16 first and the quants are computed against the rounded value, so
// the error of an element is at most about one quantization step of its sub-block.
#include "repro/common/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "repro/common/dtype.hpp"

namespace repro::quant {

void unpack_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
#if defined(__x86_64__)
  static const bool on = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return on;
#else
  return false;
#endif
}

namespace {

float bits_f32(uint32_t u) { return f32_from_bits(u); }
float half_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t f32_to_half(float f) { return f32_to_f16(f); }

uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

int round_clamp(float v, int lo, int hi) {
  float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;  // also NaN
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

#if defined(__x86_64__)
// F16 rows with the F16C conversion instruction: exact, the same values as half_to_f32.
__attribute__((target("avx,f16c"))) void f16_row_f16c(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < n; ++i) dst[i] = half_to_f32(load16(src + 2 * i));
}
#endif

// ---- the K formats' packed 6-bit scale/min pairs ----
void pack_scale_min(const int sc[8], const int m[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

// ---- dequantizers, one block ----
void dq_q8_0(const uint8_t* b, float* y) {
  const float d = half_to_f32(load16(b));
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}
void dq_q4_0(const uint8_t* b, float* y) {
  const float d = half_to_f32(load16(b));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}
// Q4_K and Q5_K (qh == nullptr for Q4_K).
void dq_k45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = half_to_f32(load16(b)), dmin = half_to_f32(load16(b + 2));
  const uint8_t* scales = b + 4;
  for (int g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    unpack_scale_min(scales, 2 * g, sc0, m0);
    unpack_scale_min(scales, 2 * g + 1, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
    const uint8_t* q = qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 0x0f, hi = q[l] >> 4;
      if (qh) {
        lo |= ((qh[l] >> (2 * g)) & 1) << 4;
        hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
      }
      y[64 * g + l] = d0 * static_cast<float>(lo) - n0;
      y[64 * g + 32 + l] = d1 * static_cast<float>(hi) - n1;
    }
  }
}
void dq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_to_f32(load16(b + 208));
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * k + l;
        const uint8_t lowbyte = ql[64 * h + l + 32 * (k & 1)];
        const int lo = k < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
        const int q = (lo | (((qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
        y[e] = (d * static_cast<float>(sc[e / 16])) * static_cast<float>(q);
      }
}

// ---- AVX2 dequantizers, one block: the same single f32 operations in the same order as the
// scalar ones above, 8 elements at a time (target avx2 without fma, so nothing is contracted) ----
#if defined(__x86_64__)
#define REPRO_DQ_AVX2 __attribute__((target("avx2")))

// 8 bytes (the low 8 of v) as unsigned / signed integers converted to f32.
REPRO_DQ_AVX2 inline __m256 u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
REPRO_DQ_AVX2 inline __m256 i8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
REPRO_DQ_AVX2 inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

REPRO_DQ_AVX2 void dq_q8_0_avx2(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(half_to_f32(load16(b)));
  for (int j = 0; j < 32; j += 16) {
    const __m128i q = load128(b + 2 + j);
    _mm256_storeu_ps(y + j, _mm256_mul_ps(d, i8x8(q)));
    _mm256_storeu_ps(y + j + 8, _mm256_mul_ps(d, i8x8(_mm_srli_si128(q, 8))));
  }
}

// 8 elements s * (v - bias): the integer subtraction first, then conversion and one multiply.
REPRO_DQ_AVX2 inline void put_biased(float* dst, __m256 s, __m128i v, int bias) {
  const __m256i i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(v), _mm256_set1_epi32(bias));
  _mm256_storeu_ps(dst, _mm256_mul_ps(s, _mm256_cvtepi32_ps(i)));
}

REPRO_DQ_AVX2 void dq_q4_0_avx2(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(half_to_f32(load16(b)));
  const __m128i q = load128(b + 2), mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
  put_biased(y, d, lo, 8);
  put_biased(y + 8, d, _mm_srli_si128(lo, 8), 8);
  put_biased(y + 16, d, hi, 8);
  put_biased(y + 24, d, _mm_srli_si128(hi, 8), 8);
}

REPRO_DQ_AVX2 void dq_k45_avx2(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = half_to_f32(load16(b)), dmin = half_to_f32(load16(b + 2));
  const uint8_t* scales = b + 4;
  const __m128i mask = _mm_set1_epi8(0x0f), one = _mm_set1_epi8(1);
  for (int g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    unpack_scale_min(scales, 2 * g, sc0, m0);
    unpack_scale_min(scales, 2 * g + 1, sc1, m1);
    const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc0)), n0 = _mm256_set1_ps(dmin * static_cast<float>(m0));
    const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc1)), n1 = _mm256_set1_ps(dmin * static_cast<float>(m1));
    for (int h = 0; h < 32; h += 16) {
      const __m128i q = load128(qs + 32 * g + h);
      __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
      if (qh) {
        const __m128i bits = load128(qh + h);
        // Bit 2g (2g + 1) of each byte moved to bit 4; the 16-bit shifts cannot mix bytes under the mask.
        lo = _mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(bits, 2 * g), one), 4));
        hi = _mm_or_si128(hi, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(bits, 2 * g + 1), one), 4));
      }
      float* ylo = y + 64 * g + h;
      float* yhi = y + 64 * g + 32 + h;
      _mm256_storeu_ps(ylo, _mm256_sub_ps(_mm256_mul_ps(d0, u8x8(lo)), n0));
      _mm256_storeu_ps(ylo + 8, _mm256_sub_ps(_mm256_mul_ps(d0, u8x8(_mm_srli_si128(lo, 8))), n0));
      _mm256_storeu_ps(yhi, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8(hi)), n1));
      _mm256_storeu_ps(yhi + 8, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8(_mm_srli_si128(hi, 8))), n1));
    }
  }
}

REPRO_DQ_AVX2 void dq_q6_k_avx2(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qhb = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_to_f32(load16(b + 208));
  const __m128i mask = _mm_set1_epi8(0x0f), three = _mm_set1_epi8(3);
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; l += 16) {
        const __m128i low = load128(ql + 64 * h + l + 32 * (k & 1));
        const __m128i nib = k < 2 ? _mm_and_si128(low, mask) : _mm_and_si128(_mm_srli_epi16(low, 4), mask);
        const __m128i top = _mm_and_si128(_mm_srli_epi16(load128(qhb + 32 * h + l), 2 * k), three);
        const __m128i q = _mm_or_si128(nib, _mm_slli_epi16(top, 4));  // 0..63, before the -32
        const int e = 128 * h + 32 * k + l;                            // 16 elements: one sub-block
        const __m256 s = _mm256_set1_ps(d * static_cast<float>(sc[e / 16]));
        put_biased(y + e, s, q, 32);
        put_biased(y + e + 8, s, _mm_srli_si128(q, 8), 32);
      }
}

REPRO_DQ_AVX2 void bf16_row_avx2(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(load128(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) dst[i] = bits_f32(static_cast<uint32_t>(load16(src + 2 * i)) << 16);
}

bool dequant_avx2() {
  static const bool on = __builtin_cpu_supports("avx2");
  return on;
}
#endif

// ---- quantizers, one block ----
float max_abs_signed(const float* x, int n) {
  float best = 0, amax = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      best = x[j];
    }
  return best;
}

void q_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint16_t dh = f32_to_half(amax / 127.0f);
  const float d = half_to_f32(dh);
  store16(b, dh);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? round_clamp(x[j] / d, -127, 127) : 0));
}

void q_q4_0(const float* x, uint8_t* b) {
  const uint16_t dh = f32_to_half(max_abs_signed(x, 32) / -8.0f);
  const float d = half_to_f32(dh);
  store16(b, dh);
  for (int j = 0; j < 16; ++j) {
    int lo = d != 0 ? round_clamp(x[j] / d + 8.0f, 0, 15) : 8;
    int hi = d != 0 ? round_clamp(x[j + 16] / d + 8.0f, 0, 15) : 8;
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q4_K (levels 15, qh == nullptr) and Q5_K (levels 31).
void q_k45(const float* x, int levels, uint8_t* b, uint8_t* qh, uint8_t* qs) {
  float scale[8], minv[8];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = x[32 * s];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * s + l]);
      hi = std::max(hi, x[32 * s + l]);
    }
    scale[s] = (hi - lo) / static_cast<float>(levels);
    minv[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, minv[s]);
  }
  const uint16_t dh = f32_to_half(max_scale / 63.0f), mh = f32_to_half(max_min / 63.0f);
  const float d = half_to_f32(dh), dmin = half_to_f32(mh);
  store16(b, dh);
  store16(b + 2, mh);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? std::min(63, static_cast<int>(std::ceil(scale[s] / d))) : 0;
    m[s] = dmin > 0 ? std::min(63, static_cast<int>(std::ceil(minv[s] / dmin))) : 0;
  }
  pack_scale_min(sc, m, b + 4);
  if (qh) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * static_cast<float>(sc[s]), ms = dmin * static_cast<float>(m[s]);
    const int g = s / 2, upper = s % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = ds > 0 ? round_clamp((x[32 * s + l] + ms) / ds, 0, levels) : 0;
      qs[32 * g + l] |= static_cast<uint8_t>((q & 0x0f) << (4 * upper));
      if (qh) qh[l] |= static_cast<uint8_t>(((q >> 4) & 1) << (2 * g + upper));
    }
  }
}

void q_q6_k(const float* x, uint8_t* b) {
  float scale[16], max_scale = 0;
  for (int s = 0; s < 16; ++s) {
    scale[s] = max_abs_signed(x + 16 * s, 16) / -32.0f;
    max_scale = std::max(max_scale, std::fabs(scale[s]));
  }
  const uint16_t dh = f32_to_half(max_scale / 127.0f);
  const float d = half_to_f32(dh);
  int8_t sc[16];
  // Rounded away from zero, so that d * sc covers the sub-block's largest element.
  for (int s = 0; s < 16; ++s) {
    const float r = d > 0 ? scale[s] / d : 0.0f;
    sc[s] = static_cast<int8_t>(std::clamp(static_cast<int>(r < 0 ? std::floor(r) : std::ceil(r)), -127, 127));
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(b, 0, 192);
  std::memcpy(b + 192, sc, 16);
  store16(b + 208, dh);
  for (int e = 0; e < 256; ++e) {
    const float ds = d * static_cast<float>(sc[e / 16]);
    const int q = (ds != 0 ? round_clamp(x[e] / ds, -32, 31) : 0) + 32;
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    ql[64 * h + l + 32 * (k & 1)] |= static_cast<uint8_t>((q & 0x0f) << (k < 2 ? 0 : 4));
    qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
}

}  // namespace

Block block_of(Format f) {
  switch (f) {
    case Format::F32: return {1, 4};
    case Format::F16: return {1, 2};
    case Format::BF16: return {1, 2};
    case Format::Q8_0: return {32, 34};
    case Format::Q4_0: return {32, 18};
    case Format::Q4_K: return {256, 144};
    case Format::Q5_K: return {256, 176};
    case Format::Q6_K: return {256, 210};
  }
  return {1, 4};
}

size_t row_bytes(Format f, int64_t n) {
  const Block b = block_of(f);
  return static_cast<size_t>(n / b.elems) * static_cast<size_t>(b.bytes);
}

namespace {
void dequantize_blocks(Format f, const uint8_t* src, float* dst, int64_t n, bool simd) {
  const Block bk = block_of(f);
  const int64_t blocks = n / bk.elems;
#if defined(__x86_64__)
  if (simd) {
    for (int64_t i = 0; i < blocks; ++i) {
      const uint8_t* b = src + i * bk.bytes;
      float* y = dst + i * bk.elems;
      switch (f) {
        case Format::Q8_0: dq_q8_0_avx2(b, y); break;
        case Format::Q4_0: dq_q4_0_avx2(b, y); break;
        case Format::Q4_K: dq_k45_avx2(b, nullptr, b + 16, y); break;
        case Format::Q5_K: dq_k45_avx2(b, b + 16, b + 48, y); break;
        case Format::Q6_K: dq_q6_k_avx2(b, y); break;
        default: return dequantize_blocks(f, src, dst, n, false);
      }
    }
    return;
  }
#else
  (void)simd;
#endif
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * bk.bytes;
    float* y = dst + i * bk.elems;
    switch (f) {
      case Format::F32: std::memcpy(y, b, 4); break;
      case Format::F16: *y = half_to_f32(load16(b)); break;
      case Format::BF16: *y = bits_f32(static_cast<uint32_t>(load16(b)) << 16); break;
      case Format::Q8_0: dq_q8_0(b, y); break;
      case Format::Q4_0: dq_q4_0(b, y); break;
      case Format::Q4_K: dq_k45(b, nullptr, b + 16, y); break;
      case Format::Q5_K: dq_k45(b, b + 16, b + 48, y); break;
      case Format::Q6_K: dq_q6_k(b, y); break;
    }
  }
}

void dequantize(Format f, const uint8_t* src, float* dst, int64_t n, bool simd) {
  // Element formats: one tight loop each (no dispatch per element).
  switch (f) {
    case Format::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case Format::F16:
#if defined(__x86_64__)
      if (simd && cpu_has_f16c()) return f16_row_f16c(src, dst, n);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_f32(load16(src + 2 * i));
      return;
    case Format::BF16:
#if defined(__x86_64__)
      if (simd) return bf16_row_avx2(src, dst, n);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = bits_f32(static_cast<uint32_t>(load16(src + 2 * i)) << 16);
      return;
    default: break;
  }
  dequantize_blocks(f, src, dst, n, simd);
}
}  // namespace

void dequantize_row(Format f, const uint8_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  dequantize(f, src, dst, n, dequant_avx2());
#else
  dequantize(f, src, dst, n, false);
#endif
}

void dequantize_row_scalar(Format f, const uint8_t* src, float* dst, int64_t n) { dequantize(f, src, dst, n, false); }

void quantize_row(Format f, const float* src, uint8_t* dst, int64_t n) {
  const Block bk = block_of(f);
  const int64_t blocks = n / bk.elems;
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* b = dst + i * bk.bytes;
    const float* x = src + i * bk.elems;
    switch (f) {
      case Format::F32: std::memcpy(b, x, 4); break;
      case Format::F16: store16(b, f32_to_half(*x)); break;
      case Format::BF16: store16(b, f32_to_bf16(*x)); break;
      case Format::Q8_0: q_q8_0(x, b); break;
      case Format::Q4_0: q_q4_0(x, b); break;
      case Format::Q4_K: q_k45(x, 15, b, nullptr, b + 16); break;
      case Format::Q5_K: q_k45(x, 31, b, b + 16, b + 48); break;
      case Format::Q6_K: q_q6_k(x, b); break;
    }
  }
}

}  // namespace repro::quant
