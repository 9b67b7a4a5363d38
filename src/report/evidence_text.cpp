// The remote evidence sections shared by the Markdown, HTML and terminal reports: each endpoint's
// posture, co-batching per concurrency level, seed probes, the replica panel and the distribution
// tests of sampled cases, as plain-text tables and finding lines (each writer escapes and renders them).
#include <fmt/core.h>

#include <algorithm>

#include "repro/audit/cobatch.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {
std::string opt1(const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : "-"; }
}  // namespace

TextTable posture_table(const AuditReport& r) {
  TextTable t;
  t.head = {"endpoint", "engine", "version", "deterministic mode", "batch invariance", "told by"};
  for (const auto& e : r.evidence) {
    std::string src;
    for (const auto& s : e.posture.sources) src += (src.empty() ? "" : "; ") + s;
    t.rows.push_back({e.endpoint, e.posture.engine, e.posture.version.empty() ? "unknown" : e.posture.version,
                      e.posture.deterministic, e.posture.batch_invariance, src.empty() ? "-" : src});
  }
  return t;
}

TextTable cobatch_table(const AuditReport& r) {
  TextTable t;
  t.head = {"endpoint",         "concurrency",      "probes", "others in flight (min / mean / max)",
            "server running (max / mean)", "largest batch shared", "co-batched"};
  for (const auto& e : r.evidence)
    for (const auto& l : e.levels) {
      std::string server = l.server_status == "known"
                               ? opt1(l.server_running_max) + " / " + opt1(l.server_running_mean) + " (" +
                                     l.server_source + ")"
                               : l.server_status;
      t.rows.push_back({e.endpoint, std::to_string(l.concurrency), std::to_string(l.probes),
                        fmt::format("{} / {:.1f} / {}", l.others_min, l.others_mean, l.others_max), server,
                        l.response_max_batch ? std::to_string(*l.response_max_batch) : "-",
                        l.control ? "control" : l.co_batched ? "yes" : "no"});
    }
  return t;
}

TextTable seed_table(const AuditReport& r) {
  TextTable t;
  t.head = {"endpoint", "API", "seed", "same seed, same output", "other seed, other output", "errors"};
  for (const auto& e : r.evidence)
    for (const auto& s : e.seeds)
      t.rows.push_back({e.endpoint, s.api, s.result, fmt::format("{} of {}", s.same_equal, s.same_pairs),
                        fmt::format("{} of {}", s.diff_distinct, s.diff_pairs), std::to_string(s.errors)});
  return t;
}

TextTable panel_table(const AuditReport& r) {
  TextTable t;
  if (r.panel.empty()) return t;
  t.head = {"prompt", "decoding", "agree"};
  for (const auto& m : r.panel.front().members) t.head.push_back(m.endpoint);
  for (const auto& pc : r.panel) {
    std::vector<std::string> row = {pc.prompt_id, pc.decoding_id,
                                    fmt::format("{} of {}", pc.agreeing, pc.members.size())};
    for (const auto& m : pc.members)
      row.push_back(m.completions == 0 ? "no output"
                    : m.agrees         ? "majority"
                                       : fmt::format("leaves at {} {}", m.by_char ? "char" : "token", m.first_divergence));
    row.resize(t.head.size(), "-");
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextTable distribution_table(const AuditReport& r) {
  TextTable t;
  t.head = {"case", "context", "against", "samples", "MMD^2", "p-value", "effect", "differs"};
  for (const auto& c : r.cases)
    for (const auto& d : c.distribution)
      t.rows.push_back({mode_label(c.mode, c.precision) + " / " + c.prompt_id + " / " + c.decoding_id,
                        d.factor + " " + d.value, d.reference,
                        fmt::format("{} vs {}", d.n_other, d.n_reference),
                        d.note.empty() ? fmt::format("{:.4f}", d.statistic) : "-",
                        d.note.empty() ? fmt::format("{:.3f}", d.p_value) : "-",
                        d.note.empty() ? fmt::format("{:.3f}", d.effect) : "-",
                        !d.note.empty() ? d.note : d.differs ? "yes" : "no"});
  return t;
}

TextTable tp_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "TP", "all-reduce", "compared", "bits differ", "tokens differ", "greedy tokens differ",
            "tokens changed", "max |dlogprob|"};
  auto rate = [](const Rate& x) { return x.n == 0 ? std::string("-") : fmt::format("{}/{}", x.k, x.n); };
  for (const auto& ms : r.summary.modes)
    for (const auto& tp : ms.tp)
      t.rows.push_back({mode_label(ms.mode, ms.precision), std::to_string(tp.tp),
                        tp.allreduce.empty() ? "-" : tp.allreduce, std::to_string(tp.bit_differ.n),
                        rate(tp.bit_differ), rate(tp.token_differ), rate(tp.greedy_token_differ),
                        fmt::format("{}/{}", tp.tokens_changed, tp.tokens),
                        tp.max_dlogprob ? fmt::format("{:.3g}", *tp.max_dlogprob) : "-"});
  return t;
}

