// Private helpers shared by the kernels (not a public header): the fixed reduction primitives that
// define the batch-invariant order, one exp implementation used by every attention path (scalar and
// AVX2 give the same bits), and the CPU dispatch switch.
//
// The fixed primitives:
//   lane dot   8 lane accumulators; lane j accumulates the elements k = j (mod 8) in increasing k,
//              each step acc = fma(a[k], b[k], acc); the length is zero-padded to a multiple of 8
//              (padding lanes see fma(0, 0, acc)).
//   tree8      the 8 lanes are reduced as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
//              which is exactly what simd::hsum computes (two _mm256_hadd_ps and one 128-bit add).
//   exp_fixed  math::exp (shared with the GPU): Cody-Waite range reduction + degree-5 polynomial
//              with fma, 0 below -87, clamped at 88.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "elementwise_math.hpp"
#include "repro/common/threadpool.hpp"
#include "repro/kernels/backends.hpp"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#include "simd/lanes8.hpp"

// x86 beyond the 8-lane layer: the integer dot products of Q8_0/Q4_K (AVX2) and the AVX-512 tiles.
#if defined(__x86_64__) || defined(__i386__)
#define REPRO_X86 1
#include <immintrin.h>
#define REPRO_AVX2 __attribute__((target("avx2,fma")))
// The AVX-512 matmul tiles: 512-bit registers holding two outputs' 8-lane accumulators each.
#define REPRO_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
#else
#define REPRO_X86 0
#endif

namespace repro::kernels {

// True when the fast paths may run the 8-lane layer (simd/lanes8.hpp; AVX2+FMA on x86): the CPU has
// it and the portable path is not forced.
bool use_lanes();
// Forces the portable (non-SIMD) paths even on an AVX2 CPU; tests use it to compare both paths.
// The environment variable REPRO_KERNELS_PORTABLE=1 sets it at startup.
void set_force_portable(bool on);
// True when the f32 matmul tiles may use AVX-512 (F, DQ, VL): the CPU has it, the lanes are in use and
// AVX-512 is not forced off. Its tiles keep every output's 8-lane order: same bits as AVX2.
bool use_avx512();
// Keeps the tiles at AVX2 on an AVX-512 CPU (tests compare both; REPRO_KERNELS_AVX2=1 at startup).
void set_force_avx2(bool on);

// Runs rows(m0, m1) over the rows [0, M) of a kernel: on the calling thread when the pool has one
// thread or the work (M rows of `row_len` elements) is below 2^16 elements, where threads do not
// pay; else in contiguous chunks of whole rows over the pool. A row is never split, so its bits
// do not depend on the split or the thread count.
inline void parallel_rows(ThreadPool& pool, int M, int row_len, const std::function<void(int, int)>& rows) {
  if (M <= 0) return;
  if (pool.size() == 1 || static_cast<long>(M) * row_len < (1L << 16)) return rows(0, M);
  pool.parallel_for(M, rows);
}

namespace detail {

inline float tree8(const float l[8]) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// The lane dot of a[0..n) and b[0..n): 8 lanes, fma, zero padding, tree8.
inline float dot_lanes(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] = std::fma(a[k + j], b[k + j], acc[j]);
  if (k < n)
    for (int j = 0; j < 8; ++j) {
      float av = k + j < n ? a[k + j] : 0.0f, bv = k + j < n ? b[k + j] : 0.0f;
      acc[j] = std::fma(av, bv, acc[j]);
    }
  return tree8(acc);
}

using math::kExpHi;
using math::kExpLo;
using math::kLn2Hi;
using math::kLn2Lo;
using math::kLog2e;
using math::kP0;
using math::kP1;
using math::kP2;
using math::kP3;
using math::kP4;
using math::kP5;

// exp(x), the one implementation every attention path uses: the shared host/device math::exp
// (kernels/elementwise_math.hpp), about 1 ulp on [-87, 88].
inline float exp_fixed(float x) { return math::exp(x); }

// ---- attention building block shared by the invariant and default paths ----
// One query head against positions [t0, t1) of one KV head: the chunk's own max m, sum l and
// unnormalised output o[head_dim] (= sum_t exp(s_t - m) * v_t). Order (also in
// attention_reference): s_t = dot_lanes(q, k_t) * scale; m = max s_t; e_t = exp_fixed(s_t - m);
// l = 8 lane accumulators over (t - t0) mod 8 with plain adds, then tree8; o: n_vacc(head_dim)
// partial accumulators, partial p takes the t with (t - t0) mod P == p, o_p[d] = fma(e_t, v_t[d],
// o_p[d]) in increasing t, then combined as o0 (P=1), o0+o1 (P=2), (o0+o1)+(o2+o3) (P=4).
// `scratch` holds at least t1 - t0 floats.
// The fixed split SIZE along the KV axis of the batch-invariant attention (positions per chunk).
constexpr int kKvChunk = 256;
struct ChunkOut {
  float m, l;
};
// Partial accumulators for the V sum: depends only on head_dim (a model constant): short heads
// get more independent fma chains.
inline int n_vacc(int head_dim) { return head_dim <= 8 ? 4 : (head_dim <= 16 ? 2 : 1); }
ChunkOut attention_chunk(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                         float scale, int t0, int t1, float* o, float* scratch);
// Folds chunk (mc, lc, oc) into the running (m, l, o): mn = max(m, mc), a = exp(m - mn),
// b = exp(mc - mn), l = l*a + lc*b, o = o*a + oc*b.
void attention_combine(float& m, float& l, float* o, float mc, float lc, const float* oc, int head_dim);

}  // namespace detail
}  // namespace repro::kernels
