// One weight element from its stored bytes, on the GPU and on the host: the CUDA kernels read
// weights in their stored type (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; layouts in
// repro/common/quant.hpp) and turn each element into f32 in registers as they stage a chunk, so
// the weights stay on the device in their stored size (never expanded to f32 there).
//
// Why the bits equal the CPU's: each element is computed with the same single f32 operations in
// the same order as quant::dequantize_row_scalar (the half and bfloat16 conversions are exact; a
// block element is d * q, (d * sc) * q - dmin * m or (d * sc) * (q - 32), each product rounded on
// its own: the CUDA build passes --fmad=false, so nothing is fused). tests/unit-cuda-emulation.cpp
// compares element() with dequantize_row_scalar for every 16-bit code and for random blocks of
// every format, bitwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../elementwise_math.hpp"
#include "repro/common/dtype.hpp"

namespace repro::kernels::cuda::dq {

REPRO_HD uint32_t load16(const uint8_t* p) { return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8); }

REPRO_HD float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE half to f32, exact (repro::f16_to_f32: a subnormal is mant * 2^-24, exact in f32).
REPRO_HD float half_to_float(uint32_t h) {
  const uint32_t sign = (h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return from_bits(sign | 0x7f800000u | (mant << 13));
  return from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

REPRO_HD float bf16_to_float(uint32_t h) { return from_bits(h << 16); }

// The 6-bit scale and min of sub-block j (< 8) of a K format (quant::unpack_scale_min).
REPRO_HD void scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Element k of a weight row stored as F (row: the row's first byte).
template <DType F>
REPRO_HD float element(const uint8_t* row, int k) {
  if constexpr (F == DType::F32) {
    return from_bits(load16(row + 4 * k) | (load16(row + 4 * k + 2) << 16));
  } else if constexpr (F == DType::F16) {
    return half_to_float(load16(row + 2 * k));
  } else if constexpr (F == DType::BF16) {
    return bf16_to_float(load16(row + 2 * k));
  } else if constexpr (F == DType::Q8_0) {
    const uint8_t* b = row + 34 * (k / 32);
    return half_to_float(load16(b)) * static_cast<float>(static_cast<int8_t>(b[2 + k % 32]));
  } else if constexpr (F == DType::Q4_0) {
    const uint8_t* b = row + 18 * (k / 32);
    const int j = k % 32;
    const int q = j < 16 ? (b[2 + j] & 0x0f) - 8 : (b[2 + j - 16] >> 4) - 8;
    return half_to_float(load16(b)) * static_cast<float>(q);
  } else if constexpr (F == DType::Q4_K || F == DType::Q5_K) {
    const bool five = F == DType::Q5_K;
    const uint8_t* b = row + (five ? 176 : 144) * (k / 256);
    const int e = k % 256, g = e / 64, hi = (e % 64) / 32, l = e % 32;
    int sc, m;
    scale_min(b + 4, 2 * g + hi, sc, m);
    const float d = half_to_float(load16(b)) * static_cast<float>(sc);
    const float n = half_to_float(load16(b + 2)) * static_cast<float>(m);
    const uint8_t* qs = b + (five ? 48 : 16);
    int q = hi ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 0x0f;
    if (five) q |= ((b[16 + l] >> (2 * g + hi)) & 1) << 4;
    return d * static_cast<float>(q) - n;
  } else {  // Q6_K
    const uint8_t* b = row + 210 * (k / 256);
    const int e = k % 256, h = e / 128, kk = (e % 128) / 32, l = e % 32;
    const uint8_t lowbyte = b[64 * h + l + 32 * (kk & 1)];
    const int lo = kk < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
    const int q = (lo | (((b[128 + 32 * h + l] >> (2 * kk)) & 3) << 4)) - 32;
    const float d = half_to_float(load16(b + 208)) * static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
    return d * static_cast<float>(q);
  }
}

// The stored types the batch-invariant matmul reads (the registry row of cuda-batch-invariant,
// kernels/ops.cpp; a type outside it is refused when the model is bound): F32 and the types whose
// CPU order is detail::dot_lanes over the dequantized row (F16, BF16, Q4_0), and the four the CPU
// multiplies on 8-bit activations (Q8_0, Q4_K, Q5_K, Q6_K: kernels/matmul/cuda_int_dot.hpp).
constexpr bool invariant_reads(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q4_0 || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::Q8_0 || t == DType::Q4_K;
}

// A weight matrix [N][K] in its stored type F: row n at data + n * row_bytes.
template <DType F>
struct Rows {
  const uint8_t* data;
  size_t row_bytes;
  REPRO_HD float operator()(int n, int k) const { return element<F>(data + static_cast<size_t>(n) * row_bytes, k); }
};

// f(Rows<F>{data, row_bytes}) for the stored type t (host code); false for F32 and unknown types.
template <class Fn>
bool with_rows(DType t, const uint8_t* data, size_t row_bytes, Fn&& f) {
  switch (t) {
    case DType::F16: f(Rows<DType::F16>{data, row_bytes}); return true;
    case DType::BF16: f(Rows<DType::BF16>{data, row_bytes}); return true;
    case DType::Q8_0: f(Rows<DType::Q8_0>{data, row_bytes}); return true;
    case DType::Q4_0: f(Rows<DType::Q4_0>{data, row_bytes}); return true;
    case DType::Q4_K: f(Rows<DType::Q4_K>{data, row_bytes}); return true;
    case DType::Q5_K: f(Rows<DType::Q5_K>{data, row_bytes}); return true;
    case DType::Q6_K: f(Rows<DType::Q6_K>{data, row_bytes}); return true;
    default: return false;
  }
}

}  // namespace repro::kernels::cuda::dq
