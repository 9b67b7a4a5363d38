// Element-wise math shared by the CPU and the GPU: one implementation, compiled by g++ for the host
// and by nvcc for both host and device, so both devices compute identical bits.
//
// Why the bits are identical on both devices:
//   - every operation is an IEEE-754 single-precision operation with round-to-nearest-even:
//     +, -, *, the division and sqrtf (nvcc rounds them correctly unless fast-math, -prec-div=false
//     or -prec-sqrt=false is given; the CUDA build pins -prec-div=true -prec-sqrt=true -ftz=false);
//   - fused multiply-adds are written out (fmaf, single rounding on both sides) and nothing else
//     is contracted: the CUDA build passes --fmad=false; the host build targets x86-64 without
//     FMA outside the AVX2 kernels, which write their fmas as intrinsics, so g++ cannot contract;
//   - no library transcendental is called on either side: exp is built here from fma, exact
//     scaling by a power of two and rintf (exact), so no libm or CUDA libdevice version enters.
// RoPE's cos/sin table is computed by one host function (rope_table) and uploaded as data: the GPU
// never evaluates a transcendental of its own for the batch-invariant path.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define REPRO_HD __host__ __device__ __forceinline__
#else
#define REPRO_HD inline
#endif
// Loop unrolling hint for the device compiler (nothing on the host).
#if defined(__CUDA_ARCH__)
#define REPRO_UNROLL _Pragma("unroll")
#else
#define REPRO_UNROLL
#endif

namespace repro::kernels::math {

constexpr float kExpLo = -87.0f;  // below: 0
constexpr float kExpHi = 88.0f;   // above: clamped
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;     // ln2 split so that n * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;  // ln2 - kLn2Hi
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

REPRO_HD float bits_to_float(int32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

// exp(x): Cody-Waite reduction x = n ln2 + r (n = rint(x log2e), two fma steps), a degree-5
// polynomial in r evaluated with fma (Horner), 1 + r + r^2 p(r), scaled by 2^n built from its bits.
// About 1 ulp on [-87, 88]; 0 below -87 (and for -inf); arguments above 88 are clamped to 88; NaN
// propagates.
REPRO_HD float exp(float x) {
  if (x != x) return x;
  if (x < kExpLo) return 0.0f;
  x = kExpHi < x ? kExpHi : x;
  const float n = rintf(x * kLog2e);
  float r = fmaf(n, -kLn2Hi, x);
  r = fmaf(n, -kLn2Lo, r);
  float p = kP0;
  p = fmaf(p, r, kP1);
  p = fmaf(p, r, kP2);
  p = fmaf(p, r, kP3);
  p = fmaf(p, r, kP4);
  p = fmaf(p, r, kP5);
  const float r2 = r * r;
  float y = fmaf(p, r2, r);
  y = y + 1.0f;
  return y * bits_to_float((static_cast<int32_t>(n) + 127) << 23);
}

// silu(x) = x / (1 + exp(-x)): one correctly rounded division.
REPRO_HD float silu(float x) { return x / (1.0f + math::exp(-x)); }

// silu(gate) * up, the SwiGLU feed-forward's element-wise step.
REPRO_HD float silu_mul(float gate, float up) { return silu(gate) * up; }

// The RMSNorm scale from a row's sum of squares: 1 / sqrt(ss / D + eps), three correctly rounded
// operations (no rsqrt approximation).
REPRO_HD float rms_scale(float sum_sq, int D, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(D) + eps);
}

// One normalised element: (x * scale) * g.
REPRO_HD float rms_apply(float x, float scale, float g) { return (x * scale) * g; }

// Softmax pieces: the exponent of one score against the running max, and the fold of two partial
// (max, sum) pairs: mn = max(m, mc), l = l * exp(m - mn) + lc * exp(mc - mn).
REPRO_HD float softmax_weight(float s, float m) { return math::exp(s - m); }

// One adjacent RoPE pair (x0, x1) rotated by (c, s): (x0 c - x1 s, x0 s + x1 c), products rounded
// first, then one subtraction / addition (no fma: the same as the scalar CPU code).
REPRO_HD void rope_pair(float& x0, float& x1, float c, float s) {
  const float a = x0 * c, b = x1 * s, d = x0 * s, e = x1 * c;
  x0 = a - b;
  x1 = d + e;
}

REPRO_HD uint32_t float_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

// x rounded to bfloat16 (nearest, ties to even) and back to f32; a NaN keeps its top payload bits
// and becomes quiet (as repro::f32_to_bf16 does on the CPU).
REPRO_HD float round_bf16(float x) {
  uint32_t u = float_bits(x);
  if (x != x) return bits_to_float(static_cast<int32_t>(((u >> 16) | 0x40u) << 16));
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  return bits_to_float(static_cast<int32_t>(u));
}

// x rounded to IEEE half (nearest, ties to even; overflow to infinity, subnormals kept) and back;
// a NaN becomes the quiet NaN of its sign (as repro::f32_to_f16 does on the CPU).
REPRO_HD float round_f16(float x) {
  if (x != x) return bits_to_float(static_cast<int32_t>((float_bits(x) & 0x80000000u) | 0x7FC00000u));
  const float ax = x < 0 ? -x : x;
  if (ax >= 65520.0f) return x < 0 ? -bits_to_float(0x7F800000) : bits_to_float(0x7F800000);
  if (ax < 6.103515625e-05f) {  // below 2^-14: half subnormals, a fixed quantum of 2^-24
    const float q = rintf(x * 16777216.0f);  // exact scaling, then round to an integer
    return q * 5.9604644775390625e-08f;
  }
  uint32_t u = float_bits(x);  // normal half: keep 10 of the 23 mantissa bits
  u += 0xFFFu + ((u >> 13) & 1u);
  u &= 0xFFFFE000u;
  return bits_to_float(static_cast<int32_t>(u));
}

// Rounding for activation storage: kind 0 = f32 (unchanged), 1 = bf16, 2 = f16.
REPRO_HD float round_storage(int kind, float x) {
  return kind == 1 ? round_bf16(x) : kind == 2 ? round_f16(x) : x;
}

// The RoPE table: cos/sin of pos * freq_scale * theta^(-2i / rope_dim) / factors[i] for positions
// p0 <= pos < p1 and i < rope_dim / 2 (factors: nullptr for all 1), laid out [pos][i] (entries of
// earlier positions are left alone, so a table grows in place). Host only: computed with the host's
// libm once per engine and uploaded to a GPU as data, so both devices rotate by the same bits.
inline void rope_table(float theta, int rope_dim, int p0, int p1, float* cos_out, float* sin_out,
                       float freq_scale = 1.0f, const float* factors = nullptr) {
  const int half = rope_dim / 2;
  for (int p = p0; p < p1; ++p)
    for (int i = 0; i < half; ++i) {
      float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
      if (factors) freq = freq / factors[i];
      const float angle = static_cast<float>(p) * freq_scale * freq;
      cos_out[static_cast<size_t>(p) * half + i] = std::cos(angle);
      sin_out[static_cast<size_t>(p) * half + i] = std::sin(angle);
    }
}

}  // namespace repro::kernels::math
