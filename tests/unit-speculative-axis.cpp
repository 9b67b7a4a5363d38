// ctest-labels: unit
// Speculative decoding as an audit axis (run --speculative; docs/ENGINE.md "Speculative decoding in
// reports"): the comparison of each completion with its twin without speculation, the groups of
// settings that agree, the trade-off rows, the flag's usage errors, and end to end on the embedded
// stories260K, where batch-invariant and deterministic modes must be identical to no speculation.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>

#include "repro/audit/compare.hpp"
#include "repro/audit/spec_axis.hpp"
#include <nlohmann/json.hpp>
#include "test_util.hpp"

using namespace repro;

namespace {

Completion completion(const std::string& spec, std::vector<int> tokens, std::vector<float> logprobs,
                      int batch_size = 4, const std::string& decoding = "greedy") {
  Completion c;
  c.prompt_id = "p-1";
  c.decoding_id = decoding;
  c.mode = "default";
  c.precision = "f32";
  c.batch_size = batch_size;
  c.position = 0;
  c.filler_set = "f0";
  c.speculative = spec;
  c.tokens = std::move(tokens);
  c.logprobs = std::move(logprobs);
  c.logits_sha256 = "ab";
  if (spec != "off") {
    c.spec_drafted = 10;
    c.spec_accepted = 4;
    c.spec_verify_steps = 2;
  }
  return c;
}

AuditReport axis(std::vector<std::string> settings) {
  AuditReport r;
  r.plan = {{"speculative", settings}};
  ModeSummary ms;
  ms.mode = "default";
  ms.precision = "f32";
  r.summary.modes.push_back(ms);
  return r;
}

}  // namespace

TEST_CASE("speculative axis: forks against off are located, settings that agree are grouped, drafts are counted") {
  AuditReport r = axis({"off", "ngram:3", "ngram:4", "ngram:8"});
  const std::vector<float> lp = {-0.5f, -1.0f, -2.0f, -0.1f};
  for (int b : {1, 4}) {
    r.completions.push_back(completion("off", {5, 6, 7, 8}, lp, b));
    r.completions.push_back(completion("ngram:3", {5, 6, 7, 8}, lp, b));
    r.completions.push_back(completion("ngram:4", {5, 6, 7, 8}, lp, b));
  }
  // ngram:8 forks at step 2 in batch 1 and at step 1 in batch 4
  r.completions.push_back(completion("ngram:8", {5, 6, 9, 9}, {-0.5f, -1.0f, -2.5f, -3.0f}, 1));
  r.completions.push_back(completion("ngram:8", {5, 3, 3, 3}, {-0.5f, -1.25f, -2.0f, -2.0f}, 4));
  // a sampled twin that differs is counted apart from the greedy figures
  r.completions.push_back(completion("off", {1, 2}, {-1.0f, -1.0f}, 1, "t0.8-s1"));
  r.completions.push_back(completion("ngram:3", {1, 3}, {-1.0f, -1.5f}, 1, "t0.8-s1"));
  analyze_speculative(r);
  const ModeSummary& ms = r.summary.modes[0];
  REQUIRE(ms.speculative.size() == 3);
  const SpecRow& n3 = ms.speculative[0];
  CHECK(n3.speculative == "ngram:3");
  CHECK(n3.bit_differ.k == 0);
  CHECK(n3.bit_differ.n == 2);
  CHECK_FALSE(n3.fork_first.has_value());
  CHECK(n3.sampled_token_differ.k == 1);
  CHECK(n3.sampled_token_differ.n == 1);
  CHECK(n3.drafted == 30);  // two greedy completions and the sampled one
  CHECK(n3.accepted == 12);
  REQUIRE(n3.acceptance);
  CHECK(*n3.acceptance == doctest::Approx(0.4));
  REQUIRE(n3.tokens_per_verify);
  CHECK(*n3.tokens_per_verify == doctest::Approx(3.0));  // (12 accepted + 6 verify steps) / 6
  const SpecRow& n8 = ms.speculative[2];
  CHECK(n8.speculative == "ngram:8");
  CHECK(n8.token_differ.k == 2);
  CHECK(n8.token_differ.n == 2);
  REQUIRE(n8.fork_first);
  CHECK(*n8.fork_first == 1);
  CHECK(*n8.fork_median == doctest::Approx(1.5));
  CHECK(n8.first_diff == "prompt p-1, batch 1: step 2");
  REQUIRE(n8.max_dlogprob);
  CHECK(*n8.max_dlogprob == doctest::Approx(0.5));  // over the common prefix and the fork step
  // off, ngram:3 and ngram:4 give the same tokens everywhere; ngram:8 stands alone
  REQUIRE(ms.spec_groups.size() == 2);
  CHECK(ms.spec_groups[0] == std::vector<std::string>{"off", "ngram:3", "ngram:4"});
  CHECK(ms.spec_groups[1] == std::vector<std::string>{"ngram:8"});
  CHECK(ms.spec_finding.find("speculative decoding, default (f32): ngram:3 identical to off in 2 of 2 greedy "
                             "completions") == 0);
  CHECK(ms.spec_finding.find("ngram:8 forks 2 of 2 greedy completions (first fork at step 1, median 1.5)") !=
        std::string::npos);
  CHECK(ms.spec_finding.find("settings that agree: {off = ngram:3 = ngram:4} {ngram:8}") != std::string::npos);

  // One logprob off by one ulp: the bits differ, the tokens do not.
  AuditReport u = axis({"off", "ngram:2"});
  u.completions = {completion("off", {5, 6}, {-0.5f, -1.0f}), completion("ngram:2", {5, 6}, {-0.5f, -1.0000001f})};
  analyze_speculative(u);
  REQUIRE(u.summary.modes[0].speculative.size() == 1);
  CHECK(u.summary.modes[0].speculative[0].bit_differ.k == 1);
  CHECK(u.summary.modes[0].speculative[0].token_differ.k == 0);
  CHECK(u.summary.modes[0].spec_groups.size() == 1);

  // Without the axis nothing is written.
  AuditReport none;
  none.summary.modes.push_back(ModeSummary{});
  none.completions = {completion("", {5}, {-0.5f})};
  analyze_speculative(none);
  CHECK(none.summary.modes[0].speculative.empty());
  CHECK(none.summary.modes[0].spec_finding.empty());
}

