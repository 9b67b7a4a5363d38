// Private to the matmul kernels: the integer dot-product path for Q8_0, Q4_K, Q5_K and Q6_K weights
// (the definitions are in kernels/matmul_quant.hpp). The plain loops live in quant_reference.cpp;
// quant_dot.cpp has the AVX2 kernels and calls the plain loops where AVX2 is absent or forced off.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "../matmul_quant.hpp"

namespace repro::kernels::detail {

// Elements per activation block for weights of format wf: 32 for Q8_0, 256 for the K formats.
inline int act_block(quant::Format wf) { return wf == quant::Format::Q8_0 ? 32 : 256; }
// Whether the activation rows carry the integer sum of each 32 q values (the mins term of Q4_K, Q5_K).
inline bool act_bsum(quant::Format wf) { return wf == quant::Format::Q4_K || wf == quant::Format::Q5_K; }

// M activation rows quantized for one weight format: row m has K int8 values at q + m*K, K/block
// f32 scales at d + m*(K/block) and, for Q4_K and Q5_K, K/32 integer sums at bsum + m*(K/32).
struct QuantActs {
  int K = 0, blocks = 0, sub = 0;  // blocks and 32-element sub-blocks per row
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> bsum;
  const int8_t* qrow(int m) const { return q.data() + static_cast<size_t>(m) * K; }
  const float* drow(int m) const { return d.data() + static_cast<size_t>(m) * blocks; }
  const int16_t* brow(int m) const { return bsum.data() + static_cast<size_t>(m) * sub; }
};

// n (32 or 256) floats to int8: amax = the largest |x| (NaN ignored), d = amax / 127 (f32),
// q = clamp(nearbyint(x / d), -127, 127) with nearbyint rounding half to even (a NaN quotient
// gives -127); amax == 0 gives d = 0 and q = 0. bsum (Q4_K and Q5_K, else nullptr): the sum of
// each 32 q values. Always inlined, so that the AVX2 build in quant_dot.cpp compiles exactly this code.
__attribute__((always_inline)) inline void quantize_act_block(const float* x, int n, int8_t* q, float* d,
                                                              int16_t* bsum) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  const float dd = amax / 127.0f;
  *d = dd;
  for (int i = 0; i < n; ++i) {
    float r = dd > 0.0f ? std::nearbyint(x[i] / dd) : 0.0f;
    r = r >= -127.0f ? r : -127.0f;  // also NaN
    r = r <= 127.0f ? r : 127.0f;
    q[i] = static_cast<int8_t>(static_cast<int>(r));
  }
  if (bsum)
    for (int s = 0; s < n / 32; ++s) {
      int t = 0;
      for (int i = 0; i < 32; ++i) t += q[32 * s + i];
      bsum[s] = static_cast<int16_t>(t);  // |t| <= 32 * 127 = 4064
    }
}

// Quantizes rows [0, M) of x into a (resized for the format). simd: the AVX2 build of the same
// code (identical bits; the plain build is the reference).
void quantize_acts(quant::Format wf, const float* x, int M, int K, QuantActs& a, bool simd);

// The plain loops that define y for one weight row and one activation row.
float dot_q8_0_reference(const uint8_t* w, const int8_t* q, const float* d, int K);
float dot_q4_k_reference(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K);
float dot_q5_k_reference(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K);
float dot_q6_k_reference(const uint8_t* w, const int8_t* q, const float* d, int K);
// The one of the four for format wf (bsum is read by Q4_K and Q5_K only).
float dot_int_reference(quant::Format wf, const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum,
                        int K);

// y[m*N + n] for rows [0, M) and columns [n0, n1) on quantized activations, AVX2 or plain loops.
void int_dot_range(const QuantWeight& w, const QuantActs& a, float* y, int M, int N, int n0, int n1, bool avx2);

// The integer path over all rows and columns: quantizes x, threads split the columns (N).
void matmul_q_int(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);

// The f32 panel path (weights dequantized to f32 panels, f32 register tiles, detail::dot_lanes
// order); the batch-invariant path of the formats without an integer path.
void matmul_q_panels(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool);
// Its plain-loop definition: detail::dot_lanes(x[m], dequantize(w[n]), K).
void matmul_q_panels_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K);

}  // namespace repro::kernels::detail
