// ctest-labels: unit
// Block formats (repro/common/quant.hpp) and the matmul on weights kept in their stored format:
// dequantization of hand-built blocks is exact; quantize -> dequantize stays within one
// quantization step of each sub-block; the 8-bit activation rows of the integer path (Q8_0, Q4_K,
// Q5_K, Q6_K) follow their rounding rule and stay within half a step; the integer kernels (AVX2) give the bits
// of the plain loops for any block bytes; the batch-invariant quantized matmul is bitwise equal to
// its plain-loop reference for every row, batch size, batch mates, position and thread count
// (memcmp), on both the AVX2 and the portable path; the default path is bitwise the reference
// while it takes the integer path and close to the f32 product after.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../kernels/common.hpp"
#include "kernel_paths.hpp"
#include "../kernels/matmul/quant_dot.hpp"
#include "repro/common/dtype.hpp"
#include "repro/common/quant.hpp"
#include "../kernels/kernels.hpp"
#include "../kernels/matmul_quant.hpp"

using namespace repro;
using namespace repro::kernels;
using namespace repro::test;
using quant::Format;

namespace {

const Format kAll[] = {Format::F32, Format::F16, Format::BF16, Format::Q8_0,
                       Format::Q4_0, Format::Q4_K, Format::Q5_K, Format::Q6_K};
const Format kIntDot[] = {Format::Q8_0, Format::Q4_K, Format::Q5_K, Format::Q6_K};
const Format kQuantized[] = {Format::F16,  Format::BF16, Format::Q8_0, Format::Q4_0,
                             Format::Q4_K, Format::Q5_K, Format::Q6_K};

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> quantize(Format f, const std::vector<float>& x) {
  std::vector<uint8_t> out(quant::row_bytes(f, static_cast<int64_t>(x.size())));
  quant::quantize_row(f, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}
std::vector<float> dequantize(Format f, const std::vector<uint8_t>& b, size_t n) {
  std::vector<float> out(n);
  quant::dequantize_row(f, b.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}
constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfQuarter = 0x3400;

}  // namespace

TEST_CASE("quant: block sizes are the GGUF ones") {
  CHECK(quant::block_of(Format::Q8_0).bytes == 34);
  CHECK(quant::block_of(Format::Q4_0).bytes == 18);
  CHECK(quant::block_of(Format::Q4_K).bytes == 144);
  CHECK(quant::block_of(Format::Q5_K).bytes == 176);
  CHECK(quant::block_of(Format::Q6_K).bytes == 210);
  CHECK(quant::block_of(Format::Q4_K).elems == 256);
  CHECK(quant::row_bytes(Format::Q6_K, 512) == 420);
  CHECK(quant::row_bytes(Format::F16, 7) == 14);
  CHECK(std::string(quant::format_name(Format::Q5_K)) == "Q5_K");
}

TEST_CASE("quant: hand-built Q8_0 and Q4_0 blocks dequantize exactly") {
  uint8_t b[34];
  put16(b, kHalfHalf);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 9 - 140 + 127) - 0);
  float y[32];
  quant::dequantize_row(Format::Q8_0, b, y, 32);
  for (int j = 0; j < 32; ++j) CHECK(y[j] == 0.5f * static_cast<float>(static_cast<int8_t>(b[2 + j])));

  uint8_t c[18];
  put16(c, kHalfQuarter);
  for (int j = 0; j < 16; ++j) c[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  quant::dequantize_row(Format::Q4_0, c, y, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == 0.25f * static_cast<float>(j - 8));
    CHECK(y[16 + j] == 0.25f * static_cast<float>(7 - j));
  }
}

