// attention reference: plain loops that DEFINE the batch-invariant order of causal attention with
// softmax inside, one query row at a time, GQA (query head h reads KV head h / (n_heads/n_kv_heads)).
//
// Why it is batch-invariant: a row attends only to its own KV cache, and the KV axis is split
// into chunks of a FIXED SIZE (detail::kKvChunk = 256 positions), never a fixed count, so the
// chunking depends on n_ctx alone. Per chunk: s_t = dot_lanes(q, k_t) * (1/sqrt(head_dim));
// m = max s_t; e_t = exp_fixed(s_t - m); l = 8 lanes over (t - t0) mod 8 with adds, tree8;
// o = sum_t e_t * v_t with n_vacc(head_dim) partial fma accumulators over (t - t0) mod P, combined
// pairwise. Chunks are folded in increasing order: mn = max(m, mc), a = exp(m - mn),
// b = exp(mc - mn), l = l*a + lc*b, o = o*a + oc*b; finally out = o / l. Nothing depends on the
// number of rows, the row's position or threads. attention_invariant reproduces these bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {

void attention_reference(const AttentionRow* rows, int n_rows, const AttentionShape& s) {
  using detail::exp_fixed;
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, P = detail::n_vacc(hd);
  const float scale = 1.0f / std::sqrt((float)hd);
  std::vector<float> o(hd), oc(hd), part((size_t)P * hd), sc(detail::kKvChunk);
  for (int r = 0; r < n_rows; ++r) {
    const AttentionRow& row = rows[r];
    for (int h = 0; h < s.n_heads; ++h) {
      const int kvh = h / group;
      const float* q = row.q + (long)h * hd;
      float* out = row.out + (long)h * hd;
      float m = 0, l = 0;
      bool first = true;
      for (int t0 = 0; t0 < row.n_ctx; t0 += detail::kKvChunk) {
        const int t1 = std::min(row.n_ctx, t0 + detail::kKvChunk);
        for (int t = t0; t < t1; ++t)
          sc[t - t0] = detail::dot_lanes(q, row.k + (long)t * s.kv_stride + (long)kvh * hd, hd) * scale;
        float mc = sc[0];
        for (int t = t0; t < t1; ++t) mc = mc < sc[t - t0] ? sc[t - t0] : mc;
        float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int t = t0; t < t1; ++t) {
          sc[t - t0] = exp_fixed(sc[t - t0] - mc);
          lanes[(t - t0) % 8] += sc[t - t0];
        }
        const float lc = detail::tree8(lanes);
        std::fill(part.begin(), part.end(), 0.0f);
        for (int t = t0; t < t1; ++t) {
          const float* v = row.v + (long)t * s.kv_stride + (long)kvh * hd;
          float* pp = part.data() + (long)((t - t0) % P) * hd;
          for (int d = 0; d < hd; ++d) pp[d] = std::fma(sc[t - t0], v[d], pp[d]);
        }
        for (int d = 0; d < hd; ++d) {
          if (P == 1) oc[d] = part[d];
          else if (P == 2) oc[d] = part[d] + part[hd + d];
          else oc[d] = (part[d] + part[hd + d]) + (part[2 * hd + d] + part[3 * hd + d]);
        }
        if (first) {
          m = mc, l = lc, o = oc;
          first = false;
        } else {
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
      }
      for (int d = 0; d < hd; ++d) out[d] = row.n_ctx > 0 ? o[d] / l : 0.0f;
    }
  }
}

}  // namespace repro::kernels
