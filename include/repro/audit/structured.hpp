// Structured output of an analysed run (a plan with a JSON Schema, --answer-json-path fields): per case
// the schema-valid rate, agreement of the parsed JSON and the same before retries; per field the
// agreement of its values; per mode the totals. Called by analyze() (src/audit/analysis.cpp).
#pragma once
#include <vector>

#include "repro/audit/answers.hpp"
#include "repro/audit/result.hpp"

namespace repro {

// Fills cr.structured from the case's members (indices into all, errors excluded): the schema-valid
// rate (final answers and first answers), the agreement of the parsed JSON in canonical form, the same
// before retries, and the retries' cost.
void analyze_structured(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members);
// Fills cr.fields: the agreement of every --answer-json-path path over the case's members.
void analyze_fields(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                    const AnswerExtractor& extractor);
// Fills ms.structured from the cases of mode ms.mode at precision ms.precision (after retries and
// before) and the requests and tokens of its completions.
void summarize_structured(ModeSummary& ms, const std::vector<CaseResult>& cases, const std::vector<Completion>& all);

}  // namespace repro
