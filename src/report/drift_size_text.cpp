// The drift-size sections shared by the Markdown and HTML reports, as plain-text tables (each writer
// escapes and renders them), and the glossary.
#include <fmt/core.h>

#include "repro/audit/stats.hpp"
#include "repro/report/report.hpp"

namespace repro {

TextTable drift_mode_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "completions differing bitwise", "differing in tokens", "cases with token divergence",
            "max |dlogprob|", "mean |dlogprob|", "max top-5 KL", "fragile tokens", "reproducible here, fragile"};
  for (const auto& m : r.summary.modes) {
    const ModeDriftSize& d = m.drift_size;
    t.rows.push_back({mode_label(m.mode, m.precision), rate_text(d.bit_differ), rate_text(d.token_differ), rate_text(d.token_divergent_cases),
                      fmt_dlogprob(d.max_dlogprob), fmt_dlogprob(d.mean_dlogprob), fmt_dlogprob(d.max_topk_kl),
                      std::to_string(d.fragile), std::to_string(d.fragile_cases)});
  }
  return t;
}

std::vector<std::pair<std::string, TextTable>> drift_factor_tables(const AuditReport& r) {
  std::vector<std::pair<std::string, TextTable>> out;
  for (const auto& m : r.summary.modes)
    for (const auto& f : m.drift_size.factors) {
      TextTable t;
      t.head = {f.factor, "completions", "differ bitwise", "differ in tokens", "max |dlogprob|"};
      for (size_t i = 0; i < f.values.size(); ++i)
        t.rows.push_back({f.values[i].empty() ? "(none)" : f.values[i], std::to_string(f.n[i]),
                          std::to_string(f.bit_differ[i]), std::to_string(f.token_differ[i]),
                          fmt_dlogprob(f.max_dlogprob[i])});
      out.emplace_back(mode_label(m.mode, m.precision) + ", by " + f.factor, std::move(t));
    }
  return out;
}

std::vector<std::pair<std::string, std::string>> structured_glossary(const AuditReport& r);  // structured_text.cpp

std::vector<std::pair<std::string, std::string>> glossary(const AuditReport& r) {
  std::vector<std::pair<std::string, std::string>> g = {
      {"TARr@N", "share of cases whose N raw completions are all identical (token ids; the text when ids are unknown)."},
      {"TARa@N", "the same after the answer extractor (regex or JSON path): identical answers, all present."},
      {"bit-divergent", "identical tokens, but the final logits hash or the bits of a chosen-token logprob differ: the "
                        "numbers moved without changing the text."},
      {"reference context", "per case, the completion run alone: batch 1, position 0, first filler draw, first repeat "
                            "(remote: concurrency 1). Drift sizes compare every other completion with it."},
      {"|dlogprob|", "per step, |logprob - reference logprob| of the chosen token, over the common token prefix "
                     "(where both chose the same token)."},
      {"top-5 KL", "KL(reference || other) at the first step where tokens differ, over the reference's 5 most likely "
                   "tokens plus one bucket for the rest of the vocabulary (an approximation of the full KL from the "
                   "recorded top-5)."},
      {"fragile", fmt::format("a step of the reference whose top-2 logit margin, relative to the larger of the two "
                              "logits, is below {:g}: a reordered sum elsewhere (another batch size, kernel or GPU) "
                              "can flip the chosen token there.",
                              r.fragile_margin)},
      {"reproducible here, fragile", "no completion's tokens differ from the reference in this run, but the reference "
                                     "has fragile steps: another serving stack may still diverge."},
      {"95% interval", "Wilson score interval of a rate: \"0 of 120 -> below 3.1%\" means the true rate is below 3.1% "
                       "at 95% confidence."},
  };
  for (auto& e : structured_glossary(r)) g.push_back(std::move(e));
  if (!r.evidence.empty()) {
    g.push_back({"co-batched", "a concurrency level whose probe overlapped other requests (client side) and, where the "
                               "server says, ran together with them (its running count or the batch it reports)."});
    g.push_back({"control arm", "concurrency 1: the probe sent alone while every filler is idle."});
    g.push_back({"UNVERIFIED", "an endpoint whose replays were reproducible but none of whose levels was co-batched: "
                               "they prove nothing about batch invariance. Never a pass (exit 4 when gated)."});
  }
  return g;
}

}  // namespace repro
