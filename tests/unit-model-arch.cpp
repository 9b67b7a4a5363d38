// ctest-labels: unit
// Architectures llama, qwen2 and qwen3 end to end on synthesized models (`model synth --arch`):
// the file loads with each architecture's keys and tensors, the forward pass equals a plain scalar
// reading of the architecture written here (normal vs neox RoPE, Q/K/V biases, per-head Q/K
// RMSNorm, wider heads, RoPE frequency factors), each feature changes the output (so none is
// silently skipped), batch-invariant mode is bitwise invariant for every architecture, and files
// with a missing tensor, an unknown architecture or unsupported RoPE scaling are refused by name.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/engine/forward.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

SynthOptions arch_opts(const std::string& arch, const std::string& type = "f32") {
  SynthOptions o;
  o.arch = arch;
  o.seed = 5;
  o.dim = 64;
  o.hidden_dim = 96;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 400;
  o.context_length = 128;
  o.type = type;
  return o;
}

std::unique_ptr<Model> synth_load(const SynthOptions& o, const std::string& name) {
  auto dir = test::scratch_dir("model-arch-" + name);
  const std::string path = (dir / "m.gguf").string();
  write_synth_model(o, path);
  return load_model(path);
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}

// ---- a plain scalar reading of the architectures (f32 weights), independent of the op tables ----
std::vector<float> matvec(const Tensor& w, const std::vector<float>& x) {
  const float* W = w.f32();
  std::vector<float> y(static_cast<size_t>(w.rows));
  for (int o = 0; o < w.rows; ++o) {
    double s = 0;
    for (int i = 0; i < w.cols; ++i) s += static_cast<double>(W[static_cast<size_t>(o) * w.cols + i]) * x[i];
    y[o] = static_cast<float>(s);
  }
  return y;
}
void rmsnorm_span(float* x, int n, const float* g, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * scale * g[i]);
}

// Logits of every position of `tokens` (one sequence from position 0).
std::vector<std::vector<float>> reference_logits(const Model& m, const std::vector<int>& tokens) {
  const ModelConfig& c = m.config;
  const int dim = c.dim, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads, T = static_cast<int>(tokens.size());
  const int half = c.rope_dim / 2;
  std::vector<std::vector<std::vector<float>>> K(c.n_layers), V(c.n_layers);
  std::vector<std::vector<float>> out;
  auto rope = [&](std::vector<float>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.rope_dim);
        if (!m.rope_freqs.empty()) freq /= m.rope_freqs[i];
        const double a = pos * c.rope_freq_scale * freq;
        float& x0 = v[static_cast<size_t>(h) * hd + (c.rope_neox ? i : 2 * i)];
        float& x1 = v[static_cast<size_t>(h) * hd + (c.rope_neox ? i + half : 2 * i + 1)];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = static_cast<float>(r0);
        x1 = static_cast<float>(r1);
      }
  };
  for (int t = 0; t < T; ++t) {
    std::vector<float> x(m.token_embd.f32() + static_cast<size_t>(tokens[t]) * dim,
                         m.token_embd.f32() + static_cast<size_t>(tokens[t] + 1) * dim);
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& w = m.layers[l];
      std::vector<float> xn = x;
      rmsnorm_span(xn.data(), dim, w.attn_norm.f32(), c.rms_eps);
      std::vector<float> q = matvec(w.wq, xn), k = matvec(w.wk, xn), v = matvec(w.wv, xn);
      if (!w.bq.empty())
        for (size_t i = 0; i < q.size(); ++i) q[i] += w.bq.f32()[i];
      if (!w.bk.empty())
        for (size_t i = 0; i < k.size(); ++i) k[i] += w.bk.f32()[i];
      if (!w.bv.empty())
        for (size_t i = 0; i < v.size(); ++i) v[i] += w.bv.f32()[i];
      if (!w.q_norm.empty()) {
        for (int h = 0; h < nh; ++h) rmsnorm_span(q.data() + h * hd, hd, w.q_norm.f32(), c.rms_eps);
        for (int h = 0; h < nkv; ++h) rmsnorm_span(k.data() + h * hd, hd, w.k_norm.f32(), c.rms_eps);
      }
      rope(q, nh, t);
      rope(k, nkv, t);
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<float> att(static_cast<size_t>(nh) * hd, 0.0f);
      for (int h = 0; h < nh; ++h) {
        const int kh = h / (nh / nkv);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int p = 0; p <= t; ++p) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += static_cast<double>(q[h * hd + i]) * K[l][p][kh * hd + i];
          s[p] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int p = 0; p <= t; ++p)
          for (int i = 0; i < hd; ++i) att[h * hd + i] += static_cast<float>(s[p] / sum * V[l][p][kh * hd + i]);
      }
      const std::vector<float> o = matvec(w.wo, att);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      xn = x;
      rmsnorm_span(xn.data(), dim, w.ffn_norm.f32(), c.rms_eps);
      std::vector<float> g = matvec(w.w_gate, xn), u = matvec(w.w_up, xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(g[i] / (1.0 + std::exp(-g[i])) * u[i]);
      const std::vector<float> d = matvec(w.w_down, g);
      for (int i = 0; i < dim; ++i) x[i] += d[i];
    }
    rmsnorm_span(x.data(), dim, m.output_norm.f32(), c.rms_eps);
    out.push_back(matvec(m.classifier(), x));
  }
  return out;
}

