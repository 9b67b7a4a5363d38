// What to do about what the run found: one list of remedies (AuditReport::advice), computed here once
// from the findings and rendered by every writer ("What to do"). Each remedy names the finding it
// answers, its cost as this run measured it (speed_ratio, with its spread) or "not measured", and, for a
// serving engine's own switch, the limits its documentation states and where.
//
// Rules (src/audit/advice.cpp):
//  - a local mode diverged at a precision and batch-invariant ran at that precision without divergence:
//    batch-invariant kernels, at batch-invariant's measured throughput ratio; batch-invariant diverged
//    too: it is not batch variance alone; batch-invariant did not run: rerun with it;
//  - a mode diverged at bf16 or f16 and the same mode did not at f32: keep f32 activations, at f32's
//    measured throughput against that precision in the same contexts;
//  - replicated shards whose hosts disagree in default mode: pin OPENBLAS_CORETYPE on every host;
//  - an endpoint diverged: its engine's documented switch (vLLM VLLM_BATCH_INVARIANT=1, SGLang
//    --enable-deterministic-inference) with its documented limits, or, when the posture does not name one
//    of those engines, both, conditionally; the divergent cases carry a curl reproducer;
//  - an endpoint's responses are confirmed replays from a cache: turn the cache off;
//  - nothing diverged: nothing to change.
#pragma once
#include "repro/audit/result.hpp"

namespace repro {

// Fills r.advice (analyze() calls it last).
void compute_advice(AuditReport& r);

// The documentation the engine advice cites.
inline constexpr const char* kVllmBatchInvarianceDoc = "https://docs.vllm.ai/en/stable/features/batch_invariance/";
inline constexpr const char* kSglangDeterministicDoc =
    "https://docs.sglang.io/advanced_features/deterministic_inference.html";

}  // namespace repro
