// ctest-labels: unit
// Quantized models end to end: `model synth --type` writes every block type with the project's own
// quantizer (the GGUF holds the type, the bytes are the quantizer's), the model loads, greedy
// decoding runs, and batch-invariant mode gives the same bits alone and in a batch.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

SynthOptions small(const std::string& type) {
  SynthOptions o;
  o.seed = 3;
  o.dim = 256;
  o.hidden_dim = 512;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 400;
  o.context_length = 128;
  o.type = type;
  return o;
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}

}  // namespace

TEST_CASE("synth --type: every block type is written with the own quantizer and round-trips") {
  const std::pair<const char*, gguf::TensorType> types[] = {
      {"f16", gguf::TensorType::F16},   {"bf16", gguf::TensorType::BF16}, {"q8_0", gguf::TensorType::Q8_0},
      {"q4_0", gguf::TensorType::Q4_0}, {"q4_k", gguf::TensorType::Q4_K}, {"q5_k", gguf::TensorType::Q5_K},
      {"q6_k", gguf::TensorType::Q6_K}};
  const std::string f32 = synth_model(small("f32"));
  const gguf::File ff = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(f32.data()), f32.size(), "f32");
  for (const auto& [name, type] : types) {
    CAPTURE(name);
    const std::string bytes = synth_model(small(name));
    CHECK(bytes == synth_model(small(name)));  // deterministic
    const gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
    const gguf::TensorInfo* t = f.tensor("blk.1.ffn_down.weight");
    REQUIRE(t != nullptr);
    CHECK(t->type == type);
    CHECK(f.tensor("blk.0.attn_norm.weight")->type == gguf::TensorType::F32);
    // The stored bytes are exactly the quantizer's output for the f32 model's values, row by row.
    quant::Format qf;
    REQUIRE(gguf::to_quant_format(type, qf));
    const gguf::TensorInfo* tf = ff.tensor("blk.1.ffn_down.weight");
    const int64_t in = static_cast<int64_t>(t->ne[0]);
    std::vector<uint8_t> want(quant::row_bytes(qf, in));
    for (uint64_t r = 0; r < t->ne[1]; ++r) {
      quant::quantize_row(qf, reinterpret_cast<const float*>(ff.data(*tf)) + r * in, want.data(), in);
      REQUIRE(std::memcmp(f.data(*t) + r * want.size(), want.data(), want.size()) == 0);
    }
  }
}

TEST_CASE("synth --type: rows must be whole blocks; unknown types list the supported ones") {
  SynthOptions o = small("q4_k");
  o.dim = 128;
  CHECK_THROWS_WITH_AS(synth_model(o),
                       "--type q4_k stores rows in blocks of 256 elements: --dim (128) and --hidden (512) must be "
                       "multiples of 256",
                       UsageError);
  CHECK_THROWS_WITH_AS(synth_model(small("q3_k")),
                       "--type 'q3_k' is not supported; supported: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m",
                       UsageError);
  auto dir = test::scratch_dir("model-quant-cli");
  auto r = test::run_cli("model synth --out " + (dir / "x.gguf").string() + " --type q4_k --dim 128");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --type q4_k stores rows in blocks of 256 elements") != std::string::npos);
  auto ok = test::run_cli("model synth --out " + (dir / "q.gguf").string() +
                          " --seed 3 --dim 256 --hidden 512 --layers 2 --heads 4 --kv-heads 2 --vocab 400 --context 128"
                          " --type q5_k");
  CHECK(ok.code == 0);
  CHECK(sha256_file((dir / "q.gguf").string()) == sha256_hex(synth_model(small("q5_k"))));
}

TEST_CASE("synth --type q4_k_m: Q4_K with Q6_K where llama-quantize widens Q4_K_M, file type 15") {
  // 8 layers: the first and last eighth are layers 0 and 7, every third between them layers 3 and 6.
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    SynthOptions o = small("q4_k_m");
    o.n_layers = 8;
    o.tied = tied;
    const std::string bytes = synth_model(o);
    const gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "q4_k_m");
    int64_t ft = 0;
    REQUIRE(f.find("general.file_type") != nullptr);
    REQUIRE(f.find("general.file_type")->get_int(ft));
    CHECK(ft == 15);
    using T = gguf::TensorType;
    CHECK(f.tensor("token_embd.weight")->type == (tied ? T::Q6_K : T::Q4_K));
    if (!tied) CHECK(f.tensor("output.weight")->type == T::Q6_K);
    for (int l = 0; l < 8; ++l) {
      CAPTURE(l);
      const std::string p = "blk." + std::to_string(l) + ".";
      const T wide = l == 0 || l == 3 || l == 6 || l == 7 ? T::Q6_K : T::Q4_K;
      CHECK(f.tensor(p + "attn_v.weight")->type == wide);
      CHECK(f.tensor(p + "ffn_down.weight")->type == wide);
      for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"})
        CHECK(f.tensor(p + n)->type == T::Q4_K);
      CHECK(f.tensor(p + "attn_norm.weight")->type == T::F32);
    }
  }
}

TEST_CASE("quantized models: load, greedy decoding, batch-invariant bits alone and in a batch") {
  auto dir = test::scratch_dir("model-quant-engine");
  for (const char* type : {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "bf16"}) {
    CAPTURE(type);
    const std::string path = (dir / (std::string(type) + ".gguf")).string();
    write_synth_model(small(type), path);
    auto m = load_model(path);
    Engine engine(*m, {Mode::BatchInvariant, 2});
    GenRequest req;
    req.prompt = m->tokenizer->encode("Once upon a time", true);
    req.params.max_tokens = 8;
    req.params.stop_at_eos = false;
    GenResult alone = run_in_batch(engine, req, {1, 0, 0}).probe;
    REQUIRE(alone.tokens.size() == 8);
    for (int id : alone.tokens) CHECK((id >= 0 && id < 400));
    for (int b : {3, 8}) {
      CAPTURE(b);
      CHECK(same_bits(run_in_batch(engine, req, {b, b / 2, 1}).probe, alone));
    }
    Engine def(*m, {Mode::Default, 2});
    CHECK(run_in_batch(def, req, {1, 0, 0}).probe.tokens.size() == 8);
  }
}
