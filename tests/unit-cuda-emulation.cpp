// ctest-labels: unit
// The CUDA batch-invariant kernels, emulated on the CPU: their per-thread functions (the same
// __host__ __device__ code the GPU runs: kernels/matmul/cuda_tile.hpp, kernels/rmsnorm/
// cuda_rows.hpp, kernels/attention/cuda_chunk.hpp, kernels/cuda/lanes.hpp) are called thread by
// thread in a serial emulation of each kernel's block/thread decomposition, with the warp's
// xor-shuffles simulated in plain C++, and the result is compared bit for bit (memcmp) with the
// CPU reference across batch sizes and shapes, odd lengths included. This catches order mistakes
// without a GPU. Also: the shared element-wise math (kernels/elementwise_math.hpp)
// against the C library, and its exact reproducibility.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "../kernels/attention/cuda_chunk.hpp"
#include "../kernels/common.hpp"
#include "../kernels/matmul/cuda_dequant.hpp"
#include "../kernels/matmul/cuda_int_dot.hpp"
#include "../kernels/matmul/cuda_tile.hpp"
#include "../kernels/matmul_quant.hpp"
#include "repro/common/quant.hpp"
#include "../kernels/rmsnorm/cuda_rows.hpp"
#include "../kernels/elementwise_math.hpp"
#include "../kernels/kernels.hpp"
#include "repro/kernels/ops.hpp"

using namespace repro::kernels;
using namespace repro::kernels::cuda;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  // A few exact zeros of both signs: the zero-padding fmas must match the reference's.
  for (size_t i = 0; i < n; i += 17) v[i] = (i / 17) % 2 ? -0.0f : 0.0f;
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- matmul: the grid of 256-thread blocks, run serially (w: an f32 matrix or a dq::Rows loader) ----
template <class W>
void emulate_matmul(const float* x, const W& w, float* y, int M, int N, int K, bool& lanes_agree) {
  using namespace repro::kernels::cuda::mm;
  auto smem = std::make_unique<Smem>();
  std::vector<float> acc_all(static_cast<size_t>(kThreads) * RM * RN);
  auto acc_of = [&](int tid) -> float(&)[RM][RN] {
    return *reinterpret_cast<float(*)[RM][RN]>(&acc_all[static_cast<size_t>(tid) * RM * RN]);
  };
  lanes_agree = true;
  for (int by = 0; by < (M + BM - 1) / BM; ++by)
    for (int bx = 0; bx < (N + BN - 1) / BN; ++bx) {
      const int m0 = by * BM, n0 = bx * BN;
      std::fill(acc_all.begin(), acc_all.end(), 0.0f);
      for (int k0 = 0; k0 < K; k0 += KC) {
        for (int tid = 0; tid < kThreads; ++tid) load_chunk(tid, x, w, M, N, K, m0, n0, k0, *smem);
        // __syncthreads()
        for (int tid = 0; tid < kThreads; ++tid) accumulate(tid, *smem, chunk_steps(K, k0), acc_of(tid));
      }
      // The xor-shuffle tree of each 8-lane group, every accumulator.
      for (int g = 0; g < kThreads / kLanes; ++g)
        for (int i = 0; i < RM; ++i)
          for (int j = 0; j < RN; ++j) {
            float lanes[kLanes];
            for (int l = 0; l < kLanes; ++l) lanes[l] = acc_of(g * kLanes + l)[i][j];
            bool same = false;
            const float v = emulate_group_tree(lanes, &same);
            lanes_agree = lanes_agree && same;
            for (int l = 0; l < kLanes; ++l) acc_of(g * kLanes + l)[i][j] = v;
          }
      for (int tid = 0; tid < kThreads; ++tid) store(tid, acc_of(tid), y, M, N, m0, n0);
    }
}

// ---- RMSNorm: 32 rows per block, one 8-lane group per row ----
void emulate_rmsnorm(const float* x, const float* g, float* y, int M, int D, float eps) {
  for (int row = 0; row < M; ++row) {
    const float* xr = x + static_cast<long>(row) * D;
    float lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) lanes[l] = lane_dot(xr, xr, D, l);
    const float scale = math::rms_scale(emulate_group_tree(lanes), D, eps);
    for (int l = 0; l < kLanes; ++l) rms::store_lane(xr, g, y + static_cast<long>(row) * D, D, l, scale);
  }
}

