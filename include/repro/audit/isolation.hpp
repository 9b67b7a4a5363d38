// Batch-mate isolation (--isolation): each batch context runs twice, with its drawn batch mates and
// with batch mates of exactly the same shapes (batch size, positions, prompt and decode lengths) but
// other token contents. Kernels depend on shapes, not contents, so in any mode the probe's output must
// be the same bits in both; a difference is leakage between rows (a masking or KV-cache bug, a
// security property), never rounding.
#pragma once
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Fills each case's isolation_pairs / isolation_leaks from its completions (pairs that differ only
// in mate_contents), and each mode summary's isolation rate and finding (after compute_verdicts).
void analyze_isolation(AuditReport& report);

}  // namespace repro
