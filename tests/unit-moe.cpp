// ctest-labels: unit
// Mixtures of experts end to end on small synthesized files (`model synth --experts`): llama with
// experts (Mixtral), qwen2moe (shared expert with a sigmoid gate) and qwen3moe load with llama.cpp's
// keys and tensors and generate in every mode; the forward pass equals a plain-loop reading of each
// architecture written here (softmax, top-k, normalisation, shared expert); batch-invariant mode is
// bitwise invariant across batch sizes 1..64, positions and thread counts; routing breaks ties
// towards the lower expert index; and the bad inputs (expert_used_count > expert_count, a missing
// expert tensor, an unknown gating function) are one-line errors naming the key (exit 2).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "repro/audit/batch_context.hpp"
#include "repro/bench/perf_model.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/engine/forward.hpp"
#include "repro/engine/moe.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/synth.hpp"
#include "reference_forward.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
using namespace repro::test;

namespace {

SynthOptions moe_opts(const std::string& arch, int experts, int used, const std::string& type = "f32") {
  SynthOptions o;
  o.arch = arch;
  o.seed = 11;
  o.dim = 64;
  o.hidden_dim = 64;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 400;
  o.context_length = 128;
  o.type = type;
  o.n_experts = experts;
  o.n_experts_used = used;
  return o;
}

std::string write_model(const std::string& bytes, const std::string& name) {
  auto dir = test::scratch_dir("moe-" + name);
  const std::string path = (dir / "m.gguf").string();
  write_file_atomic(path, bytes);
  return path;
}

std::unique_ptr<Model> synth_load(const SynthOptions& o, const std::string& name) {
  return load_model(write_model(synth_model(o), name));
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}

// The feed-forward block of a mixture of experts, as the architectures define it: softmax over the
// router logits (in double), the k largest (a stable sort: ties to the lower index), their weights
// renormalised when the architecture says so, the weighted sum of the chosen experts; qwen2moe adds
// the shared expert times sigmoid(gate . x).
std::vector<float> moe_block(const Model& m, const LayerWeights& w, const std::vector<float>& x) {
  const ModelConfig& c = m.config;
  const std::vector<float> logits = matvec(w.router, x);
  std::vector<double> p(logits.size());
  double mx = -1e300, sum = 0;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  for (size_t e = 0; e < p.size(); ++e) sum += (p[e] = std::exp(logits[e] - mx));
  for (double& v : p) v /= sum;
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double wsum = 0;
  for (int j = 0; j < c.n_experts_used; ++j) wsum += p[order[j]];
  std::vector<double> out(static_cast<size_t>(c.dim), 0.0);
  for (int j = 0; j < c.n_experts_used; ++j) {
    const int e = order[j];
    const double wt = c.norm_topk ? p[e] / wsum : p[e];
    const std::vector<float> y = swiglu(w.exp_gate[e], w.exp_up[e], w.exp_down[e], x);
    for (int i = 0; i < c.dim; ++i) out[i] += wt * y[i];
  }
  if (!w.shexp_gate.empty()) {
    const double g = 1.0 / (1.0 + std::exp(-static_cast<double>(matvec(w.shexp_router, x)[0])));
    const std::vector<float> y = swiglu(w.shexp_gate, w.shexp_up, w.shexp_down, x);
    for (int i = 0; i < c.dim; ++i) out[i] += g * y[i];
  }
  return std::vector<float>(out.begin(), out.end());
}

// The mixture-of-experts block as the reference forward's feed-forward.
ReferenceFfn moe_ffn(const Model& m) {
  return [&m](const LayerWeights& w, const std::vector<float>& x) { return moe_block(m, w, x); };
}

const std::vector<int> kTokens = {1, 70, 200, 33, 301, 150, 9, 260, 77, 12, 390, 5};

std::string load_error(const std::string& bytes) {
  const std::string path = write_model(bytes, "edit");
  try {
    load_model(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("moe: each architecture's keys and tensors load as llama.cpp writes them") {
  auto mix = synth_load(moe_opts("llama", 4, 2), "keys-llama");
  const ModelConfig& c = mix->config;
  CHECK(c.arch == "llama");
  CHECK(c.n_experts == 4);
  CHECK(c.n_experts_used == 2);
  CHECK(c.expert_hidden_dim == 64);
  CHECK(c.shared_hidden_dim == 0);
  CHECK(c.norm_topk);
  CHECK(c.gating == MoeGating::Softmax);
  const LayerWeights& L = mix->layers[1];
  CHECK(L.w_gate.empty());
  REQUIRE(L.exp_gate.size() == 4);
  REQUIRE(L.exp_down.size() == 4);
  CHECK(L.router.rows == 4);
  CHECK(L.router.cols == 64);
  CHECK(L.exp_up[3].rows == 64);
  CHECK(L.exp_down[3].cols == 64);
  // Each expert is a view of its slice of the 3-D tensor: experts one matrix apart, in place.
  CHECK(static_cast<const char*>(L.exp_gate[1].data) - static_cast<const char*>(L.exp_gate[0].data) ==
        64 * 64 * 4);
  // Every matrix, the experts and routers included, is mapped in place; only the norm gains (2 per
  // layer and the output norm, f32) are owned: memory as a dense model's.
  CHECK(mix->owned_bytes == (2 * 2 * 64 + 64) * 4);
  CHECK(mix->mapped_bytes == 4LL * (400 * 64 + 2 * (2 * 64 * 64 + 2 * 32 * 64 + 4 * 64 + 3 * 4 * 64 * 64)));

  auto q2 = synth_load(moe_opts("qwen2moe", 4, 2), "keys-qwen2moe");
  CHECK(q2->config.rope_neox);
  CHECK(q2->config.shared_hidden_dim == 64);
  CHECK_FALSE(q2->config.norm_topk);  // qwen2moe keeps the softmax weights of the chosen experts
  CHECK_FALSE(q2->layers[0].bq.empty());
  CHECK(q2->layers[0].shexp_router.cols == 64);
  CHECK(q2->layers[0].shexp_down.rows == 64);

  auto q3 = synth_load(moe_opts("qwen3moe", 8, 2, "q8_0"), "keys-qwen3moe");
  CHECK(q3->config.n_experts == 8);
  CHECK(q3->config.norm_topk);
  CHECK_FALSE(q3->layers[0].q_norm.empty());
  CHECK(q3->layers[0].exp_gate[7].dtype == DType::Q8_0);
  CHECK(q3->layers[0].shexp_gate.empty());
  // Q8_0 expert matrices are read in place: expert e starts e x (64 rows of 2 blocks of 34 bytes) in.
  CHECK(static_cast<const char*>(q3->layers[0].exp_up[5].data) - static_cast<const char*>(q3->layers[0].exp_up[0].data) ==
        5 * 64 * 68);
}

TEST_CASE("moe: the forward pass equals a plain-loop reading of each architecture, every mode") {
  for (const char* arch : {"qwen3moe", "qwen2moe", "llama"}) {
    CAPTURE(arch);
    auto m = synth_load(moe_opts(arch, 6, 2), std::string("ref-") + arch);
    const auto ref = reference_logits(*m, kTokens, moe_ffn(*m));
    for (Mode mode : {Mode::BatchInvariant, Mode::Default, Mode::Deterministic, Mode::TpInvariant}) {
      CAPTURE(static_cast<int>(mode));
      const float d = max_diff(engine_logits(*m, kTokens, mode), ref);
      CAPTURE(d);
      CHECK(d < 2e-4f);
    }
  }
  // The experts matter: with the router's choice ignored (every expert's weight the same) the
  // logits move, so the reference is not blind to routing.
  auto m = synth_load(moe_opts("qwen3moe", 6, 2), "ref-flat");
  const auto ref = reference_logits(*m, kTokens, moe_ffn(*m));
  for (auto& l : m->layers) std::swap(l.exp_down[0], l.exp_down[1]);
  CHECK(max_diff(reference_logits(*m, kTokens, moe_ffn(*m)), ref) > 1e-3f);
}

TEST_CASE("moe: batch-invariant mode is bitwise invariant across batch sizes 1..64, positions and threads") {
  struct Case {
    const char* arch;
    const char* type;
    Precision prec;
  };
  for (const Case& k : {Case{"qwen3moe", "f32", Precision::F32}, Case{"qwen2moe", "q8_0", Precision::BF16},
                        Case{"llama", "q4_k", Precision::F32}}) {
    CAPTURE(k.arch);
    CAPTURE(k.type);
    SynthOptions o = moe_opts(k.arch, 8, 2, k.type);
    if (std::string(k.type) == "q4_k") o.dim = o.hidden_dim = 256;
    auto m = synth_load(o, std::string("inv-") + k.arch);
    GenRequest req;
    req.prompt = m->tokenizer->encode("Once upon a time", true);
    req.params.max_tokens = 6;
    req.params.stop_at_eos = false;
    Engine e1(*m, {Mode::BatchInvariant, 1, Device::Cpu, k.prec});
    Engine e2(*m, {Mode::BatchInvariant, 2, Device::Cpu, k.prec});
    const GenResult alone = run_in_batch(e1, req, {1, 0, 0}).probe;
    REQUIRE(alone.tokens.size() == 6);
    for (int b : {2, 3, 8, 33, 64})
      for (int pos : {0, b / 2, b - 1}) {
        CAPTURE(b);
        CAPTURE(pos);
        CHECK(same_bits(run_in_batch(b % 2 ? e1 : e2, req, {b, pos, static_cast<uint64_t>(b)}).probe, alone));
      }
    // Default mode runs the same files (its bits may move with the batch: that is what it measures).
    Engine def(*m, {Mode::Default, 2, Device::Cpu, k.prec});
    CHECK(run_in_batch(def, req, {16, 3, 1}).probe.tokens.size() == 6);
  }
}

TEST_CASE("moe: routing is softmax, top-k with ties to the lower index, and each architecture's normalisation") {
  ModelConfig c;
  c.n_experts = 5;
  c.n_experts_used = 2;
  c.norm_topk = true;
  const float tie[] = {0.5f, 2.0f, 1.0f, 2.0f, 2.0f};  // experts 1, 3, 4 tied at the top
  Route r = route_token(c, tie);
  CHECK(r.experts == std::vector<int>{1, 3});
  CHECK(r.weights[0] == 0.5f);  // two equal gate values normalised
  CHECK(r.weights[1] == 0.5f);
  CHECK(r.margin == 0.0f);  // the tie with expert 4 is exactly on the edge
  const float spread[] = {3.0f, 0.0f, 1.0f, -1.0f, 2.0f};
  c.norm_topk = false;
  r = route_token(c, spread);
  CHECK(r.experts == std::vector<int>{0, 4});
  double sum = 0;
  for (float l : spread) sum += std::exp(static_cast<double>(l) - 3.0);
  CHECK(r.weights[0] == doctest::Approx(1.0 / sum).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(std::exp(-1.0) / sum).epsilon(1e-6));
  CHECK(r.margin > 0.0f);
  c.gating = MoeGating::Sigmoid;
  r = route_token(c, spread);
  CHECK(r.weights[0] == doctest::Approx(1.0 / (1.0 + std::exp(-3.0))).epsilon(1e-6));
}

TEST_CASE("moe: bad input is one line naming the key (exit 2)") {
  const SynthOptions o = moe_opts("qwen3moe", 4, 2);
  auto none = [](gguf::Writer&) {};
  CHECK(load_error(edited(o, none, {})) == "no error");
  const std::string too_many = load_error(edited(
      o, [](gguf::Writer& w) { w.add("qwen3moe.expert_used_count", gguf::Value::u(gguf::ValueType::UINT32, 5)); },
      {"qwen3moe.expert_used_count"}));
  CHECK(too_many.find("'qwen3moe.expert_used_count' = 5 is larger than 'qwen3moe.expert_count' = 4") !=
        std::string::npos);
  CHECK(load_error(edited(o, none, {"blk.1.ffn_down_exps.weight"}))
            .find("tensor 'blk.1.ffn_down_exps.weight' is missing; architecture qwen3moe needs") != std::string::npos);
  CHECK(load_error(edited(moe_opts("qwen2moe", 4, 2), none, {"blk.0.ffn_gate_inp_shexp.weight"}))
            .find("tensor 'blk.0.ffn_gate_inp_shexp.weight' is missing") != std::string::npos);
  CHECK(load_error(edited(o, none, {"qwen3moe.expert_count"}))
            .find("missing metadata key 'qwen3moe.expert_count'") != std::string::npos);
  const std::string gating = load_error(edited(
      o, [](gguf::Writer& w) { w.add("qwen3moe.expert_gating_func", gguf::Value::u(gguf::ValueType::UINT32, 3)); },
      {}));
  CHECK(gating.find("'qwen3moe.expert_gating_func' = 3 is not a gating function this tool runs; supported: 1 "
                    "(softmax), 2 (sigmoid)") != std::string::npos);
  CHECK(gating.find('\n') == std::string::npos);
  // Through the CLI: exit 2 and one error line.
  const std::string path = write_model(edited(o, none, {"blk.0.ffn_gate_exps.weight"}), "cli");
  const auto r = test::run_cli("generate --model '" + path + "' --prompt hi --max-tokens 2");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: ") == 0);
  CHECK(r.output.find("tensor 'blk.0.ffn_gate_exps.weight' is missing") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  // synth refuses what it cannot write.
  CHECK_THROWS_WITH_AS(synth_model(moe_opts("qwen3moe", 4, 5)), doctest::Contains("--experts-used 5 must be 1..--experts (4)"),
                       UsageError);
  CHECK_THROWS_WITH_AS(synth_model(moe_opts("qwen3moe", 0, 0)),
                       doctest::Contains("--arch qwen3moe is a mixture of experts: give --experts E"), UsageError);
  CHECK_THROWS_WITH_AS(synth_model(moe_opts("qwen2", 4, 2)), doctest::Contains("architecture qwen2 has no experts"),
                       UsageError);
  // MoE models run at --tp 1 only.
  auto m = synth_load(o, "tp");
  CHECK_THROWS_WITH_AS(check_tensor_parallel(*m, 2), doctest::Contains("expert parallelism is not simulated"), UsageError);
}

TEST_CASE("moe: model synth and model info on the command line") {
  auto dir = test::scratch_dir("moe-cli");
  const std::string path = (dir / "q2.gguf").string();
  auto r = test::run_cli("model synth --arch qwen2moe --experts 4 --experts-used 2 --dim 64 --hidden 64 --layers 1 "
                         "--vocab 400 --out '" + path + "'");
  REQUIRE(r.code == 0);
  r = test::run_cli("model info '" + path + "'");
  CHECK(r.code == 0);
  CHECK(r.output.find("architecture:    qwen2moe") != std::string::npos);
  CHECK(r.output.find("experts:         4 per layer, 2 per token (64 wide; softmax gating, top-k weights as gated), "
                      "shared expert 64 wide") != std::string::npos);
  r = test::run_cli("generate --model '" + path + "' --prompt 'Once upon' --max-tokens 4 --mode batch-invariant");
  CHECK(r.code == 0);
}

TEST_CASE("moe: the performance model counts k experts per token and up to every expert per step") {
  auto m = synth_load(moe_opts("qwen3moe", 8, 2), "perf");
  const bench::ModelCosts c = bench::model_costs(*m);
  const int64_t one_expert = 2LL * 3 * 64 * 64;  // 2 layers x gate, up, down of [64][64]
  CHECK(c.expert_params == one_expert);
  CHECK(c.expert_bytes == one_expert * 4);
  // Per layer: wq, wk, wv, wo (q_dim 64, kv_dim 32), the router [8][64], and k = 2 experts.
  CHECK(c.layer_matmul_params == 2LL * (64 * 64 * 2 + 32 * 64 * 2 + 8 * 64) + 2 * one_expert);
  CHECK(c.weight_bytes_for(1) == static_cast<double>(c.weight_bytes()));
  CHECK(c.weight_bytes_for(2) == static_cast<double>(c.weight_bytes() + 2 * c.expert_bytes));
  CHECK(c.weight_bytes_for(64) == static_cast<double>(c.weight_bytes() + 6 * c.expert_bytes));  // all 8 experts
}

TEST_CASE("moe: the routing trace: batch mates change no route, margin or bit in batch-invariant mode") {
  // The probe's 12 prompt rows in one step, alone and among rows of two other sequences before and
  // after it. Batch-invariant: every route (experts, order, margin) and every logit bit is the
  // probe's alone. Default: its experts see other token counts, so its bits may move; how many
  // rows and routes moved is printed (a flip needs a near-tie, which the margin shows).
  auto m = synth_load(moe_opts("qwen3moe", 8, 2), "trace");
  const int V = m->config.vocab_size, layers = m->config.n_layers;
  struct Step {
    std::vector<float> logits;  // [12][V]
    std::vector<Route> routes;  // [12][layers]
  };
  auto run = [&](Forward& fwd, int before, int after) {
    const int n = static_cast<int>(kTokens.size());
    const int sp = fwd.acquire_slot(n), sa = fwd.acquire_slot(before + 1), sb = fwd.acquire_slot(after + 1);
    std::vector<TokenRow> rows;
    for (int i = 0; i < before; ++i) rows.push_back({sa, 3 + (i * 37) % 390, i, false});
    for (int t = 0; t < n; ++t) rows.push_back({sp, kTokens[t], t, true});
    for (int i = 0; i < after; ++i) rows.push_back({sb, 7 + (i * 53) % 390, i, false});
    const float* lg = fwd.run(rows);
    Step s;
    s.logits.assign(lg, lg + static_cast<size_t>(n) * V);
    for (int t = 0; t < n; ++t)
      for (int l = 0; l < layers; ++l) s.routes.push_back(fwd.route(before + t, l));
    for (int slot : {sp, sa, sb}) fwd.release_slot(slot);
    return s;
  };
  for (Mode mode : {Mode::BatchInvariant, Mode::Default}) {
    CAPTURE(static_cast<int>(mode));
    EngineOptions eo;
    eo.mode = mode;
    eo.threads = 2;
    Forward fwd(*m, eo);
    const Step alone = run(fwd, 0, 0);
    REQUIRE(alone.routes.size() == kTokens.size() * layers);
    float min_margin = alone.routes[0].margin;
    for (const Route& r : alone.routes) {
      CHECK(r.experts.size() == 2);
      CHECK(r.margin >= 0.0f);
      min_margin = std::min(min_margin, r.margin);
    }
    for (auto [before, after] : {std::pair{3, 0}, std::pair{0, 20}, std::pair{17, 30}, std::pair{40, 23}}) {
      CAPTURE(before);
      CAPTURE(after);
      const Step s = run(fwd, before, after);
      int flips = 0, margins = 0;
      for (size_t i = 0; i < s.routes.size(); ++i) {
        flips += s.routes[i].experts != alone.routes[i].experts;
        margins += std::memcmp(&s.routes[i].margin, &alone.routes[i].margin, sizeof(float)) != 0;
      }
      const bool same_logits = std::memcmp(s.logits.data(), alone.logits.data(), sizeof(float) * s.logits.size()) == 0;
      if (mode == Mode::BatchInvariant) {
        CHECK(flips == 0);
        CHECK(margins == 0);
        CHECK(same_logits);
      } else {
        MESSAGE("default, " << before << " rows before and " << after << " after: logits "
                            << std::string(same_logits ? "identical" : "differ") << ", " << margins << " of " << s.routes.size()
                            << " router margins moved, " << flips << " routes flipped (smallest margin alone "
                            << min_margin << ")");
      }
    }
  }
}

TEST_CASE("moe: an exact router tie goes to the lower expert index in every mode and batch") {
  // Router rows 0 and 1 made equal: the two logits are the same dot product, so their gate values
  // tie exactly for every token; with k = 1 expert 1 must never be chosen, whatever the mode, batch
  // or thread count, and expert 0 must be (else the test proves nothing).
  const std::string bytes = synth_model(moe_opts("qwen3moe", 4, 1));
  gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "synth");
  gguf::Writer w;
  for (const auto& [k, v] : f.kv) w.add(k, v);
  for (const auto& t : f.tensors) {
    std::string data(reinterpret_cast<const char*>(f.data(t)), t.n_bytes);
    if (t.name.find("ffn_gate_inp.weight") != std::string::npos)
      std::memcpy(data.data() + t.ne[0] * sizeof(float), data.data(), t.ne[0] * sizeof(float));  // row 1 = row 0
    w.add_tensor(t.name, t.ne, t.type, std::move(data));
  }
  auto m = load_model(write_model(w.serialize(), "tie"));
  const int layers = m->config.n_layers;
  int chose0 = 0, chose1 = 0;
  for (Mode mode : {Mode::Default, Mode::BatchInvariant, Mode::Deterministic})
    for (int threads : {1, 2}) {
      EngineOptions eo;
      eo.mode = mode;
      eo.threads = threads;
      Forward fwd(*m, eo);
      for (int mates : {0, 9, 70}) {
        const int n = static_cast<int>(kTokens.size());
        const int sp = fwd.acquire_slot(n), sa = fwd.acquire_slot(mates + 1);
        std::vector<TokenRow> rows;
        for (int i = 0; i < mates; ++i) rows.push_back({sa, 3 + (i * 37) % 390, i, false});
        for (int t = 0; t < n; ++t) rows.push_back({sp, kTokens[t], t, true});
        fwd.run(rows);
        for (int r = 0; r < static_cast<int>(rows.size()); ++r)
          for (int l = 0; l < layers; ++l) {
            chose0 += fwd.route(r, l).experts[0] == 0;
            chose1 += fwd.route(r, l).experts[0] == 1;
          }
        fwd.release_slot(sp);
        fwd.release_slot(sa);
      }
    }
  CHECK(chose0 > 0);
  CHECK(chose1 == 0);
}