TEST_CASE("speculative axis: usage errors name the flag (exit 2)") {
  const auto dir = test::scratch_dir("spec-axis-bad");
  const std::string run = "'" + test::binary() + "' run --quiet --max-tokens 4 --out '" + (dir / "o").string() + "' ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--speculative ngram:0", "error: --speculative must be off, ngram:K or draft:FILE:K with K from 1 to 32"},
      {"--speculative ngram:33", "error: --speculative must be off, ngram:K or draft:FILE:K with K from 1 to 32"},
      {"--speculative lookup:3", "error: --speculative must be"},
      {"--speculative off,ngram:3,ngram:3", "error: --speculative: each setting once"},
      {"--speculative ngram:3 --device cuda", "error: --speculative is not implemented on --device cuda"},
      {"--speculative ngram:3 --devices cpu,cuda", "error: --speculative is not implemented on cuda"},
      {"--speculative ngram:3 --endpoint http://127.0.0.1:9", "error: --speculative sets speculative decoding in the "
                                                              "local engine"},
      {"--speculative draft:" + (dir / "missing.gguf").string() + ":4", "error: --speculative draft:"},
  };
  for (const auto& [flags, message] : bad) {
    auto r = test::run_shell(run + flags);
    INFO(flags);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(message) != std::string::npos);
  }
  // A draft model with another vocabulary names both files.
  const std::string other = (dir / "other-vocab.gguf").string();
  REQUIRE(test::run_cli("model synth --vocab 600 --out '" + other + "'").code == 0);
  auto r = test::run_shell(run + "--speculative draft:" + other + ":4");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("the draft model " + other) != std::string::npos);
  CHECK(r.output.find("have other vocabularies") != std::string::npos);
}

TEST_CASE("speculative axis: reports from before the axis compare as no speculation; adding it is a config change") {
  AuditReport old_run, new_run, axis_run;
  old_run.plan = {{"profile", "quick"}, {"batch_sizes", {1, 8}}};
  new_run.plan = old_run.plan;
  new_run.plan["speculative"] = nlohmann::json::array();
  axis_run.plan = old_run.plan;
  axis_run.plan["speculative"] = {"off", "ngram:3"};
  for (const auto& line : config_drift(old_run, new_run)) CHECK_MESSAGE(line.find("plan.") != 0, line);
  bool named = false;
  for (const auto& line : config_drift(old_run, axis_run)) named = named || line.rfind("plan.speculative ", 0) == 0;
  CHECK(named);
}

