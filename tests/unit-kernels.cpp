// ctest-labels: unit
// Kernels: the batch-invariant paths are bitwise equal to the plain-loop references for every row,
// whatever the batch size, batch mates, position in batch or thread count (memcmp, no tolerance),
// and the portable path gives the same bits as the AVX2 path. The default paths are checked
// against the reference with a tolerance, and how often their rows differ bitwise from the row
// computed alone is measured and printed (not asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../kernels/common.hpp"
#include "kernel_paths.hpp"
#include "../kernels/kernels.hpp"

using namespace repro;
using namespace repro::kernels;
using namespace repro::test;

namespace {

const int kBatches[] = {1, 2, 3, 7, 8, 16, 33, 64};
const int kThreads[] = {1, 2, 4};
constexpr int kPool = 64;  // rows to draw batches from

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// b distinct row indices of the pool in a seeded random order: different batch mates and
// positions for every (batch size, threads, shape).
std::vector<int> draw_rows(int b, uint32_t seed) {
  std::vector<int> idx(kPool);
  for (int i = 0; i < kPool; ++i) idx[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(b);
  return idx;
}

// " M=b:differ/b"
std::string fmt_count(int b, int differ) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " M=%d:%d/%d", b, differ, b);
  return buf;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

float max_rel_err(const float* a, const float* ref, size_t n) {
  float scale = 0, err = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(ref[i]));
  for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(a[i] - ref[i]));
  return scale > 0 ? err / scale : err;
}

}  // namespace

TEST_CASE("exp_fixed: scalar and AVX2 agree bitwise and are accurate") {
  std::vector<float> xs;
  for (int i = 0; i <= 200000; ++i) xs.push_back(-100.0f + 190.0f * (float)i / 200000.0f);
  xs.insert(xs.end(), {0.0f, -0.0f, -87.0f, -86.99f, -87.01f, 88.0f, 1e-8f, -1e-8f, -0.5f});
  float worst = 0;
  for (float x : xs) {
    const float e = detail::exp_fixed(x);
    if (x >= -87.0f && x <= 88.0f) worst = std::max(worst, (float)std::fabs((e - std::exp((double)x)) / std::exp((double)x)));
    if (x < -87.0f) CHECK(e == 0.0f);
  }
  MESSAGE("exp_fixed max relative error on [-87, 88]: " << worst);
  CHECK(worst < 3e-7f);
  CHECK(detail::exp_fixed(0.0f) == 1.0f);
  if (simd::lanes_available()) {  // the 8-lane exp (simd/lanes8.hpp), bit for bit
    std::vector<float> out(xs.size() + 8);
    struct Run {
      REPRO_LANES static void go(const float* x, float* y, size_t n) {
        for (size_t i = 0; i + 8 <= n; i += 8) simd::store(y + i, simd::exp(simd::load(x + i)));
      }
    };
    const size_t n8 = xs.size() / 8 * 8;
    Run::go(xs.data(), out.data(), n8);
    int diff = 0;
    for (size_t i = 0; i < n8; ++i) {
      const float e = detail::exp_fixed(xs[i]);
      diff += std::memcmp(&e, &out[i], 4) != 0;
    }
    CHECK(diff == 0);
  }
}

// ---------------------------------------------------------------- matmul

