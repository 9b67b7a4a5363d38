// Size of the drift against a reference context, per case and per mode. See docs/REPORT-SCHEMA.md
// ("drift") for the definitions.
//
// Reference: per case, the completion of the reference context: batch 1 (remote: concurrency 1),
// position 0, first filler draw, cold cache, first repeat; when the plan has no such context, the
// nearest one in that order of keys. Every other completion of the case is compared with it:
//  - bitwise: tokens, final-logits SHA-256 and the bits of every chosen-token logprob;
//  - token level: the token ids (or the text when ids are unknown);
//  - per step, over the common token prefix: |logprob - reference logprob| of the chosen token;
//  - at the first step where tokens differ: the top-k KL divergence KL(reference || other) over
//    the reference's recorded top-k tokens plus one bucket for the rest of the vocabulary. A token
//    of the reference's top-k that is missing from the other's top-k gets the other's tail mass
//    shared evenly, capped at the other's k-th probability. It is an approximation of the full
//    KL, computed from what the completions record (k = 5 on the local engine).
// Fragile steps: steps of the reference whose relative top-2 logit margin is below
// AuditReport::fragile_margin (default 1e-3): where a reordered sum can flip the greedy choice.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Index of the reference completion among `members` (indices into all, errors excluded); -1 if empty.
int reference_completion(const std::vector<Completion>& all, const std::vector<int>& members);

// Top-k KL(P || Q) in nats for two steps' recorded top-k (ids, logprobs; -1 ids are absent), as
// described above. Never negative.
double topk_kl(const int* p_ids, const float* p_lp, const int* q_ids, const float* q_lp, int k);

// Fills cr.drift_size from the case's members (indices into all, errors excluded).
void analyze_drift_size(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                        double fragile_margin);

// Fills ms.drift_size from the cases of mode ms.mode at precision ms.precision (their drift already
// analysed); the finding names both ("default (bf16): ...").
void summarize_drift_size(ModeSummary& ms, const std::vector<CaseResult>& cases);

}  // namespace repro