TextTable device_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "device", "against", "compared", "bits differ", "tokens differ", "first difference",
            "max |dlogprob|"};
  auto rate = [](const Rate& x) { return x.n == 0 ? std::string("-") : fmt::format("{}/{}", x.k, x.n); };
  for (const auto& ms : r.summary.modes)
    for (const auto& d : ms.devices)
      t.rows.push_back({mode_label(ms.mode, ms.precision), d.device, d.against, std::to_string(d.bit_differ.n),
                        rate(d.bit_differ), rate(d.token_differ), d.first_diff.empty() ? "-" : d.first_diff,
                        d.max_dlogprob ? fmt::format("{:.3g}", *d.max_dlogprob) : "-"});
  return t;
}

TextTable speculative_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "speculative", "greedy compared", "bits differ", "tokens differ (fork)", "fork step first / median",
            "agrees with", "acceptance", "tokens / verify step", "max |dlogprob|", "first difference"};
  auto rate = [](const Rate& x) { return x.n == 0 ? std::string("-") : fmt::format("{}/{}", x.k, x.n); };
  for (const auto& ms : r.summary.modes)
    for (const auto& s : ms.speculative) {
      std::string agrees;
      for (const auto& g : ms.spec_groups)
        if (std::find(g.begin(), g.end(), s.speculative) != g.end())
          for (const auto& other : g)
            if (other != s.speculative) agrees += (agrees.empty() ? "" : ", ") + other;
      t.rows.push_back({mode_label(ms.mode, ms.precision), s.speculative, std::to_string(s.bit_differ.n),
                        rate(s.bit_differ), rate(s.token_differ),
                        s.fork_first ? fmt::format("{} / {:g}", *s.fork_first, *s.fork_median) : "-",
                        agrees.empty() ? "-" : agrees, s.acceptance ? fmt::format("{:.2f}", *s.acceptance) : "-",
                        s.tokens_per_verify ? fmt::format("{:.2f}", *s.tokens_per_verify) : "-",
                        s.max_dlogprob ? fmt::format("{:.3g}", *s.max_dlogprob) : "-",
                        s.first_diff.empty() ? "-" : s.first_diff});
    }
  return t;
}

TextTable routing_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode",           "compared",       "(step, layer) flips", "flips per layer",
            "completions flipped", "flip at or before token divergence", "fragile routes", "min margin", "first flip"};
  auto rate = [](const Rate& x) { return x.n == 0 ? std::string("-") : fmt::format("{}/{}", x.k, x.n); };
  for (const auto& ms : r.summary.modes) {
    if (!ms.routing) continue;
    const RoutingSummary& s = *ms.routing;
    std::string layers;
    for (size_t l = 0; l < s.layers.size(); ++l) layers += (l ? " " : "") + rate(s.layers[l]);
    t.rows.push_back({mode_label(ms.mode, ms.precision), std::to_string(s.completions), rate(s.flips),
                      layers.empty() ? "-" : layers, fmt::format("{}/{}", s.flipped, s.completions),
                      fmt::format("{}/{}", s.flip_first, s.token_diverged),
                      s.fragile ? std::to_string(*s.fragile) : "unavailable",
                      s.min_margin ? fmt::format("{:.3g}", *s.min_margin) : s.fragile ? "-" : "unavailable",
                      s.first_flip.empty() ? "-" : s.first_flip});
  }
  return t;
}

std::vector<std::string> evidence_findings(const AuditReport& r) {
  std::vector<std::string> out;
  for (const auto& e : r.evidence) {
    if (!e.verified) out.push_back("'" + e.endpoint + "' is UNVERIFIED: " + e.finding);
    for (const auto& f : e.posture.findings) out.push_back("'" + e.endpoint + "': " + f);
    for (const auto& s : e.seeds)
      if (s.result != "honoured") out.push_back("'" + e.endpoint + "' " + s.api + ": seed " + s.result + ": " + s.detail);
  }
  for (const auto& ms : r.summary.modes)
    if (!ms.isolation_finding.empty()) out.push_back(ms.isolation_finding);
  for (const auto& f : r.summary.tp_findings) out.push_back(f);
  for (const auto& ms : r.summary.modes)
    if (!ms.tp_finding.empty()) out.push_back(ms.tp_finding);
  for (const auto& f : r.summary.device_findings) out.push_back(f);
  for (const auto& ms : r.summary.modes)
    if (!ms.device_finding.empty()) out.push_back(ms.device_finding);
  for (const auto& ms : r.summary.modes) {
    if (!ms.spec_finding.empty()) out.push_back(ms.spec_finding);
  for (const auto& ms : r.summary.modes)
    if (!ms.routing_finding.empty()) out.push_back(ms.routing_finding);
  }
  for (const auto& pc : r.panel)
    for (const auto& m : pc.members)
      if (!m.agrees && m.completions > 0)
        out.push_back(fmt::format("'{}' leaves the panel's majority on {} / {} at {} {}", m.endpoint, pc.prompt_id,
                                  pc.decoding_id, m.by_char ? "character" : "token", m.first_divergence));
  return out;
}

std::string evidence_intro() {
  return "A concurrency level proves something about batch invariance only if the probe really shared the server "
         "with other requests. Client side: how many other requests of the level were in flight during each probe "
         "(send to last byte). Server side, where the engine says: its running-request count sampled during the level "
         "(/metrics, /slots) and, from repro-audit serve, the largest batch each response's decoding shared. "
         "Concurrency 1 is the control arm: the probe alone. An endpoint none of whose levels was co-batched is "
         "UNVERIFIED, never a pass.";
}

}  // namespace repro
