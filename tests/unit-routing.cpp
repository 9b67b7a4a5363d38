// ctest-labels: unit
// The routing trace of a mixture of experts in run reports (docs/ENGINE.md "Mixture of experts",
// src/audit/routing.cpp): the engine records a sequence's routes only when asked, one per generated
// token and layer; the analysis compares each completion's trace with its case's reference over the
// common token prefix (expert sets, not order; nothing after the first token divergence); and end to
// end, `run` on a small synthesized qwen3moe records the trace in every completion, batch-invariant
// shows no flip at any batch size, default flips where batch shapes change its kernels, and the
// report's reader gives the trace back intact. A dense model's report has no routing field.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/audit/analysis.hpp"
#include "repro/audit/routing.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/synth.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

// A tiny qwen3moe whose default mode flips routes: its Q8_0 matmuls quantize activations to 8 bits
// per block up to 63 rows and switch to f32 activations from 64 rows (as llama.cpp does on CPU),
// so a batch of 64 moves the router's input by about 1%, enough to cross the closest top-k margins.
SynthOptions tiny_moe() {
  SynthOptions o;
  o.arch = "qwen3moe";
  o.seed = 11;
  o.dim = 64;
  o.hidden_dim = 64;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 400;
  o.context_length = 512;
  o.type = "q8_0";
  o.n_experts = 8;
  o.n_experts_used = 2;
  return o;
}

std::string write_tiny_moe(const std::string& name) {
  const auto dir = test::scratch_dir("routing-" + name);
  const std::string path = (dir / "moe.gguf").string();
  write_file_atomic(path, synth_model(tiny_moe()));
  return path;
}

// One completion of case (p-1, greedy, default, f32) with a trace of 2 layers, k = 2.
Completion traced(int batch, std::vector<int> tokens, std::vector<std::vector<std::vector<int>>> routing) {
  Completion c;
  c.prompt_id = "p-1";
  c.decoding_id = "greedy";
  c.mode = "default";
  c.precision = "f32";
  c.batch_size = batch;
  c.tokens = std::move(tokens);
  c.routing = std::move(routing);
  for (const auto& step : c.routing) c.routing_margins.push_back(std::vector<float>(step.size(), 0.5f));
  return c;
}

}  // namespace

TEST_CASE("routing: the engine records a sequence's routes only when asked: one per generated token and layer") {
  const std::string path = write_tiny_moe("engine");
  auto m = load_model(path);
  Engine engine(*m, EngineOptions{});
  GenRequest plain, asked;
  plain.prompt = asked.prompt = {1, 70, 200, 33};
  plain.params.max_tokens = asked.params.max_tokens = 6;
  plain.params.stop_at_eos = asked.params.stop_at_eos = false;
  asked.params.routing_trace = true;
  const auto out = engine.generate({plain, asked});
  CHECK(out[0].routing.empty());
  REQUIRE(out[1].routing.size() == out[1].tokens.size());
  for (const auto& step : out[1].routing) {
    REQUIRE(step.size() == 2);  // layers
    for (const Route& r : step) {
      CHECK(r.experts.size() == 2);  // k
      CHECK(r.margin >= 0.0f);
    }
  }
  // The same request alone routes the same way in batch-invariant mode (the default EngineOptions).
  Engine alone(*m, EngineOptions{});
  const GenResult a = alone.generate({asked})[0];
  REQUIRE(a.routing.size() == out[1].routing.size());
  for (size_t t = 0; t < a.routing.size(); ++t)
    for (size_t l = 0; l < a.routing[t].size(); ++l) CHECK(a.routing[t][l].experts == out[1].routing[t][l].experts);
}

