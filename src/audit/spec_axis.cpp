// Speculative decoding against no speculation: see include/repro/audit/spec_axis.hpp.
#include "repro/audit/spec_axis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "repro/audit/cases.hpp"
#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Everything of a completion's context but its speculative setting.
using Twin = std::tuple<std::string, std::string, std::string, std::string, int, int, std::string, int, int,
                        std::string, int, std::string, std::string, uint64_t, int>;
Twin twin_key(const Completion& c) {
  return {c.prompt_id,  c.decoding_id,    c.mode,          c.precision,   c.batch_size,
          c.position,   c.filler_set,     c.mate_join_step, c.mate_prompt_delta, c.mate_contents,
          c.tp,         c.allreduce,      c.device,        c.seed,        c.repeat};
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

bool same_bits(const Completion& a, const Completion& b) {
  if (a.tokens != b.tokens || a.logits_sha256 != b.logits_sha256 || a.logprobs.size() != b.logprobs.size())
    return false;
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    if (!same_float(a.logprobs[i], b.logprobs[i])) return false;
  return true;
}

// The first step whose token id differs; -1 when the tokens agree.
int fork_step(const Completion& a, const Completion& b) {
  const size_t n = std::max(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < n; ++i)
    if (i >= a.tokens.size() || i >= b.tokens.size() || a.tokens[i] != b.tokens[i]) return static_cast<int>(i);
  return -1;
}

bool is_off(const std::string& s) { return s == "off"; }

struct Acc {
  int n = 0, bit = 0, tok = 0, sampled_n = 0, sampled_tok = 0;
  std::vector<int> forks;
  std::string first_diff;
  std::optional<double> max_dlp;
  int64_t drafted = 0, accepted = 0, verify_steps = 0;
};

std::string where(const Completion& c, int step) {
  std::string s = fmt::format("prompt {}, batch {}", c.prompt_id, c.batch_size);
  if (c.batch_size > 1) s += fmt::format(" at position {}", c.position);
  if (c.tp != 1) s += fmt::format(", TP {}", c.tp);
  if (!c.device.empty()) s += ", " + c.device;
  return s + (step >= 0 ? fmt::format(": step {}", step) : std::string(": the same tokens, other bits"));
}

std::string group_text(const std::vector<std::string>& g) {
  std::string s;
  for (const auto& x : g) s += (s.empty() ? "" : " = ") + x;
  return "{" + s + "}";
}

}  // namespace

