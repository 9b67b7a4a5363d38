// Verdicts and the CI gate, computed from an analysed report.
//
// Every mode (local) or endpoint (remote) gets a verdict by one rule, gated or not:
//   "not run"      no case of it ran;
//   "errors"       no case got a completion, or its error rate (failed / finished requests, probes
//                  and fillers) is over thresholds.max_error_rate;
//   "divergent"    more than max_divergent divergent cases, or a TARr rate (over the cases that got
//                  completions) below min_tarr;
//   "unverified"   (endpoints) reproducible, but no concurrency level co-batched the probe with
//                  another request (repro/audit/cobatch.hpp): nothing was proven about batching; or
//                  a cache-hit header or repeated response id confirms that responses were replayed
//                  from a cache (repro/audit/response_cache.hpp);
//   "no answer"    an answer extractor found no answer in any completion of some case whose outputs
//                  are identical (such a case is "no answer", not divergent);
//   "reproducible" otherwise.
// The gate is a separate column: "pass" when a gated mode is reproducible, "fail" otherwise,
// "not gated" ("no answer" passes: the outputs are reproducible). The run's verdict: "interrupted";
// else "errors" when a gated mode failed on errors or did not run, or no mode is gated; else
// "divergent"; else "drift" when a --baseline drifted; else "unverified" when a gated endpoint is
// unverified (exit 4); else "no answer" when a gated mode's verdict is
// "no answer" (exit 0, with a warning); else "reproducible". Errors never count as divergence, nor
// does a missing answer. A shard report (run --shard) leaves out the modes it has no cases of, and one
// with no gated mode is not an error; a merge with missing shards or cases (report merge
// --allow-partial) is "incomplete" (exit 1), never a pass.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Whether the thresholds apply to `mode` (an empty thresholds.modes list gates every mode).
bool mode_gated(const Thresholds& t, const std::string& mode);

// The modes or endpoint labels the run planned: environment.endpoints[].label for remote runs,
// else plan.modes. Empty when the report records neither.
std::vector<std::string> planned_modes(const AuditReport& r);

// Fills summary.modes (in `mode_order`, then any planned mode not in it) and summary's totals and
// verdict from the analysed cases. Called by analyze().
void compute_verdicts(AuditReport& r, std::vector<std::string> mode_order);

// A case's verdict word: "no completions", "divergent", "no answer" or "reproducible".
std::string case_verdict(const CaseResult& c);

// Exit status for a finished, analysed report: 130 interrupted, 3 errors, 1 divergent, drift or
// incomplete, 4 unverified, 0 reproducible or no answer (see include/repro/common/error.hpp).
int exit_code_for(const AuditReport& report);

// Checks --gate-modes (or the profile's gate modes) against the modes or endpoint labels of the
// run. Throws UsageError naming `flag`, the unknown entry, a close match and the run's modes.
void check_gate_modes(const std::vector<std::string>& gate_modes, const std::vector<std::string>& run_modes,
                      const std::string& flag);

// The first error of each kind per mode/endpoint, for the terminal summary: kind is the failure
// cause ("http_4xx", "connect", ...) with the HTTP status when there is one.
struct ErrorKind {
  std::string mode;
  std::string kind;               // e.g. "HTTP 404", "connect", "timeout"
  std::string first;              // the first such error's message (server message included)
  int count = 0;
};
std::vector<ErrorKind> error_kinds(const AuditReport& r);

}  // namespace repro