TEST_CASE("matmul invariant: every row bitwise equal to the row alone and to the reference") {
  struct Shape {
    int N, K;
  };
  const Shape shapes[] = {{64, 64}, {172, 64}, {64, 172}, {100, 100}, {37, 13}, {96, 768}, {20, 7}};
  for (const Shape sh : shapes) {
    const int N = sh.N, K = sh.K;
    CAPTURE(N);
    CAPTURE(K);
    const auto x = random_vec((size_t)kPool * K, 1000 + K);
    const auto w = random_vec((size_t)N * K, 2000 + N);
    std::vector<float> ref((size_t)kPool * N);
    matmul_reference(x.data(), w.data(), ref.data(), kPool, N, K);
    for (bool portable : portable_modes())
    for (bool avx2_only : avx2_forced_modes(portable)) {
      ForcePortable fp(portable);
      ForceAvx2 fa(avx2_only);
      CAPTURE(portable);
      CAPTURE(avx2_only);
      ThreadPool one(1);
      for (int r = 0; r < kPool; ++r) {  // alone
        std::vector<float> y(N);
        matmul_invariant(x.data() + (long)r * K, w.data(), y.data(), 1, N, K, one);
        REQUIRE(same_bits(y.data(), ref.data() + (long)r * N, N));
      }
      for (int t : kThreads) {
        ThreadPool pool(t);
        for (int b : kBatches) {
          CAPTURE(t);
          CAPTURE(b);
          const auto idx = draw_rows(b, 31 * b + 7 * t + N + K);
          std::vector<float> xb((size_t)b * K), yb((size_t)b * N, -1.0f);
          for (int i = 0; i < b; ++i) std::copy_n(x.data() + (long)idx[i] * K, K, xb.data() + (long)i * K);
          matmul_invariant(xb.data(), w.data(), yb.data(), b, N, K, pool);
          int bad = 0;
          for (int i = 0; i < b; ++i) bad += !same_bits(yb.data() + (long)i * N, ref.data() + (long)idx[i] * N, N);
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul invariant: AVX-512 tiles give the AVX2 tiles' bits for every tile remainder") {
  if (!cpu_has_avx512()) {
    MESSAGE("skipped: this CPU has no AVX-512 (F, DQ, VL); the AVX2 path is checked against the reference");
    return;
  }
  // Row counts around the 6-row tile and the 4-row AVX2 tile, columns around the 8-column tile and
  // the 16-column thread unit, K with and without a tail of the 8 lanes.
  for (int M : {2, 3, 5, 6, 7, 11, 12, 13, 64, 65})
    for (int N : {8, 9, 15, 16, 17, 24, 31, 100})
      for (int K : {5, 8, 13, 64, 100, 777}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        const auto x = random_vec((size_t)M * K, 40 + M + K, -4.0f, 4.0f);
        const auto w = random_vec((size_t)N * K, 50 + N + K);
        std::vector<float> ref((size_t)M * N), a((size_t)M * N, -1.0f), b((size_t)M * N, -2.0f);
        matmul_reference(x.data(), w.data(), ref.data(), M, N, K);
        for (int t : {1, 2}) {
          ThreadPool pool(t);
          matmul_invariant(x.data(), w.data(), a.data(), M, N, K, pool);
          {
            ForceAvx2 fa(true);
            matmul_invariant(x.data(), w.data(), b.data(), M, N, K, pool);
          }
          CHECK(same_bits(a.data(), ref.data(), a.size()));
          CHECK(same_bits(a.data(), b.data(), a.size()));
        }
      }
}

TEST_CASE("matmul invariant: portable path equals AVX2 path bitwise, also on non-finite-free extremes") {
  if (!cpu_has_avx2_fma()) return;
  const int M = 9, N = 23, K = 333;
  auto x = random_vec((size_t)M * K, 5, -1e3f, 1e3f);
  auto w = random_vec((size_t)N * K, 6, -1e-3f, 1e-3f);
  x[5] = 0.0f, x[7] = -0.0f;  // signed zeros
  std::vector<float> a((size_t)M * N), b((size_t)M * N);
  ThreadPool pool(2);
  matmul_invariant(x.data(), w.data(), a.data(), M, N, K, pool);
  {
    ForcePortable fp(true);
    matmul_invariant(x.data(), w.data(), b.data(), M, N, K, pool);
  }
  CHECK(same_bits(a.data(), b.data(), a.size()));
}

TEST_CASE("matmul default: close to the reference; bitwise batch variance measured") {
  const int N = 256, K = 768;
  const auto x = random_vec((size_t)kPool * K, 11);
  const auto w = random_vec((size_t)N * K, 12);
  std::vector<float> ref((size_t)kPool * N);
  matmul_reference(x.data(), w.data(), ref.data(), kPool, N, K);
  for (int t : {1, 2}) {
    ThreadPool pool(t);
    std::vector<float> alone((size_t)kPool * N);
    for (int r = 0; r < kPool; ++r)
      matmul_default(x.data() + (long)r * K, w.data(), alone.data() + (long)r * N, 1, N, K, pool);
    CHECK(max_rel_err(alone.data(), ref.data(), alone.size()) < 1e-5f);
    std::string report;
    for (int b : kBatches) {
      const auto idx = draw_rows(b, 77 + b);
      std::vector<float> xb((size_t)b * K), yb((size_t)b * N);
      for (int i = 0; i < b; ++i) std::copy_n(x.data() + (long)idx[i] * K, K, xb.data() + (long)i * K);
      matmul_default(xb.data(), w.data(), yb.data(), b, N, K, pool);
      int differ = 0;
      for (int i = 0; i < b; ++i) {
        differ += !same_bits(yb.data() + (long)i * N, alone.data() + (long)idx[i] * N, N);
        CHECK(max_rel_err(yb.data() + (long)i * N, ref.data() + (long)idx[i] * N, N) < 1e-5f);
      }
      report += fmt_count(b, differ);
    }
    MESSAGE("matmul_default (GEMV / tiles / OpenBLAS), threads=" << t << ", N=" << N << " K=" << K
                                                  << ", rows differing bitwise from the row alone:" << report);
  }
}

TEST_CASE("matmul default: every path (GEMV, tiles, sgemm) close to the reference, SIMD and portable") {
  // K values with every tail: multiples of 32, of 8 only, and odd; M on each side of the paths.
  for (int K : {64, 200, 77}) {
    const int N = 53;
    const int Ms[] = {1, 2, 5, kSgemmMinRows - 1, kSgemmMinRows, kSgemmMinRows + 3};
    const int maxM = kSgemmMinRows + 3;
    const auto x = random_vec((size_t)maxM * K, 21 + K);
    const auto w = random_vec((size_t)N * K, 22 + K);
    std::vector<float> ref((size_t)maxM * N);
    matmul_reference(x.data(), w.data(), ref.data(), maxM, N, K);
    for (int t : {1, 2}) {
      ThreadPool pool(t);
      for (int M : Ms) {
        for (bool portable : {false, true}) {
          ForcePortable fp(portable);
          std::vector<float> y((size_t)M * N);
          matmul_default(x.data(), w.data(), y.data(), M, N, K, pool);
          CAPTURE(K);
          CAPTURE(M);
          CAPTURE(t);
          CAPTURE(portable);
          CHECK(max_rel_err(y.data(), ref.data(), y.size()) < 1e-5f);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- rmsnorm

TEST_CASE("rmsnorm invariant: every row bitwise equal to the row alone and to the reference") {
  for (int D : {64, 172, 768, 100, 5, 4096}) {
    CAPTURE(D);
    const auto x = random_vec((size_t)kPool * D, 300 + D, -3.0f, 3.0f);
    const auto g = random_vec(D, 400 + D, 0.5f, 1.5f);
    std::vector<float> ref((size_t)kPool * D);
    rmsnorm_reference(x.data(), g.data(), ref.data(), kPool, D, 1e-5f);
    for (bool portable : portable_modes())
    for (bool avx2_only : avx2_forced_modes(portable)) {
      ForcePortable fp(portable);
      ForceAvx2 fa(avx2_only);
      CAPTURE(portable);
      CAPTURE(avx2_only);
      ThreadPool one(1);
      for (int r = 0; r < kPool; ++r) {
        std::vector<float> y(D);
        rmsnorm_invariant(x.data() + (long)r * D, g.data(), y.data(), 1, D, 1e-5f, one);
        REQUIRE(same_bits(y.data(), ref.data() + (long)r * D, D));
      }
      for (int t : kThreads) {
        ThreadPool pool(t);
        for (int b : kBatches) {
          CAPTURE(t);
          CAPTURE(b);
          const auto idx = draw_rows(b, 13 * b + t + D);
          std::vector<float> xb((size_t)b * D), yb((size_t)b * D);
          for (int i = 0; i < b; ++i) std::copy_n(x.data() + (long)idx[i] * D, D, xb.data() + (long)i * D);
          rmsnorm_invariant(xb.data(), g.data(), yb.data(), b, D, 1e-5f, pool);
          int bad = 0;
          for (int i = 0; i < b; ++i) bad += !same_bits(yb.data() + (long)i * D, ref.data() + (long)idx[i] * D, D);
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("rmsnorm default: close to the reference; bitwise batch variance measured") {
  const int D = 768;
  const auto x = random_vec((size_t)kPool * D, 21, -3.0f, 3.0f);
  const auto g = random_vec(D, 22, 0.5f, 1.5f);
  std::vector<float> ref((size_t)kPool * D), alone((size_t)kPool * D);
  rmsnorm_reference(x.data(), g.data(), ref.data(), kPool, D, 1e-5f);
  ThreadPool one(1), two(2);
  for (int r = 0; r < kPool; ++r)
    rmsnorm_default(x.data() + (long)r * D, g.data(), alone.data() + (long)r * D, 1, D, 1e-5f, one);
  CHECK(max_rel_err(alone.data(), ref.data(), alone.size()) < 1e-5f);
  int differ = 0, total = 0, vs_ref = 0;
  for (int b : kBatches) {
    std::vector<float> yb((size_t)b * D);
    rmsnorm_default(x.data(), g.data(), yb.data(), b, D, 1e-5f, two);
    for (int i = 0; i < b; ++i, ++total) {
      differ += !same_bits(yb.data() + (long)i * D, alone.data() + (long)i * D, D);
      vs_ref += !same_bits(yb.data() + (long)i * D, ref.data() + (long)i * D, D);
    }
  }
  MESSAGE("rmsnorm_default D=" << D << ": rows differing bitwise from the row alone: " << differ << "/" << total
                               << "; from the invariant reference: " << vs_ref << "/" << total);
}

// ---------------------------------------------------------------- attention

namespace {

struct AttnCase {
  AttentionShape s;
  std::vector<float> q, kv_k, kv_v;
  std::vector<int> n_ctx, offset;  // per pool row: context length and start position in kv
};

const int kCtx[] = {1, 5, 255, 256, 257, 700};

AttnCase make_attn(int n_heads, int n_kv_heads, int head_dim, uint32_t seed) {
  AttnCase c;
  c.s = {n_heads, n_kv_heads, head_dim, n_kv_heads * head_dim};
  const int positions = 700 + kPool * 5;
  c.q = random_vec((size_t)kPool * n_heads * head_dim, seed, -2.0f, 2.0f);
  c.kv_k = random_vec((size_t)positions * c.s.kv_stride, seed + 1, -2.0f, 2.0f);
  c.kv_v = random_vec((size_t)positions * c.s.kv_stride, seed + 2);
  for (int r = 0; r < kPool; ++r) {
    c.n_ctx.push_back(kCtx[r % 6]);
    c.offset.push_back(r * 5);
  }
  return c;
}

// Rows for pool indices idx, outputs in out[i * n_heads * head_dim].
std::vector<AttentionRow> rows_for(const AttnCase& c, const std::vector<int>& idx, float* out) {
  const int qn = c.s.n_heads * c.s.head_dim;
  std::vector<AttentionRow> rows;
  for (size_t i = 0; i < idx.size(); ++i) {
    const int r = idx[i];
    rows.push_back({c.q.data() + (long)r * qn, c.kv_k.data() + (long)c.offset[r] * c.s.kv_stride,
                    c.kv_v.data() + (long)c.offset[r] * c.s.kv_stride, c.n_ctx[r], out + (long)i * qn});
  }
  return rows;
}

std::vector<int> all_rows() {
  std::vector<int> idx(kPool);
  for (int i = 0; i < kPool; ++i) idx[i] = i;
  return idx;
}

}  // namespace

TEST_CASE("attention invariant: every row bitwise equal to the row alone and to the reference (GQA)") {
  struct Geo {
    int heads, kv_heads, head_dim;
  };
  const Geo geos[] = {{8, 4, 8}, {12, 4, 64}, {6, 2, 12}, {4, 4, 20}, {2, 1, 5}, {2, 2, 128}};
  for (const Geo g : geos) {
    CAPTURE(g.heads);
    CAPTURE(g.kv_heads);
    CAPTURE(g.head_dim);
    const AttnCase c = make_attn(g.heads, g.kv_heads, g.head_dim, 500 + g.head_dim);
    const int qn = g.heads * g.head_dim;
    std::vector<float> ref((size_t)kPool * qn);
    {
      auto rows = rows_for(c, all_rows(), ref.data());
      attention_reference(rows.data(), kPool, c.s);
    }
    for (float v : ref) REQUIRE(std::isfinite(v));
    for (bool portable : portable_modes())
    for (bool avx2_only : avx2_forced_modes(portable)) {
      ForcePortable fp(portable);
      ForceAvx2 fa(avx2_only);
      CAPTURE(portable);
      CAPTURE(avx2_only);
      ThreadPool one(1);
      for (int r = 0; r < kPool; ++r) {
        std::vector<float> out(qn);
        auto rows = rows_for(c, {r}, out.data());
        attention_invariant(rows.data(), 1, c.s, one);
        CAPTURE(r);
        REQUIRE(same_bits(out.data(), ref.data() + (long)r * qn, qn));
      }
      for (int t : kThreads) {
        ThreadPool pool(t);
        for (int b : kBatches) {
          CAPTURE(t);
          CAPTURE(b);
          const auto idx = draw_rows(b, 17 * b + t + g.head_dim);
          std::vector<float> out((size_t)b * qn);
          auto rows = rows_for(c, idx, out.data());
          attention_invariant(rows.data(), b, c.s, pool);
          int bad = 0;
          for (int i = 0; i < b; ++i) bad += !same_bits(out.data() + (long)i * qn, ref.data() + (long)idx[i] * qn, qn);
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("attention reference: matches a double-precision softmax") {
  const AttnCase c = make_attn(8, 4, 8, 900);
  const int qn = 8 * 8;
  std::vector<float> ref((size_t)kPool * qn);
  auto rows = rows_for(c, all_rows(), ref.data());
  attention_reference(rows.data(), kPool, c.s);
  double worst = 0;
  for (int r = 0; r < kPool; ++r)
    for (int h = 0; h < 8; ++h) {
      const float* q = c.q.data() + (long)r * qn + h * 8;
      const float* k = rows[r].k + (h / 2) * 8;
      const float* v = rows[r].v + (h / 2) * 8;
      std::vector<double> s(rows[r].n_ctx);
      double mx = -1e300, sum = 0;
      for (int t = 0; t < rows[r].n_ctx; ++t) {
        double d = 0;
        for (int i = 0; i < 8; ++i) d += (double)q[i] * k[(long)t * c.s.kv_stride + i];
        s[t] = d / std::sqrt(8.0);
        mx = std::max(mx, s[t]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < 8; ++i) {
        double o = 0;
        for (int t = 0; t < rows[r].n_ctx; ++t) o += s[t] * v[(long)t * c.s.kv_stride + i];
        worst = std::max(worst, std::fabs(o / sum - ref[(long)r * qn + h * 8 + i]));
      }
    }
  CHECK(worst < 1e-5);
}

TEST_CASE("attention default: close to the reference; bitwise batch variance measured") {
  const AttnCase c = make_attn(8, 4, 8, 700);
  const int qn = 8 * 8;
  std::vector<float> ref((size_t)kPool * qn);
  {
    auto rows = rows_for(c, all_rows(), ref.data());
    attention_reference(rows.data(), kPool, c.s);
  }
  for (int t : {1, 2, 4, 16}) {
    ThreadPool pool(t);
    std::vector<float> alone((size_t)kPool * qn);
    ThreadPool one(1);
    for (int r = 0; r < kPool; ++r) {
      auto rows = rows_for(c, {r}, alone.data() + (long)r * qn);
      attention_default(rows.data(), 1, c.s, one);
    }
    CHECK(max_rel_err(alone.data(), ref.data(), alone.size()) < 1e-5f);
    std::string report;
    for (int b : kBatches) {
      const auto idx = draw_rows(b, 5 * b + t);
      std::vector<float> out((size_t)b * qn);
      auto rows = rows_for(c, idx, out.data());
      attention_default(rows.data(), b, c.s, pool);
      int differ = 0;
      for (int i = 0; i < b; ++i) {
        differ += !same_bits(out.data() + (long)i * qn, alone.data() + (long)idx[i] * qn, qn);
        CHECK(max_rel_err(out.data() + (long)i * qn, ref.data() + (long)idx[i] * qn, qn) < 1e-5f);
      }
      report += fmt_count(b, differ);
    }
    MESSAGE("attention_default threads=" << t << " (8 heads, 4 KV heads, head_dim 8, n_ctx up to 700): rows "
                                         << "differing bitwise from the row alone (1 thread), per batch size:" << report);
  }
}