TEST_CASE("routing: each trace against the reference: expert sets over the common prefix, the first flip, the finding") {
  AuditReport r;
  ModeSummary ms;
  ms.mode = "default";
  ms.precision = "f32";
  r.summary.modes.push_back(ms);
  // The reference (batch 1); at batch 4 the same experts in another order (no flip) and tokens equal;
  // at batch 8 layer 1 flips at step 1 and the tokens diverge at step 2; at batch 16 the tokens
  // diverge at step 1 and the routes only differ after it (not compared: other inputs).
  r.completions = {traced(1, {5, 6, 7}, {{{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}}),
                   traced(4, {5, 6, 7}, {{{1, 0}, {3, 2}}, {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}}),
                   traced(8, {5, 6, 9}, {{{0, 1}, {2, 3}}, {{0, 1}, {2, 4}}, {{0, 1}, {2, 3}}}),
                   traced(16, {5, 8, 9}, {{{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}})};
  r.completions[0].routing_margins[1][1] = 1e-4f;  // a fragile route of the reference
  const std::optional<CaseRouting> cr = compare_routing(r.completions, {0, 1, 2, 3}, 0, 1e-3);
  REQUIRE(cr);
  CHECK(cr->compared == 3);
  CHECK(cr->token_diverged == 2);
  CHECK(cr->pairs == 3 * 2 + 3 * 2 + 2 * 2);  // batch 16: steps 0 and 1 (its first divergent step)
  CHECK(cr->flips == 1);
  CHECK(cr->layer_flips == std::vector<int>{0, 1});
  CHECK(cr->fragile == 1);
  REQUIRE(cr->divergences.size() == 1);
  CHECK(cr->divergences[0].completion == 2);
  CHECK(cr->divergences[0].step == 1);
  CHECK(cr->divergences[0].layer == 1);
  CHECK(cr->divergences[0].token_divergence == 2);
  CHECK(r.completions[0].routing_vs_reference == "same");
  CHECK(r.completions[1].routing_vs_reference == "same");
  CHECK(r.completions[2].routing_vs_reference == "flipped");
  CHECK(r.completions[3].routing_vs_reference == "same");

  CaseResult c;
  c.prompt_id = "p-1";
  c.decoding_id = "greedy";
  c.mode = "default";
  c.precision = "f32";
  c.routing = cr;
  r.cases.push_back(c);
  summarize_routing(r);
  REQUIRE(r.summary.modes[0].routing);
  const RoutingSummary& s = *r.summary.modes[0].routing;
  CHECK(s.flips.k == 1);
  CHECK(s.flips.n == 16);
  CHECK(s.flipped == 1);
  CHECK(s.token_diverged == 2);
  CHECK(s.flip_first == 1);
  CHECK(s.flip_same_step == 0);
  CHECK(s.first_flip == "prompt p-1, greedy, batch 8 at position 0: step 1, layer 1 (tokens diverge at step 2)");
  CHECK(r.summary.modes[0].routing_finding ==
        "routing, default (f32): 6.2% of (step, layer) pairs flip against the reference (1 of 16), in 1 of 3 "
        "completions; the first flip precedes the first token divergence in 1 of 2 diverging completions; 1 fragile "
        "route in the references (top-k margin below the threshold)");
  // The routing table of the writers shows the row.
  const TextTable t = routing_table(r);
  REQUIRE(t.rows.size() == 1);
  CHECK(t.rows[0][0] == "default (f32)");
  CHECK(t.rows[0][3] == "0/8 1/8");

  // Without traces nothing is derived: a dense model's case.
  std::vector<Completion> dense = {Completion{}, Completion{}};
  CHECK_FALSE(compare_routing(dense, {0, 1}, 0, 1e-3));
  CHECK(dense[1].routing_vs_reference.empty());
}

TEST_CASE("run on a mixture of experts: the trace in every completion; batch-invariant never flips, default does") {
  const std::string model = write_tiny_moe("run");
  const auto dir = test::scratch_dir("routing-run-out");
  const std::string out = (dir / "rep").string();
  const std::string cmd = "'" + test::binary() + "' run --quiet --model '" + model + "' --out '" + out +
                          "' --modes default,batch-invariant --precisions f32,bf16 --batch-sizes 1,4,16,64 "
                          "--positions first,last --filler-sets 2 --max-tokens 24 --repeats 1 --format json,md";
  auto r = test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.code == 0);  // the gate (batch-invariant) holds
  const std::string json_path = (std::filesystem::path(out) / "report.json").string();
  const nlohmann::json doc = nlohmann::json::parse(test::slurp(json_path));
  // The trace: steps x layers x k, and a margin per step and layer.
  REQUIRE(doc["completions"].size() > 0);
  for (const auto& c : doc["completions"]) {
    REQUIRE(c.contains("routing"));
    REQUIRE(c.contains("routing_margins"));
    CHECK(c["routing"].size() == c["tokens"].size());
    CHECK(c["routing_margins"].size() == c["tokens"].size());
    for (size_t t = 0; t < c["routing"].size(); ++t) {
      REQUIRE(c["routing"][t].size() == 2);
      REQUIRE(c["routing_margins"][t].size() == 2);
      for (const auto& layer : c["routing"][t]) {
        REQUIRE(layer.size() == 2);
        const int a = layer[0].get<int>(), b = layer[1].get<int>();
        CHECK(a != b);
        CHECK((a >= 0 && a < 8 && b >= 0 && b < 8));
      }
    }
  }
  int default_flips = 0, invariant_rows = 0;
  bool default_factor = false;
  for (const auto& ms : doc["summary"]["modes"]) {
    CAPTURE(ms["mode"].get<std::string>());
    CAPTURE(ms["precision"].get<std::string>());
    REQUIRE(ms.contains("routing"));
    const auto& rt = ms["routing"];
    CHECK(rt["completions"].get<int>() == 36);  // 3 prompts x 12 batch contexts besides the reference
    CHECK(rt["layers"].size() == 2);
    const std::string finding = ms["routing_finding"].get<std::string>();
    MESSAGE(finding);
    if (ms["mode"] == "batch-invariant") {
      ++invariant_rows;
      CHECK(rt["flips"]["k"] == 0);
      CHECK(rt["flipped"] == 0);
      CHECK(finding.find("no routing flips in 36 completions") != std::string::npos);
    } else {
      default_flips += rt["flips"]["k"].get<int>();
      if (rt["flips"]["k"].get<int>() > 0) {
        CHECK(rt["flipped"].get<int>() > 0);
        CHECK(finding.find("of (step, layer) pairs flip against the reference") != std::string::npos);
        CHECK_FALSE(rt["first_flip"].get<std::string>().empty());
      }
    }
  }
  CHECK(invariant_rows == 2);
  CHECK(default_flips > 0);  // this model flips in default mode (batch 64 changes its Q8_0 kernels)
  // The routing factor: the default cases with a flip tabulate "flipped" against "same".
  for (const auto& cs : doc["cases"]) {
    if (cs["mode"] != "default" || !cs.contains("routing") || cs["routing"]["flips"] == 0) continue;
    for (const auto& f : cs["drift_size"]["factors"]) default_factor = default_factor || f["factor"] == "routing";
  }
  CHECK(default_factor);
  const std::string md = test::slurp(std::filesystem::path(out) / "report.md");
  CHECK(md.find("## Expert routing against the reference") != std::string::npos);

  // The reader gives the trace back intact, and analysing the report read back finds the same.
  AuditReport back = load_report(json_path);
  REQUIRE(back.completions.size() == doc["completions"].size());
  for (size_t i = 0; i < back.completions.size(); ++i) {
    const Completion& c = back.completions[i];
    CHECK(nlohmann::json(c.routing) == doc["completions"][i]["routing"]);
    REQUIRE(c.routing_margins.size() == doc["completions"][i]["routing_margins"].size());
    for (size_t t = 0; t < c.routing_margins.size(); ++t)
      for (size_t l = 0; l < c.routing_margins[t].size(); ++l)
        CHECK(c.routing_margins[t][l] == doc["completions"][i]["routing_margins"][t][l].get<float>());
  }
  std::vector<std::string> findings;
  for (const auto& ms : back.summary.modes) findings.push_back(ms.routing_finding);
  analyze(back);
  for (size_t i = 0; i < back.summary.modes.size(); ++i) CHECK(back.summary.modes[i].routing_finding == findings[i]);
  const nlohmann::json again = nlohmann::json::parse(to_json(back));
  for (size_t i = 0; i < back.completions.size(); ++i)
    CHECK(again["completions"][i]["routing"] == doc["completions"][i]["routing"]);
}

TEST_CASE("run on a dense model: no routing field anywhere in the report") {
  const auto dir = test::scratch_dir("routing-dense");
  const std::string out = (dir / "rep").string();
  auto r = test::run_shell("'" + test::binary() + "' run --quiet --out '" + out +
                           "' --batch-sizes 1,2 --positions first --filler-sets 1 --max-tokens 4 --repeats 1 "
                           "--format json");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string text = test::slurp(std::filesystem::path(out) / "report.json");
  CHECK(text.find("\"routing") == std::string::npos);
}
