// Drift size against the reference context: Wilson intervals, per-step records of the engine,
// top-k KL, the per-case and per-mode analysis, and a real run on stories260K.
// ctest-labels: unit model
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "repro/audit/analysis.hpp"
#include "repro/audit/drift_size.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/runner.hpp"
#include "repro/audit/stats.hpp"
#include "repro/engine/engine.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;

TEST_CASE("wilson: 95% score intervals and their plain text") {
  Rate r = wilson(0, 120);
  CHECK(r.lo == 0.0);
  CHECK(r.hi == doctest::Approx(0.03102).epsilon(1e-3));
  CHECK(rate_text(r) == "0 of 120 -> below 3.1%");
  r = wilson(7, 30);
  CHECK(r.lo == doctest::Approx(0.11792).epsilon(1e-3));
  CHECK(r.hi == doctest::Approx(0.40929).epsilon(1e-3));
  CHECK(rate_text(r) == "7 of 30 -> 12% to 41%");
  r = wilson(120, 120);
  CHECK(r.hi == 1.0);
  CHECK(rate_text(r) == "120 of 120 -> above 97%");
  CHECK(rate_text(wilson(0, 0)) == "none compared");
}

TEST_CASE("step_stats: top-5 by logit (ties by id), margins, logprobs equal to token_logprob") {
  std::vector<float> lg = {1.0f, 3.0f, 2.5f, 3.0f, -1.0f, 2.9f, 0.5f, 2.5f};
  StepStats st = step_stats(lg.data(), static_cast<int>(lg.size()));
  const int want[] = {1, 3, 5, 2, 7};
  for (int j = 0; j < kTopRecorded; ++j) {
    CHECK(st.top_ids[j] == want[j]);
    float lp = token_logprob(lg.data(), static_cast<int>(lg.size()), want[j]);
    CHECK(std::memcmp(&lp, &st.top_logprobs[j], sizeof lp) == 0);
  }
  CHECK(st.margin == 0.0f);  // a tie at the top
  CHECK(st.margin_rel == 0.0f);
  std::vector<float> lg2 = {-2.0f, 4.0f, 3.996f};
  st = step_stats(lg2.data(), 3);
  CHECK(st.margin == doctest::Approx(0.004f));
  CHECK(st.margin_rel == doctest::Approx(0.001f).epsilon(1e-3));
  CHECK(st.top_ids[3] == -1);
  CHECK(std::isinf(st.top_logprobs[4]));
}

TEST_CASE("topk_kl: zero for the same distribution, positive when the top two swap, finite when ids are missing") {
  const int ids[5] = {10, 11, 12, 13, 14};
  const float a[5] = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.05f), std::log(0.03f)};
  CHECK(topk_kl(ids, a, ids, a, 5) == doctest::Approx(0.0).epsilon(1e-9));
  const int ids2[5] = {11, 10, 12, 13, 14};
  const float b[5] = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.05f), std::log(0.03f)};
  double kl = topk_kl(ids, a, ids2, b, 5);
  // exact over the 5 tokens + tail: 0.5 ln(0.5/0.3) + 0.3 ln(0.3/0.5)
  CHECK(kl == doctest::Approx(0.5 * std::log(0.5 / 0.3) + 0.3 * std::log(0.3 / 0.5)).epsilon(1e-4));
  const int ids3[5] = {20, 21, 22, 23, 24};
  double far = topk_kl(ids, a, ids3, b, 5);
  CHECK(std::isfinite(far));
  CHECK(far > kl);
}

namespace {
Completion comp(int batch, int pos, const std::string& filler, int repeat, std::vector<int> tokens,
                std::vector<float> lps) {
  Completion c;
  c.prompt_id = "p";
  c.decoding_id = "greedy";
  c.mode = "default";
  c.batch_size = batch;
  c.position = pos;
  c.filler_set = filler;
  c.repeat = repeat;
  c.tokens = std::move(tokens);
  c.logprobs = std::move(lps);
  c.logits_sha256 = "h";
  c.completion_tokens = static_cast<int>(c.tokens.size());
  return c;
}
}  // namespace

