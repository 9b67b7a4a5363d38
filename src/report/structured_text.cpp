// Structured output sections shared by the Markdown, HTML and terminal reports, as plain-text tables
// (each writer escapes and renders them): schema-valid rates and JSON agreement per mode, after and
// before validation with retry, the retries' cost, and per-field agreement of the JSON paths.
#include <fmt/core.h>

#include "repro/audit/stats.hpp"
#include "repro/report/report.hpp"

namespace repro {

bool has_structured(const AuditReport& r) {
  for (const auto& m : r.summary.modes)
    if (m.structured) return true;
  return false;
}

namespace {
int retry_invalid_of(const AuditReport& r) {
  if (!r.plan.is_object()) return 0;
  auto it = r.plan.find("retry_invalid");
  return it != r.plan.end() && it->is_number_integer() ? it->get<int>() : 0;
}
}  // namespace

TextTable structured_mode_table(const AuditReport& r) {
  TextTable t;
  const bool retry = retry_invalid_of(r) > 0;
  t.head = {"mode", "schema-valid", "TARr@N (raw text)", "TARa@N (parsed JSON)"};
  if (retry) t.head.insert(t.head.begin() + 2, "schema-valid before retry");
  for (const auto& m : r.summary.modes) {
    if (!m.structured) continue;
    const StructuredSummary& s = *m.structured;
    std::vector<std::string> row = {mode_label(m.mode, m.precision), rate_text(s.valid), rate_text(s.tarr),
                                    rate_text(s.tara_json)};
    if (retry) row.insert(row.begin() + 2, rate_text(s.valid_first));
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextTable retry_table(const AuditReport& r) {
  TextTable t;
  if (retry_invalid_of(r) <= 0) return t;
  t.head = {"mode", "schema-valid before retry", "after", "TARr@N before retry", "after", "TARa@N (JSON) before retry",
            "after", "extra requests", "extra tokens"};
  for (const auto& m : r.summary.modes) {
    if (!m.structured) continue;
    const StructuredSummary& s = *m.structured;
    auto share = [](int64_t extra, int64_t base) {
      return base > 0 ? fmt::format("{} (+{})", extra, fmt_percent(static_cast<double>(extra) / static_cast<double>(base)))
                      : std::to_string(extra);
    };
    t.rows.push_back({mode_label(m.mode, m.precision), rate_text(s.valid_first), rate_text(s.valid),
                      rate_text(s.tarr_first), rate_text(s.tarr), rate_text(s.tara_json_first), rate_text(s.tara_json),
                      share(s.retries, s.requests), share(s.retry_tokens, s.tokens)});
  }
  return t;
}

TextTable field_agreement_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "field", "cases where all completions agree"};
  for (const auto& m : r.summary.modes) {
    if (!m.structured) continue;
    for (const auto& f : m.structured->fields) t.rows.push_back({mode_label(m.mode, m.precision), f.path, rate_text(f.agree)});
  }
  return t;
}

std::string structured_case_text(const CaseResult& c) {
  std::string o;
  if (c.structured) {
    const StructuredCase& s = *c.structured;
    o = fmt::format("schema-valid {} of {}; parsed JSON {} ({} distinct value{}, {} not JSON)", s.valid.k, s.valid.n,
                    s.tara_json ? "identical (TARa)" : "differs", s.json_unique, s.json_unique == 1 ? "" : "s",
                    s.json_invalid);
    if (s.retries > 0)
      o += fmt::format("; {} retr{} (+{} tokens), before retries: schema-valid {} of {}, TARr {}, JSON TARa {}",
                       s.retries, s.retries == 1 ? "y" : "ies", s.retry_tokens, s.valid_first.k, s.valid_first.n,
                       s.tarr_first ? "yes" : "no", s.tara_json_first ? "yes" : "no");
  }
  if (!c.fields.empty()) {
    o += o.empty() ? "fields: " : "; fields: ";
    for (size_t i = 0; i < c.fields.size(); ++i) {
      const FieldAgreement& f = c.fields[i];
      o += (i ? ", " : "") + f.path + " " +
           (f.agree ? std::string("agree") : fmt::format("{} values, {} missing", f.unique, f.missing));
    }
  }
  return o;
}

std::vector<std::pair<std::string, std::string>> structured_glossary(const AuditReport& r) {
  std::vector<std::pair<std::string, std::string>> g;
  if (!has_structured(r)) return g;
  g.push_back({"schema-valid", "the completion's text parses as JSON and conforms to the plan's JSON Schema "
                               "(--json-schema); locally decoding is constrained to it, so only a completion cut "
                               "by --max-tokens can fail."});
  g.push_back({"TARa@N (parsed JSON)", "all N completions parse as JSON and are one value in canonical form (keys "
                                       "sorted, no whitespace, 1.0 = 1): formatting differences do not count."});
  if (retry_invalid_of(r) > 0)
    g.push_back({"before retry", "the first answer of every request; --retry-invalid re-requested non-conforming "
                                 "answers (sampled configs with the next seeds) and the report keeps the last one."});
  return g;
}

}  // namespace repro
