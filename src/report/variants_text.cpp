// The prompt-variant and response-cache sections shared by the Markdown, HTML and terminal reports,
// as plain-text tables and finding lines (each writer escapes and renders them).
#include <fmt/core.h>

#include "repro/audit/response_cache.hpp"
#include "repro/audit/stats.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {
std::string rank_text(const TaskVariants& t, const VariantResult& v) {
  if (v.variant.empty()) return "all variants";
  if (t.best.empty()) return t.variants.size() > 1 ? "tie" : "-";
  if (v.variant == t.best) return t.significant ? "1 (most reproducible)" : "1 (not significant)";
  return std::to_string(v.rank);
}
}  // namespace

TextTable variants_table(const AuditReport& r) {
  TextTable t;
  const bool answers = !r.answer_regex.empty() || !r.answer_json_path.empty();
  t.head = {"task", "variant", "cases", "completions", "TARr@N (95% interval)", "tokens differ from reference",
            "bits differ from reference"};
  if (answers) t.head.push_back("TARa@N (95% interval)");
  t.head.insert(t.head.end(), {"mean unique", "rank"});
  for (const auto& task : r.variants) {
    auto row = [&](const VariantResult& v) {
      std::vector<std::string> cells = {task.task,
                                        v.variant.empty() ? "(all variants)" : v.variant,
                                        std::to_string(v.cases),
                                        std::to_string(v.completions),
                                        rate_text(v.tarr),
                                        rate_text(v.token_differ),
                                        rate_text(v.bit_differ)};
      if (answers) cells.push_back(v.tara ? rate_text(*v.tara) : "-");
      cells.push_back(fmt::format("{:.2f}", v.mean_unique));
      cells.push_back(rank_text(task, v));
      t.rows.push_back(std::move(cells));
    };
    for (const auto& v : task.variants) row(v);
    row(task.overall);
  }
  return t;
}

std::vector<std::string> variant_findings(const AuditReport& r) {
  std::vector<std::string> out;
  for (const auto& t : r.variants)
    if (!t.finding.empty()) out.push_back(t.finding);
  return out;
}

TextTable response_cache_table(const AuditReport& r) {
  TextTable t;
  t.head = {"endpoint", "completions", "cache-hit header", "repeated response id", "near-zero latency",
            "look replayed (95% interval)", "headers seen"};
  for (const auto& m : r.summary.modes) {
    if (!m.response_cache) continue;
    const ResponseCacheSigns& s = *m.response_cache;
    std::string headers;
    for (const auto& h : s.headers) headers += (headers.empty() ? "" : " | ") + h;
    t.rows.push_back({mode_label(m.mode, m.precision), std::to_string(s.completions), std::to_string(s.header_hits),
                      std::to_string(s.repeated_ids), std::to_string(s.fast_replays), rate_text(s.replayed),
                      headers.empty() ? "-" : headers});
  }
  return t;
}

std::vector<std::string> response_cache_findings(const AuditReport& r) {
  std::vector<std::string> out;
  for (const auto& m : r.summary.modes)
    if (m.response_cache && !m.response_cache->finding.empty()) out.push_back(m.response_cache->finding);
  return out;
}

std::string variants_intro() {
  return "Variants of one task (prompts file records with \"task\" and \"variant\"), each over every decoding, mode "
         "and precision it ran in. Rank 1 has the fewest completions differing in tokens from their case's reference "
         "(ties: higher TARr@N, higher TARa@N, fewer bitwise differences); it is significant only when its 95% "
         "interval is disjoint from every other variant's.";
}

std::string response_cache_intro() {
  return fmt::format(
      "Signs that an endpoint replayed cached responses: a response header reporting a cache hit (x-cache, "
      "*cache-status, age > 0, ...), the same response id and output as an earlier completion of the case, or "
      "near-zero latency (at most {:.0f}% of the case's slowest completion and at least {:.0f} ms below it, with a "
      "repeated output, in at least two completions of the case). A cache hides nondeterminism instead of removing it.",
      kFastReplayShare * 100, kFastReplayGapS * 1000);
}

}  // namespace repro
