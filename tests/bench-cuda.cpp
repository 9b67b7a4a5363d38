// repro-cuda-bench: the GPU benchmarks, side by side in one run (scripts/gpu-check.sh runs it).
//   1. matmul GFLOP/s, batch-invariant kernel vs cuBLAS default, M in {1, 8, 64, 256, 4096} on f32
//      weights [N][K] = 4096x4096, 14336x4096 (up) and 4096x14336 (down);
//   2. matmul GFLOP/s on weights in their stored type (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K;
//      4096x4096, M in {1, 64, 256}), batch-invariant kernel vs the default path (cublasGemmEx for
//      F16/BF16, dequantized chunks + sgemm for the block formats), each validated bitwise first;
//   3. one decode step of a synthesized ~1B-parameter Llama-shaped model (TinyLlama's shape: dim
//      2048, 22 layers, 32 heads, 4 KV heads, ffn 5632, vocab 32000; random weights made on the
//      device), every layer through the CUDA kernels of each mode, at batch {1, 16, 64, 256} with
//      256 positions of context each: tokens/s = batch / step time (the forward pass only; sampling
//      runs on the host and is the same for both modes).
// Validates first (the invariant kernel against the CPU reference on sampled rows, bitwise), then
// times (warm-up, then repeats until 0.3 s). Prints one table per part and a summary line; exit 3
// with one line when there is no device.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "../kernels/cuda.hpp"
#include "../kernels/elementwise_math.hpp"
#include "../kernels/kernels.hpp"
#include "../kernels/matmul_quant.hpp"

using namespace repro::kernels;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of fn: one warm-up call, then calls until 0.3 s (at least 3).
template <class F>
double time_per_call(F fn) {
  fn();
  cuda::synchronize();
  int n = 0;
  const double t0 = now();
  double t = t0;
  while (n < 3 || t - t0 < 0.3) {
    fn();
    ++n;
    if (n % 4 == 0 || n < 4) {
      cuda::synchronize();
      t = now();
    }
  }
  cuda::synchronize();
  return (now() - t0) / n;
}

