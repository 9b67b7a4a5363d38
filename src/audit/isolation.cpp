// Batch-mate isolation: see include/repro/audit/isolation.hpp.
#include "repro/audit/isolation.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "repro/audit/cases.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Everything of a completion's context but its batch mates' contents.
using Key = std::tuple<std::string, std::string, std::string, std::string, int, int, std::string, int, int, uint64_t,
                       int, int, std::string, std::string, std::string>;
Key shape_key(const Completion& c) {
  return {c.prompt_id, c.decoding_id, c.mode, c.precision, c.batch_size, c.position, c.filler_set,
          c.mate_join_step, c.mate_prompt_delta, c.seed, c.repeat, c.tp, c.allreduce, c.device, c.speculative};
}

bool same_output(const Completion& a, const Completion& b) {
  if (a.tokens_known && b.tokens_known ? a.tokens != b.tokens : a.text != b.text) return false;
  if (!a.logits_sha256.empty() && !b.logits_sha256.empty() && a.logits_sha256 != b.logits_sha256) return false;
  return a.logprobs.size() != b.logprobs.size() || a.logprobs == b.logprobs;
}

using CaseKey = std::tuple<std::string, std::string, std::string, std::string>;  // prompt, decoding, mode, precision

bool matches_any(const Completion& c, const std::vector<const Completion*>& among) {
  return std::any_of(among.begin(), among.end(), [&](const Completion* d) { return same_output(c, *d); });
}

// Endpoints: at each co-batched level, every probe sent with the other filler contents against the
// outputs the level gave with the drawn fillers. A server's batches are not the client's to shape, so
// a changed output is leakage only where nothing else explains it: the endpoint claims batch
// invariance and gave one output at every level with the drawn fillers.
void analyze_remote_isolation(AuditReport& r) {
  struct Level {
    std::vector<const Completion*> drawn, other;
  };
  std::map<std::pair<CaseKey, int>, Level> levels;
  std::map<CaseKey, std::vector<const Completion*>> drawn_all;
  std::set<std::string> tried;  // endpoints that ran the other arm
  for (const auto& c : r.completions) {
    if (!c.error.empty() || !is_remote_completion(c)) continue;
    const CaseKey k{c.prompt_id, c.decoding_id, c.mode, c.precision};
    if (c.mate_contents.empty()) {
      drawn_all[k].push_back(&c);
      if (c.cache_state.empty()) levels[{k, c.batch_size}].drawn.push_back(&c);
    } else {
      levels[{k, c.batch_size}].other.push_back(&c);
      tried.insert(c.mode);
    }
  }
  if (tried.empty()) return;
  struct Counts {
    int pairs = 0, changed = 0, leaks = 0;
  };
  std::map<CaseKey, Counts> per_case;
  std::map<std::string, Counts> per_endpoint;
  for (const auto& [key, lv] : levels) {
    const auto& [ck, conc] = key;
    const EndpointEvidence* ev = find_evidence(r, std::get<2>(ck));
    bool co_batched = false;
    if (ev)
      for (const auto& l : ev->levels) co_batched = co_batched || (l.concurrency == conc && l.co_batched);
    if (!co_batched || lv.drawn.empty()) continue;
    const bool claims = ev->posture.batch_invariance == "claimed" || ev->posture.deterministic == "on";
    const auto& all = drawn_all[ck];
    const bool one_output = std::all_of(all.begin(), all.end(), [&](const Completion* d) { return same_output(*d, *all[0]); });
    for (const Completion* c : lv.other) {
      const bool changed = !matches_any(*c, lv.drawn);
      for (Counts* n : {&per_case[ck], &per_endpoint[std::get<2>(ck)]}) {
        ++n->pairs;
        n->changed += changed;
        n->leaks += changed && claims && one_output;
      }
    }
  }
  for (auto& cr : r.cases) {
    auto it = per_case.find({cr.prompt_id, cr.decoding_id, cr.mode, cr.precision});
    if (it == per_case.end()) continue;
    cr.isolation_pairs = it->second.pairs;
    cr.isolation_leaks = it->second.changed;
  }
  for (auto& ms : r.summary.modes) {
    if (!tried.count(ms.mode)) continue;
    const Counts n = per_endpoint[ms.mode];
    const EndpointEvidence* ev = find_evidence(r, ms.mode);
    int fillers = 0, same = 0;
    if (ev)
      for (const auto& l : ev->levels) {
        fillers += l.isolation_fillers;
        same += l.isolation_same_tokens;
      }
    const std::string how =
        fillers > 0 ? fmt::format("the co-batched requests' words reversed; equal prompt token counts for {} of {} "
                                  "fillers by the server's usage counts",
                                  same, fillers)
                    : "the co-batched requests' words reversed; the server reported no prompt token counts";
    if (n.pairs == 0) {
      ms.isolation_finding = ms.mode + ": isolation not tested: no level run with other filler contents was co-batched";
      continue;
    }
    ms.isolation = wilson(n.changed, n.pairs);
    const bool claims = ev && (ev->posture.batch_invariance == "claimed" || ev->posture.deterministic == "on");
    if (n.changed == 0)
      ms.isolation_finding = fmt::format(
          "{}: the probe gave the same output with other contents in the requests sharing the server ({}) in all {} "
          "co-batched probes: no leakage between requests seen",
          ms.mode, how, n.pairs);
    else if (n.leaks > 0)
      ms.isolation_finding = fmt::format(
          "{}: LEAKAGE BETWEEN REQUESTS: in {} of {} co-batched probes the output changed when only the contents of "
          "the requests sharing the server changed ({}), on an endpoint that claims batch invariance and otherwise "
          "gave one output at every concurrency: one request's output depends on another's contents",
          ms.mode, n.leaks, n.pairs, how);
    else
      ms.isolation_finding = fmt::format(
          "{}: the probe output changed in {} of {} co-batched probes with other contents in the requests sharing "
          "the server ({}); not attributable to leakage: {}",
          ms.mode, n.changed, n.pairs, how,
          claims ? "the output already varied with the drawn fillers"
                 : "the endpoint claims no batch invariance, so batching explains the change as well");
  }
}

}  // namespace