// The engine's logits for every position of `tokens` (one prefill step).
std::vector<std::vector<float>> engine_logits(const Model& m, const std::vector<int>& tokens, Mode mode) {
  EngineOptions eo;
  eo.mode = mode;
  Forward fwd(m, eo);
  const int slot = fwd.acquire_slot(static_cast<int>(tokens.size()));
  std::vector<TokenRow> rows;
  for (size_t t = 0; t < tokens.size(); ++t) rows.push_back({slot, tokens[t], static_cast<int>(t), true});
  const float* lg = fwd.run(rows);
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < tokens.size(); ++t)
    out.emplace_back(lg + t * m.config.vocab_size, lg + (t + 1) * m.config.vocab_size);
  fwd.release_slot(slot);
  return out;
}

float max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float d = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) d = std::max(d, std::fabs(a[t][i] - b[t][i]));
  return d;
}

const std::vector<int> kTokens = {1, 70, 200, 33, 301, 150, 9};

}  // namespace

TEST_CASE("synth --arch: each architecture's keys and tensors load; the config says which features run") {
  auto llama = synth_load(arch_opts("llama"), "keys-llama");
  CHECK(llama->config.arch == "llama");
  CHECK_FALSE(llama->config.rope_neox);
  CHECK(llama->layers[0].bq.empty());
  CHECK(llama->layers[0].q_norm.empty());

  auto qwen2 = synth_load(arch_opts("qwen2"), "keys-qwen2");
  CHECK(qwen2->config.arch == "qwen2");
  CHECK(qwen2->config.rope_neox);
  CHECK(qwen2->config.rope_theta == 1000000.0f);
  CHECK(qwen2->config.rms_eps == doctest::Approx(1e-6));
  REQUIRE_FALSE(qwen2->layers[1].bq.empty());
  CHECK(qwen2->layers[1].bq.cols == 64);
  CHECK(qwen2->layers[1].bk.cols == 32);
  CHECK(qwen2->layers[1].bv.cols == 32);
  CHECK(qwen2->layers[0].q_norm.empty());

  SynthOptions o3 = arch_opts("qwen3");
  o3.head_dim = 32;  // heads wider than dim / n_heads: Q is [4 * 32][64]
  auto qwen3 = synth_load(o3, "keys-qwen3");
  CHECK(qwen3->config.arch == "qwen3");
  CHECK(qwen3->config.rope_neox);
  CHECK(qwen3->config.head_dim() == 32);
  CHECK(qwen3->config.q_dim() == 128);
  CHECK(qwen3->layers[0].wq.rows == 128);
  CHECK(qwen3->layers[0].wo.cols == 128);
  REQUIRE_FALSE(qwen3->layers[0].q_norm.empty());
  CHECK(qwen3->layers[0].k_norm.cols == 32);
  CHECK(qwen3->layers[0].bq.empty());
  // 2 + per layer 9 + qwen3's 2 head norms, all F32 here.
  CHECK(qwen3->tensor_types.at("F32") == 2 + 2 * 11);

  SynthOptions o1 = arch_opts("llama");
  o1.rope_freqs = true;
  auto l31 = synth_load(o1, "keys-llama31");
  REQUIRE(l31->rope_freqs.size() == 8);
  CHECK(l31->rope_freqs[0] == 1.0f);
  CHECK(l31->rope_freqs[7] > 6.0f);
}