TEST_CASE("run --speculative on stories260K: batch-invariant and deterministic are identical to no speculation, "
          "default is measured, the drafts are accepted, and every report format shows it") {
  const auto dir = test::scratch_dir("spec-axis-run");
  const std::string out = (dir / "rep").string();
  // The embedded model drafting for itself through draft:FILE:K, beside two n-gram widths.
  const std::string self = std::string(REPRO_SOURCE_DIR) + "/models/stories260K.gguf";
  const std::string cmd = "'" + test::binary() + "' run --quiet --out '" + out + "' --speculative ngram:2,ngram:8,draft:" +
                          self + ":3 --modes default,batch-invariant,deterministic --batch-sizes 1,4 "
                          "--positions first,last --filler-sets 1 --max-tokens 48 --repeats 1 --precisions f32,bf16 "
                          "--format json,md,html";
  auto r = test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.code == 0);  // the gate (batch-invariant) holds with speculation
  const nlohmann::json doc = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  CHECK(doc["plan"]["speculative"] == nlohmann::json::array({"off", "ngram:2", "ngram:8", "draft:" + self + ":3"}));
  // Every batch context ran once per setting.
  std::map<std::string, int> per_setting;
  for (const auto& c : doc["completions"]) per_setting[c.value("speculative", std::string())]++;
  REQUIRE(per_setting.size() == 4);
  CHECK(per_setting["off"] == per_setting["ngram:2"]);
  CHECK(per_setting["off"] == per_setting["ngram:8"]);
  for (const auto& c : doc["completions"])
    if (c["speculative"] != "off") CHECK(c["spec_accepted"].get<int>() <= c["spec_drafted"].get<int>());
  int default_bits = 0;
  std::set<std::string> seen;
  for (const auto& ms : doc["summary"]["modes"]) {
    const std::string mode = ms["mode"];
    INFO(mode);
    REQUIRE(ms.contains("speculative"));
    REQUIRE(ms["speculative"].size() == 3);
    MESSAGE(ms["spec_finding"].get<std::string>());
    for (const auto& row : ms["speculative"]) {
      CHECK(row["bit_differ"]["n"].get<int>() > 0);
      CHECK(row["drafted"].get<int>() > 0);
      CHECK(row["accepted"].get<int>() > 0);
      if (mode == "default") {
        default_bits += row["bit_differ"]["k"].get<int>();
        continue;
      }
      seen.insert(mode);
      CHECK(row["bit_differ"]["k"] == 0);
      CHECK(row["token_differ"]["k"] == 0);
      if (row["speculative"].get<std::string>().rfind("draft:", 0) == 0)
        CHECK(row["accepted"] == row["drafted"]);  // its own draft, through the same invariant kernels
    }
    if (mode != "default") {
      CHECK(ms["spec_groups"].size() == 1);  // every setting agrees with off
      CHECK(ms["spec_finding"].get<std::string>().find("identical to off in ") != std::string::npos);
    }
  }
  CHECK(seen == std::set<std::string>{"batch-invariant", "deterministic"});
  // The default table's GEMV (one row) and register tiles (K+1 verify rows) add in other orders: at
  // batch 1 the bits of some completions move (tokens may or may not; the report says which).
  CHECK(default_bits > 0);
  // Trade-off rows: one per mode and setting, measured, batch-invariant's without a changed token.
  int rows = 0;
  for (const auto& t : doc["tradeoff"]) {
    if (!t.contains("speculative")) continue;
    ++rows;
    CHECK(t["measured"] == true);
    if (t["mode"] == "batch-invariant") CHECK(t["token_differ"]["k"] == 0);
  }
  CHECK(rows == 9);
  const std::string md = test::slurp(std::filesystem::path(out) / "report.md");
  CHECK(md.find("## Speculative decoding: each setting against off") != std::string::npos);
  CHECK(md.find("batch-invariant + speculative ngram:8") != std::string::npos);
  const std::string html = test::slurp(std::filesystem::path(out) / "report.html");
  CHECK(html.find("<h2>Speculative decoding: each setting against off</h2>") != std::string::npos);

  // --resume of the finished run keeps the axis and adds nothing.
  auto again = test::run_shell("'" + test::binary() + "' run --quiet --resume '" + out + "'");
  INFO(again.output);
  CHECK(again.code == 0);
  const nlohmann::json back = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  CHECK(back["completions"].size() == doc["completions"].size());
}

TEST_CASE("run --speculative with a small draft written by model synth, and with TP 2 in tp-invariant mode") {
  // A synthesized target and a one-layer draft with the same vocabulary size: model synth writes the
  // same tokenizer for both, so the draft is accepted; its unrelated weights make most drafts miss,
  // which exercises the rollback in every row of the plan.
  const auto dir = test::scratch_dir("spec-axis-synth");
  const std::string target = (dir / "target.gguf").string(), draft = (dir / "draft.gguf").string();
  REQUIRE(test::run_cli("model synth --out '" + target + "'").code == 0);
  REQUIRE(test::run_cli("model synth --dim 32 --hidden 64 --layers 1 --heads 2 --kv-heads 1 --seed 5 --out '" + draft +
                        "'").code == 0);
  const std::string out = (dir / "rep").string();
  auto r = test::run_shell("'" + test::binary() + "' run --quiet --model '" + target + "' --out '" + out +
                           "' --speculative draft:" + draft + ":4,ngram:3 --modes batch-invariant,tp-invariant "
                           "--tp 1,2 --batch-sizes 1,4 --filler-sets 1 --max-tokens 24 --precisions f32 --format json");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nlohmann::json doc = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  std::set<int> tps;
  for (const auto& c : doc["completions"]) tps.insert(c.value("tp", 1));
  CHECK(tps == std::set<int>{1, 2});
  for (const auto& ms : doc["summary"]["modes"]) {
    INFO(ms["mode"].get<std::string>());
    REQUIRE(ms["speculative"].size() == 2);
    for (const auto& row : ms["speculative"]) {
      CHECK(row["bit_differ"]["n"].get<int>() > 0);
      CHECK(row["bit_differ"]["k"] == 0);
      CHECK(row["drafted"].get<int>() > row["accepted"].get<int>());  // rejections: the rollback ran
    }
  }
}