void analyze_isolation(AuditReport& r) {
  analyze_remote_isolation(r);
  std::map<Key, std::pair<const Completion*, const Completion*>> pairs;  // (drawn, other)
  bool any = false;
  for (const auto& c : r.completions) {
    if (!c.error.empty() || is_remote_completion(c)) continue;
    auto& p = pairs[shape_key(c)];
    (c.mate_contents.empty() ? p.first : p.second) = &c;
    any = any || !c.mate_contents.empty();
  }
  if (!any) return;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, std::pair<int, int>> per_case;
  for (const auto& [k, p] : pairs) {
    if (!p.first || !p.second) continue;
    auto& n = per_case[{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)}];
    ++n.first;
    n.second += !same_output(*p.first, *p.second);
  }
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> per_mode;
  for (auto& cr : r.cases) {
    auto it = per_case.find({cr.prompt_id, cr.decoding_id, cr.mode, cr.precision});
    if (it == per_case.end()) continue;  // (endpoints' cases: analyze_remote_isolation)
    cr.isolation_pairs = it->second.first;
    cr.isolation_leaks = it->second.second;
    auto& m = per_mode[{cr.mode, cr.precision}];
    m.first += cr.isolation_pairs;
    m.second += cr.isolation_leaks;
  }
  for (auto& ms : r.summary.modes) {
    auto it = per_mode.find({ms.mode, ms.precision});
    if (it == per_mode.end() || it->second.first == 0) continue;
    ms.isolation = wilson(it->second.second, it->second.first);
    const std::string who = mode_label(ms.mode, ms.precision);
    ms.isolation_finding =
        ms.isolation.k == 0
            ? fmt::format("{}: the probe gave the same bits with other batch-mate contents at the same shapes in all "
                          "{} batch contexts: no leakage between rows",
                          who, ms.isolation.n)
            : fmt::format("{}: LEAKAGE BETWEEN ROWS: in {} of {} batch contexts the probe's output changed when only "
                          "its batch mates' contents changed (same shapes): kernels depend on shapes, not contents, so "
                          "this is a masking or KV-cache bug, not rounding",
                          who, ms.isolation.k, ms.isolation.n);
  }
}

}  // namespace repro