// ---- attention: one 128-thread block per (row, head), chunks of 256 from t_begin ----
void emulate_attention(const AttentionRow* rows, int n_rows, const AttentionShape& s) {
  using namespace repro::kernels::cuda::att;
  const int hd = s.head_dim, P = n_vacc(hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> sc(kChunk), o(hd);
  for (int r = 0; r < n_rows; ++r)
    for (int h = 0; h < s.n_heads; ++h) {
      const AttentionRow& row = rows[r];
      const int kvh = h / (s.n_heads / s.n_kv_heads);
      const float* q = row.q + static_cast<long>(h) * hd;
      float m = 0, l = 0;
      bool any = false;
      for (int t0 = 0; t0 < row.n_ctx; t0 += kChunk) {
        const int n = std::min(kChunk, row.n_ctx - t0);
        const float* kb = row.k + static_cast<long>(t0) * s.kv_stride + static_cast<long>(kvh) * hd;
        const float* vb = row.v + static_cast<long>(t0) * s.kv_stride + static_cast<long>(kvh) * hd;
        for (int tb = 0; tb < n; tb += kGroups)  // groups in parallel, lanes then the tree
          for (int g = 0; g < kGroups; ++g) {
            const int t = tb + g;
            float lanes[kLanes];
            for (int ln = 0; ln < kLanes; ++ln)
              lanes[ln] = t < n ? lane_dot(q, kb + static_cast<long>(t) * s.kv_stride, hd, ln) : 0.0f;
            const float p = emulate_group_tree(lanes);
            if (t < n) sc[t] = p * scale;
          }
        const float mc = chunk_max(sc.data(), n);
        for (int t = 0; t < n; ++t) sc[t] = math::softmax_weight(sc[t], mc);
        float lanes[kLanes];
        for (int ln = 0; ln < kLanes; ++ln) lanes[ln] = lane_sum(sc.data(), n, ln);
        const float lc = emulate_group_tree(lanes);
        float a = 1.0f, b = 1.0f;
        if (any) fold(m, l, mc, lc, a, b);
        for (int d = 0; d < hd; ++d) {  // thread d (and d + 128)
          const float oc = v_dim(sc.data(), vb, s.kv_stride, n, d, P);
          o[d] = any ? fold_o(o[d], oc, a, b) : oc;
        }
        if (!any) m = mc, l = lc, any = true;
      }
      for (int d = 0; d < hd; ++d) row.out[static_cast<long>(h) * hd + d] = row.n_ctx > 0 ? o[d] / l : 0.0f;
    }
}

// ulp distance of two finite floats of the same sign.
long ulp_diff(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::labs(static_cast<long>(ia) - static_cast<long>(ib));
}

}  // namespace

TEST_CASE("cuda emulation: invariant matmul equals matmul_reference bitwise") {
  const int batches[] = {1, 2, 3, 7, 8, 16, 33, 64};
  const int shapes[][2] = {{1, 1}, {5, 7}, {64, 64}, {70, 33}, {33, 100}, {130, 257}, {8, 512}};
  int checked = 0;
  for (const auto& sh : shapes) {
    const int N = sh[0], K = sh[1];
    const auto w = random_vec(static_cast<size_t>(N) * K, 11 + N * 7 + K);
    for (int M : batches) {
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      const auto x = random_vec(static_cast<size_t>(M) * K, 97 + M * 13 + K);
      std::vector<float> ref(static_cast<size_t>(M) * N), emu(ref.size(), 12345.0f);
      matmul_reference(x.data(), w.data(), ref.data(), M, N, K);
      bool lanes_agree = false;
      emulate_matmul(x.data(), w.data(), emu.data(), M, N, K, lanes_agree);
      CHECK(lanes_agree);
      CHECK(same_bits(ref, emu));
      ++checked;
    }
  }
  CHECK(checked == 56);
}

