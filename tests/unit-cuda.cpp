// ctest-labels: cuda
// The CUDA kernels on a real device: the batch-invariant kernels are bitwise equal to the CPU
// reference (memcmp, every row, batch sizes 1..256, odd shapes), the element-wise ops equal the
// shared host math, and the number of rows where the default path (cuBLAS, split-KV attention)
// differs from the same row computed at batch 1 is printed. Without a device (or in a build
// without CUDA) every case says so in one MESSAGE and passes: the CPU emulation of the same
// kernels (unit-cuda-emulation.cpp) runs everywhere.
#include <doctest/doctest.h>

#ifndef REPRO_HAVE_CUDA
TEST_CASE("cuda: built without CUDA") { MESSAGE("skipped: this build has no CUDA backend (configure with -DREPRO_CUDA=ON)"); }
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"
#include "../kernels/cuda.hpp"
#include "repro/common/quant.hpp"
#include "repro/model/synth.hpp"
#include "../kernels/matmul/cuda_dequant.hpp"
#include "../kernels/matmul_quant.hpp"
#include "test_util.hpp"
#include "../kernels/elementwise_math.hpp"
#include "../kernels/kernels.hpp"

using namespace repro::kernels;
using repro::BatchContext;
using repro::Device;
using repro::Engine;
using repro::GenRequest;
using repro::GenResult;
using repro::Mode;
using repro::Model;

