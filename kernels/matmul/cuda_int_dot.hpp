// The per-thread work of the batch-invariant CUDA matmul on Q8_0 and Q4_K weights (the integer
// dot-product path; definitions in kernels/matmul_quant.hpp), as host-callable functions: the
// kernels in kernels/matmul/cuda_invariant.cu call them on the GPU, tests/unit-cuda-emulation.cpp
// on the CPU, where it compares them bit for bit with quantize_act_row_reference and
// matmul_q_reference.
//
//   act_block  one thread quantizes one block of an activation row (32 elements for Q8_0, 256 for
//              Q4_K) exactly as detail::quantize_act_block: amax (NaN ignored), d = amax / 127
//              (IEEE division), q = clamp(rint(x / d), -127, 127) (round half to even), the integer
//              sums of each 32 q values for Q4_K. Row-local, so batch-invariant by construction.
//   lanes      one output y[m][n] is one aligned group of 8 lanes; lane l takes, in each weight
//              block in increasing order, the elements 4l .. 4l + 3 of every 32 (its int32 sum is
//              exact) and accumulates acc_l = fma(d_w * d_x, (float)isum_l, acc_l): lane l of
//              dot_q8_0_reference / dot_q4_k_reference. Q4_K's mins term accm is the same sum in
//              every lane (each lane computes it). The group's xor-shuffle tree then gives tree8(acc)
//              (kernels/cuda/lanes.hpp), and y = tree8(acc) for Q8_0, tree8(acc) - accm for Q4_K.
// So each y[m][n] is summed in the CPU reference's order whatever the batch, grid or position.
#pragma once
#include <cstdint>

#include "cuda_dequant.hpp"

namespace repro::kernels::cuda::idot {

// Elements of one activation block: 32 for Q8_0 weights, 256 for Q4_K.
REPRO_HD int act_block(bool q4_k) { return q4_k ? 256 : 32; }

// Block b of activation row x (K elements): q[b * n ..], d[b], and for Q4_K bsum[b * 8 ..].
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

// Lane l's accumulator of a Q4_K row, and the mins term accm (the same in every lane).
REPRO_HD float q4_k_lane(const uint8_t* w, const int8_t* q, const float* d, const int16_t* bsum, int K, int l,
                         float& accm) {
  float acc = 0.0f;
  accm = 0.0f;
  for (int b = 0; b < K / 256; ++b) {
    const uint8_t* blk = w + 144 * b;
    const uint8_t* qs = blk + 16;
    const int8_t* qb = q + 256 * b;
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      dq::scale_min(blk + 4, s, sc, mn);
      imin += mn * bsum[8 * b + s];
      const int g = s / 2, shift = 4 * (s % 2);
      int32_t p = 0;
      for (int i = 0; i < 4; ++i) p += ((qs[32 * g + 4 * l + i] >> shift) & 0x0f) * qb[32 * s + 4 * l + i];
      isum += sc * p;
    }
    const float dw = dq::half_to_float(dq::load16(blk)) * d[b], mw = dq::half_to_float(dq::load16(blk + 2)) * d[b];
    acc = fmaf(dw, static_cast<float>(isum), acc);
    accm = fmaf(mw, static_cast<float>(imin), accm);
  }
  return acc;
}

}  // namespace repro::kernels::cuda::idot
