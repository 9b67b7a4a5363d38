// Terminal summary, drift between two reports, and small formatting helpers shared by the writers.
#include <fmt/core.h>

#include <map>
#include <tuple>

#include "repro/audit/analysis.hpp"
#include "repro/report/report.hpp"

namespace repro {

std::string fmt_percent(double share) { return fmt::format("{:.1f}%", share * 100.0); }
std::string fmt_ratio(double ratio) { return fmt::format("{:.2f}x", ratio); }
std::string short_hash(const std::string& h) { return h.substr(0, 12); }
std::string fmt_dlogprob(const std::optional<double>& v) {
  if (!v) return "-";
  return *v == 0 ? "0" : fmt::format("{:.2g}", *v);
}

std::string drift_summary(const DriftSize& d) {
  if (d.reference < 0) return "no completions";
  if (d.compared == 0) return fmt::format("{}; only the reference ran", d.status);
  std::string s = fmt::format("{} vs reference ({}): {} of {} differ bitwise, {} in tokens", d.status,
                              d.reference_context, d.bit_differ, d.compared, d.token_differ);
  if (d.max_dlogprob) s += fmt::format("; |dlogprob| max {} mean {}", fmt_dlogprob(d.max_dlogprob), fmt_dlogprob(d.mean_dlogprob));
  if (d.first_divergence >= 0)
    s += fmt::format("; first divergence at token {} ({} -> {})", d.first_divergence, d.reference_token, d.divergent_token);
  if (d.topk_kl) s += fmt::format(", top-5 KL {}", fmt_dlogprob(d.topk_kl));
  if (d.fragile) s += fmt::format("; {} fragile steps", *d.fragile);
  return s;
}

std::string case_summary(const CaseResult& c) {
  if (c.n == 0) return fmt::format("no completions ({} errors)", c.errors);
  std::string s = fmt::format("{} unique of {}", c.unique, c.n);
  if (c.tara) s += fmt::format(", answers {} unique{}", c.answer_unique, *c.tara ? " (TARa)" : "");
  s += ":";
  for (size_t i = 0; i < c.clusters.size(); ++i) {
    const Cluster& k = c.clusters[i];
    s += fmt::format(" c{} x{} {}", i + 1, k.count, short_hash(k.hash));
    if (k.majority) {
      s += " (majority)";
    } else {
      if (k.first_divergence_token >= 0)
        s += fmt::format(" diverges at token {} ({} -> {})", k.first_divergence_token, k.majority_token,
                         k.cluster_token);
      else
        s += fmt::format(" diverges at char {}", k.first_divergence_char);
    }
    if (i + 1 < c.clusters.size()) s += ";";
  }
  if (c.errors > 0) s += fmt::format("; {} errors", c.errors);
  return s;
}

namespace {
std::string upper(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

std::string to_terminal(const AuditReport& r) {
  const Summary& s = r.summary;
  std::string out;
  out += fmt::format("verdict: {} (exit {})  cases {}  divergent {}  max unique {}  completions {}  errors {}\n",
                     upper(s.verdict.empty() ? "unknown" : s.verdict), exit_code_for(r), s.cases,
                     s.divergent_cases, s.max_unique, s.completions, s.errors);
  out += fmt::format("{:<20} {:>6} {:>8} {:>12} {:>9} {:>10} {:>12} {:>10} {:>10} {:>8}  {}\n", "mode", "cases",
                     "TARr@N", "mean unique", "bit-div", "divergent", "tok/s ratio", "|dlogprob|", "tok!=ref",
                     "fragile", "gate");
  for (const auto& m : s.modes) {
    const ModeDriftSize& d = m.drift_size;
    out += fmt::format("{:<20} {:>6} {:>8} {:>12.2f} {:>9} {:>10} {:>12} {:>10} {:>10} {:>8}  {}\n", m.mode, m.cases,
                       fmt_percent(m.tarr_rate), m.mean_unique, fmt_percent(m.bit_divergent_share),
                       m.divergent_cases, m.throughput_ratio ? fmt_ratio(*m.throughput_ratio) : "-",
                       fmt_dlogprob(d.max_dlogprob), fmt::format("{}/{}", d.token_differ.k, d.token_differ.n),
                       d.fragile, m.gated ? m.verdict : "not gated");
  }
  for (const auto& m : s.modes)
    if (!m.drift_size.finding.empty()) out += "finding: " + m.drift_size.finding + "\n";
  int shown = 0;
  for (const auto& c : r.cases) {
    if (!c.divergent && c.n > 0) continue;
    if (shown++ == 0) out += "divergent cases:\n";
    if (shown > 10) {
      out += "  ... (see the full report)\n";
      break;
    }
    out += fmt::format("  {} [{}] {}: {}\n", c.prompt_id, c.decoding_id, c.mode, case_summary(c));
  }
  return out;
}

// ============================================================================ drift

Drift compute_drift(const AuditReport& a, const AuditReport& b) {
  using Key = std::tuple<std::string, std::string, std::string>;
  auto key = [](const CaseResult& c) { return Key{c.prompt_id, c.decoding_id, c.mode}; };
  auto majority = [](const CaseResult& c) { return c.clusters.empty() ? std::string() : c.clusters[0].hash; };
  auto verdict = [](const CaseResult& c) { return std::string(c.divergent ? "divergent" : "reproducible"); };
  std::map<Key, const CaseResult*> in_b;
  for (const auto& c : b.cases) in_b[key(c)] = &c;
  std::map<Key, bool> in_a;
  Drift d;
  d.verdict_a = a.summary.verdict;
  d.verdict_b = b.summary.verdict;
  for (const auto& ca : a.cases) {
    in_a[key(ca)] = true;
    auto it = in_b.find(key(ca));
    if (it == in_b.end()) {
      d.cases.push_back({ca.prompt_id, ca.decoding_id, ca.mode, "removed", {}});
      continue;
    }
    const CaseResult& cb = *it->second;
    CaseDrift cd{ca.prompt_id, ca.decoding_id, ca.mode, "changed", {}};
    if (majority(ca) != majority(cb))
      cd.what.push_back("majority output " + short_hash(majority(ca)) + " -> " + short_hash(majority(cb)));
    if (ca.unique != cb.unique) cd.what.push_back(fmt::format("unique {} -> {}", ca.unique, cb.unique));
    if (verdict(ca) != verdict(cb)) cd.what.push_back("verdict " + verdict(ca) + " -> " + verdict(cb));
    if (cd.what.empty())
      d.unchanged++;
    else
      d.cases.push_back(std::move(cd));
  }
  for (const auto& cb : b.cases)
    if (!in_a.count(key(cb))) d.cases.push_back({cb.prompt_id, cb.decoding_id, cb.mode, "added", {}});
  return d;
}

std::string drift_text(const Drift& d, const std::string& name_a, const std::string& name_b) {
  std::string out;
  if (!d.drifted()) {
    return fmt::format("no drift: {} cases unchanged, verdict {} in both\n", d.unchanged, d.verdict_a);
  }
  int changed = 0, added = 0, removed = 0;
  for (const auto& c : d.cases) (c.change == "added" ? added : c.change == "removed" ? removed : changed)++;
  out += fmt::format("drift between {} and {}: {} changed, {} added, {} removed, {} unchanged\n", name_a, name_b,
                     changed, added, removed, d.unchanged);
  if (d.verdict_a != d.verdict_b) out += fmt::format("  verdict: {} -> {}\n", d.verdict_a, d.verdict_b);
  for (const auto& c : d.cases) {
    out += fmt::format("  {} {} [{}] {}", c.change, c.prompt_id, c.decoding_id, c.mode);
    for (size_t i = 0; i < c.what.size(); ++i) out += (i == 0 ? ": " : ", ") + c.what[i];
    out += "\n";
  }
  return out;
}

nlohmann::json drift_json(const Drift& d) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : d.cases)
    cases.push_back({{"prompt_id", c.prompt_id},
                     {"decoding", c.decoding_id},
                     {"mode", c.mode},
                     {"change", c.change},
                     {"what", c.what}});
  return {{"drift", d.drifted()},
          {"verdict_a", d.verdict_a},
          {"verdict_b", d.verdict_b},
          {"unchanged", d.unchanged},
          {"cases", cases}};
}

}  // namespace repro
