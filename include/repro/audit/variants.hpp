// Prompt variants (layer 3 of reproducibility): a prompts file may hold several variants of one task
// ({"task": ..., "variant": ..., "prompt"|"messages": ...}), e.g. a free-form prompt, a deterministic
// structure (task, output format, requirements, an "N/A" rule, no commentary) and the same with
// few-shot examples and negative instructions. analyze() compares them per variant and per task:
//
//  - TARr@N: share of the variant's cases (decoding x mode x precision) whose N raw outputs are all
//    identical, with its 95% Wilson interval;
//  - share of completions differing in tokens (and bitwise) from their case's reference completion
//    (the drift reference of repro/audit/drift_size.hpp), with intervals;
//  - TARa@N: share of cases whose N extracted answers agree (with --answer-regex/--answer-json-path).
//
// Ranking inside a task (rank 1 = most reproducible): lowest token-differ share, then highest TARr@N,
// then highest TARa@N, then lowest bit-differ share, then file order. The ranking is significant when
// the best variant's token-differ interval is disjoint from every other variant's; otherwise the
// finding says which intervals overlap.
#pragma once
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Fills report.variants from report.prompt_variants and report.cases (their drift already analysed).
void analyze_variants(AuditReport& report);

}  // namespace repro