namespace {

const int kBatches[] = {1, 2, 3, 7, 8, 16, 33, 64, 128, 256};

bool have_device() {
  static const cuda::DeviceInfo info = cuda::device_info();
  if (info.device_count == 0) MESSAGE("skipped: no CUDA device (", info.error, ")");
  return info.device_count > 0;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of a host vector, freed with the scope.
struct Dev {
  float* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<float>& h) : p(cuda::alloc(h.size())), n(h.size()) { cuda::upload(p, h.data(), n); }
  explicit Dev(size_t count) : p(cuda::alloc(count)), n(count) {}
  ~Dev() { cuda::free(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<float> get() const {
    std::vector<float> h(n);
    cuda::download(h.data(), p, n);
    return h;
  }
};

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("cuda: device record") {
  const cuda::DeviceInfo info = cuda::device_info();
  CHECK(info.runtime_version > 0);
  if (!have_device()) {
    // Without a device cuBLAS is never opened (CPU-only runs do not map it): the record names the
    // version the build was compiled against.
    CHECK(info.cublas_version.rfind("built against ", 0) == 0);
    return;
  }
  CHECK(info.cublas_version.find("not loaded") == std::string::npos);  // a device is present: cuBLAS loads
  MESSAGE(info.name, " cc ", info.cc_major, ".", info.cc_minor, ", ", info.sm_count, " SMs, driver ",
          info.driver_version, ", runtime ", info.runtime_version, ", cuBLAS ", info.cublas_version);
  CHECK(!info.name.empty());
}

TEST_CASE("cuda: invariant matmul == CPU reference bitwise; cuBLAS differences from batch 1 counted") {
  if (!have_device()) return;
  const int shapes[][2] = {{64, 64}, {130, 257}, {512, 1024}, {96, 4096}};
  for (const auto& sh : shapes) {
    const int N = sh[0], K = sh[1];
    const auto w = random_vec(static_cast<size_t>(N) * K, 1 + N + K);
    Dev dw(w);
    std::string counts;
    std::vector<float> alone_default;  // row 0 computed at M = 1 by cuBLAS
    for (int M : kBatches) {
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      const auto x = random_vec(static_cast<size_t>(M) * K, 7 + K);  // same seed: row 0 is the same row
      std::vector<float> ref(static_cast<size_t>(M) * N);
      matmul_reference(x.data(), w.data(), ref.data(), M, N, K);
      Dev dx(x), dy(ref.size());
      cuda::matmul_invariant(dx.p, dw.p, dy.p, M, N, K);
      CHECK(same_bits(dy.get().data(), ref.data(), ref.size()));
      cuda::matmul_default(dx.p, dw.p, dy.p, M, N, K);
      const auto def = dy.get();
      if (M == 1) alone_default.assign(def.begin(), def.begin() + N);
      const bool differs = !same_bits(def.data(), alone_default.data(), N);
      counts += " M=" + std::to_string(M) + (differs ? ":differs" : ":same");
      // cuBLAS is close to the reference (a tolerance, not bits).
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(def[i]) - ref[i]));
      CHECK(worst < 1e-3 * std::sqrt(double(K)));
    }
    MESSAGE("cuBLAS row 0 vs batch 1, N=", N, " K=", K, ":", counts);
  }
}

namespace {
// Quantized random rows of type t ([N][K] stored) and their device copy.
std::vector<uint8_t> stored_rows(repro::DType t, int N, int K, uint32_t seed) {
  const size_t rb = repro::quant::row_bytes(t, K);
  std::vector<uint8_t> out(rb * N);
  const auto f = random_vec(static_cast<size_t>(N) * K, seed, -2.0f, 2.0f);
  for (int n = 0; n < N; ++n) repro::quant::quantize_row(t, f.data() + static_cast<size_t>(n) * K, out.data() + rb * n, K);
  return out;
}
}  // namespace

TEST_CASE("cuda: stored weights (F16, BF16, block formats): invariant matmul == CPU reference bitwise, "
          "embedding rows == dequantize_row, default close") {
  if (!have_device()) return;
  using repro::DType;
  const int N = 320, K = 1024;
  cuda::MatmulScratch scratch;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(repro::dtype_name(t));
    const auto w = stored_rows(t, N, K, 17 + static_cast<uint32_t>(t));
    const size_t rb = repro::quant::row_bytes(t, K);
    void* dw = cuda::alloc_bytes(w.size());
    cuda::upload_bytes(dw, w.data(), w.size());
    const cuda::StoredWeight sw{t, static_cast<const uint8_t*>(dw), rb};
    const QuantWeight qw{t, w.data(), rb};
    std::vector<float> deq(static_cast<size_t>(N) * K);
    for (int n = 0; n < N; ++n) repro::quant::dequantize_row(t, w.data() + rb * n, deq.data() + static_cast<size_t>(n) * K, K);
    std::string counts;
    std::vector<float> alone;
    for (int M : {1, 2, 7, 33, 64, 256}) {
      CAPTURE(M);
      const auto x = random_vec(static_cast<size_t>(M) * K, 23 + K);
      Dev dx(x), dy(static_cast<size_t>(M) * N);
      REQUIRE(cuda::dq::invariant_reads(t));  // the registry row of cuda-batch-invariant
      std::vector<float> ref(static_cast<size_t>(M) * N);
      matmul_q_reference(x.data(), qw, ref.data(), M, N, K);
      cuda::matmul_invariant_stored(dx.p, sw, dy.p, M, N, K, scratch);
      CHECK(same_bits(dy.get().data(), ref.data(), ref.size()));
      cuda::matmul_default_stored(dx.p, sw, dy.p, M, N, K, scratch);
      const auto def = dy.get();
      if (M == 1) alone.assign(def.begin(), def.begin() + N);
      counts += " M=" + std::to_string(M) + (same_bits(def.data(), alone.data(), N) ? ":same" : ":differs");
      // Against the f32 product on the dequantized matrix (16-bit activations in F16/BF16: a tolerance).
      std::vector<float> f32(static_cast<size_t>(M) * N);
      matmul_reference(x.data(), deq.data(), f32.data(), M, N, K);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < f32.size(); ++i) {
        worst = std::max(worst, std::fabs(double(def[i]) - f32[i]));
        scale = std::max(scale, std::fabs(double(f32[i])));
      }
      CHECK(worst <= 2e-2 * (1 + scale));
    }
    MESSAGE(repro::dtype_name(t), " cuda-default row 0 vs batch 1:", counts);
    // Embedding rows: dequantized on the device, the CPU's bits.
    const std::vector<int> idx = {5, 0, 319, 5};
    int* didx = cuda::alloc_ints(idx.size());
    cuda::upload_ints(didx, idx.data(), idx.size());
    Dev out(idx.size() * K);
    cuda::gather_rows_stored(sw, didx, static_cast<int>(idx.size()), K, out.p);
    const auto got = out.get();
    cuda::free_ints(didx);
    for (size_t j = 0; j < idx.size(); ++j) CHECK(same_bits(&got[j * K], &deq[static_cast<size_t>(idx[j]) * K], K));
    cuda::free_bytes(dw);
  }
}

TEST_CASE("cuda: invariant RMSNorm == CPU reference bitwise") {
  if (!have_device()) return;
  for (int D : {7, 64, 260, 4096}) {
    const auto g = random_vec(D, 3 + D, 0.5f, 1.5f);
    Dev dg(g);
    for (int M : kBatches) {
      const auto x = random_vec(static_cast<size_t>(M) * D, 11 + D, -4.0f, 4.0f);
      std::vector<float> ref(x.size());
      rmsnorm_reference(x.data(), g.data(), ref.data(), M, D, 1e-5f);
      Dev dx(x), dy(x.size());
      cuda::rmsnorm_invariant(dx.p, dg.p, dy.p, M, D, 1e-5f);
      CAPTURE(D);
      CAPTURE(M);
      CHECK(same_bits(dy.get().data(), ref.data(), ref.size()));
      cuda::rmsnorm_default(dx.p, dg.p, dy.p, M, D, 1e-5f);
      const auto def = dy.get();
      for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::fabs(def[i] - ref[i]) <= 1e-4f * (1 + std::fabs(ref[i])));
    }
  }
}

