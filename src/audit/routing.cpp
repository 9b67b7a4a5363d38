// Routing of a mixture of experts against each case's reference: see include/repro/audit/routing.hpp.
#include "repro/audit/routing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Two routes choose the same experts: the same set, whatever the order (the order only says which
// gate value was higher; the block sums the same experts' outputs).
bool same_set(std::vector<int> a, std::vector<int> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

std::string where(const Completion& c, const RoutingDivergence& d) {
  std::string s = fmt::format("prompt {}, {}, batch {}", c.prompt_id, c.decoding_id, c.batch_size);
  if (c.batch_size > 1) s += fmt::format(" at position {}", c.position);
  if (c.tp != 1) s += fmt::format(", TP {}", c.tp);
  s += fmt::format(": step {}, layer {}", d.step, d.layer);
  if (d.token_divergence >= 0) s += fmt::format(" (tokens diverge at step {})", d.token_divergence);
  return s;
}

std::string percent(int k, int n) {
  const double p = n > 0 ? 100.0 * k / n : 0;
  return p >= 10 || p == 0 ? fmt::format("{:.0f}%", p) : fmt::format("{:.2g}%", p);
}

}  // namespace

std::optional<CaseRouting> compare_routing(std::vector<Completion>& all, const std::vector<int>& members,
                                           int reference, double fragile_margin) {
  for (int i : members) all[static_cast<size_t>(i)].routing_vs_reference.clear();
  if (reference < 0 || all[static_cast<size_t>(reference)].routing.empty()) return std::nullopt;
  const Completion& ref = all[static_cast<size_t>(reference)];
  CaseRouting cr;
  cr.reference = reference;
  // fragile routes of the reference: how near a flip its router was
  if (!ref.routing_margins.empty()) {
    int fragile = 0;
    double mn = 1e300;
    for (const auto& step : ref.routing_margins)
      for (float m : step) {
        fragile += m < fragile_margin;
        mn = std::min(mn, static_cast<double>(m));
      }
    cr.fragile = fragile;
    if (mn < 1e300) cr.min_margin = mn;
  }
  for (int i : members) {
    Completion& c = all[static_cast<size_t>(i)];
    if (i == reference) {
      c.routing_vs_reference = "same";
      continue;
    }
    if (c.routing.empty()) continue;
    cr.compared++;
    size_t prefix = 0;
    while (prefix < c.tokens.size() && prefix < ref.tokens.size() && c.tokens[prefix] == ref.tokens[prefix])
      ++prefix;
    const bool diverge = c.tokens != ref.tokens;
    cr.token_diverged += diverge;
    // Through the first divergent step: its routes still saw the reference's tokens.
    const size_t steps = std::min({prefix + (diverge ? 1 : 0), c.routing.size(), ref.routing.size()});
    RoutingDivergence first;
    first.completion = i;
    first.step = -1;
    first.token_divergence = diverge ? static_cast<int>(prefix) : -1;
    for (size_t t = 0; t < steps; ++t) {
      const size_t layers = std::min(c.routing[t].size(), ref.routing[t].size());
      if (cr.layer_pairs.size() < layers) {
        cr.layer_pairs.resize(layers, 0);
        cr.layer_flips.resize(layers, 0);
      }
      for (size_t l = 0; l < layers; ++l) {
        const bool flip = !same_set(c.routing[t][l], ref.routing[t][l]);
        cr.pairs++;
        cr.layer_pairs[l]++;
        cr.flips += flip;
        cr.layer_flips[l] += flip;
        if (flip && first.step < 0) {
          first.step = static_cast<int>(t);
          first.layer = static_cast<int>(l);
        }
      }
    }
    c.routing_vs_reference = first.step >= 0 ? "flipped" : "same";
    if (first.step >= 0) cr.divergences.push_back(first);
  }
  return cr;
}

void summarize_routing(AuditReport& r) {
  for (auto& ms : r.summary.modes) {
    ms.routing.reset();
    ms.routing_finding.clear();
    RoutingSummary s;
    bool any = false;
    int pairs = 0, flips = 0;
    std::vector<int> lp, lf;
    for (const auto& cr : r.cases) {
      if (cr.mode != ms.mode || cr.precision != ms.precision || !cr.routing) continue;
      any = true;
      const CaseRouting& c = *cr.routing;
      s.completions += c.compared;
      pairs += c.pairs;
      flips += c.flips;
      if (lp.size() < c.layer_pairs.size()) {
        lp.resize(c.layer_pairs.size(), 0);
        lf.resize(c.layer_pairs.size(), 0);
      }
      for (size_t l = 0; l < c.layer_pairs.size(); ++l) {
        lp[l] += c.layer_pairs[l];
        lf[l] += c.layer_flips[l];
      }
      if (c.fragile) s.fragile = s.fragile.value_or(0) + *c.fragile;
      if (c.min_margin) s.min_margin = std::min(s.min_margin.value_or(*c.min_margin), *c.min_margin);
      s.flipped += static_cast<int>(c.divergences.size());
      for (const auto& d : c.divergences) {
        if (d.token_divergence >= 0 && d.step <= d.token_divergence) {
          s.flip_first++;
          s.flip_same_step += d.step == d.token_divergence;
        }
        if (s.first_flip.empty()) s.first_flip = where(r.completions[static_cast<size_t>(d.completion)], d);
      }
      s.token_diverged += c.token_diverged;
    }
    if (!any) continue;
    s.flips = wilson(flips, pairs);
    for (size_t l = 0; l < lp.size(); ++l) s.layers.push_back(wilson(lf[l], lp[l]));
    const std::string who = "routing, " + mode_label(ms.mode, ms.precision);
    std::string line;
    if (s.completions == 0) {
      line = who + ": nothing to compare (each case ran in one context only)";
    } else if (flips == 0) {
      line = fmt::format("{}: no routing flips in {} completion{} ({} (step, layer) pairs compared)", who,
                         s.completions, s.completions == 1 ? "" : "s", pairs);
    } else {
      line = fmt::format(
          "{}: {} of (step, layer) pairs flip against the reference ({} of {}), in {} of {} completions", who,
          percent(flips, pairs), flips, pairs, s.flipped, s.completions);
      if (s.token_diverged == 0)
        line += "; tokens never diverge";
      else
        line += fmt::format(
            "; the first flip {} the first token divergence in {} of {} diverging completion{}{}",
            s.flip_same_step == 0 ? "precedes" : "precedes or coincides with", s.flip_first, s.token_diverged,
            s.token_diverged == 1 ? "" : "s",
            s.flip_same_step == 0 ? "" : fmt::format(" (at the same step in {})", s.flip_same_step));
    }
    if (!s.fragile)
      line += "; route margins unavailable (no gate values), so fragile routes are unknown";
    else if (*s.fragile > 0)
      line += fmt::format("; {} fragile route{} in the references (top-k margin below the threshold)",
                          *s.fragile, *s.fragile == 1 ? "" : "s");
    ms.routing = std::move(s);
    ms.routing_finding = line;
  }
}

}  // namespace repro