namespace {

// Random stored rows of type t: quantized random floats, or (raw) random bytes, which reach every
// scale, min and code a block can hold (NaN and infinite scales included).
std::vector<uint8_t> stored_rows(repro::DType t, int N, int K, uint32_t seed, bool raw) {
  const size_t rb = repro::quant::row_bytes(t, K);
  std::vector<uint8_t> out(rb * N);
  if (raw) {
    std::mt19937 rng(seed);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    return out;
  }
  const auto f = random_vec(static_cast<size_t>(N) * K, seed, -2.0f, 2.0f);
  for (int n = 0; n < N; ++n) repro::quant::quantize_row(t, f.data() + static_cast<size_t>(n) * K, out.data() + rb * n, K);
  return out;
}

// dq::element over whole rows, as the kernels read them.
template <repro::DType F>
std::vector<float> element_rows(const std::vector<uint8_t>& w, int N, int K) {
  const dq::Rows<F> rows{w.data(), repro::quant::row_bytes(F, K)};
  std::vector<float> out(static_cast<size_t>(N) * K);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) out[static_cast<size_t>(n) * K + k] = rows(n, k);
  return out;
}
std::vector<float> element_rows(repro::DType t, const std::vector<uint8_t>& w, int N, int K) {
  std::vector<float> out;
  dq::with_rows(t, w.data(), repro::quant::row_bytes(t, K), [&](auto rows) {
    out.resize(static_cast<size_t>(N) * K);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) out[static_cast<size_t>(n) * K + k] = rows(n, k);
  });
  return out;
}

std::vector<float> dequantized(repro::DType t, const std::vector<uint8_t>& w, int N, int K) {
  const size_t rb = repro::quant::row_bytes(t, K);
  std::vector<float> out(static_cast<size_t>(N) * K);
  for (int n = 0; n < N; ++n) repro::quant::dequantize_row_scalar(t, w.data() + rb * n, out.data() + static_cast<size_t>(n) * K, K);
  return out;
}

}  // namespace

