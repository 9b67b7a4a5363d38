// Batch-mate isolation (--isolation): each batch context runs twice, with its drawn batch mates and
// with batch mates of exactly the same shapes (batch size, positions, prompt and decode lengths) but
// other token contents. Kernels depend on shapes, not contents, so in any mode the probe's output must
// be the same bits in both; a difference is leakage between rows (a masking or KV-cache bug, a
// security property), never rounding.
//
// Endpoints: each co-batched level runs again with the fillers' words in reverse order (other contents;
// the server's usage counts say whether the token counts stayed equal). A server's batches are not the
// client's to shape, so a changed probe output is called leakage only on an endpoint that claims batch
// invariance (or a deterministic mode) and gave one output at every level with the drawn fillers;
// otherwise it is reported as changed but not attributable.
#pragma once
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Fills each case's isolation_pairs / isolation_leaks from its completions (local: pairs that differ
// only in mate_contents; endpoints: other-contents probes, and those matching no drawn output of their
// level), and each mode summary's isolation rate and finding (after compute_verdicts and
// decide_evidence).
void analyze_isolation(AuditReport& report);

}  // namespace repro
