// matmul with quantized weights, reference: plain loops that DEFINE the batch-invariant order.
//
// Q8_0, Q4_K, Q5_K and Q6_K weights (the integer dot-product path, definitions in
// kernels/matmul_quant.hpp):
// each activation row is quantized on its own (quantize_act_block below), the products within a
// block are summed in int32 (exact), and the float combination runs in 8 lanes over the blocks in
// increasing order, then tree8. Other formats: y[m][n] = detail::dot_lanes(x[m], dequantize(w[n]), K).
// Either way a result depends on its own activation row, its weight row, K and the format only:
// nothing depends on M, on the other rows, on the row's position or on threads.
// matmul_q_invariant reproduces these bits exactly.
#include <cmath>
#include <vector>

#include "../common.hpp"
#include "quant_dot.hpp"
#include "repro/common/dtype.hpp"
#include "repro/common/quant.hpp"

namespace repro::kernels {
namespace detail {
namespace {

uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

// Q8_0: isum_l = sum over i < 4 of w[32b + 4l + i] * q[32b + 4l + i] (int32, |isum_l| <= 4 * 128 *
// 127); acc_l = fma(d_w * d_x, (float)isum_l, acc_l), blocks in increasing order; y = tree8(acc).
float dot_q8_0_reference(const uint8_t* w, const int8_t* q, const float* d, int K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int b = 0; b < K / 32; ++b) {
    const uint8_t* blk = w + 34 * b;
    const float s = f16_to_f32(load16(blk)) * d[b];
    for (int l = 0; l < 8; ++l) {
      int32_t isum = 0;
      for (int i = 0; i < 4; ++i)
        isum += static_cast<int32_t>(static_cast<int8_t>(blk[2 + 4 * l + i])) * q[32 * b + 4 * l + i];
      acc[l] = std::fma(s, static_cast<float>(isum), acc[l]);
    }
  }
  return tree8(acc);
}

// Q4_K: per block, with the 6-bit scales sc_s and mins m_s of its 8 sub-blocks,
//   isum_l = sum over s < 8 of sc_s * (sum over i < 4 of qw[32s + 4l + i] * q[32s + 4l + i])
//            (int32, |isum_l| <= 8 * 63 * 4 * 15 * 127 < 2^24: exact in f32 too)
//   imin   = sum over s < 8 of m_s * bsum_s    (|imin| <= 8 * 63 * 4064 < 2^24)
//   acc_l  = fma(d_w * d_x, (float)isum_l, acc_l);  accm = fma(dmin_w * d_x, (float)imin, accm)
// blocks in increasing order; y = tree8(acc) - accm.
float dot_q4_k_reference(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, accm = 0.0f;
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + 144 * b;
    const uint8_t* qs = blk + 16;
    const int8_t* qb = q + 256 * b;
    int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0}, imin = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      quant::unpack_scale_min(blk + 4, s, sc, mn);
      imin += mn * bsum[8 * b + s];
      const int g = s / 2, shift = 4 * (s % 2);
      for (int l = 0; l < 8; ++l) {
        int32_t p = 0;
        for (int i = 0; i < 4; ++i) p += ((qs[32 * g + 4 * l + i] >> shift) & 0x0f) * qb[32 * s + 4 * l + i];
        isum[l] += sc * p;
      }
    }
    const float dw = f16_to_f32(load16(blk)) * d[b], mw = f16_to_f32(load16(blk + 2)) * d[b];
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(dw, static_cast<float>(isum[l]), acc[l]);
    accm = std::fma(mw, static_cast<float>(imin), accm);
  }
  return tree8(acc) - accm;
}

// Q5_K: Q4_K's definition with 5-bit weights: element j of sub-block s has the low 4 bits of Q4_K
// and, as fifth bit, bit s of qh[j]. |isum_l| <= 8 * 63 * 4 * 31 * 127 < 2^24.
float dot_q5_k_reference(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, accm = 0.0f;
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + 176 * b;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + 48;
    const int8_t* qb = q + 256 * b;
    int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0}, imin = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      quant::unpack_scale_min(blk + 4, s, sc, mn);
      imin += mn * bsum[8 * b + s];
      const int g = s / 2, shift = 4 * (s % 2);
      for (int l = 0; l < 8; ++l) {
        int32_t p = 0;
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * l + i;
          const int qv = ((qs[32 * g + j] >> shift) & 0x0f) | (((qh[j] >> s) & 1) << 4);
          p += qv * qb[32 * s + j];
        }
        isum[l] += sc * p;
      }
    }
    const float dw = f16_to_f32(load16(blk)) * d[b], mw = f16_to_f32(load16(blk + 2)) * d[b];
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(dw, static_cast<float>(isum[l]), acc[l]);
    accm = std::fma(mw, static_cast<float>(imin), accm);
  }
  return tree8(acc) - accm;
}