TEST_CASE("cuda emulation: the device dequantizer equals quant::dequantize_row bitwise, every type") {
  using repro::DType;
  // Every 16-bit code (NaNs, infinities, subnormals, both zeros) of F16 and BF16.
  std::vector<uint8_t> codes(2 * 65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[2 * c] = static_cast<uint8_t>(c & 0xff), codes[2 * c + 1] = static_cast<uint8_t>(c >> 8);
  for (DType t : {DType::F16, DType::BF16}) {
    CAPTURE(repro::dtype_name(t));
    CHECK(same_bits(element_rows(t, codes, 1, 65536), dequantized(t, codes, 1, 65536)));
  }
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (bool raw : {false, true}) {
      CAPTURE(repro::dtype_name(t));
      CAPTURE(raw);
      const int N = 40, K = 512;
      const auto w = stored_rows(t, N, K, 31 + static_cast<uint32_t>(t), raw);
      CHECK(same_bits(element_rows(t, w, N, K), dequantized(t, w, N, K)));
    }
  // The SIMD dequantizer the CPU tables run gives the same bits too (so the CPU tables' embedding
  // and panels equal the device's elements).
  const auto w = stored_rows(DType::Q5_K, 8, 256, 5, false);
  std::vector<float> simd(8 * 256);
  for (int n = 0; n < 8; ++n) repro::quant::dequantize_row(DType::Q5_K, w.data() + 176 * n, simd.data() + 256 * n, 256);
  CHECK(same_bits(simd, element_rows<DType::Q5_K>(w, 8, 256)));
  // F32 and unknown types are not stored types.
  CHECK_FALSE(dq::with_rows(DType::F32, nullptr, 0, [](auto) {}));
}

TEST_CASE("cuda emulation: invariant matmul on stored weights equals matmul_q_reference bitwise") {
  using repro::DType;
  struct Case {
    DType t;
    int N, K;
  };
  const Case cases[] = {{DType::F16, 70, 33},   {DType::F16, 130, 257}, {DType::BF16, 5, 7},
                        {DType::BF16, 64, 512}, {DType::Q4_0, 33, 96},  {DType::Q4_0, 70, 512}};
  // (Q8_0 and the K formats take the integer path: the next test case.)
  int checked = 0;
  for (const Case& c : cases) {
    REQUIRE(dq::invariant_reads(c.t));
    const auto w = stored_rows(c.t, c.N, c.K, 3 + c.N + c.K, false);
    const QuantWeight qw{c.t, w.data(), repro::quant::row_bytes(c.t, c.K)};
    for (int M : {1, 2, 3, 7, 8, 16, 33, 64}) {
      CAPTURE(repro::dtype_name(c.t));
      CAPTURE(M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      const auto x = random_vec(static_cast<size_t>(M) * c.K, 97 + M * 13 + c.K);
      std::vector<float> ref(static_cast<size_t>(M) * c.N), emu(ref.size(), 12345.0f);
      matmul_q_reference(x.data(), qw, ref.data(), M, c.N, c.K);
      bool lanes_agree = false;
      dq::with_rows(c.t, w.data(), qw.row_bytes,
                    [&](auto rows) { emulate_matmul(x.data(), rows, emu.data(), M, c.N, c.K, lanes_agree); });
      CHECK(lanes_agree);
      CHECK(same_bits(ref, emu));
      ++checked;
    }
  }
  CHECK(checked == 48);
}

TEST_CASE("cuda emulation: Q8_0, Q4_K, Q5_K and Q6_K on int8 activations equal matmul_q_reference bitwise") {
  using repro::DType;
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    REQUIRE(dq::invariant_reads(t));
    const bool mins = idot::act_bsum(t);
    const int blk = idot::act_block(t);
    const repro::quant::Block bk = repro::quant::block_of(t);
    // Where each block keeps its f16 scales: d (and dmin) at 0 (and 2), Q6_K's d at 208.
    const int d_at = t == DType::Q6_K ? 208 : 0;
    for (const int K : {256, 768}) {
      const int N = 37;
      for (bool raw : {false, true}) {
        // Raw bytes reach every scale and min; keep the f16 scales finite so the sums are numbers.
        auto w = stored_rows(t, N, K, 41 + K + raw, raw);
        const size_t rb = repro::quant::row_bytes(t, K);
        if (raw)
          for (int n = 0; n < N; ++n)
            for (int b = 0; b < K / bk.elems; ++b) {
              uint8_t* blkp = w.data() + rb * n + static_cast<size_t>(bk.bytes) * b;
              blkp[d_at + 1] &= 0x3b;  // exponent below 31 (and small)
              if (mins) blkp[3] &= 0x3b;
            }
        const QuantWeight qw{t, w.data(), rb};
        for (int M : {1, 2, 3, 7, 8, 33}) {
          CAPTURE(repro::dtype_name(t));
          CAPTURE(K);
          CAPTURE(raw);
          CAPTURE(M);
          auto x = random_vec(static_cast<size_t>(M) * K, 7 + M + K, -3.0f, 3.0f);
          if (M > 2) std::fill(x.begin() + 2 * K, x.begin() + 2 * K + blk, 0.0f);  // a zero block: d = 0
          // The quantize kernel: one thread per (row, block).
          const int nb = K / blk;
          std::vector<int8_t> q(static_cast<size_t>(M) * K), qr(q.size());
          std::vector<float> d(static_cast<size_t>(M) * nb), dr(static_cast<size_t>(M) * (K / 32));
          std::vector<int16_t> bs(static_cast<size_t>(M) * (K / 32)), bsr(bs.size());
          for (long th = 0; th < static_cast<long>(M) * nb; ++th)
            idot::quantize_block(x.data() + th * blk, blk, q.data() + th * blk, d.data() + th,
                                 mins ? bs.data() + th * (blk / 32) : nullptr);
          for (int m = 0; m < M; ++m)
            quantize_act_row_reference(t, x.data() + static_cast<size_t>(m) * K, K, qr.data() + static_cast<size_t>(m) * K,
                                       dr.data() + static_cast<size_t>(m) * nb, bsr.data() + static_cast<size_t>(m) * (K / 32));
          CHECK(std::memcmp(q.data(), qr.data(), q.size()) == 0);
          CHECK(std::memcmp(d.data(), dr.data(), d.size() * 4) == 0);
          if (mins) CHECK(std::memcmp(bs.data(), bsr.data(), bs.size() * 2) == 0);
          // The dot kernel: 8 lanes per output, the xor-shuffle tree, minus the mins term.
          std::vector<float> ref(static_cast<size_t>(M) * N), emu(ref.size());
          matmul_q_reference(x.data(), qw, ref.data(), M, N, K);
          bool all_same = true;
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              float lanes[kLanes], accm = 0.0f;
              for (int l = 0; l < kLanes; ++l) {
                const uint8_t* wr = w.data() + rb * n;
                const int8_t* qm = q.data() + static_cast<size_t>(m) * K;
                lanes[l] = idot::int_lane(t, wr, qm, d.data() + static_cast<size_t>(m) * nb,
                                          bs.data() + static_cast<size_t>(m) * (K / 32), K, l, accm);
              }
              bool same = false;
              const float v = emulate_group_tree(lanes, &same);
              all_same = all_same && same;
              emu[static_cast<size_t>(m) * N + n] = mins ? v - accm : v;
            }
          CHECK(all_same);
          CHECK(same_bits(ref, emu));
        }
      }
    }
  }
}