TEST_CASE("quant: hand-built Q4_K and Q5_K blocks dequantize exactly") {
  // Sub-block s has scale sc[s] and min m[s]; s = 5 uses 6-bit values to exercise the high bits.
  const int sc[8] = {1, 2, 3, 4, 5, 63, 7, 8}, m[8] = {0, 1, 2, 3, 4, 45, 6, 7};
  uint8_t scales[12] = {};
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s]);
    scales[s + 4] = static_cast<uint8_t>(m[s]);
  }
  for (int s = 4; s < 8; ++s) {
    scales[s + 4] = static_cast<uint8_t>((sc[s] & 15) | ((m[s] & 15) << 4));
    scales[s - 4] |= static_cast<uint8_t>((sc[s] >> 4) << 6);
    scales[s] |= static_cast<uint8_t>((m[s] >> 4) << 6);
  }
  for (int five = 0; five < 2; ++five) {
    const Format f = five ? Format::Q5_K : Format::Q4_K;
    std::vector<uint8_t> b(quant::block_of(f).bytes);
    put16(b.data(), kHalfOne);
    put16(b.data() + 2, kHalfHalf);
    std::memcpy(b.data() + 4, scales, 12);
    uint8_t* qh = five ? b.data() + 16 : nullptr;
    uint8_t* qs = b.data() + (five ? 48 : 16);
    for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>(i * 37 + 11);
    if (qh)
      for (int i = 0; i < 32; ++i) qh[i] = static_cast<uint8_t>(i * 73 + 5);
    float y[256];
    quant::dequantize_row(f, b.data(), y, 256);
    // Element e: 64-element group g, sub-block s = e / 32; quant from qs[32g + e % 32], low nibble
    // for the group's first half; fifth bit from qh[e % 32], bit s.
    for (int e = 0; e < 256; ++e) {
      const int g = e / 64, s = e / 32, l = e % 32;
      int q = (s % 2 == 0) ? (qs[32 * g + l] & 15) : (qs[32 * g + l] >> 4);
      if (qh) q += ((qh[l] >> s) & 1) * 16;
      CAPTURE(e);
      CHECK(y[e] == 1.0f * static_cast<float>(sc[s]) * static_cast<float>(q) - 0.5f * static_cast<float>(m[s]));
    }
  }
}

TEST_CASE("quant: a hand-built Q6_K block dequantizes exactly") {
  uint8_t b[210];
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>(i * 29 + 3);       // ql
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(i * 53 + 17);  // qh
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s * 9 - 70));
  put16(b + 208, kHalfQuarter);
  float y[256];
  quant::dequantize_row(Format::Q6_K, b, y, 256);
  // In each half of 128 elements and for l < 32: the four elements l, l+32, l+64, l+96 take their
  // low bits from ql[l] (low), ql[l+32] (low), ql[l] (high), ql[l+32] (high) and their high bits
  // from qh[l] bits 0-1, 2-3, 4-5, 6-7.
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {(ql[l] & 15) | ((qh[l] & 3) << 4), (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4),
                        (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int e = 128 * h + 32 * k + l;
        const float scale = static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
        CAPTURE(e);
        CHECK(y[e] == 0.25f * scale * static_cast<float>(q[k] - 32));
      }
    }
  }
}

TEST_CASE("quant: quantize -> dequantize stays within one step of each sub-block") {
  // Sub-block length and number of levels per format; the error of an element is at most one
  // quantization step of its sub-block's range (half a step from rounding, plus the rounding of
  // the scales to f16 and 6/8 bits).
  struct Case {
    Format f;
    int sub;
    float levels;
    float max_rms;  // RMS error over the whole vector relative to the RMS of x
  };
  const Case cases[] = {{Format::Q8_0, 32, 254, 0.005f}, {Format::Q4_0, 32, 15, 0.08f},
                        {Format::Q4_K, 32, 15, 0.08f},  {Format::Q5_K, 32, 31, 0.04f},
                        {Format::Q6_K, 16, 63, 0.02f}};
  const int n = 4096;
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> x = random_vec(n, seed, -2.0f, 2.0f);
    // Vary the magnitude along the row (as weights do), including a few all-zero sub-blocks.
    for (int i = 0; i < n; ++i) x[i] *= 0.01f + static_cast<float>((i / 256) % 7);
    for (int i = 512; i < 544; ++i) x[i] = 0.0f;
    for (const Case& c : cases) {
      CAPTURE(std::string(quant::format_name(c.f)));
      std::vector<float> y = dequantize(c.f, quantize(c.f, x), n);
      double se = 0, sx = 0;
      for (int s0 = 0; s0 < n; s0 += c.sub) {
        // The K formats round the sub-block scales against one scale per 256 elements: allow
        // 1/256 of that super-block's largest magnitude on top.
        float super = 0;
        for (int i = s0 / 256 * 256; i < s0 / 256 * 256 + 256; ++i) super = std::max(super, std::fabs(x[i]));
        float lo = 0, hi = 0;
        for (int i = s0; i < s0 + c.sub; ++i) {
          lo = std::min(lo, x[i]);
          hi = std::max(hi, x[i]);
        }
        const float step = (hi - lo) / c.levels;
        for (int i = s0; i < s0 + c.sub; ++i) {
          CAPTURE(i);
          CHECK(std::fabs(y[i] - x[i]) <= step * 1.05f + super / 256.0f + 1e-6f);
          se += double(y[i] - x[i]) * (y[i] - x[i]);
          sx += double(x[i]) * x[i];
        }
      }
      for (int i = 512; i < 544; ++i) CHECK(y[i] == 0.0f);
      CHECK(std::sqrt(se / sx) < c.max_rms);
    }
  }
}