TEST_CASE("forward pass = a plain scalar reading of each architecture (RoPE pairs, biases, head norms)") {
  struct Case {
    const char* name;
    SynthOptions o;
  };
  std::vector<Case> cases = {{"llama", arch_opts("llama")}, {"qwen2", arch_opts("qwen2")}, {"qwen3", arch_opts("qwen3")}};
  cases.push_back({"qwen3-wide", arch_opts("qwen3")});
  cases.back().o.head_dim = 32;
  cases.push_back({"llama-rope-freqs", arch_opts("llama")});
  cases.back().o.rope_freqs = true;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto m = synth_load(c.o, std::string("ref-") + c.name);
    const auto ref = reference_logits(*m, kTokens);
    for (Mode mode : {Mode::BatchInvariant, Mode::Default}) {
      const float d = max_diff(engine_logits(*m, kTokens, mode), ref);
      CAPTURE(d);
      CHECK(d < 2e-4f);
    }
  }
}

TEST_CASE("each architecture feature changes the logits: none is silently skipped") {
  auto base = [](const Model& m) { return engine_logits(m, kTokens, Mode::BatchInvariant); };
  auto qwen2 = synth_load(arch_opts("qwen2"), "feat-qwen2");
  const auto with_all = base(*qwen2);
  qwen2->config.rope_neox = false;  // the same weights with llama's RoPE pairs
  CHECK(max_diff(base(*qwen2), with_all) > 1e-3f);
  qwen2->config.rope_neox = true;
  CHECK(max_diff(base(*qwen2), with_all) == 0.0f);
  for (auto& l : qwen2->layers) l.bq = l.bk = l.bv = Tensor{};  // drop the biases
  CHECK(max_diff(base(*qwen2), with_all) > 1e-3f);

  auto qwen3 = synth_load(arch_opts("qwen3"), "feat-qwen3");
  const auto q3 = base(*qwen3);
  for (auto& l : qwen3->layers) l.q_norm = l.k_norm = Tensor{};  // drop the head norms
  CHECK(max_diff(base(*qwen3), q3) > 1e-3f);

  SynthOptions o = arch_opts("llama");
  o.rope_freqs = true;
  auto l31 = synth_load(o, "feat-llama31");
  const auto with_ff = base(*l31);
  l31->rope_freqs.clear();
  CHECK(max_diff(base(*l31), with_ff) > 1e-4f);
}

TEST_CASE("batch-invariant mode is bitwise invariant for qwen2 and qwen3: batch size, position, mates, threads") {
  for (const char* arch : {"qwen2", "qwen3"})
    for (const char* type : {"f32", "q8_0"})
      for (Precision prec : {Precision::F32, Precision::BF16}) {
        CAPTURE(arch);
        CAPTURE(type);
        CAPTURE(static_cast<int>(prec));
        SynthOptions o = arch_opts(arch, type);
        if (std::string(arch) == "qwen3") o.head_dim = 32;
        auto m = synth_load(o, std::string("inv-") + arch + "-" + type);
        GenRequest req;
        req.prompt = m->tokenizer->encode("Once upon a time", true);
        req.params.max_tokens = 8;
        req.params.stop_at_eos = false;
        Engine e1(*m, {Mode::BatchInvariant, 1, Device::Cpu, prec});
        Engine e2(*m, {Mode::BatchInvariant, 2, Device::Cpu, prec});
        const GenResult alone = run_in_batch(e1, req, {1, 0, 0}).probe;
        REQUIRE(alone.tokens.size() == 8);
        for (int b : {2, 5, 16})
          for (int pos : {0, b - 1}) {
            CAPTURE(b);
            CAPTURE(pos);
            CHECK(same_bits(run_in_batch(e1, req, {b, pos, 1}).probe, alone));
            CHECK(same_bits(run_in_batch(e2, req, {b, pos, 2}).probe, alone));
          }
        Engine def(*m, {Mode::Default, 2, Device::Cpu, prec});
        CHECK(run_in_batch(def, req, {4, 1, 1}).probe.tokens.size() == 8);
      }
}

