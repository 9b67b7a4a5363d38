// One case (prompt, decoding, mode, precision) of an analysed run: clusters of identical outputs, the
// majority, first divergences, families, the bitwise tier, TARr/TARa and the factor tables
// (include/repro/audit/factors.hpp). analyze() (src/audit/analysis.cpp) groups the completions into
// cases and calls analyze_case on each.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/answers.hpp"
#include "repro/audit/result.hpp"

namespace repro {

// Family linkage threshold: two clusters belong to the same family when their normalised token edit
// distance (Levenshtein / max(len)) is <= this value (single linkage).
inline constexpr double kFamilyThreshold = 0.2;

// ---- building blocks (exposed for tests and the writers) ----

// SHA-256 of token ids as int32 little-endian.
std::string tokens_sha256(const std::vector<int>& tokens);

// Levenshtein distance between a and b if it is <= max_dist, otherwise max_dist + 1. Banded, with
// early exit; common prefix and suffix are stripped first.
int edit_distance_bounded(const std::vector<int>& a, const std::vector<int>& b, int max_dist);
// Exact Levenshtein / max(len) in [0, 1] (0 for two empty sequences).
double normalized_edit_distance(const std::vector<int>& a, const std::vector<int>& b);


// A completion from an endpoint (it carries a cache state, a response id, a fingerprint, a served
// model or a cache header); completions of the local engine carry none.
bool is_remote_completion(const Completion& c);
// The strings of a list in the report's plan block (plan.devices, plan.speculative); empty when the
// key is absent or not an array, non-string entries skipped.
std::vector<std::string> plan_strings(const AuditReport& r, const char* key);
// The hash a case clusters by: of the token ids (tokens_sha256), or of the text when ids are unknown.
std::string output_hash(const Completion& c);

// Fills cr's clusters (majority first), unique count, TARr, first divergences, families, bitwise tier,
// answers (with `extractor`) and factor tables from `members` (indices into `all`, errors excluded);
// `hashes[i]` is output_hash(all[i]).
void analyze_case(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                  const std::vector<std::string>& hashes, const AnswerExtractor& extractor);

}  // namespace repro
