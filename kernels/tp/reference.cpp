// Simulated tensor parallelism: the arithmetic order of a row-parallel matmul split over N ranks,
// defined once, in plain loops (docs/ENGINE.md "Tensor parallelism").
//
// What a rank computes is its table's own matmul on its K shard (Ops::matmul_partial); how the N
// partials are added is below:
//   allreduce_reference      ring or tree order (repro/kernels/ops.hpp: ring_first_rank), every
//                            partial and every sum rounded to the activation precision, as an
//                            all-reduce in that precision stores them (bf16 NCCL adds in f32 and
//                            stores bf16).
//   tp_allreduce_reference   the tp-invariant tables: the pairwise tree over the ranks in f32 (the
//                            ranks exchange f32 partials), whatever the algorithm, one rounding of
//                            the total.
//   matmul_tp_blocks         the tp-invariant partial: the shard's K is cut into blocks of
//                            tp_block(k_total, type); each block's product is the batch-invariant
//                            dot (lane order over the block), and the block sums are added along
//                            the same pairwise tree. With N a power of two dividing the number of
//                            blocks G of the whole K, rank r holds blocks [r G/N, (r+1) G/N): its
//                            tree is the subtree of those leaves, and the tree over the ranks is
//                            the top of the whole tree. So the total is one tree over the G blocks
//                            of K whatever N and the algorithm: TP-invariant by construction.
// All of it is element-wise over the output (an element depends on its own x row, its weight row,
// K, the type and the block length): batch-invariant as well.
#include <stdexcept>
#include <vector>

#include "../tp.hpp"
#include "repro/common/quant.hpp"

namespace repro::kernels {

int ring_first_rank(int N, size_t i, size_t n) {
  const size_t chunk = (n + static_cast<size_t>(N) - 1) / static_cast<size_t>(N);
  return chunk == 0 ? 0 : static_cast<int>(i / chunk);
}

int tp_block(int K, DType t) {
  const int elems = quant::block_of(t).elems;
  for (int g = kMaxTp; g > 1; g /= 2)
    if (K % (g * elems) == 0) return K / g;
  return K;
}

namespace {
bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// v[0] = the pairwise tree over v[0..n) (n a power of two), each sum rounded to p.
float pairwise(float* v, int n, Precision p) {
  for (int s = 1; s < n; s *= 2)
    for (int i = 0; i + s < n; i += 2 * s) v[i] = round_to_precision(p, v[i] + v[i + s]);
  return v[0];
}
}  // namespace

void allreduce_reference(float* const* parts, int N, AllReduce algo, Precision p, size_t n) {
  if (N < 1 || N > kMaxTp || !power_of_two(N)) throw std::logic_error("allreduce: N must be 1, 2, 4 or 8");
  float v[kMaxTp];
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < N; ++r) v[r] = round_to_precision(p, parts[r][i]);  // what each rank sends
    float acc;
    if (algo == AllReduce::Tree) {
      acc = pairwise(v, N, p);
    } else {
      const int c = ring_first_rank(N, i, n);
      acc = v[c];
      for (int t = 1; t < N; ++t) acc = round_to_precision(p, acc + v[(c + t) % N]);
    }
    parts[0][i] = acc;
  }
}

void tp_allreduce_reference(float* const* parts, int N, Precision p, size_t n) {
  if (N < 1 || N > kMaxTp || !power_of_two(N)) throw std::logic_error("allreduce: N must be 1, 2, 4 or 8");
  float v[kMaxTp];
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < N; ++r) v[r] = parts[r][i];
    parts[0][i] = round_to_precision(p, pairwise(v, N, Precision::F32));
  }
}

void matmul_tp_blocks(const float* x, DType t, const void* w, float* y, int M, int N, int Ks, int B,
                      const BlockMatmul& block) {
  if (B <= 0 || Ks % B != 0 || !power_of_two(Ks / B))
    throw std::logic_error("matmul_tp_blocks: the shard is not a power-of-two number of whole blocks");
  const int nb = Ks / B;
  const size_t row = quant::row_bytes(t, Ks), blk = quant::row_bytes(t, B);
  // Scratch kept per thread between calls (the engine calls this twice per layer).
  thread_local std::vector<float> xs, ys;
  xs.resize(static_cast<size_t>(M) * B);
  ys.resize(static_cast<size_t>(nb) * M * N);
  for (int b = 0; b < nb; ++b) {
    for (int m = 0; m < M; ++m)
      for (int k = 0; k < B; ++k) xs[static_cast<size_t>(m) * B + k] = x[static_cast<size_t>(m) * Ks + b * B + k];
    // Block b of every weight row: bytes [b * blk, (b + 1) * blk) of the row, rows `row` apart.
    const QuantWeight wb{t, static_cast<const uint8_t*>(w) + b * blk, row};
    block(xs.data(), wb, ys.data() + static_cast<size_t>(b) * M * N, M, N, B);
  }
  const size_t mn = static_cast<size_t>(M) * N;
  for (int s = 1; s < nb; s *= 2)
    for (int b = 0; b + s < nb; b += 2 * s)
      for (size_t i = 0; i < mn; ++i) ys[b * mn + i] += ys[(b + s) * mn + i];
  for (size_t i = 0; i < mn; ++i) y[i] = ys[i];
}

void matmul_tp_reference(const float* x, DType t, const void* w, float* y, int M, int N, int Ks, int k_total) {
  matmul_tp_blocks(x, t, w, y, M, N, Ks, tp_block(k_total, t),
                   [](const float* xb, const QuantWeight& wb, float* yb, int m, int n, int k) {
                     matmul_q_reference(xb, wb, yb, m, n, k);
                   });
}

}  // namespace repro::kernels