TEST_CASE("quant: the SIMD dequantizers give the bits of the scalar loops (memcmp), any block bytes") {
  // Arbitrary bytes exercise every nibble, high bit, packed 6-bit scale and sign; finite scales
  // only (a NaN scale's payload is not part of the contract). Quantized real values add the
  // layouts the quantizer writes. Rows of 3 blocks check the block stride.
  std::mt19937 rng(1234);
  for (Format f : kQuantized) {
    CAPTURE(quant::format_name(f));
    const int64_t n = 3 * quant::block_of(f).elems;
    std::vector<uint8_t> bytes(quant::row_bytes(f, n));
    for (int trial = 0; trial < 200; ++trial) {
      if (trial % 2 == 0) {
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      } else {
        bytes = quantize(f, random_vec(static_cast<size_t>(n), 99u + static_cast<uint32_t>(trial), -3.0f, 2.0f));
      }
      std::vector<float> fast(static_cast<size_t>(n)), plain(static_cast<size_t>(n));
      quant::dequantize_row(f, bytes.data(), fast.data(), n);
      quant::dequantize_row_scalar(f, bytes.data(), plain.data(), n);
      bool finite = true;
      for (float v : plain) finite = finite && !std::isnan(v);
      if (!finite) continue;
      REQUIRE(std::memcmp(fast.data(), plain.data(), fast.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("quant: F16 and BF16 round to nearest even; an all-zero row stays zero") {
  std::vector<float> x = {1.0f, 1.0009765625f, 1.00048828125f, -65504.0f, 65520.0f, 1e-8f, 3.0f, 0.0f};
  std::vector<float> y = dequantize(Format::F16, quantize(Format::F16, x), x.size());
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == 1.0009765625f);
  CHECK(y[2] == 1.0f);  // tie to even
  CHECK(y[3] == -65504.0f);
  CHECK(std::isinf(y[4]));
  CHECK(y[5] == 0.0f);
  std::vector<float> z = dequantize(Format::BF16, quantize(Format::BF16, x), x.size());
  CHECK(z[0] == 1.0f);
  CHECK(z[6] == 3.0f);
  CHECK(z[2] == 1.0f);
  for (Format f : kAll) {
    std::vector<float> zero(256, 0.0f);
    std::vector<float> back = dequantize(f, quantize(f, zero), 256);
    for (float v : back) CHECK(v == 0.0f);
  }
}

TEST_CASE("quant matmul: the f32 panel reference equals the f32 reference on the dequantized weights") {
  // The definition of the formats without an integer path, and of the default table's f32 panels.
  const int N = 40, K = 512, M = 5;
  std::vector<float> x = random_vec(static_cast<size_t>(M) * K, 11);
  for (Format f : kQuantized) {
    CAPTURE(std::string(quant::format_name(f)));
    std::vector<float> wf = random_vec(static_cast<size_t>(N) * K, 12);
    std::vector<uint8_t> wq = quantize(f, wf);
    std::vector<float> wd = dequantize(f, wq, wf.size());
    const QuantWeight w{f, wq.data(), quant::row_bytes(f, K)};
    std::vector<float> y(static_cast<size_t>(M) * N), yref(y.size()), yq(y.size());
    detail::matmul_q_panels_reference(x.data(), w, y.data(), M, N, K);
    matmul_reference(x.data(), wd.data(), yref.data(), M, N, K);
    CHECK(std::memcmp(y.data(), yref.data(), y.size() * 4) == 0);
    matmul_q_reference(x.data(), w, yq.data(), M, N, K);
    CHECK(has_int_dot(f) == (f == Format::Q8_0 || f == Format::Q4_K || f == Format::Q5_K || f == Format::Q6_K));
    if (!has_int_dot(f)) CHECK(std::memcmp(yq.data(), yref.data(), y.size() * 4) == 0);
  }
}

TEST_CASE("quant activations: 8-bit rows per block of the weight format, rounding rule, half-step bound") {
  for (Format f : kIntDot) {
    CAPTURE(std::string(quant::format_name(f)));
    const int blk = f == Format::Q8_0 ? 32 : 256, K = 3 * blk;
    std::vector<int8_t> q(K);
    std::vector<float> d(K / 32);
    std::vector<int16_t> bsum(K / 32, -1);
    for (uint32_t seed = 0; seed < 50; ++seed) {
      // Magnitudes from 1e-3 to 1e3; block 1 all zero on odd seeds.
      const float mag = std::pow(10.0f, static_cast<float>(seed % 7) - 3.0f);
      std::vector<float> x = random_vec(K, 400 + seed, -mag, mag);
      if (seed % 2) std::fill(x.begin() + blk, x.begin() + 2 * blk, 0.0f);
      quantize_act_row_reference(f, x.data(), K, q.data(), d.data(), bsum.data());
      for (int b = 0; b < K / blk; ++b) {
        float amax = 0;
        for (int i = 0; i < blk; ++i) amax = std::max(amax, std::fabs(x[b * blk + i]));
        CHECK(d[b] == amax / 127.0f);
        bool reached = amax == 0;
        for (int i = 0; i < blk; ++i) {
          const int k = b * blk + i;
          CHECK(std::abs(static_cast<int>(q[k])) <= 127);
          if (amax == 0) {
            CHECK(q[k] == 0);
            continue;
          }
          // round to nearest: within half a step (plus the f32 rounding of x / d and d * q)
          CHECK(std::fabs(x[k] - d[b] * static_cast<float>(q[k])) <= d[b] * (0.5f + 1e-4f));
          reached = reached || std::abs(static_cast<int>(q[k])) == 127;
        }
        CHECK(reached);  // the largest element maps to +-127
      }
      if (detail::act_bsum(f))
        for (int s = 0; s < K / 32; ++s) {
          int t = 0;
          for (int i = 0; i < 32; ++i) t += q[32 * s + i];
          CHECK(bsum[s] == t);
        }
    }
    // Ties round half to even: with amax = 127 the scale is exactly 1.
    std::vector<float> x(K, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = -0.5f;
    x[5] = 126.5f;
    quantize_act_row_reference(f, x.data(), K, q.data(), d.data(), bsum.data());
    CHECK(d[0] == 1.0f);
    CHECK(q[0] == 127);
    CHECK(q[1] == 2);
    CHECK(q[2] == 4);
    CHECK(q[3] == -2);
    CHECK(q[4] == 0);
    CHECK(q[5] == 126);
  }
}

TEST_CASE("quant matmul, integer path: AVX2 equals the plain loops (memcmp) for any block bytes and several K") {
  // Arbitrary weight bytes (every nibble, packed 6-bit scale and min, int8 -128) with finite f16
  // scales; activation rows with ties, zero blocks and one large element. K: Q8_0 any multiple of
  // 32 (the loader requires rows to be whole blocks), the K formats of 256.
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (Format f : kIntDot) {
    const std::vector<int> Ks = f == Format::Q8_0 ? std::vector<int>{32, 96, 1056} : std::vector<int>{256, 1280, 2816};
    const quant::Block bk = quant::block_of(f);
    for (int K : Ks) {
      CAPTURE(std::string(quant::format_name(f)));
      CAPTURE(K);
      const int N = 19, M = 7;
      const size_t rb = quant::row_bytes(f, K);
      std::vector<uint8_t> wq(rb * N);
      for (auto& b : wq) b = static_cast<uint8_t>(rng());
      for (int n = 0; n < N; ++n)
        for (int b = 0; b < K / bk.elems; ++b) {
          uint8_t* blk = wq.data() + rb * n + static_cast<size_t>(b) * bk.bytes;
          const uint16_t dh = f32_to_f16(scale(rng)), mh = f32_to_f16(scale(rng));
          const int d_at = f == Format::Q6_K ? 208 : 0;  // Q6_K keeps d at the end of the block
          blk[d_at] = static_cast<uint8_t>(dh & 0xff);
          blk[d_at + 1] = static_cast<uint8_t>(dh >> 8);
          if (detail::act_bsum(f)) {
            blk[2] = static_cast<uint8_t>(mh & 0xff);
            blk[3] = static_cast<uint8_t>(mh >> 8);
          }
        }
      std::vector<float> x = random_vec(static_cast<size_t>(M) * K, 500 + K, -4.0f, 4.0f);
      std::fill(x.begin(), x.begin() + 32, 0.0f);  // a zero block
      x[static_cast<size_t>(K) + 3] = 1e4f;        // one large element
      for (int i = 0; i < 16; ++i) x[2 * static_cast<size_t>(K) + i] = 0.5f * static_cast<float>(i - 8);  // ties
      const QuantWeight w{f, wq.data(), rb};
      std::vector<float> ref(static_cast<size_t>(M) * N);
      matmul_q_reference(x.data(), w, ref.data(), M, N, K);
      // The activation rows: SIMD build == plain loops.
      for (bool simd : {false, true}) {
        detail::QuantActs a;
        detail::quantize_acts(f, x.data(), M, K, a, simd);
        std::vector<int8_t> q(K);
        std::vector<float> d(K / 32);
        std::vector<int16_t> bs(K / 32);
        for (int m = 0; m < M; ++m) {
          quantize_act_row_reference(f, x.data() + static_cast<size_t>(m) * K, K, q.data(), d.data(), bs.data());
          CHECK(std::memcmp(a.qrow(m), q.data(), K) == 0);
          CHECK(std::memcmp(a.drow(m), d.data(), a.blocks * sizeof(float)) == 0);
          if (detail::act_bsum(f)) CHECK(std::memcmp(a.brow(m), bs.data(), a.sub * sizeof(int16_t)) == 0);
        }
      }
      ThreadPool one(1), two(2);
      for (bool portable : portable_modes()) {
        ForcePortable fp(portable);
        CAPTURE(portable);
        for (ThreadPool* pool : {&one, &two}) {
          std::vector<float> y(ref.size(), -1.0f);
          matmul_q_invariant(x.data(), w, y.data(), M, N, K, *pool);
          CHECK(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("quant matmul, integer path: the products of the 8-bit rows, within the activation rounding of f32") {
  const int N = 30, M = 4;
  for (Format f : kIntDot)
    for (int K : {256, 2048}) {
      CAPTURE(std::string(quant::format_name(f)));
      CAPTURE(K);
      std::vector<float> x = random_vec(static_cast<size_t>(M) * K, 61 + K, -2.0f, 2.0f);
      std::vector<uint8_t> wq = quantize(f, random_vec(static_cast<size_t>(N) * K, 62 + K));
      std::vector<float> wd = dequantize(f, wq, static_cast<size_t>(N) * K);
      const QuantWeight w{f, wq.data(), quant::row_bytes(f, K)};
      std::vector<float> y(static_cast<size_t>(M) * N);
      matmul_q_reference(x.data(), w, y.data(), M, N, K);
      const int blk = f == Format::Q8_0 ? 32 : 256;
      std::vector<int8_t> q(K);
      std::vector<float> d(K / 32);
      std::vector<int16_t> bs(K / 32);
      for (int m = 0; m < M; ++m) {
        const float* xr = x.data() + static_cast<size_t>(m) * K;
        quantize_act_row_reference(f, xr, K, q.data(), d.data(), bs.data());
        for (int n = 0; n < N; ++n) {
          const float* wr = wd.data() + static_cast<size_t>(n) * K;
          double exact_q = 0, exact = 0, mag = 0, bound = 0;
          for (int k = 0; k < K; ++k) {
            const double xq = static_cast<double>(d[k / blk]) * q[k];
            exact_q += static_cast<double>(wr[k]) * xq;
            exact += static_cast<double>(wr[k]) * xr[k];
            mag += std::fabs(static_cast<double>(wr[k]) * xq);
            bound += std::fabs(static_cast<double>(wr[k])) * 0.5 * d[k / blk];
          }
          const double yv = y[static_cast<size_t>(m) * N + n];
          // f32 accumulation of exact integer block sums: a few ulps of the magnitude
          CHECK(std::fabs(yv - exact_q) <= 1e-5 * mag);
          // against f32 activations: at most half a step per element, weighted by |w|
          CHECK(std::fabs(yv - exact) <= bound * 1.001 + 1e-5 * mag);
        }
      }
    }
}

TEST_CASE("quant matmul: invariant path is bitwise the reference for every row, batch and thread count") {
  const int kBatches[] = {1, 2, 3, 7, 8, 16, 33, 64};
  const int kThreads[] = {1, 2, 4};
  constexpr int kPool = 64;
  struct Shape {
    int N, K;
  };
  // K = 256 (one K block), 768, 1280; N not a multiple of the panel or the tiles.
  const Shape shapes[] = {{53, 256}, {100, 768}, {37, 1280}};
  std::vector<ThreadPool*> pools;
  for (int t : kThreads) pools.push_back(new ThreadPool(t));
  for (bool portable : portable_modes())
  for (bool avx2_only : avx2_forced_modes(portable)) {
    ForcePortable fp(portable);
    ForceAvx2 fa(avx2_only);
    for (Format f : kQuantized)
      for (const Shape& s : shapes) {
        CAPTURE(std::string(quant::format_name(f)));
        CAPTURE(s.K);
        CAPTURE(portable);
        CAPTURE(avx2_only);
        std::vector<float> xs = random_vec(static_cast<size_t>(kPool) * s.K, 21);
        std::vector<uint8_t> wq = quantize(f, random_vec(static_cast<size_t>(s.N) * s.K, 22));
        const QuantWeight w{f, wq.data(), quant::row_bytes(f, s.K)};
        // Every pool row alone through the reference.
        std::vector<float> ref(static_cast<size_t>(kPool) * s.N);
        matmul_q_reference(xs.data(), w, ref.data(), kPool, s.N, s.K);
        for (size_t ti = 0; ti < pools.size(); ++ti)
          for (int b : kBatches) {
            // b rows drawn from the pool in a seeded order: other batch mates and positions.
            std::vector<int> idx(kPool);
            for (int i = 0; i < kPool; ++i) idx[i] = i;
            std::mt19937 rng(static_cast<uint32_t>(b * 7 + ti));
            std::shuffle(idx.begin(), idx.end(), rng);
            std::vector<float> x(static_cast<size_t>(b) * s.K), y(static_cast<size_t>(b) * s.N);
            for (int i = 0; i < b; ++i)
              std::memcpy(&x[static_cast<size_t>(i) * s.K], &xs[static_cast<size_t>(idx[i]) * s.K], s.K * 4);
            matmul_q_invariant(x.data(), w, y.data(), b, s.N, s.K, *pools[ti]);
            int differ = 0;
            for (int i = 0; i < b; ++i)
              differ += std::memcmp(&y[static_cast<size_t>(i) * s.N], &ref[static_cast<size_t>(idx[i]) * s.N],
                                    s.N * 4) != 0;
            CAPTURE(b);
            CAPTURE(kThreads[ti]);
            CHECK(differ == 0);
          }
      }
  }
  for (ThreadPool* p : pools) delete p;
}

TEST_CASE("quant matmul: default path is the reference on the integer path, close to the f32 product after") {
  const int N = 70, K = 512;
  ThreadPool pool(2);
  for (Format f : kQuantized) {
    CAPTURE(std::string(quant::format_name(f)));
    std::vector<uint8_t> wq = quantize(f, random_vec(static_cast<size_t>(N) * K, 31));
    const QuantWeight w{f, wq.data(), quant::row_bytes(f, K)};
    CHECK(quant_int_max_rows(f) == (f == Format::Q8_0 ? 64 : has_int_dot(f) ? kQuantSgemmMinRows : 0));
    for (int b : {1, 7, 33, 63, 64, 200, kQuantSgemmMinRows, kQuantSgemmMinRows + 3}) {
      std::vector<float> x = random_vec(static_cast<size_t>(b) * K, 32 + b);
      std::vector<float> y(static_cast<size_t>(b) * N), ref(y.size());
      matmul_q_default(x.data(), w, y.data(), b, N, K, pool);
      CAPTURE(b);
      if (b < quant_int_max_rows(f)) {
        matmul_q_reference(x.data(), w, ref.data(), b, N, K);
        CHECK(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0);
        continue;
      }
      // f32 activations (the reference of the other formats is this product)
      detail::matmul_q_panels_reference(x.data(), w, ref.data(), b, N, K);
      float scale = 0, err = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        scale = std::max(scale, std::fabs(ref[i]));
        err = std::max(err, std::fabs(y[i] - ref[i]));
      }
      CHECK(err <= 1e-4f * scale);
    }
  }
}
