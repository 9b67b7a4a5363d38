// The trade-off table: which completions make each approach's row, how its throughput relative to
// default and its reproducibility are computed, "not measured" rows, and `run --profile tradeoff`
// end to end (four measured rows in every format, in under a minute on the embedded model).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "repro/audit/analysis.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

// One local completion of `prompt` in mode `mode` at batch `bs`: `tokens` generated, the cell's
// batch generated `bs * 4` tokens in `seconds`.
Completion done(const std::string& prompt, const std::string& mode, const std::string& decoding, int bs, int repeat,
                std::vector<int> tokens, double seconds) {
  Completion c;
  c.prompt_id = prompt;
  c.decoding_id = decoding;
  c.mode = mode;
  c.precision = "f32";
  c.batch_size = bs;
  c.position = 0;
  c.filler_set = bs > 1 ? "f0" : "";
  c.repeat = repeat;
  c.seed = decoding == "greedy" ? 0 : 1;
  c.tokens = std::move(tokens);
  c.logprobs.assign(c.tokens.size(), -0.5f);
  c.logits_sha256 = "aa";
  c.finish_reason = "length";
  c.completion_tokens = static_cast<int>(c.tokens.size());
  c.latency_s = seconds;
  c.batch_tokens = 4L * bs;
  c.batch_seconds = seconds;
  return c;
}

const TradeoffRow& row(const AuditReport& r, const std::string& approach) {
  for (const auto& t : r.tradeoff)
    if (t.approach == approach) return t;
  FAIL("no row " << approach);
  return r.tradeoff.front();
}

}  // namespace

TEST_CASE("trade-off table: rows from the run's completions, speed relative to default in the same context") {
  AuditReport r;
  r.plan = {{"precisions", {"f32"}}};
  const std::vector<int> a{1, 2, 3, 4}, b{1, 2, 9, 9};
  for (int rep = 0; rep < 2; ++rep) {
    // default greedy: 4 tokens in 1 s alone, 32 tokens in 2 s at batch 8 (repeat 1: in 4 s, diverging)
    r.completions.push_back(done("p", "default", "greedy", 1, rep, a, 1.0));
    r.completions.push_back(done("p", "default", "greedy", 8, rep, rep == 0 ? a : b, rep == 0 ? 2.0 : 4.0));
    // batch-invariant: the same tokens, twice the default's time everywhere
    r.completions.push_back(done("p", "batch-invariant", "greedy", 1, rep, a, 2.0));
    r.completions.push_back(done("p", "batch-invariant", "greedy", 8, rep, a, rep == 0 ? 4.0 : 8.0));
    // sampled in default mode: controlled sampling, at the default's speed
    r.completions.push_back(done("p", "default", "t0.8-s1", 1, rep, b, 1.0));
    r.completions.push_back(done("p", "default", "t0.8-s1", 8, rep, b, rep == 0 ? 2.0 : 4.0));
  }
  analyze(r);
  REQUIRE(r.tradeoff.size() == 4);
  CHECK(tradeoff_approaches() ==
        std::vector<std::string>{"default", "batch-invariant", "deterministic", "controlled sampling"});
  for (size_t i = 0; i < 4; ++i) CHECK(r.tradeoff[i].approach == tradeoff_approaches()[i]);

  const TradeoffRow& d = row(r, "default");
  REQUIRE(d.measured);
  CHECK(d.cases == 1);
  CHECK(d.n_min == 4);
  CHECK(d.tarr.k == 0);  // batch 8, repeat 1 diverged
  CHECK(d.token_differ.k == 1);
  CHECK(d.token_differ.n == 3);
  // default's own measurements against its per-context mean: 1, 1 alone; 2/3 and 4/3 (32 tok in 2 s vs 4 s)
  REQUIRE(d.speed_mean);
  CHECK(d.speed_n == 4);
  CHECK(*d.speed_mean == doctest::Approx(1.0));
  CHECK(*d.speed_min == doctest::Approx(2.0 / 3));
  CHECK(*d.speed_max == doctest::Approx(4.0 / 3));
  CHECK(*d.speed_sd == doctest::Approx(std::sqrt((2 * (1.0 / 9)) / 3)));

  const TradeoffRow& inv = row(r, "batch-invariant");
  REQUIRE(inv.measured);
  CHECK(inv.tarr.k == 1);
  CHECK(inv.token_differ.k == 0);
  REQUIRE(inv.speed_mean);
  // alone: 2 tok/s vs 4 -> 0.5 twice; batch 8: 8 tok/s and 4 tok/s vs a mean of 12 tok/s -> 2/3 and 1/3
  CHECK(*inv.speed_mean == doctest::Approx((0.5 + 0.5 + 2.0 / 3 + 1.0 / 3) / 4));
  CHECK(inv.tokens_per_s == doctest::Approx((4.0 + 4 + 32 + 32) / (2.0 + 2 + 4 + 8)));

  const TradeoffRow& det = row(r, "deterministic");
  CHECK_FALSE(det.measured);
  CHECK_FALSE(det.speed_mean);
  CHECK(det.tarr.n == 0);
  CHECK(det.note.find("not in this run (add deterministic to --modes") == 0);

  const TradeoffRow& cs = row(r, "controlled sampling");
  REQUIRE(cs.measured);
  CHECK(cs.mode == "default");
  CHECK(cs.cases == 1);
  CHECK(cs.tarr.k == 1);
  REQUIRE(cs.speed_mean);
  CHECK(*cs.speed_mean == doctest::Approx(1.0));  // the same times as default greedy

  // every writer shows the four rows; the unmeasured one says so and invents nothing
  const TextTable t = tradeoff_table(r);
  REQUIRE(t.rows.size() == 4);
  CHECK(t.rows[2][2] == "not measured");
  CHECK(t.rows[2][4] == "not measured");
  CHECK(t.rows[1][2].rfind("0.50x ±", 0) == 0);
  CHECK(to_markdown(r).find("| deterministic | deterministic, greedy, f32 | not measured |") != std::string::npos);
  CHECK(to_terminal(r).find("deterministic") != std::string::npos);
  CHECK(to_junit(r).find("<property name=\"tradeoff.deterministic\" value=\"deterministic: not measured (not in this run (add ") !=
        std::string::npos);

  // the JSON carries the rows and reads them back
  const AuditReport back = from_json(to_json(r), "r.json");
  REQUIRE(back.tradeoff.size() == 4);
  CHECK(back.tradeoff[1].speed_mean == inv.speed_mean);
  CHECK(back.tradeoff[0].tarr.n == 1);
  CHECK_FALSE(back.tradeoff[2].measured);
  CHECK(back.completions[0].batch_tokens == 4);
  CHECK(back.completions[0].batch_seconds == 1.0);

  // endpoints: the table compares local modes, so every row is not measured, with the reason
  AuditReport remote = r;
  for (auto& c : remote.completions) c.response_id = "x";
  analyze(remote);
  for (const auto& t2 : remote.tradeoff) {
    CHECK_FALSE(t2.measured);
    CHECK(t2.note.find("this run audited endpoints") != std::string::npos);
  }
}

