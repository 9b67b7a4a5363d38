// Speculative decoding as an audit axis (run --speculative off,ngram:3,draft:FILE:4): every batch
// context runs with each setting, so each completion with speculation has a twin without it in the
// same context. This compares them, per mode and precision (ModeSummary::speculative, spec_groups,
// spec_finding): how many greedy completions fork and where, which settings agree with each other,
// and the acceptance of the drafts. In batch-invariant and deterministic modes a verified row is the
// decoded row bit for bit, so nothing forks; in default mode the verify rows' shapes change the
// reduction order, and the forks are measured, never hidden.
#pragma once
#include "repro/audit/result.hpp"

namespace repro {

// Fills ModeSummary::speculative / spec_groups / spec_finding from the completions; nothing without
// run --speculative.
void analyze_speculative(AuditReport& report);

}  // namespace repro
