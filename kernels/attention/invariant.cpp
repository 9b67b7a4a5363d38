// attention invariant: the batch-invariant fast path (AVX2+FMA, threads over (row, head) pairs),
// bitwise equal to attention_reference.
//
// Why it is batch-invariant: the KV axis is cut into chunks of the FIXED SIZE detail::kKvChunk
// (256 positions; the split depends on n_ctx only, never on the number of rows or threads), each
// chunk is reduced in the order attention_reference defines (see kernels/common.hpp), and chunks
// are folded in increasing order on the same thread. Threads take whole (row, head) pairs, so no
// reduction is ever split across threads. The V accumulator count depends on head_dim only.
// This file also holds the chunk and fold routines the default path reuses.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {
namespace detail {
namespace {

ChunkOut chunk_portable(const float* q, const float* k, const float* v, int kv_stride, int hd,
                        float scale, int t0, int t1, float* o, float* sc) {
  const int n = t1 - t0, P = n_vacc(hd);
  for (int t = 0; t < n; ++t) sc[t] = dot_lanes(q, k + (long)(t0 + t) * kv_stride, hd) * scale;
  float m = sc[0];
  for (int t = 0; t < n; ++t) m = m < sc[t] ? sc[t] : m;
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int t = 0; t < n; ++t) {
    sc[t] = exp_fixed(sc[t] - m);
    lanes[t % 8] += sc[t];
  }
  for (int d = 0; d < hd; ++d) {
    float part[4] = {0, 0, 0, 0};
    for (int t = 0; t < n; ++t) part[t % P] = std::fma(sc[t], v[(long)(t0 + t) * kv_stride + d], part[t % P]);
    o[d] = P == 1 ? part[0] : P == 2 ? part[0] + part[1] : (part[0] + part[1]) + (part[2] + part[3]);
  }
  return {m, tree8(lanes)};
}

template <int NB, bool TAIL>
REPRO_LANES inline void vstep(simd::f32x8* acc, float e, const float* vt, simd::mask8 mask) {
  const simd::f32x8 eb = simd::set1(e);
  for (int b = 0; b < NB; ++b) {
    simd::f32x8 vv = (TAIL && b == NB - 1) ? simd::load(vt + b * 8, mask) : simd::load(vt + b * 8);
    acc[b] = simd::fma(eb, vv, acc[b]);
  }
}

// o[d0 .. d0+dlen) = sum_t e_t * v_t with P partial accumulators; NB 8-wide blocks of d, the last
// one partial (masked) when TAIL.
template <int NB, int P, bool TAIL>
REPRO_LANES void vsum(const float* e, const float* v, int kv_stride, int n, int dlen, float* o) {
  simd::f32x8 acc[P][NB];
  for (int p = 0; p < P; ++p)
    for (int b = 0; b < NB; ++b) acc[p][b] = simd::zero();
  const simd::mask8 mask = simd::tail(dlen - (NB - 1) * 8);
  int t = 0;
  for (; t + P <= n; t += P)
    for (int p = 0; p < P; ++p) vstep<NB, TAIL>(acc[p], e[t + p], v + (long)(t + p) * kv_stride, mask);
  for (; t < n; ++t) vstep<NB, TAIL>(acc[t % P], e[t], v + (long)t * kv_stride, mask);
  for (int b = 0; b < NB; ++b) {
    simd::f32x8 r = acc[0][b];
    if constexpr (P == 2) r = simd::add(acc[0][b], acc[1][b]);
    if constexpr (P == 4)
      r = simd::add(simd::add(acc[0][b], acc[1][b]), simd::add(acc[2][b], acc[3][b]));
    if (TAIL && b == NB - 1) simd::store(o + b * 8, mask, r);
    else simd::store(o + b * 8, r);
  }
}

template <int NB, int P>
REPRO_LANES void vsum_dispatch(const float* e, const float* v, int kv_stride, int n, int dlen, float* o) {
  if (dlen == NB * 8) vsum<NB, P, false>(e, v, kv_stride, n, dlen, o);
  else vsum<NB, P, true>(e, v, kv_stride, n, dlen, o);
}

// One dot per position, lane order of dot_lanes, for 8 positions at once (tree in hsum8x8).
REPRO_LANES inline simd::f32x8 dots8(const float* q, const float* k, int kv_stride, int hd, simd::mask8 qmask) {
  simd::f32x8 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = simd::zero();
  const int hd8 = hd & ~7;
  for (int d = 0; d < hd8; d += 8) {
    const simd::f32x8 qv = simd::load(q + d);
    for (int j = 0; j < 8; ++j)
      acc[j] = simd::fma(qv, simd::load(k + (long)j * kv_stride + d), acc[j]);
  }
  if (hd8 < hd) {
    const simd::f32x8 qv = simd::load(q + hd8, qmask);
    for (int j = 0; j < 8; ++j)
      acc[j] = simd::fma(qv, simd::load(k + (long)j * kv_stride + hd8, qmask), acc[j]);
  }
  return simd::hsum8(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
}

REPRO_LANES inline float dot1(const float* q, const float* k, int hd, simd::mask8 qmask) {
  simd::f32x8 acc = simd::zero();
  const int hd8 = hd & ~7;
  for (int d = 0; d < hd8; d += 8) acc = simd::fma(simd::load(q + d), simd::load(k + d), acc);
  if (hd8 < hd) acc = simd::fma(simd::load(q + hd8, qmask), simd::load(k + hd8, qmask), acc);
  return simd::hsum(acc);
}

REPRO_LANES ChunkOut chunk_lanes(const float* q, const float* k, const float* v, int kv_stride, int hd,
                               float scale, int t0, int t1, float* o, float* sc) {
  const int n = t1 - t0;
  const simd::mask8 qmask = simd::tail(hd & 7);
  const simd::f32x8 vscale = simd::set1(scale);
  k += (long)t0 * kv_stride;
  v += (long)t0 * kv_stride;
  // scores
  int t = 0;
  for (; t + 8 <= n; t += 8)
    simd::store(sc + t, simd::mul(dots8(q, k + (long)t * kv_stride, kv_stride, hd, qmask), vscale));
  for (; t < n; ++t) sc[t] = dot1(q, k + (long)t * kv_stride, hd, qmask) * scale;
  // max (exact in any order)
  float m = sc[0];
  {
    simd::f32x8 vm = simd::set1(sc[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = simd::max(vm, simd::load(sc + i));
    alignas(32) float tmp[8];
    simd::store(tmp, vm);
    for (int j = 0; j < 8; ++j) m = m < tmp[j] ? tmp[j] : m;
    for (; i < n; ++i) m = m < sc[i] ? sc[i] : m;
  }
  // exp and the 8-lane sum
  const simd::f32x8 vmax = simd::set1(m);
  simd::f32x8 lanes = simd::zero();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    simd::f32x8 e = simd::exp(simd::sub(simd::load(sc + i), vmax));
    simd::store(sc + i, e);
    lanes = simd::add(lanes, e);
  }
  if (i < n) {
    const simd::mask8 mask = simd::tail(n - i);
    simd::f32x8 e = simd::exp(simd::sub(simd::load(sc + i, mask), vmax));
    e = simd::keep(e, mask);
    simd::store(sc + i, mask, e);
    lanes = simd::add(lanes, e);
  }
  const float l = simd::hsum(lanes);
  // weighted V
  const int P = n_vacc(hd);
  if (P == 4) {
    vsum_dispatch<1, 4>(sc, v, kv_stride, n, hd, o);
  } else if (P == 2) {
    vsum_dispatch<2, 2>(sc, v, kv_stride, n, hd, o);  // 8 < head_dim <= 16
  } else {
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const int dlen = std::min(64, hd - d0), nb = (dlen + 7) / 8;
      const float* vd = v + d0;
      float* od = o + d0;
      switch (nb) {
        case 1: vsum_dispatch<1, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 2: vsum_dispatch<2, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 3: vsum_dispatch<3, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 4: vsum_dispatch<4, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 5: vsum_dispatch<5, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 6: vsum_dispatch<6, 1>(sc, vd, kv_stride, n, dlen, od); break;
        case 7: vsum_dispatch<7, 1>(sc, vd, kv_stride, n, dlen, od); break;
        default: vsum_dispatch<8, 1>(sc, vd, kv_stride, n, dlen, od); break;
      }
    }
  }
  return {m, l};
}

}  // namespace

ChunkOut attention_chunk(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                         float scale, int t0, int t1, float* o, float* scratch) {
  if (use_lanes()) return chunk_lanes(q, k, v, kv_stride, head_dim, scale, t0, t1, o, scratch);
  return chunk_portable(q, k, v, kv_stride, head_dim, scale, t0, t1, o, scratch);
}

void attention_combine(float& m, float& l, float* o, float mc, float lc, const float* oc, int hd) {
  const float mn = m < mc ? mc : m;
  const float a = exp_fixed(m - mn), b = exp_fixed(mc - mn);
  const float la = l * a, lb = lc * b;
  l = la + lb;
  for (int d = 0; d < hd; ++d) {
    const float oa = o[d] * a, ob = oc[d] * b;
    o[d] = oa + ob;
  }
  m = mn;
}

}  // namespace detail