void analyze_speculative(AuditReport& r) {
  const std::vector<std::string> settings = plan_strings(r, "speculative");
  if (settings.size() < 2) return;
  // Each setting's completions by twin key (errors and endpoints left out).
  std::map<std::string, std::map<Twin, const Completion*>> by_setting;
  for (const auto& c : r.completions)
    if (c.error.empty() && !is_remote_completion(c) && !c.speculative.empty())
      by_setting[c.speculative][twin_key(c)] = &c;
  const auto& base = by_setting["off"];

  // (mode, precision) -> setting -> counts
  std::map<std::pair<std::string, std::string>, std::map<std::string, Acc>> acc;
  for (const auto& c : r.completions) {
    if (!c.error.empty() || is_remote_completion(c) || c.speculative.empty() || is_off(c.speculative)) continue;
    Acc& a = acc[{c.mode, c.precision}][c.speculative];
    a.drafted += c.spec_drafted;
    a.accepted += c.spec_accepted;
    a.verify_steps += c.spec_verify_steps;
    auto it = base.find(twin_key(c));
    if (it == base.end()) continue;
    const Completion& b = *it->second;
    const int step = fork_step(c, b);
    if (c.decoding_id != "greedy") {
      ++a.sampled_n;
      a.sampled_tok += step >= 0;
      continue;
    }
    ++a.n;
    const bool bits = !same_bits(c, b);
    a.bit += bits;
    if (step >= 0) {
      ++a.tok;
      a.forks.push_back(step);
    }
    if (bits && a.first_diff.empty()) a.first_diff = where(c, step);
    const size_t common = step >= 0 ? static_cast<size_t>(step) + 1 : c.tokens.size();
    const size_t steps = std::min({common, c.logprobs.size(), b.logprobs.size()});
    for (size_t i = 0; i < steps; ++i)
      a.max_dlp = std::max(a.max_dlp.value_or(0.0),
                           std::fabs(static_cast<double>(c.logprobs[i]) - static_cast<double>(b.logprobs[i])));
  }

  for (auto& ms : r.summary.modes) {
    auto it = acc.find({ms.mode, ms.precision});
    if (it == acc.end()) continue;
    // Rows in the plan's order of settings.
    for (const auto& s : settings) {
      auto a_it = it->second.find(s);
      if (a_it == it->second.end()) continue;
      Acc& a = a_it->second;
      SpecRow row;
      row.speculative = s;
      row.bit_differ = wilson(a.bit, a.n);
      row.token_differ = wilson(a.tok, a.n);
      if (!a.forks.empty()) {
        std::sort(a.forks.begin(), a.forks.end());
        row.fork_first = a.forks.front();
        const size_t m = a.forks.size();
        row.fork_median = m % 2 ? a.forks[m / 2] : 0.5 * (a.forks[m / 2 - 1] + a.forks[m / 2]);
      }
      row.first_diff = a.first_diff;
      row.max_dlogprob = a.max_dlp;
      row.drafted = a.drafted;
      row.accepted = a.accepted;
      row.verify_steps = a.verify_steps;
      if (a.drafted > 0) row.acceptance = static_cast<double>(a.accepted) / static_cast<double>(a.drafted);
      if (a.verify_steps > 0)
        row.tokens_per_verify =
            static_cast<double>(a.accepted + a.verify_steps) / static_cast<double>(a.verify_steps);
      row.sampled_token_differ = wilson(a.sampled_tok, a.sampled_n);
      ms.speculative.push_back(row);
    }

    // Which settings give the same greedy tokens in every context they share: a setting joins the
    // first group whose first member agrees with it on every shared twin (all settings run the same
    // contexts, so agreement is an equivalence).
    std::vector<std::pair<std::string, std::map<Twin, const Completion*>>> greedy;
    for (const auto& s : settings) {
      std::map<Twin, const Completion*> m;
      for (const auto& [k, c] : by_setting[s])
        if (c->mode == ms.mode && c->precision == ms.precision && c->decoding_id == "greedy") m[k] = c;
      if (!m.empty()) greedy.push_back({s, std::move(m)});
    }
    auto agree = [](const std::map<Twin, const Completion*>& x, const std::map<Twin, const Completion*>& y) {
      for (const auto& [k, c] : x)
        if (auto j = y.find(k); j != y.end() && j->second->tokens != c->tokens) return false;
      return true;
    };
    std::vector<size_t> leaders;
    for (size_t i = 0; i < greedy.size(); ++i) {
      size_t g = 0;
      while (g < leaders.size() && !agree(greedy[leaders[g]].second, greedy[i].second)) ++g;
      if (g == leaders.size()) {
        leaders.push_back(i);
        ms.spec_groups.push_back({});
      }
      ms.spec_groups[g].push_back(greedy[i].first);
    }

    // The finding.
    std::string line = fmt::format("speculative decoding, {}: ", mode_label(ms.mode, ms.precision));
    std::vector<std::string> parts;
    int64_t drafted = 0, accepted = 0;
    bool any_greedy = false;
    for (const auto& row : ms.speculative) {
      drafted += row.drafted;
      accepted += row.accepted;
      if (row.token_differ.n == 0) continue;
      any_greedy = true;
      if (row.bit_differ.k == 0)
        parts.push_back(fmt::format("{} identical to off in {} of {} greedy completions", row.speculative,
                                    row.bit_differ.n, row.bit_differ.n));
      else if (row.token_differ.k == 0)
        parts.push_back(fmt::format("{} keeps the tokens of all {} greedy completions, {} differ in bits",
                                    row.speculative, row.token_differ.n, row.bit_differ.k));
      else
        parts.push_back(fmt::format("{} forks {} of {} greedy completions (first fork at step {}, median {:g})",
                                    row.speculative, row.token_differ.k, row.token_differ.n, *row.fork_first,
                                    *row.fork_median));
    }
    if (!any_greedy) parts.push_back("no greedy completion to compare with off");
    for (size_t i = 0; i < parts.size(); ++i) line += (i ? "; " : "") + parts[i];
    if (ms.spec_groups.size() > 1) {
      line += "; settings that agree:";
      for (const auto& g : ms.spec_groups) line += " " + group_text(g);
    }
    if (drafted > 0)
      line += fmt::format(" (acceptance {:.2f}: {} of {} drafted tokens)", static_cast<double>(accepted) / drafted,
                          accepted, drafted);
    ms.spec_finding = line;
  }
}

}  // namespace repro