TEST_CASE("cuda: invariant attention == CPU reference bitwise (prefill and decode rows, GQA); default counted") {
  if (!have_device()) return;
  const AttentionShape s{8, 2, 64, 2 * 64};
  const int max_ctx = 700;
  const auto k = random_vec(static_cast<size_t>(max_ctx) * s.kv_stride, 5, -2.0f, 2.0f);
  const auto v = random_vec(static_cast<size_t>(max_ctx) * s.kv_stride, 6);
  Dev dk(k), dv(v);
  std::string counts;
  cuda::AttentionScratch scratch;
  std::vector<float> alone;
  for (int R : kBatches) {
    // Row r attends to n_ctx = 1 + (r * 37 + 600) % max_ctx positions; row 0 always to 601.
    const size_t width = static_cast<size_t>(s.n_heads) * s.head_dim;
    const auto q = random_vec(R * width, 8, -3.0f, 3.0f);
    std::vector<float> ref(q.size());
    Dev dq(q), dout(q.size());
    std::vector<AttentionRow> hr(R), dr(R);
    for (int r = 0; r < R; ++r) {
      const int n_ctx = 1 + (r * 37 + 600) % max_ctx;
      hr[r] = {q.data() + r * width, k.data(), v.data(), n_ctx, ref.data() + r * width};
      dr[r] = {dq.p + r * width, dk.p, dv.p, n_ctx, dout.p + r * width};
    }
    attention_reference(hr.data(), R, s);
    cuda::attention_invariant(dr.data(), R, s, scratch);
    CAPTURE(R);
    CHECK(same_bits(dout.get().data(), ref.data(), ref.size()));
    cuda::attention_default(dr.data(), R, s, scratch);
    const auto def = dout.get();
    if (R == 1) alone.assign(def.begin(), def.begin() + width);
    counts += " R=" + std::to_string(R) + (same_bits(def.data(), alone.data(), width) ? ":same" : ":differs");
    for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::fabs(def[i] - ref[i]) <= 1e-4f);
  }
  MESSAGE("split-KV attention row 0 vs batch 1:", counts);
}

TEST_CASE("cuda: element-wise ops == the shared host math bitwise") {
  if (!have_device()) return;
  const size_t n = 100003;
  const auto a = random_vec(n, 1, -20.0f, 20.0f), b = random_vec(n, 2, -3.0f, 3.0f);
  {
    Dev dg(a), du(b);
    cuda::silu_mul(dg.p, du.p, n);
    const auto got = dg.get();
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = math::silu_mul(a[i], b[i]);
    CHECK(same_bits(got.data(), want.data(), n));
  }
  {
    Dev dx(a), dy(b);
    cuda::add(dx.p, dy.p, n);
    const auto got = dx.get();
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    CHECK(same_bits(got.data(), want.data(), n));
  }
  for (int kind : {1, 2}) {
    Dev dx(a);
    cuda::round_to(kind, dx.p, n);
    const auto got = dx.get();
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = math::round_storage(kind, a[i]);
    CHECK(same_bits(got.data(), want.data(), n));
  }
  {  // RoPE: 5 rows, 4 heads of 16, rope_dim 12, positions from a host table
    const int R = 5, H = 4, hd = 16, rd = 12, half = rd / 2, P = 64;
    std::vector<float> cs(P * half), sn(P * half);
    math::rope_table(10000.0f, rd, 0, P, cs.data(), sn.data());
    const auto x = random_vec(R * H * hd, 3);
    const std::vector<int> pos = {0, 1, 7, 31, 63};
    Dev dx(x), dc(cs), ds(sn);
    int* dpos = cuda::alloc_ints(R);
    cuda::upload_ints(dpos, pos.data(), R);
    cuda::rope(dx.p, dpos, R, H, hd, rd, false, dc.p, ds.p);
    const auto got = dx.get();
    cuda::free_ints(dpos);
    auto want = x;
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < half; ++i) {
          float* v = &want[(r * H + h) * hd];
          math::rope_pair(v[2 * i], v[2 * i + 1], cs[pos[r] * half + i], sn[pos[r] * half + i]);
        }
    CHECK(same_bits(got.data(), want.data(), want.size()));
  }
  {  // gather and scatter rows
    const int width = 33, rows = 10;
    const auto src = random_vec(rows * width, 4);
    const std::vector<int> idx = {9, 0, 3, 3};
    Dev ds(src), dd(idx.size() * width);
    int* didx = cuda::alloc_ints(idx.size());
    cuda::upload_ints(didx, idx.data(), idx.size());
    cuda::gather_rows(ds.p, didx, static_cast<int>(idx.size()), width, dd.p);
    const auto got = dd.get();
    cuda::free_ints(didx);
    for (size_t j = 0; j < idx.size(); ++j) CHECK(same_bits(&got[j * width], &src[idx[j] * width], width));
    Dev dst(rows * width);
    float* const targets[2] = {dst.p + 5 * width, dst.p + 2 * width};
    float** dptr = cuda::alloc_ptrs(2);
    cuda::upload_ptrs(dptr, targets, 2);
    cuda::scatter_rows(ds.p, dptr, 2, width);
    const auto sc = dst.get();
    cuda::free_ptrs(dptr);
    CHECK(same_bits(&sc[5 * width], &src[0], width));
    CHECK(same_bits(&sc[2 * width], &src[width], width));
  }
}