namespace {

struct AttnArgs {
  const AttentionRow* rows;
  const AttentionShape* s;
  float scale;
};

// Items [b, e) of the (row, head) grid, each with the fixed 256-position chunking.
void run_items(const AttnArgs& a, int b, int e) {
  const AttentionShape& s = *a.s;
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  thread_local std::vector<float> buf;
  if (buf.size() < (size_t)(2 * hd + detail::kKvChunk)) buf.resize(2 * hd + detail::kKvChunk);
  float* o = buf.data();
  float* oc = o + hd;
  float* sc = oc + hd;
  for (int it = b; it < e; ++it) {
    const AttentionRow& row = a.rows[it / s.n_heads];
    const int h = it % s.n_heads, kvh = h / group;
    const float* q = row.q + (long)h * hd;
    const float* k = row.k + (long)kvh * hd;
    const float* v = row.v + (long)kvh * hd;
    float* out = row.out + (long)h * hd;
    if (row.n_ctx <= 0) {
      std::fill(out, out + hd, 0.0f);
      continue;
    }
    // Chunk size fixed (kKvChunk): depends on nothing but the constant.
    const int t1 = std::min(row.n_ctx, detail::kKvChunk);
    detail::ChunkOut st = detail::attention_chunk(q, k, v, s.kv_stride, hd, a.scale, 0, t1, o, sc);
    float m = st.m, l = st.l;
    for (int t0 = t1; t0 < row.n_ctx; t0 += detail::kKvChunk) {
      const int te = std::min(row.n_ctx, t0 + detail::kKvChunk);
      detail::ChunkOut c = detail::attention_chunk(q, k, v, s.kv_stride, hd, a.scale, t0, te, oc, sc);
      detail::attention_combine(m, l, o, c.m, c.l, oc, hd);
    }
    for (int d = 0; d < hd; ++d) out[d] = o[d] / l;
  }
}

}  // namespace

void attention_invariant(const AttentionRow* rows, int n_rows, const AttentionShape& s, ThreadPool& pool) {
  if (n_rows <= 0) return;
  const AttnArgs a{rows, &s, 1.0f / std::sqrt((float)s.head_dim)};
  const int items = n_rows * s.n_heads;
  long work = 0;
  for (int r = 0; r < n_rows; ++r) work += (long)rows[r].n_ctx;
  work *= (long)s.n_heads * s.head_dim;
  // Threads over whole (row, head) items only when there is enough work (bits are unchanged).
  if (pool.size() == 1 || work < (1L << 15)) return run_items(a, 0, items);
  const AttnArgs* c = &a;
  pool.parallel_for(items, [c](int b, int e) { run_items(*c, b, e); });
}

}  // namespace repro::kernels