struct DevBuf {
  float* p;
  explicit DevBuf(size_t n) : p(cuda::alloc(n)) {}
  ~DevBuf() { cuda::free(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Rows 0 and M-1 of the invariant product against matmul_reference, bitwise.
bool validate_matmul(const float* d_x, const std::vector<float>& w, const float* d_y, int M, int N, int K) {
  std::vector<float> x(K), y(N), ref(N);
  for (int m : {0, M - 1}) {
    cuda::download(x.data(), d_x + static_cast<size_t>(m) * K, K);
    cuda::download(y.data(), d_y + static_cast<size_t>(m) * N, N);
    matmul_reference(x.data(), w.data(), ref.data(), 1, N, K);
    if (std::memcmp(y.data(), ref.data(), N * sizeof(float)) != 0) return false;
  }
  return true;
}

void bench_matmul(std::string& summary) {
  std::printf("\nmatmul f32, GFLOP/s (y[M][N] = x[M][K] w[N][K]^T)\n");
  std::printf("%-12s %6s %14s %14s %8s %6s\n", "weight NxK", "M", "invariant", "cuBLAS", "ratio", "bits");
  const int shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  const int Ms[] = {1, 8, 64, 256, 4096};
  for (const auto& sh : shapes) {
    const int N = sh[0], K = sh[1];
    DevBuf w(static_cast<size_t>(N) * K), x(static_cast<size_t>(4096) * K), y(static_cast<size_t>(4096) * N);
    cuda::fill_random(w.p, static_cast<size_t>(N) * K, 1, 0.05f);
    cuda::fill_random(x.p, static_cast<size_t>(4096) * K, 2, 1.0f);
    std::vector<float> hw(static_cast<size_t>(N) * K);
    cuda::download(hw.data(), w.p, hw.size());
    for (int M : Ms) {
      cuda::matmul_invariant(x.p, w.p, y.p, M, N, K);
      const bool ok = validate_matmul(x.p, hw, y.p, M, N, K);
      const double flop = 2.0 * M * N * static_cast<double>(K);
      const double ti = time_per_call([&] { cuda::matmul_invariant(x.p, w.p, y.p, M, N, K); });
      const double td = time_per_call([&] { cuda::matmul_default(x.p, w.p, y.p, M, N, K); });
      std::printf("%5dx%-6d %6d %14.1f %14.1f %7.2fx %6s\n", N, K, M, flop / ti * 1e-9, flop / td * 1e-9, td / ti,
                  ok ? "=cpu" : "DIFF");
      if (!ok) summary += " matmul-invariant-differs-from-cpu";
    }
  }
}

// Matmul on weights in their stored type, 4096x4096: the batch-invariant kernel (validated first
// against matmul_q_reference on rows 0 and M-1, bitwise) vs the default path (cublasGemmEx for
// F16/BF16, dequantized chunks + sgemm for block formats).
void bench_matmul_stored(std::string& summary) {
  using repro::DType;
  std::printf("\nmatmul on stored weights 4096x4096, GFLOP/s\n");
  std::printf("%-6s %6s %14s %14s %8s %6s\n", "type", "M", "invariant", "default", "ratio", "bits");
  const int N = 4096, K = 4096, Ms[] = {1, 64, 256};
  std::vector<float> hw(static_cast<size_t>(N) * K), hx(static_cast<size_t>(256) * K);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : hw) v = dist(rng) * 0.05f;
  for (auto& v : hx) v = dist(rng);
  DevBuf x(hx.size()), y(static_cast<size_t>(256) * N);
  cuda::upload(x.p, hx.data(), hx.size());
  cuda::MatmulScratch scratch;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const size_t rb = repro::quant::row_bytes(t, K);
    std::vector<uint8_t> w(rb * N);
    for (int n = 0; n < N; ++n) repro::quant::quantize_row(t, hw.data() + static_cast<size_t>(n) * K, w.data() + rb * n, K);
    void* dw = cuda::alloc_bytes(w.size());
    cuda::upload_bytes(dw, w.data(), w.size());
    const cuda::StoredWeight sw{t, static_cast<const uint8_t*>(dw), rb};
    const QuantWeight qw{t, w.data(), rb};
    for (int M : Ms) {
      cuda::matmul_invariant_stored(x.p, sw, y.p, M, N, K, scratch);
      bool ok = true;
      std::vector<float> got(N), ref(N);
      for (int m : {0, M - 1}) {
        cuda::download(got.data(), y.p + static_cast<size_t>(m) * N, N);
        matmul_q_reference(hx.data() + static_cast<size_t>(m) * K, qw, ref.data(), 1, N, K);
        ok = ok && std::memcmp(got.data(), ref.data(), N * sizeof(float)) == 0;
      }
      const double flop = 2.0 * M * N * static_cast<double>(K);
      const double ti = time_per_call([&] { cuda::matmul_invariant_stored(x.p, sw, y.p, M, N, K, scratch); });
      const double td = time_per_call([&] { cuda::matmul_default_stored(x.p, sw, y.p, M, N, K, scratch); });
      std::printf("%-6s %6d %14.1f %14.1f %7.2fx %6s\n", repro::dtype_name(t), M, flop / ti * 1e-9, flop / td * 1e-9,
                  td / ti, ok ? "=cpu" : "DIFF");
      if (!ok) summary += std::string(" ") + repro::dtype_name(t) + "-invariant-differs-from-cpu";
    }
    cuda::free_bytes(dw);
  }
}

// ---- one decode step of a Llama-shaped model through the kernels of one mode ----
struct ModelShape {
  int dim = 2048, layers = 22, heads = 32, kv_heads = 4, ffn = 5632, vocab = 32000, ctx = 256;
  int head_dim() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
};

struct Layer {
  float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
};

struct Model {
  ModelShape s;
  std::vector<Layer> layers;
  float *out_norm = nullptr, *lm_head = nullptr;
  std::vector<float*> all;
  float* make(size_t n, uint32_t seed, float scale) {
    float* p = cuda::alloc(n);
    cuda::fill_random(p, n, seed, scale);
    all.push_back(p);
    return p;
  }
  explicit Model(const ModelShape& shape) : s(shape) {
    uint32_t seed = 100;
    const float ws = 1.0f / std::sqrt(static_cast<float>(s.dim));
    for (int l = 0; l < s.layers; ++l) {
      Layer L{};
      L.attn_norm = make(s.dim, seed++, 1.0f);
      L.wq = make(static_cast<size_t>(s.dim) * s.dim, seed++, ws);
      L.wk = make(static_cast<size_t>(s.kv_dim()) * s.dim, seed++, ws);
      L.wv = make(static_cast<size_t>(s.kv_dim()) * s.dim, seed++, ws);
      L.wo = make(static_cast<size_t>(s.dim) * s.dim, seed++, ws);
      L.ffn_norm = make(s.dim, seed++, 1.0f);
      L.w_gate = make(static_cast<size_t>(s.ffn) * s.dim, seed++, ws);
      L.w_up = make(static_cast<size_t>(s.ffn) * s.dim, seed++, ws);
      L.w_down = make(static_cast<size_t>(s.dim) * s.ffn, seed++, 1.0f / std::sqrt(static_cast<float>(s.ffn)));
      layers.push_back(L);
    }
    out_norm = make(s.dim, seed++, 1.0f);
    lm_head = make(static_cast<size_t>(s.vocab) * s.dim, seed++, ws);
  }
  ~Model() {
    for (float* p : all) cuda::free(p);
  }
  size_t params() const {
    const size_t per = 2 * static_cast<size_t>(s.dim) * s.dim + 2 * static_cast<size_t>(s.kv_dim()) * s.dim +
                       3 * static_cast<size_t>(s.ffn) * s.dim + 2 * s.dim;
    return per * s.layers + static_cast<size_t>(s.vocab) * s.dim + s.dim;
  }
};

// Activations and KV caches for a batch of B sequences, each with ctx positions (the new token at
// position ctx - 1).
struct Step {
  const Model& m;
  int B;
  bool invariant;
  DevBuf x, xn, q, k, v, att, tmp, gate, up, logits, kcache, vcache, rcos, rsin;
  int* pos;
  float** kdst;
  float** vdst;
  std::vector<AttentionRow> rows;
  cuda::AttentionScratch att_scratch;
  Step(const Model& model, int batch, bool inv)
      : m(model), B(batch), invariant(inv), x(size_t(B) * m.s.dim), xn(size_t(B) * m.s.dim), q(size_t(B) * m.s.dim),
        k(size_t(B) * m.s.kv_dim()), v(size_t(B) * m.s.kv_dim()), att(size_t(B) * m.s.dim), tmp(size_t(B) * m.s.dim),
        gate(size_t(B) * m.s.ffn), up(size_t(B) * m.s.ffn), logits(size_t(B) * m.s.vocab),
        kcache(size_t(m.s.layers) * B * m.s.ctx * m.s.kv_dim()), vcache(size_t(m.s.layers) * B * m.s.ctx * m.s.kv_dim()),
        rcos(size_t(m.s.ctx) * m.s.head_dim() / 2), rsin(size_t(m.s.ctx) * m.s.head_dim() / 2) {
    const ModelShape& s = m.s;
    cuda::fill_random(x.p, size_t(B) * s.dim, 7, 1.0f);
    cuda::fill_random(kcache.p, size_t(s.layers) * B * s.ctx * s.kv_dim(), 8, 1.0f);
    cuda::fill_random(vcache.p, size_t(s.layers) * B * s.ctx * s.kv_dim(), 9, 1.0f);
    std::vector<float> cs(size_t(s.ctx) * s.head_dim() / 2), sn(cs.size());
    math::rope_table(10000.0f, s.head_dim(), 0, s.ctx, cs.data(), sn.data());
    cuda::upload(rcos.p, cs.data(), cs.size());
    cuda::upload(rsin.p, sn.data(), sn.size());
    std::vector<int> hp(B, s.ctx - 1);
    pos = cuda::alloc_ints(B);
    cuda::upload_ints(pos, hp.data(), B);
    // Where each layer writes each sequence's new position (position ctx - 1), made once.
    kdst = cuda::alloc_ptrs(size_t(s.layers) * B);
    vdst = cuda::alloc_ptrs(size_t(s.layers) * B);
    std::vector<float*> kd(size_t(s.layers) * B), vd(kd.size());
    for (int l = 0; l < s.layers; ++l)
      for (int b = 0; b < B; ++b) {
        const size_t at = (size_t(l) * B * s.ctx + size_t(b) * s.ctx + (s.ctx - 1)) * s.kv_dim();
        kd[size_t(l) * B + b] = kcache.p + at;
        vd[size_t(l) * B + b] = vcache.p + at;
      }
    cuda::upload_ptrs(kdst, kd.data(), kd.size());
    cuda::upload_ptrs(vdst, vd.data(), vd.size());
    rows.resize(B);
  }
  ~Step() {
    cuda::free_ints(pos);
    cuda::free_ptrs(kdst);
    cuda::free_ptrs(vdst);
  }
  void matmul(const float* in, const float* w, float* out, int N, int K) {
    if (invariant) cuda::matmul_invariant(in, w, out, B, N, K);
    else cuda::matmul_default(in, w, out, B, N, K);
  }
  void norm(const float* in, const float* g, float* out) {
    if (invariant) cuda::rmsnorm_invariant(in, g, out, B, m.s.dim, 1e-5f);
    else cuda::rmsnorm_default(in, g, out, B, m.s.dim, 1e-5f);
  }
  void run() {
    const ModelShape& s = m.s;
    const AttentionShape as{s.heads, s.kv_heads, s.head_dim(), s.kv_dim()};
    for (int l = 0; l < s.layers; ++l) {
      const Layer& L = m.layers[l];
      float* kc = kcache.p + size_t(l) * B * s.ctx * s.kv_dim();
      float* vc = vcache.p + size_t(l) * B * s.ctx * s.kv_dim();
      norm(x.p, L.attn_norm, xn.p);
      matmul(xn.p, L.wq, q.p, s.dim, s.dim);
      matmul(xn.p, L.wk, k.p, s.kv_dim(), s.dim);
      matmul(xn.p, L.wv, v.p, s.kv_dim(), s.dim);
      cuda::rope(q.p, pos, B, s.heads, s.head_dim(), s.head_dim(), false, rcos.p, rsin.p);
      cuda::rope(k.p, pos, B, s.kv_heads, s.head_dim(), s.head_dim(), false, rcos.p, rsin.p);
      cuda::scatter_rows(k.p, kdst + size_t(l) * B, B, s.kv_dim());  // KV cache written before attention
      cuda::scatter_rows(v.p, vdst + size_t(l) * B, B, s.kv_dim());
      for (int b = 0; b < B; ++b)
        rows[b] = {q.p + size_t(b) * s.dim, kc + size_t(b) * s.ctx * s.kv_dim(), vc + size_t(b) * s.ctx * s.kv_dim(),
                   s.ctx, att.p + size_t(b) * s.dim};
      if (invariant) cuda::attention_invariant(rows.data(), B, as, att_scratch);
      else cuda::attention_default(rows.data(), B, as, att_scratch);
      matmul(att.p, L.wo, tmp.p, s.dim, s.dim);
      cuda::add(x.p, tmp.p, size_t(B) * s.dim);
      norm(x.p, L.ffn_norm, xn.p);
      matmul(xn.p, L.w_gate, gate.p, s.ffn, s.dim);
      matmul(xn.p, L.w_up, up.p, s.ffn, s.dim);
      cuda::silu_mul(gate.p, up.p, size_t(B) * s.ffn);
      matmul(gate.p, L.w_down, tmp.p, s.dim, s.ffn);
      cuda::add(x.p, tmp.p, size_t(B) * s.dim);
    }
    norm(x.p, m.out_norm, xn.p);
    matmul(xn.p, m.lm_head, logits.p, s.vocab, s.dim);
  }
};

void bench_decode(std::string& summary) {
  const ModelShape shape;
  const Model model(shape);
  std::printf("\ndecode step, synthesized %.2fB-parameter f32 model (dim %d, %d layers, %d/%d heads, ffn %d, "
              "vocab %d), %d positions of context\n",
              model.params() * 1e-9, shape.dim, shape.layers, shape.heads, shape.kv_heads, shape.ffn, shape.vocab,
              shape.ctx);
  std::printf("%6s %16s %16s %8s\n", "batch", "invariant tok/s", "default tok/s", "ratio");
  for (int B : {1, 16, 64, 256}) {
    double tps[2];
    for (int inv = 0; inv < 2; ++inv) {
      Step st(model, B, inv == 1);
      const double t = time_per_call([&] { st.run(); });
      tps[inv] = B / t;
    }
    std::printf("%6d %16.1f %16.1f %7.2fx\n", B, tps[1], tps[0], tps[1] / tps[0]);
    if (B == 64) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " decode@64 invariant/default=%.2fx (goal >= 0.90x)", tps[1] / tps[0]);
      summary += buf;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool matmul_only = argc > 1 && std::string(argv[1]) == "--matmul-only";
  try {
    const cuda::DeviceInfo info = cuda::device_info();
    if (info.device_count == 0) {
      std::fprintf(stderr, "error: no CUDA device (%s): run repro-cuda-bench on a machine with an NVIDIA GPU\n",
                   info.error.c_str());
      return repro::kExitBackend;
    }
    std::printf("%s, compute capability %d.%d, %d SMs; driver %d, runtime %d, cuBLAS %s\n", info.name.c_str(),
                info.cc_major, info.cc_minor, info.sm_count, info.driver_version, info.runtime_version,
                info.cublas_version.c_str());
    std::string summary;
    bench_matmul(summary);
    bench_matmul_stored(summary);
    if (!matmul_only) bench_decode(summary);
    std::printf("\nsummary:%s\n", summary.empty() ? " ok" : summary.c_str());
    return summary.find("differs") == std::string::npos ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return repro::kExitBackend;
  }
}