TEST_CASE("analyze: drift size against the reference context, fragile steps, attribution and the finding") {
  AuditReport r;
  // listed first, but not the reference: batch 8
  r.completions.push_back(comp(8, 0, "f0", 0, {1, 2, 3, 4}, {-0.5f, -0.25f, -1.0f, -0.1f}));
  // the reference: batch 1, position 0, repeat 0; step 2 is fragile (relative margin 5e-4)
  Completion ref = comp(1, 0, "", 0, {1, 2, 3, 4}, {-0.5f, -0.25f, -1.0f, -0.1f});
  ref.margins = {1.0f, 2.0f, 0.001f, 3.0f};
  ref.margins_rel = {0.1f, 0.2f, 0.0005f, 0.3f};
  r.completions.push_back(ref);
  r.completions.push_back(comp(1, 0, "", 1, {1, 2, 3, 4}, {-0.5f, -0.25f, -1.0f, -0.1f}));  // identical repeat
  // batch 4: same tokens, one logprob moved by 2^-20 (bit-divergent)
  r.completions.push_back(comp(4, 0, "f0", 0, {1, 2, 3, 4}, {-0.5f, -0.25f + 0x1p-20f, -1.0f, -0.1f}));
  // batch 16: tokens change at step 2
  r.completions.push_back(comp(16, 0, "f0", 0, {1, 2, 9, 9}, {-0.5f, -0.25f + 0x1p-18f, -0.9f, -0.2f}));
  r.completions[0].logits_sha256 = "other";  // batch 8: the final logits differ
  analyze(r);
  REQUIRE(r.cases.size() == 1);
  const DriftSize& d = r.cases[0].drift_size;
  CHECK(d.reference == 1);
  CHECK(d.reference_context == "batch 1, position 0, repeat 0");
  CHECK(d.compared == 4);
  CHECK(d.bit_differ == 3);
  CHECK(d.token_differ == 1);
  REQUIRE(d.max_dlogprob);
  CHECK(*d.max_dlogprob == doctest::Approx(0x1p-18));
  CHECK(d.steps_compared == 4 + 4 + 4 + 2);
  CHECK(*d.mean_dlogprob == doctest::Approx((0x1p-20 + 0x1p-18) / 14));
  CHECK(d.first_divergence == 2);
  CHECK(d.reference_token == 3);
  CHECK(d.divergent_token == 9);
  CHECK(d.first_divergence_completion == 4);
  CHECK(!d.topk_kl);  // no top-k recorded
  REQUIRE(d.fragile);
  CHECK(*d.fragile == 1);
  CHECK(d.status == "token-divergent");
  // the margin the flip crossed: the reference's top-2 margin at the first divergent step (step 2)
  REQUIRE(d.flip_margin);
  CHECK(*d.flip_margin == doctest::Approx(0.001));
  REQUIRE(d.flip_margin_rel);
  CHECK(*d.flip_margin_rel == doctest::Approx(0.0005));
  REQUIRE(!d.factors.empty());
  CHECK(d.factors[0].factor == "batch_size");
  CHECK(d.factors[0].values == std::vector<std::string>{"1", "4", "8", "16"});
  CHECK(d.factors[0].bit_differ == std::vector<int>{0, 1, 1, 1});
  CHECK(d.factors[0].token_differ == std::vector<int>{0, 0, 0, 1});

  REQUIRE(r.summary.modes.size() == 1);
  const ModeDriftSize& m = r.summary.modes[0].drift_size;
  CHECK(m.bit_differ.k == 3);
  CHECK(m.bit_differ.n == 4);
  CHECK(m.token_divergent_cases.k == 1);
  CHECK(m.fragile == 1);
  CHECK(m.finding ==
        "default: logits change from batch size 4 up (max |dlogprob| 3.8e-06); tokens change in 1 of 1 cases from "
        "batch size 16 up; each flip was a near-tie: the reference's top-2 logit margin there was at most 0.001; 1 "
        "fragile token (top-2 margin below the threshold)");
  REQUIRE(m.max_flip_margin);
  CHECK(*m.max_flip_margin == doctest::Approx(0.001));

  // the same case without the token divergence is "reproducible here, fragile"
  r.completions.pop_back();
  analyze(r);
  CHECK(r.cases[0].drift_size.status == "reproducible here, fragile");
  CHECK(r.summary.modes[0].drift_size.fragile_cases == 1);
  r.completions[1].margins_rel = {0.1f, 0.2f, 0.3f, 0.3f};
  analyze(r);
  CHECK(r.cases[0].drift_size.status == "bit-divergent");

  // the JSON report keeps all of it
  AuditReport back = from_json(to_json(r), "mem");
  CHECK(to_json(back) == to_json(r));
  CHECK(back.cases[0].drift_size.factors[0].bit_differ == r.cases[0].drift_size.factors[0].bit_differ);
  CHECK(back.summary.modes[0].drift_size.finding == r.summary.modes[0].drift_size.finding);
  CHECK(back.completions[1].margins_rel == r.completions[1].margins_rel);
}

