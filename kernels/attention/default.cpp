// attention default: the fastest strategy for the shape, as production engines choose it.
//
// NOT batch-invariant by construction: the KV axis is split into a number of pieces chosen from
// the thread count and the number of (row, head) work items (split-KV, "flash-decoding"): when
// there are fewer items than threads, each item's KV range is cut into enough pieces to keep
// every thread busy, the pieces run in parallel and are folded afterwards. Otherwise a whole row
// is one piece (no fold, one pass over its scores). The piece boundaries, hence the bits, thus
// depend on how many rows share the call and on the thread count. Nothing is perturbed on
// purpose: each choice is made for speed.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../common.hpp"
#include "../kernels.hpp"

namespace repro::kernels {
namespace {

struct Args {
  const AttentionRow* rows;
  const AttentionShape* s;
  float scale;
  int splits;     // pieces per item along KV
  float* part;    // [items * splits][head_dim + 2] partial (o, m, l) when splits > 1
};

// Tasks [b, e): task = item * splits + piece.
void run_tasks(const Args& a, int b, int e) {
  const AttentionShape& s = *a.s;
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  int max_ctx = 0;
  for (int it = b; it < e; ++it) max_ctx = std::max(max_ctx, a.rows[(it / a.splits) / s.n_heads].n_ctx);
  thread_local std::vector<float> buf;
  if (buf.size() < (size_t)(hd + max_ctx + 8)) buf.resize(hd + max_ctx + 8);
  for (int task = b; task < e; ++task) {
    const int item = task / a.splits, piece = task % a.splits;
    const AttentionRow& row = a.rows[item / s.n_heads];
    const int h = item % s.n_heads, kvh = h / group;
    const float* q = row.q + (long)h * hd;
    const float* k = row.k + (long)kvh * hd;
    const float* v = row.v + (long)kvh * hd;
    const int len = (row.n_ctx + a.splits - 1) / a.splits;
    const int t0 = std::min(row.n_ctx, piece * len), t1 = std::min(row.n_ctx, t0 + len);
    if (a.splits == 1) {
      float* out = row.out + (long)h * hd;
      if (t1 <= t0) {
        std::fill(out, out + hd, 0.0f);
        continue;
      }
      detail::ChunkOut c = detail::attention_chunk(q, k, v, s.kv_stride, hd, a.scale, t0, t1, buf.data(),
                                                   buf.data() + hd);
      const float inv = 1.0f / c.l;
      for (int d = 0; d < hd; ++d) out[d] = buf[d] * inv;
    } else {
      float* p = a.part + (long)task * (hd + 2);
      if (t1 <= t0) {
        p[hd] = 0, p[hd + 1] = -1;  // empty piece
        continue;
      }
      detail::ChunkOut c = detail::attention_chunk(q, k, v, s.kv_stride, hd, a.scale, t0, t1, p, buf.data());
      p[hd] = c.m, p[hd + 1] = c.l;
    }
  }
}

}  // namespace

void attention_default(const AttentionRow* rows, int n_rows, const AttentionShape& s, ThreadPool& pool) {
  if (n_rows <= 0) return;
  const int hd = s.head_dim, items = n_rows * s.n_heads, threads = pool.size();
  int max_ctx = 0;
  for (int r = 0; r < n_rows; ++r) max_ctx = std::max(max_ctx, rows[r].n_ctx);
  // Split-KV only when the items alone cannot keep the threads busy and the rows are long enough
  // for a piece (>= 128 positions) to outweigh the fold.
  int splits = 1;
  if (threads > 1 && items < threads) splits = std::max(1, std::min((threads + items - 1) / items, max_ctx / 128));
  thread_local std::vector<float> part;
  if (splits > 1 && part.size() < (size_t)items * splits * (hd + 2)) part.resize((size_t)items * splits * (hd + 2));
  const Args a{rows, &s, 1.0f / std::sqrt((float)hd), splits, part.data()};
  const int tasks = items * splits;
  const Args* c = &a;
  if (threads == 1 || tasks == 1) run_tasks(a, 0, tasks);
  else pool.parallel_for(tasks, [c](int b, int e) { run_tasks(*c, b, e); });
  if (splits == 1) return;
  for (int item = 0; item < items; ++item) {
    const AttentionRow& row = rows[item / s.n_heads];
    float* out = row.out + (long)(item % s.n_heads) * hd;
    const float* p0 = part.data() + (long)item * splits * (hd + 2);
    float m = p0[hd], l = p0[hd + 1];
    std::copy(p0, p0 + hd, out);
    for (int piece = 1; piece < splits; ++piece) {
      const float* p = p0 + (long)piece * (hd + 2);
      if (p[hd + 1] < 0) continue;
      detail::attention_combine(m, l, out, p[hd], p[hd + 1], p, hd);
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; ++d) out[d] *= inv;
  }
}

}  // namespace repro::kernels
