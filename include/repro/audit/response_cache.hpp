// Response-cache awareness for endpoints. A gateway, proxy or provider that caches responses replays
// the first answer to every identical request: the run then looks reproducible while the model
// behind it is not. analyze() counts three signs per endpoint over its successful completions:
//
//  - a cache-hit header: x-cache, x-cache-status, x-proxy-cache, x-vercel-cache, helicone-cache or any
//    header whose name ends in "cache-status" (cf-cache-status, ...) with a value containing HIT or
//    STALE; or age with a value above 0 (the client keeps them: cache_hit_header in repro/remote/client.hpp);
//  - a repeated response id: the same non-empty id and the same output as an earlier completion of
//    the same case (real servers give every response its own id);
//  - near-zero latency: a completion whose latency is at most kFastReplayShare of the slowest
//    completion of its case under the same load (one concurrency level; the cache probe's cold and
//    warm requests run alone, as concurrency 1's do) and at least kFastReplayGapS below it, with the same output as another completion of
//    the case (a replay skips the generation the slowest one paid for), counted only when that
//    context has at least two such completions (a pattern, not one outlier). Latencies are never
//    compared across levels: a request alone is rightly faster than one among 32.
#pragma once
#include <optional>
#include <string>

#include "repro/audit/result.hpp"

namespace repro {

inline constexpr double kFastReplayShare = 0.05;  // at most 5% of the case's slowest latency
inline constexpr double kFastReplayGapS = 0.1;    // and at least 100 ms faster than it

// The signs of one endpoint (mode) at one precision over its cases; unset for local modes.
// compute_verdicts (repro/audit/verdict.hpp) stores them in summary.modes[].response_cache.
std::optional<ResponseCacheSigns> response_cache_signs(const AuditReport& report, const std::string& mode,
                                                      const std::string& precision);
// A confirmed replay: a cache-hit header or a repeated response id (near-zero latency alone is a sign,
// not a proof). A confirmed replay makes an otherwise reproducible endpoint UNVERIFIED (exit 4): its
// identical outputs say nothing about the model behind the cache.
bool cache_confirmed(const ResponseCacheSigns& s);

}  // namespace repro