namespace {

GenResult decode(const Model& m, Device device, Mode mode, int batch, int pos, int max_tokens) {
  Engine e(m, {mode, 1, device});
  GenRequest r;
  r.prompt = m.tokenizer->encode("Once upon a time", true);
  r.params.max_tokens = max_tokens;
  return repro::run_in_batch(e, r, {batch, pos, 1}).probe;
}

// cuda-batch-invariant gives the same tokens, logprobs and final-logits hash as
// cpu-batch-invariant, at batch 1 and inside larger batches; cuda-default rows that differ from
// batch 1 are counted and printed.
void cross_device(const Model& m, const char* what) {
  const GenResult cpu = decode(m, Device::Cpu, Mode::BatchInvariant, 1, 0, 24);
  REQUIRE(!cpu.tokens.empty());
  for (int b : {1, 2, 7, 16, 33}) {
    const GenResult gpu = decode(m, Device::Cuda, Mode::BatchInvariant, b, b - 1, 24);
    CAPTURE(what);
    CAPTURE(b);
    CHECK(gpu.tokens == cpu.tokens);
    CHECK(gpu.logits_sha256 == cpu.logits_sha256);
    REQUIRE(gpu.logprobs.size() == cpu.logprobs.size());
    CHECK(std::memcmp(gpu.logprobs.data(), cpu.logprobs.data(), sizeof(float) * cpu.logprobs.size()) == 0);
  }
  const GenResult alone = decode(m, Device::Cuda, Mode::Default, 1, 0, 24);
  std::string counts;
  for (int b : {2, 7, 16, 33, 64}) {
    const GenResult r = decode(m, Device::Cuda, Mode::Default, b, b - 1, 24);
    counts += " b=" + std::to_string(b) + (r.logits_sha256 == alone.logits_sha256 ? ":same" : ":differs") +
              (r.tokens == alone.tokens ? "" : "(tokens)");
  }
  MESSAGE(what, ": cuda-default final logits vs batch 1:", counts);
}

}  // namespace

TEST_CASE("cuda: end to end, cuda-batch-invariant == cpu-batch-invariant (tokens, logprobs, logits hash)") {
  if (!have_device()) return;
  const auto dir = repro::test::scratch_dir("cuda-synth");
  // Every type cuda-batch-invariant reads (GQA: 4 query heads over 2 KV heads; dim and hidden are
  // multiples of 256 for the k-quants). cuda-default runs each too.
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"}) {
    repro::SynthOptions o;
    o.seed = 7;
    o.type = type;
    o.dim = 256;
    o.hidden_dim = 512;
    o.n_layers = 2;
    const std::string path = (dir / (std::string(type) + ".gguf")).string();
    repro::write_synth_model(o, path);
    cross_device(*repro::load_model(path), (std::string("synthesized GQA model, ") + type).c_str());
  }
  REPRO_REQUIRE_MODELS(models);
  cross_device(*repro::load_model((models / "stories260K.gguf").string()), "stories260K");
}

TEST_CASE("cuda: errors name the call, file and line") {
  if (!have_device()) return;
  std::string what;
  try {
    cuda::alloc(size_t(1) << 62);  // far beyond any device
  } catch (const repro::BackendError& e) {
    what = e.what();
  }
  CHECK(what.find("cudaMalloc") != std::string::npos);
  CHECK(what.find("device.cu:") != std::string::npos);
}
#endif
