// Signs of replayed cached responses per endpoint: see include/repro/audit/response_cache.hpp.
#include "repro/audit/response_cache.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "repro/audit/stats.hpp"

namespace repro {

namespace {

bool from_endpoint(const Completion& c) {
  return !c.cache_state.empty() || !c.response_id.empty() || !c.system_fingerprint.empty() ||
         !c.response_model.empty() || !c.cache_header.empty();
}

}  // namespace

std::optional<ResponseCacheSigns> response_cache_signs(const AuditReport& r, const std::string& mode,
                                                      const std::string& precision) {
  const auto& all = r.completions;
  {
    ResponseCacheSigns s;
    bool endpoint = false;
    std::set<int> replayed;
    for (const auto& c : r.cases) {
      if (c.mode != mode || c.precision != precision) continue;
      // The case's successful completions with their output cluster, in the order they were recorded.
      std::vector<std::pair<int, const Cluster*>> members;
      for (const auto& cl : c.clusters)
        for (int i : cl.members) members.emplace_back(i, &cl);
      std::sort(members.begin(), members.end());
      // Latencies compare within one load only: the requests of one concurrency level (the cache
      // probe's requests run alone, as concurrency 1's do). A request alone is rightly faster than
      // one among 32.
      auto context = [&](int i) { return all[i].batch_size; };
      std::map<int, double> slowest;
      for (const auto& [i, cl] : members) {
        endpoint = endpoint || from_endpoint(all[i]);
        double& s_max = slowest[context(i)];
        s_max = std::max(s_max, all[i].latency_s);
      }
      auto fast = [&](int i, const Cluster* cl) {
        const double top = slowest[context(i)];
        return cl->count > 1 && all[i].latency_s <= kFastReplayShare * top && top - all[i].latency_s >= kFastReplayGapS;
      };
      // Near-zero latency counts as a pattern only: at least two such completions in one context.
      std::map<int, int> fast_in;
      for (const auto& [i, cl] : members) fast_in[context(i)] += fast(i, cl);
      auto fast_pattern = [&](int i) { return fast_in[context(i)] >= 2; };
      std::set<std::pair<std::string, std::string>> ids;  // (response id, output hash) seen in this case
      for (const auto& [i, cl] : members) {
        const Completion& x = all[i];
        ++s.completions;
        if (!x.cache_header.empty()) {
          ++s.header_hits;
          replayed.insert(i);
          if (s.headers.size() < 5 && std::find(s.headers.begin(), s.headers.end(), x.cache_header) == s.headers.end())
            s.headers.push_back(x.cache_header);
        }
        if (!x.response_id.empty() && !ids.insert({x.response_id, cl->hash}).second) {
          ++s.repeated_ids;
          replayed.insert(i);
        }
        if (fast_pattern(i) && fast(i, cl)) {
          ++s.fast_replays;
          replayed.insert(i);
        }
      }
    }
    if (!endpoint) return std::nullopt;
    s.replayed = wilson(static_cast<int>(replayed.size()), s.completions);
    if (!replayed.empty()) {
      std::string signs;
      auto add = [&](int n, const std::string& what) {
        if (n > 0) signs += (signs.empty() ? "" : "; ") + what + fmt::format(" on {}", n);
      };
      add(s.header_hits, "cache-hit header (" + (s.headers.empty() ? std::string() : s.headers[0]) + ")");
      add(s.repeated_ids, "repeated response id");
      add(s.fast_replays, fmt::format("near-zero latency (at most {:.0f}% of the case's slowest)", kFastReplayShare * 100));
      s.finding = fmt::format(
          "'{}': {} of {} completions look replayed from a response cache ({}); a cache hides nondeterminism instead of "
          "removing it, so this endpoint's TARr@N says little about the model: turn the cache off or make each request "
          "unique, then rerun",
          mode_label(mode, precision), replayed.size(), s.completions, signs);
      if (cache_confirmed(s))
        s.finding += "; a cache-hit header or a repeated response id confirms the replay, so its verdict is "
                     "UNVERIFIED, never reproducible";
    }
    return s;
  }
}

bool cache_confirmed(const ResponseCacheSigns& s) { return s.header_hits > 0 || s.repeated_ids > 0; }

}  // namespace repro
