// Canary: a rerun of a baseline's plan, classified for a scheduled job (`repro-audit canary`).
//
//   GREEN   identical: every case produced the same token outputs, the same answers and the same
//           bits (final-logits hash, chosen-token logprob bits) in every matched context, and the
//           model identity is unchanged.
//   YELLOW  bit-level or answer-preserving drift: the same tokens with other bits in some context,
//           or other tokens whose extracted answers are unchanged (an answer extractor is set).
//   RED     answer or token drift, a changed model identity (model file digest; an endpoint's
//           served model name or system_fingerprint), a changed engine, engine version or determinism
//           posture of an endpoint (named first), cases missing from the rerun, or a rerun that
//           could not vouch for anything (verdict "errors" or "interrupted").
//
// Sampled cases whose outputs the seed does not control (T > 0, more than one output in a run) are
// compared as distributions, not by their sets of outputs (repro/audit/distribution.hpp): the
// two-sample test of the baseline's completions against the rerun's is YELLOW below p = 0.05 and RED
// below p = 0.001; with fewer than 5 completions per side it cannot test (YELLOW, saying so; 10 or
// more per side give it useful power).
//
// Matching. Cases are matched by (prompt, decoding, mode or endpoint) as `diff` and `run --baseline`
// match them (match_cases, repro/audit/compare.hpp), across a deliberate change too: `--precision
// bf16` on an f32 baseline compares each mode's bf16 cases with its f32 ones, and says so.
// Token drift names where the majority outputs part, as text ("... the dog| ran" -> "... the dog| sat"). Token drift compares the set
// of distinct token outputs of a case (and the set of extracted answers), not completion by
// completion, so an endpoint that was already nondeterministic in the baseline is not flagged as long
// as it produces the same outputs. Bits are compared completion by completion in the same context
// (batch size, position, filler draw, seed, repeat, cache state), where both runs recorded them: the
// local engine gives the same bits for the same context run after run. An endpoint need not, so for
// endpoints only cases with one bit pattern in the baseline are compared bitwise.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

enum class CanaryLevel { Green = 0, Yellow = 1, Red = 2 };

struct CanaryResult {
  CanaryLevel level = CanaryLevel::Green;
  std::vector<std::string> alarms;  // one line per finding, RED ones first ("RED model digest ab12.. -> cd34..")
  int cases_compared = 0;
  int token_drift = 0, answer_drift = 0, answer_preserving = 0, bit_drift = 0;
  int distribution_tests = 0;       // sampled cases compared as distributions
  std::vector<std::string> mapped;  // modes compared across a deliberate change ("default (f32) -> default (bf16)")
};

const char* canary_level_name(CanaryLevel l);  // "GREEN", "YELLOW", "RED"
// The exit status of a level: GREEN 0, YELLOW 1, RED 5 (kExitCanaryRed; 2 stays a usage error).
int canary_exit_code(CanaryLevel l);

// Classifies `rerun` (analysed) against `baseline` (analysed, as loaded from its report.json).
CanaryResult classify_canary(const AuditReport& baseline, const AuditReport& rerun);

// The terminal / log form: the level, counts, then the alarm lines.
std::string canary_text(const CanaryResult& c);

}  // namespace repro
