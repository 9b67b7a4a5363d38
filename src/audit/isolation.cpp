// Batch-mate isolation: see include/repro/audit/isolation.hpp.
#include "repro/audit/isolation.hpp"

#include <fmt/core.h>

#include <map>
#include <tuple>

#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Everything of a completion's context but its batch mates' contents.
using Key = std::tuple<std::string, std::string, std::string, std::string, int, int, std::string, int, int, uint64_t,
                       int>;
Key shape_key(const Completion& c) {
  return {c.prompt_id, c.decoding_id, c.mode, c.precision, c.batch_size, c.position, c.filler_set,
          c.mate_join_step, c.mate_prompt_delta, c.seed, c.repeat};
}

bool same_output(const Completion& a, const Completion& b) {
  if (a.tokens_known && b.tokens_known ? a.tokens != b.tokens : a.text != b.text) return false;
  if (!a.logits_sha256.empty() && !b.logits_sha256.empty() && a.logits_sha256 != b.logits_sha256) return false;
  return a.logprobs.size() != b.logprobs.size() || a.logprobs == b.logprobs;
}

}  // namespace

void analyze_isolation(AuditReport& r) {
  std::map<Key, std::pair<const Completion*, const Completion*>> pairs;  // (drawn, other)
  bool any = false;
  for (const auto& c : r.completions) {
    if (!c.error.empty()) continue;
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
    cr.isolation_pairs = it == per_case.end() ? 0 : it->second.first;
    cr.isolation_leaks = it == per_case.end() ? 0 : it->second.second;
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
