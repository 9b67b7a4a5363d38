// Element types of weights and activations, and the scalar conversions between them.
//
// The conversions are header-only and plain integer arithmetic, so every backend (the model loader,
// the CPU op tables, a GPU backend) rounds with exactly the same function: f32 -> f16 and
// f32 -> bf16 round to nearest, ties to even; NaN stays NaN; overflow gives inf.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace repro {

// The type a weight is stored in: plain floats or one of the GGUF block formats (block layouts,
// quantizer and dequantizer in repro/common/quant.hpp). The loader keeps matrices in their stored
// type and the op tables' matmul reads them directly.
enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half to float (exact).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in f32
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));         // rebias 15 -> 127
}

// bfloat16 to float (exact).
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// float to IEEE half: round to nearest even; overflow gives inf.
inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);  // inf / NaN
  if (ax < 0x38800000u) {                                                           // below 2^-14: subnormal
    if (ax <= 0x33000000u) return sign;  // <= 2^-25 rounds (ties to even) to zero
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // value * 2^24 = m * 2^(e - 126)
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = (ax - 0x38000000u) >> 13;  // rebias 127 -> 15, keep 10 mantissa bits
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) ++q;  // may carry into inf: correct
  if (q >= 0x7c00u) q = 0x7c00u;
  return static_cast<uint16_t>(sign | q);
}

// float to bfloat16: round to nearest even (carries into the exponent, up to inf); NaN stays a
// quiet NaN of the same sign.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace repro
