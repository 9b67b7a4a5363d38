// The per-thread work of the batch-invariant CUDA matmul on Q8_0, Q4_K, Q5_K and Q6_K weights (the integer
// dot-product path; definitions in kernels/matmul_quant.hpp), as host-callable functions: the
// kernels in kernels/matmul/cuda_invariant.cu call them on the GPU, tests/unit-cuda-emulation.cpp
// on the CPU, where it compares them bit for bit with quantize_act_row_reference and
// matmul_q_reference.
//
//   act_block  one thread quantizes one block of an activation row (32 elements for Q8_0, 256 for
//              the K formats) exactly as detail::quantize_act_block: amax (NaN ignored), d = amax /
//              127 (IEEE division), q = clamp(rint(x / d), -127, 127) (round half to even), the
//              integer sums of each 32 q values for Q4_K and Q5_K. Row-local, so batch-invariant by
//              construction.
//   lanes      one output y[m][n] is one aligned group of 8 lanes; lane l takes, in each weight
//              block in increasing order, the elements 4l .. 4l + 3 of every 32 (its int32 sum is
//              exact) and accumulates acc_l = fma(d_w * d_x, (float)isum_l, acc_l): lane l of
//              dot_q8_0_reference / dot_q4_k_reference / dot_q5_k_reference / dot_q6_k_reference.
//              The mins term accm of Q4_K and Q5_K is the same sum in every lane (each lane computes
//              it). The group's xor-shuffle tree then gives tree8(acc) (kernels/cuda/lanes.hpp), and
//              y = tree8(acc) for Q8_0 and Q6_K, tree8(acc) - accm for Q4_K and Q5_K.
// So each y[m][n] is summed in the CPU reference's order whatever the batch, grid or position.
#pragma once
#include <cstdint>

#include "cuda_dequant.hpp"

namespace repro::kernels::cuda::idot {

// Elements of one activation block: 32 for Q8_0 weights, 256 for the K formats; whether the rows
// carry the sums of 32 q values (Q4_K, Q5_K).
REPRO_HD int act_block(DType t) { return t == DType::Q8_0 ? 32 : 256; }
REPRO_HD bool act_bsum(DType t) { return t == DType::Q4_K || t == DType::Q5_K; }

// Block b of activation row x (K elements): q[b * n ..], d[b], and for Q4_K and Q5_K bsum[b * 8 ..].
REPRO_HD void quantize_block(const float* x, int n, int8_t* q, float* d, int16_t* bsum) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = fabsf(x[i]);
    amax = a > amax ? a : amax;
  }
  const float dd = amax / 127.0f;
  *d = dd;
  for (int i = 0; i < n; ++i) {
    float r = dd > 0.0f ? rintf(x[i] / dd) : 0.0f;
    r = r >= -127.0f ? r : -127.0f;  // also NaN
    r = r <= 127.0f ? r : 127.0f;
    q[i] = static_cast<int8_t>(static_cast<int>(r));
  }
  if (bsum)
    for (int s = 0; s < n / 32; ++s) {
      int t = 0;
      for (int i = 0; i < 32; ++i) t += q[32 * s + i];
      bsum[s] = static_cast<int16_t>(t);
    }
}

// Lane l's accumulator of a Q8_0 row (w: the weight row, 34-byte blocks; q, d: the activation row).
REPRO_HD float q8_0_lane(const uint8_t* w, const int8_t* q, const float* d, int K, int l) {
  float acc = 0.0f;
  for (int b = 0; b < K / 32; ++b) {
    const uint8_t* blk = w + 34 * b;
    const float s = dq::half_to_float(dq::load16(blk)) * d[b];
    int32_t isum = 0;
    for (int i = 0; i < 4; ++i)
      isum += static_cast<int32_t>(static_cast<int8_t>(blk[2 + 4 * l + i])) * q[32 * b + 4 * l + i];
    acc = fmaf(s, static_cast<float>(isum), acc);
  }
  return acc;
}

// Lane l's accumulator of a Q4_K (five false) or Q5_K (five true) row, and the mins term accm (the
// same in every lane).
REPRO_HD float k45_lane(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K, int l,
                        float& accm, bool five) {
  float acc = 0.0f;
  accm = 0.0f;
  const int bytes = five ? 176 : 144;
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + bytes * b;
    const uint8_t* qs = blk + (five ? 48 : 16);
    const uint8_t* qh = blk + 16;
    const int8_t* qb = q + 256 * b;
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      dq::scale_min(blk + 4, s, sc, mn);
      imin += mn * bsum[8 * b + s];
      const int g = s / 2, shift = 4 * (s % 2);
      int32_t p = 0;
      for (int i = 0; i < 4; ++i) {
        const int j = 4 * l + i;
        int v = (qs[32 * g + j] >> shift) & 0x0f;
        if (five) v |= ((qh[j] >> s) & 1) << 4;
        p += v * qb[32 * s + j];
      }
      isum += sc * p;
    }
    const float dw = dq::half_to_float(dq::load16(blk)) * d[b], mw = dq::half_to_float(dq::load16(blk + 2)) * d[b];
    acc = fmaf(dw, static_cast<float>(isum), acc);
    accm = fmaf(mw, static_cast<float>(imin), accm);
  }
  return acc;
}

// Lane l's accumulator of a Q6_K row (no mins term).
REPRO_HD float q6_k_lane(const uint8_t* w, const int8_t* q, const float* d, int K, int l) {
  float acc = 0.0f;
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + 210 * b;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const int8_t* qb = q + 256 * b;
    int32_t isum = 0;
    for (int c = 0; c < 8; ++c) {
      const int h = c / 4, k = c % 4;
      int32_t p = 0;
      for (int i = 0; i < 4; ++i) {
        const int j = 4 * l + i;
        const int byte = blk[64 * h + j + 32 * (k & 1)];
        const int lo = k < 2 ? byte & 0x0f : byte >> 4;
        const int hi = (blk[128 + 32 * h + j] >> (2 * k)) & 3;
        p += ((lo | (hi << 4)) - 32) * qb[32 * c + j];
      }
      isum += sc[2 * c + l / 4] * p;
    }
    acc = fmaf(dq::half_to_float(dq::load16(blk + 208)) * d[b], static_cast<float>(isum), acc);
  }
  return acc;
}

// Lane l's accumulator of a row of type t (Q8_0, Q4_K, Q5_K or Q6_K); accm: the mins term (0 for
// Q8_0 and Q6_K), so that y = tree8(acc) - accm in every case.
REPRO_HD float int_lane(DType t, const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K, int l,
                        float& accm) {
  accm = 0.0f;
  if (t == DType::Q8_0) return q8_0_lane(w, q, d, K, l);
  if (t == DType::Q6_K) return q6_k_lane(w, q, d, K, l);
  return k45_lane(w, q, d, bsum, K, l, accm, t == DType::Q5_K);
}

}  // namespace repro::kernels::cuda::idot