TEST_CASE("run --profile tradeoff: the four approaches measured in every format, in under a minute") {
  const auto dir = test::scratch_dir("tradeoff-profile");
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = test::run_cli("run --profile tradeoff --out '" + dir.string() + "'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(res.output);
  CHECK(res.code == 0);  // batch-invariant and deterministic are gated, and reproducible
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("the under-a-minute bound is not checked under AddressSanitizer (a Debug build, several times slower)");
#else
  CHECK(seconds < 60);
#endif
  MESSAGE("run --profile tradeoff took " << seconds << " s");

  const AuditReport r = load_report((dir / "report.json").string());
  REQUIRE(r.tradeoff.size() == 4);
  for (const auto& t : r.tradeoff) {
    CAPTURE(t.approach);
    CHECK(t.measured);
    CHECK(t.precision == "bf16");
    CHECK(t.cases == 3);      // the three built-in prompts
    CHECK(t.n_min == 9);      // batch 1, batch 8 first and last, 3 repeats each
    REQUIRE(t.speed_mean);
    CHECK(t.speed_n == 9 * 3);
    CHECK(t.tara.has_value());  // the profile's answer regex: the first sentence
  }
  const TradeoffRow& inv = r.tradeoff[1];
  const TradeoffRow& det = r.tradeoff[2];
  // batch-invariant and deterministic: bitwise identical to the reference in every context
  CHECK(inv.bit_differ.k == 0);
  CHECK(det.bit_differ.k == 0);
  CHECK(inv.tarr.k == inv.tarr.n);
  CHECK(det.tarr.k == det.tarr.n);
  // deterministic decodes every request alone on reference kernels: slower than default
  CHECK(*det.speed_mean < 1.0);
  CHECK(det.note.find("every request decoded alone") != std::string::npos);
  CHECK(r.tradeoff[3].mode == "default");

  const std::string md = read_file((dir / "report.md").string());
  const std::string html = read_file((dir / "report.html").string());
  const std::string junit = read_file((dir / "report.junit.xml").string());
  CHECK(md.find("## Trade-off: approaches to reproducibility, measured in this run") != std::string::npos);
  CHECK(html.find("<table id=\"tradeoff\">") != std::string::npos);
  for (const std::string a : {"default", "batch-invariant", "deterministic", "controlled sampling"}) {
    CAPTURE(a);
    CHECK(md.find("| " + a + " | ") != std::string::npos);
    CHECK(html.find("<tr><td>" + a + "</td>") != std::string::npos);
    CHECK(junit.find("<property name=\"tradeoff." + a + "\" value=\"" + a + ": speed ") != std::string::npos);
    CHECK(res.output.find("\n  " + a + " ") != std::string::npos);  // the terminal table
  }
  CHECK(md.find(" | not measured | ") == std::string::npos);  // every row measured
}