// Q6_K: per block, with the signed 6-bit weights v = q - 32 and the int8 scales sc of its 16
// sub-blocks of 16, over the 8 chunks c of 32 elements (lane l's elements 4l..4l+3 of a chunk lie
// in sub-block 2c + l / 4):
//   isum_l = sum over c < 8 of sc_{2c + l/4} * (sum over i < 4 of v[32c + 4l + i] * q[32c + 4l + i])
//            (int32, |isum_l| <= 8 * 128 * 4 * 32 * 127 < 2^24: exact in f32 too)
//   acc_l  = fma(d_w * d_x, (float)isum_l, acc_l), blocks in increasing order; y = tree8(acc).
float dot_q6_k_reference(const uint8_t* w, const int8_t* q, const float* d, int K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + 210 * b;
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const int8_t* qb = q + 256 * b;
    int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int c = 0; c < 8; ++c) {
      const int h = c / 4, k = c % 4;
      for (int l = 0; l < 8; ++l) {
        int32_t p = 0;
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * l + i;
          const int byte = ql[64 * h + j + 32 * (k & 1)];
          const int lo = k < 2 ? byte & 0x0f : byte >> 4;
          const int hi = (qh[32 * h + j] >> (2 * k)) & 3;
          p += ((lo | (hi << 4)) - 32) * qb[32 * c + j];
        }
        isum[l] += sc[2 * c + l / 4] * p;
      }
    }
    const float dw = f16_to_f32(load16(blk + 208)) * d[b];
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(dw, static_cast<float>(isum[l]), acc[l]);
  }
  return tree8(acc);
}

float dot_int_reference(quant::Format wf, const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum,
                        int K) {
  switch (wf) {
    case quant::Format::Q8_0: return dot_q8_0_reference(w, q, d, K);
    case quant::Format::Q4_K: return dot_q4_k_reference(w, q, d, bsum, K);
    case quant::Format::Q5_K: return dot_q5_k_reference(w, q, d, bsum, K);
    default: return dot_q6_k_reference(w, q, d, K);
  }
}

void matmul_q_panels_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K) {
  std::vector<float> row(static_cast<size_t>(K));
  for (int n = 0; n < N; ++n) {
    quant::dequantize_row(w.format, w.data + static_cast<size_t>(n) * w.row_bytes, row.data(), K);
    for (int m = 0; m < M; ++m) y[(long)m * N + n] = detail::dot_lanes(x + (long)m * K, row.data(), K);
  }
}

}  // namespace detail

bool has_int_dot(quant::Format f) {
  return f == quant::Format::Q8_0 || f == quant::Format::Q4_K || f == quant::Format::Q5_K || f == quant::Format::Q6_K;
}

void quantize_act_row_reference(quant::Format wf, const float* x, int K, int8_t* q, float* d, int16_t* bsum) {
  const int blk = detail::act_block(wf);
  for (int b = 0; b < K / blk; ++b)
    detail::quantize_act_block(x + b * blk, blk, q + b * blk, d + b,
                               detail::act_bsum(wf) ? bsum + b * (blk / 32) : nullptr);
}

void matmul_q_reference(const float* x, const QuantWeight& w, float* y, int M, int N, int K) {
  if (!has_int_dot(w.format)) return detail::matmul_q_panels_reference(x, w, y, M, N, K);
  std::vector<int8_t> q(static_cast<size_t>(K));
  std::vector<float> d(static_cast<size_t>(K / 32));
  std::vector<int16_t> bsum(static_cast<size_t>(K / 32));
  for (int m = 0; m < M; ++m) {
    quantize_act_row_reference(w.format, x + static_cast<size_t>(m) * K, K, q.data(), d.data(), bsum.data());
    for (int n = 0; n < N; ++n) {
      const uint8_t* wr = w.data + static_cast<size_t>(n) * w.row_bytes;
      y[static_cast<size_t>(m) * N + n] = detail::dot_int_reference(w.format, wr, q.data(), d.data(), bsum.data(), K);
    }
  }
}

}  // namespace repro::kernels