namespace {

// A synthesized file rewritten: metadata edited by `edit`, keys and tensors named in skip left out.
std::string edited(const SynthOptions& o, const std::function<void(gguf::Writer&)>& edit,
                   const std::vector<std::string>& skip) {
  const std::string bytes = synth_model(o);
  gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "synth");
  auto skipped = [&](const std::string& n) { return std::find(skip.begin(), skip.end(), n) != skip.end(); };
  gguf::Writer w;
  for (const auto& [k, v] : f.kv)
    if (!skipped(k)) w.add(k, v);
  edit(w);
  for (const auto& t : f.tensors)
    if (!skipped(t.name))
      w.add_tensor(t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), t.n_bytes));
  return w.serialize();
}

std::string load_error(const std::string& bytes) {
  auto dir = test::scratch_dir("model-arch-edit");
  auto path = (dir / "m.gguf").string();
  write_file_atomic(path, bytes);
  try {
    load_model(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("architectures: a missing tensor or key, an unknown architecture or RoPE scaling exit 2 naming it") {
  auto none = [](gguf::Writer&) {};
  CHECK(load_error(edited(arch_opts("qwen2"), none, {})) == "no error");
  CHECK(load_error(edited(arch_opts("qwen2"), none, {"blk.1.attn_k.bias"}))
            .find("tensor 'blk.1.attn_k.bias' is missing; architecture qwen2 needs") != std::string::npos);
  CHECK(load_error(edited(arch_opts("qwen3"), none, {"blk.0.attn_q_norm.weight"}))
            .find("tensor 'blk.0.attn_q_norm.weight' is missing; architecture qwen3 needs token_embd, output_norm "
                  "and blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up, "
                  "attn_q_norm, attn_k_norm}") != std::string::npos);
  CHECK(load_error(edited(arch_opts("qwen2"), none, {"qwen2.block_count"}))
            .find("missing metadata key 'qwen2.block_count', which architecture qwen2 needs") != std::string::npos);
  const std::string unknown = load_error(edited(
      arch_opts("qwen2"), [](gguf::Writer& w) { w.add("general.architecture", gguf::Value::string("phi3")); },
      {"general.architecture"}));
  CHECK(unknown.find("architecture 'phi3' is not supported; supported: llama (") != std::string::npos);
  CHECK(unknown.find("qwen2 (Qwen2, Qwen2.5); qwen3 (Qwen3 dense)") != std::string::npos);
  CHECK(load_error(edited(
                       arch_opts("llama"),
                       [](gguf::Writer& w) { w.add("llama.rope.scaling.type", gguf::Value::string("yarn")); }, {}))
            .find("RoPE scaling 'yarn' ('llama.rope.scaling.type') is not supported") != std::string::npos);
  // A tensor the architecture does not use is named, not ignored (here a mixture-of-experts tensor).
  CHECK(load_error(edited(
                       arch_opts("llama"),
                       [](gguf::Writer& w) {
                         w.add_f32("blk.0.ffn_gate_exps.weight", {4}, std::vector<float>(4, 1.0f));
                       },
                       {}))
            .find("tensor 'blk.0.ffn_gate_exps.weight' is not part of architecture llama") != std::string::npos);
  // Linear RoPE scaling divides positions by the factor.
  SynthOptions lin = arch_opts("llama");
  auto dir = test::scratch_dir("model-arch-linear");
  write_file_atomic((dir / "m.gguf").string(),
                    edited(lin, [](gguf::Writer& w) {
                      w.add("llama.rope.scaling.type", gguf::Value::string("linear"));
                      w.add("llama.rope.scaling.factor", gguf::Value::real(gguf::ValueType::FLOAT32, 4.0));
                    }, {}));
  auto m = load_model((dir / "m.gguf").string());
  CHECK(m->config.rope_freq_scale == 0.25f);
  CHECK(max_diff(engine_logits(*m, kTokens, Mode::BatchInvariant), reference_logits(*m, kTokens)) < 2e-4f);
}

TEST_CASE("synth --arch: unknown names and inconsistent head sizes name the flag") {
  SynthOptions o = arch_opts("gemma");
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--arch 'gemma' is not supported; supported: llama, qwen2, qwen3"),
                       UsageError);
  o = arch_opts("qwen3");
  o.head_dim = 7;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--head-dim 7 must be even"), UsageError);
  o = arch_opts("qwen2");
  o.rope_freqs = true;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--rope-freqs is a Llama 3 feature"), UsageError);
  // Same options, same bytes; the architecture changes them.
  CHECK(synth_model(arch_opts("qwen3")) == synth_model(arch_opts("qwen3")));
  CHECK(synth_model(arch_opts("qwen3")) != synth_model(arch_opts("qwen2")));
}
