// Co-batching evidence: did a remote probe really share the server with other requests?
//
// Client side, per probe: how many other requests of the level were in flight during the probe's
// lifetime (send to last byte, monotonic clock): the fewest at any moment and the time-weighted mean.
// Server side, per level: the server's own running count sampled while the level ran (/metrics,
// /slots) and, per response, the largest batch the request's decoding shared (repro-audit serve's
// extension field). A level is co-batched when some probe overlapped another request (client) and,
// where the server says, the server ran two or more requests at once. An endpoint none of whose
// levels above concurrency 1 was co-batched is UNVERIFIED: its concurrency sweep proves nothing about
// batch invariance.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"
#include "repro/remote/server_metrics.hpp"

namespace repro {

// One request's lifetime on the monotonic clock.
struct Interval {
  double start = 0, end = 0;
};

// Fills others_min, others_mean (and returns the most at once) for the request `self` of `all`:
// the other intervals that overlap it, counted over self's lifetime.
int overlap_with_others(const std::vector<Interval>& all, size_t self, int& others_min, double& others_mean);

// Adds one level's probes (and what the server said during it: the running-count sampler's summary,
// repro/remote/server_metrics.hpp) to the endpoint's evidence in `report.evidence` (created when
// missing), merged with earlier probes of the same level.
void record_level(AuditReport& report, const std::string& endpoint, int concurrency,
                  const std::vector<Completion>& probes, const ServerMetricsSummary& server);

// Decides every level's co_batched/evidence and every endpoint's verified/finding (called by analyze()).
void decide_evidence(AuditReport& report);

// The one line every format shows for an endpoint that is not verified.
inline constexpr const char* kUnverifiedWhy =
    "no probe shared the server with another request: the concurrency levels prove nothing about batch invariance";

// The endpoint's evidence record, or nullptr.
const EndpointEvidence* find_evidence(const AuditReport& report, const std::string& endpoint);
EndpointEvidence& evidence_for(AuditReport& report, const std::string& endpoint);

// One line: "engine vllm 0.6.3, deterministic mode unknown, batch invariance not claimed".
std::string posture_line(const EndpointPosture& p);

}  // namespace repro
