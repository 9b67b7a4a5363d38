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
#include "reference_forward.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
using namespace repro::test;

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
