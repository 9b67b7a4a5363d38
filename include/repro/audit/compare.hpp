// Run against run: one analysed run compared with an earlier one (its golden report).
//   - `run --baseline FILE` and `diff A B`: drift (compute_drift), what changed in how the runs were
//     made (config_drift), and the report's `baseline` section (baseline_result); analyze() computes
//     it when given the golden report, and the verdict becomes "drift" when a case changed.
//   - `canary`: GREEN / YELLOW / RED (classify_canary, include/repro/audit/canary.hpp), on the same
//     case matching (match_cases).
// Not to be confused with the drift *size* of a completion against the reference context of its own
// run (include/repro/audit/drift_size.hpp).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// ---- case matching
// Cases of run A and run B matched by (prompt, decoding, mode): the mode with its precision ("default
// (bf16)"), unless A was written before precisions were recorded (it ran one precision and is matched
// by mode alone).
struct MatchedCase {
  const CaseResult* a = nullptr;  // null: the case is only in B
  const CaseResult* b = nullptr;  // null: the case is only in A
};
// A deliberate change of configuration (`canary --precision bf16`, another mode, a renamed endpoint)
// changes a case's mode label; the cases are mapped across it instead of counting as removed and
// added. Of the labels only one run has, A's label L and B's label M are paired when
//   1. L and M are the same mode at other precisions and neither has another candidate, or
//   2. exactly one such label is left in each run (a mode or endpoint swapped for another).
// Anything else stays unmatched (removed / added), as a guess would compare unrelated cases.
struct CaseMatching {
  bool with_precision = false;
  std::vector<MatchedCase> cases;  // A's cases in A's order, then B's cases that A lacks in B's order
  std::map<std::string, std::string> b_to_a;  // B's mode label -> A's, for the labels mapped across a change
  std::vector<std::string> mapped;            // "default (f32) -> default (bf16)", one per pair, A's order
  // The mode as the matching names it: mode_label(mode, precision), or the mode alone.
  std::string mode_of(const std::string& mode, const std::string& precision) const;
  // A mode of run B named as its counterpart in run A (the same name unless mapped across a change).
  std::string mode_of_b(const std::string& mode, const std::string& precision) const;
};
CaseMatching match_cases(const AuditReport& a, const AuditReport& b);

// ---- drift between two runs; used by `diff`, `run --baseline` and canary's rerun
struct CaseDrift {
  std::string prompt_id, decoding_id, mode;
  std::string change;              // "added" (only in B), "removed" (only in A), "changed"
  std::vector<std::string> what;   // e.g. "majority output 1a2b3c4d -> 5e6f7a8b", "unique 1 -> 3"
};
struct Drift {
  std::string verdict_a, verdict_b;
  std::vector<std::string> mapped;  // modes compared across a deliberate change (CaseMatching::mapped)
  std::vector<std::string> config;  // configuration differences (model/profile/prompts digests, endpoints, plan fields)
  std::vector<CaseDrift> cases;    // in A's case order, then added cases in B's order
  int unchanged = 0;
  bool drifted() const { return !cases.empty() || verdict_a != verdict_b; }
};
// Cases are matched by match_cases. A case drifts when its majority output hash, unique count or case
// verdict (divergent or not) changed, or (structured output) its schema-valid count or TARa on parsed JSON.
Drift compute_drift(const AuditReport& a, const AuditReport& b);
// "model digest 1a2b.. -> 3c4d..", "plan.max_tokens 8 -> 16": what differs in how the two runs were made.
std::vector<std::string> config_drift(const AuditReport& a, const AuditReport& b);

// The golden report a run is compared with (`run --baseline`): as read, its file, and its recorded
// digest with the check of the content against it.
struct GoldenReport {
  AuditReport report;
  std::string file;
  std::string digest;
  bool digest_ok = false;
};
// The `baseline` section of a run compared with a golden report (file, its digest and check, changes).
BaselineResult baseline_result(const Drift& d, const std::string& file, const std::string& digest, bool digest_ok);

// ---- small helpers for reading two runs' records side by side
std::string short_hash(const std::string& h);  // first 12 hex digits
// The string at record[a][b] ("digests", "model_sha256" of a report's environment); "" when absent or
// not a string.
std::string recorded_text(const nlohmann::json& record, const char* a, const char* b);

}  // namespace repro
