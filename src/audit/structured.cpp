// Structured output of an analysed run: see include/repro/audit/structured.hpp and docs/REPORT-SCHEMA.md.
#include "repro/audit/structured.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "repro/audit/cases.hpp"
#include "repro/audit/stats.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"

namespace repro {

// ============================================================================ structured output

// Structured output of one case: the schema-valid rate (final answers and first answers), the
// agreement of the parsed JSON in canonical form, the same before retries, and the retries' cost.
void analyze_structured(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members) {
  StructuredCase sc;
  int valid = 0, valid_first = 0;
  std::set<std::string> json_final, json_first, raw_first;
  int invalid_final = 0, invalid_first = 0;
  for (int ci : members) {
    const Completion& c = all[ci];
    const bool ok = c.schema_valid.value_or(false);
    valid += ok;
    valid_first += ok && c.retries == 0;
    sc.retries += c.retries;
    sc.retry_tokens += c.retry_tokens;
    const bool retried = c.retries > 0;
    const std::string& first_text = retried ? c.first_text : c.text;
    raw_first.insert(retried ? (c.tokens_known ? tokens_sha256(c.first_tokens) : sha256_hex(c.first_text))
                             : output_hash(c));
    auto canon = [](const std::string& text, std::set<std::string>& seen, int& invalid) {
      nlohmann::json j;
      if (!parse_json(text, j))
        ++invalid;
      else
        seen.insert(canonical_answer(j));
    };
    canon(c.text, json_final, invalid_final);
    canon(first_text, json_first, invalid_first);
  }
  const int n = static_cast<int>(members.size());
  sc.valid = wilson(valid, n);
  sc.valid_first = wilson(valid_first, n);
  sc.json_unique = static_cast<int>(json_final.size());
  sc.json_invalid = invalid_final;
  sc.tara_json = n > 0 && invalid_final == 0 && json_final.size() == 1;
  sc.tarr_first = n > 0 && raw_first.size() == 1;
  sc.tara_json_first = n > 0 && invalid_first == 0 && json_first.size() == 1;
  cr.structured = sc;
}

// Per-field agreement of every --answer-json-path path over the case's completions.
void analyze_fields(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                    const AnswerExtractor& extractor) {
  const auto& paths = extractor.field_paths();
  cr.fields.clear();
  if (paths.empty()) return;
  std::vector<std::map<std::string, int>> counts(paths.size());
  std::vector<int> missing(paths.size(), 0);
  for (int ci : members) {
    auto vals = extractor.fields(all[ci].text);
    for (size_t i = 0; i < paths.size(); ++i) {
      if (vals[i])
        counts[i][*vals[i]]++;
      else
        missing[i]++;
    }
  }
  const int n = static_cast<int>(members.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    FieldAgreement f;
    f.path = paths[i];
    f.unique = static_cast<int>(counts[i].size());
    f.missing = missing[i];
    int top = 0;
    for (const auto& [v, k] : counts[i]) top = std::max(top, k);
    f.majority = wilson(top, n);
    f.agree = n > 0 && f.missing == 0 && f.unique == 1;
    cr.fields.push_back(std::move(f));
  }
}

// Structured output over a mode's cases (after retries and before).
void summarize_structured(ModeSummary& ms, const std::vector<CaseResult>& cases, const std::vector<Completion>& all) {
  StructuredSummary st;
  int valid = 0, valid_first = 0, n = 0, ncases = 0, tarr = 0, tarr_first = 0, tj = 0, tj_first = 0;
  std::vector<int> field_agree;
  for (const auto& cr : cases) {
    if (cr.mode != ms.mode || cr.precision != ms.precision || !cr.structured || cr.n == 0) continue;
    const StructuredCase& sc = *cr.structured;
    valid += sc.valid.k;
    valid_first += sc.valid_first.k;
    n += sc.valid.n;
    ++ncases;
    tarr += cr.tarr;
    tarr_first += sc.tarr_first;
    tj += sc.tara_json;
    tj_first += sc.tara_json_first;
    st.retries += sc.retries;
    st.retry_tokens += sc.retry_tokens;
    if (st.fields.empty())
      for (const auto& f : cr.fields) st.fields.push_back(FieldRate{f.path, {}});
    field_agree.resize(st.fields.size(), 0);
    for (size_t i = 0; i < cr.fields.size() && i < field_agree.size(); ++i) field_agree[i] += cr.fields[i].agree;
  }
  for (const auto& c : all)
    if (c.error.empty() && c.mode == ms.mode && c.precision == ms.precision && c.schema_valid) {
      st.requests++;
      st.tokens += c.completion_tokens > 0 ? c.completion_tokens : static_cast<int64_t>(c.tokens.size());
    }
  st.valid = wilson(valid, n);
  st.valid_first = wilson(valid_first, n);
  st.tarr = wilson(tarr, ncases);
  st.tarr_first = wilson(tarr_first, ncases);
  st.tara_json = wilson(tj, ncases);
  st.tara_json_first = wilson(tj_first, ncases);
  for (size_t i = 0; i < st.fields.size(); ++i) st.fields[i].agree = wilson(field_agree[i], ncases);
  ms.structured = st;
}

}  // namespace repro