TEST_CASE("cuda emulation: a wrong lane order is caught (the test can fail)") {
  // Summing the lanes left to right instead of the tree changes bits for some inputs: the
  // emulation compares bits, so an order mistake in the kernel would show.
  const int K = 1000;
  int differ = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto a = random_vec(K, seed, -1000.0f, 1000.0f), b = random_vec(K, seed + 100);
    float lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) lanes[l] = lane_dot(a.data(), b.data(), K, l);
    float seq = 0.0f;
    for (float v : lanes) seq += v;
    const float tree = emulate_group_tree(lanes);
    const float ref = detail::dot_lanes(a.data(), b.data(), K);
    CHECK(std::memcmp(&tree, &ref, 4) == 0);
    differ += std::memcmp(&seq, &ref, 4) != 0;
  }
  CHECK(differ > 0);
}

TEST_CASE("cuda emulation: invariant RMSNorm equals rmsnorm_reference bitwise") {
  for (int D : {1, 7, 8, 33, 64, 260}) {
    const auto g = random_vec(D, 5 + D, 0.5f, 1.5f);
    for (int M : {1, 2, 3, 7, 8, 16, 33, 64}) {
      CAPTURE(D);
      CAPTURE(M);
      const auto x = random_vec(static_cast<size_t>(M) * D, 17 + M * 31 + D, -4.0f, 4.0f);
      std::vector<float> ref(x.size()), emu(x.size());
      rmsnorm_reference(x.data(), g.data(), ref.data(), M, D, 1e-5f);
      emulate_rmsnorm(x.data(), g.data(), emu.data(), M, D, 1e-5f);
      CHECK(same_bits(ref, emu));
    }
  }
}

TEST_CASE("cuda emulation: invariant attention equals attention_reference bitwise (GQA, multi-chunk)") {
  struct Case {
    int n_heads, n_kv_heads, head_dim;
  };
  for (const Case c : {Case{4, 2, 8}, Case{4, 4, 16}, Case{8, 2, 32}, Case{2, 1, 36}, Case{4, 1, 64}}) {
    const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, c.n_kv_heads * c.head_dim};
    const int max_ctx = 600;
    const auto k = random_vec(static_cast<size_t>(max_ctx) * s.kv_stride, 3 + c.head_dim, -2.0f, 2.0f);
    const auto v = random_vec(static_cast<size_t>(max_ctx) * s.kv_stride, 4 + c.head_dim);
    const int ctxs[] = {1, 2, 5, 16, 255, 256, 257, 511, 600};
    const int R = static_cast<int>(std::size(ctxs));
    const auto q = random_vec(static_cast<size_t>(R) * c.n_heads * c.head_dim, 9 + c.n_heads, -3.0f, 3.0f);
    std::vector<float> ref(q.size()), emu(q.size(), 7.0f);
    std::vector<AttentionRow> rr(R), re(R);
    for (int r = 0; r < R; ++r) {
      const long off = static_cast<long>(r) * c.n_heads * c.head_dim;
      rr[r] = {q.data() + off, k.data(), v.data(), ctxs[r], ref.data() + off};
      re[r] = {q.data() + off, k.data(), v.data(), ctxs[r], emu.data() + off};
    }
    attention_reference(rr.data(), R, s);
    emulate_attention(re.data(), R, s);
    CAPTURE(c.head_dim);
    CAPTURE(c.n_heads);
    CHECK(same_bits(ref, emu));
  }
}

