// Routing of a mixture of experts in run reports (local engine): each completion's routing trace
// (Completion::routing, recorded by the runner for the probe) against its case's reference
// completion (the drift-size reference, repro/audit/drift_size.hpp), over the common token prefix
// through the step where the tokens first differ: up to there both saw the same tokens, so a route
// that differs was flipped by the numerics (in default mode, by the batch's shape), not by the text.
//  - per case (CaseResult::routing): (step, layer) pairs compared and flipped (expert sets differ),
//    per layer; each flipped completion's first flip (step, layer) and its first token divergence;
//    the reference's fragile routes (top-k margin below the report's fragile_margin: the idea of a
//    fragile token, for the router; gate values are probabilities, so the margin needs no scaling);
//  - per mode and precision (ModeSummary::routing, routing_finding): the same summed, how often the
//    first flip comes at or before the first token divergence, and one line: "routing, default
//    (f32): 12% of (step, layer) pairs flip against the reference; the first flip comes at or before
//    the first token divergence in 5 of 6 diverging completions", or "no routing flips in N
//    completions".
// A report without traces (a dense model, endpoints) gets none of these fields.
#pragma once
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Sets Completion::routing_vs_reference of the case's members ("same" / "flipped" against
// `reference`, an index into all; "" without traces on both) and returns the case's routing, unset
// when no member has a trace. members: indices into all, errors excluded.
std::optional<CaseRouting> compare_routing(std::vector<Completion>& all, const std::vector<int>& members,
                                           int reference, double fragile_margin);

// Fills ModeSummary::routing / routing_finding from the cases' routing (after compute_verdicts).
void summarize_routing(AuditReport& r);

}  // namespace repro