TEST_CASE("stories260K: the engine records top-5 and margins; batch-invariant never differs from the reference") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  PlanOptions plan;
  plan.prompts = {prompt_from_text("Once upon a time"), prompt_from_text("Lily wanted to")};
  plan.max_tokens = 24;
  plan.repeats = 1;
  plan.batch_sizes = {1, 3, 17};
  plan.positions = {"first", "last"};
  plan.filler_sets = 1;
  AuditReport r;
  RunControl ctl;
  run_local(plan, *model, r, ctl);
  analyze(r);
  REQUIRE(!r.completions.empty());
  for (const auto& c : r.completions) {
    REQUIRE(c.top_k == kTopRecorded);
    REQUIRE(c.top_ids.size() == c.tokens.size() * kTopRecorded);
    REQUIRE(c.margins_rel.size() == c.tokens.size());
    for (size_t t = 0; t < c.tokens.size(); ++t) {
      CHECK(c.top_ids[t * kTopRecorded] == c.tokens[t]);  // greedy: the chosen token is the top-1
      CHECK(c.top_logprobs[t * kTopRecorded] == c.logprobs[t]);
      CHECK(c.margins[t] >= 0.0f);
    }
  }
  bool seen_default = false;
  for (const auto& m : r.summary.modes) {
    CHECK(m.drift_size.bit_differ.n == 2 * 4);  // 5 contexts per prompt, one the reference
    CHECK(!m.drift_size.finding.empty());
    if (m.mode == "batch-invariant") {
      CHECK(m.drift_size.bit_differ.k == 0);
      CHECK(m.drift_size.max_dlogprob.value_or(-1) == 0.0);
    } else {
      seen_default = true;
      CHECK(m.drift_size.max_dlogprob.has_value());
    }
  }
  CHECK(seen_default);
  for (const auto& c : r.cases) {
    CHECK(c.drift_size.reference_context == "batch 1, position 0, repeat 0");
    CHECK(c.drift_size.fragile.has_value());
  }
  std::string term = to_terminal(r);
  CHECK(term.find("finding: batch-invariant (f32): bitwise identical to the reference context in all 8 completions") !=
        std::string::npos);
  std::string md = to_markdown(r);
  CHECK(md.find("## Size of the drift against the reference context") != std::string::npos);
  CHECK(md.find("## Glossary") != std::string::npos);
  std::string html = to_html(r);
  CHECK(html.find("id=\"glossary\"") != std::string::npos);
}

TEST_CASE("stories260K, the batch-sweep profile reduced (f32 and bf16): batch-invariant stays bitwise, default carries sizes") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  PlanOptions plan;
  apply_profile(find_profile("batch-sweep"), plan);
  REQUIRE(plan.precisions == std::vector<std::string>{"f32", "bf16"});  // the profile's precision axis
  // reduced to a few seconds: three prompts, 32 tokens, one repeat, four batch sizes
  plan.prompts = {prompt_from_text("Once upon a time"), prompt_from_text("The little dog was"),
                  prompt_from_text("Lily wanted to")};
  plan.max_tokens = 32;
  plan.repeats = 1;
  plan.batch_sizes = {1, 2, 8, 33};
  plan.positions = {"first", "last"};
  plan.filler_sets = 2;
  AuditReport r;
  RunControl ctl;
  run_local(plan, *model, r, ctl);
  analyze(r);
  // one case per prompt, mode and precision; every completion records its precision
  CHECK(r.cases.size() == 3 * 2 * 2);
  for (const auto& c : r.completions) CHECK((c.precision == "f32" || c.precision == "bf16"));
  // one headline row per (mode, precision)
  REQUIRE(r.summary.modes.size() == 4);
  // contexts per prompt: batch 1 once; batch 2, 8, 33 at two positions with two filler draws each
  const int compared = 3 * (1 + 3 * 2 * 2 - 1);
  int bf16_default = 0;
  for (const auto& m : r.summary.modes) {
    const ModeDriftSize& d = m.drift_size;
    CAPTURE(m.mode);
    CAPTURE(m.precision);
    CHECK(m.cases == 3);
    CHECK(d.bit_differ.n == compared);
    CHECK(d.max_dlogprob.has_value());
    CHECK(m.drift_size.finding.find(m.mode + " (" + m.precision + "): ") == 0);
    if (m.mode == "batch-invariant") {
      CHECK(d.bit_differ.k == 0);
      CHECK(d.token_differ.k == 0);
      CHECK(*d.max_dlogprob == 0.0);
      CHECK(m.divergent_cases == 0);
    } else {
      // default: the sizes are there whatever they are; the attribution covers the factors varied
      std::vector<std::string> names;
      for (const auto& f : d.factors) names.push_back(f.factor);
      CHECK(names == std::vector<std::string>{"batch_size", "position", "filler_set"});
      bf16_default += m.precision == "bf16";
      MESSAGE("stories260K reduced sweep: " << d.finding << "; token-differing completions "
                                            << rate_text(d.token_differ) << "; fragile steps " << d.fragile);
    }
  }
  CHECK(bf16_default == 1);
  for (const auto& c : r.cases) {
    REQUIRE(c.drift_size.fragile.has_value());
    CHECK(!c.drift_size.status.empty());
  }
  // the reports carry the precision per case and the attribution per (mode, precision)
  std::string md = to_markdown(r);
  CHECK(md.find("default (bf16), by batch\\_size") != std::string::npos);
  CHECK(md.find("| batch-invariant (bf16) |") != std::string::npos);
  CHECK(md.find("fragile tokens") != std::string::npos);
  // the cross-mode tables compare the outputs of every (mode, precision)
  REQUIRE(!r.cross_mode.empty());
  CHECK(r.cross_mode[0].table.values.size() == 4);
  // throughput rows per (mode, precision, batch size), each compared with default at its precision
  for (const auto& t : r.throughput) {
    CHECK((t.precision == "f32" || t.precision == "bf16"));
    if (t.mode == "batch-invariant") CHECK(t.ratio_vs_default.has_value());
  }
}