TEST_CASE("shared math: exp within 2 ulp of the C library on [-87, 88], and the CPU attention uses it") {
  long worst = 0;
  int n = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f, ++n) {
    const float e = math::exp(x), want = static_cast<float>(std::exp(static_cast<double>(x)));
    worst = std::max(worst, ulp_diff(e, want));
    const float f = detail::exp_fixed(x);
    REQUIRE(std::memcmp(&e, &f, 4) == 0);
  }
  for (float x : {-1e-30f, 0.0f, -0.0f, 1e-7f, -1e-7f, 0.5f, -0.5f, 1.0f, -1.0f})
    worst = std::max(worst, ulp_diff(math::exp(x), static_cast<float>(std::exp(static_cast<double>(x)))));
  MESSAGE("math::exp: worst ", worst, " ulp over ", n, " points");
  CHECK(n > 10000);
  CHECK(worst <= 2);
  CHECK(math::exp(-100.0f) == 0.0f);
  CHECK(math::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isnan(math::exp(std::nanf(""))));
  CHECK(std::isfinite(math::exp(1000.0f)));
  CHECK(math::exp(0.0f) == 1.0f);
}

TEST_CASE("shared math: silu, RMS scale and RoPE against plain formulas") {
  long worst = 0;
  for (float x = -30.0f; x <= 30.0f; x += 0.01f) {
    const double want = x / (1.0 + std::exp(-static_cast<double>(x)));
    worst = std::max(worst, ulp_diff(std::fabs(math::silu(x)), std::fabs(static_cast<float>(want))));
    CHECK(math::silu_mul(x, 2.0f) == math::silu(x) * 2.0f);
  }
  MESSAGE("math::silu: worst ", worst, " ulp");
  CHECK(worst <= 4);
  CHECK(math::rms_scale(16.0f, 4, 0.0f) == 0.5f);
  CHECK(math::rms_scale(3.0f, 3, 0.0f) == 1.0f);
  float a = 1.0f, b = 0.0f;
  math::rope_pair(a, b, 0.0f, 1.0f);
  CHECK(a == 0.0f);
  CHECK(b == 1.0f);
  std::vector<float> cs(10 * 4), sn(10 * 4);
  math::rope_table(10000.0f, 8, 0, 10, cs.data(), sn.data());
  CHECK(cs[0] == 1.0f);
  CHECK(sn[0] == 0.0f);
  CHECK(cs[4 * 3 + 0] == std::cos(3.0f));
  // Growing the table in place gives the same entries as building it at once.
  std::vector<float> cs2(10 * 4), sn2(10 * 4);
  math::rope_table(10000.0f, 8, 0, 4, cs2.data(), sn2.data());
  math::rope_table(10000.0f, 8, 4, 10, cs2.data(), sn2.data());
  CHECK(same_bits(cs, cs2));
  CHECK(same_bits(sn, sn2));
}

TEST_CASE("shared math: bf16 and f16 rounding are round-to-nearest-even") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  int n = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float x;
    std::memcpy(&x, &u, 4);
    if (!std::isfinite(x)) continue;
    ++n;
    // f16: against the compiler's _Float16 conversion (round to nearest even).
    const float want16 = static_cast<float>(static_cast<_Float16>(x));
    const float got16 = math::round_f16(x);
    REQUIRE(std::memcmp(&want16, &got16, 4) == 0);
    // bf16: against rounding via double: the two bf16 neighbours, nearest, ties to even.
    const float got = math::round_bf16(x);
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    // Past the largest bf16 the upper neighbour is infinity, at the distance 2^128 would have.
    const double dhi_val = std::isinf(fhi) ? std::copysign(std::ldexp(1.0, 128), x) : static_cast<double>(fhi);
    const double dlo = std::fabs(static_cast<double>(x) - flo), dhi = std::fabs(dhi_val - x);
    const float want = (dlo < dhi || (dlo == dhi && (lo & 0x10000u) == 0)) ? flo : fhi;
    REQUIRE(std::memcmp(&want, &got, 4) == 0);
  }
  CHECK(n > 190000);
  // The same bits as the CPU tables' rounding (repro::f32_to_bf16 / f32_to_f16), NaNs included.
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    if (i % 50 == 0) u |= 0x7F800001u;  // some NaNs
    float x;
    std::memcpy(&x, &u, 4);
    for (auto [kind, p] : {std::pair{1, repro::Precision::BF16}, std::pair{2, repro::Precision::F16}}) {
      const float a = math::round_storage(kind, x), b = round_to_precision(p, x);
      REQUIRE(std::memcmp(&a, &b, 4) == 0);
    }
  }
  CHECK(std::isinf(math::round_f16(70000.0f)));
  CHECK(math::round_f16(65504.0f) == 65504.0f);
  CHECK(std::isnan(math::round_bf16(std::nanf(""))));
  CHECK(math::round_storage(0, 0.1f) == 0.1f);
}
