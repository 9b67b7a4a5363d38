// Terminal summary, the text and JSON of drift between two reports (computed in src/audit/compare.cpp),
// and small formatting helpers shared by the writers.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "repro/audit/analysis.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/audit/stats.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro {

std::string fmt_percent(double share) { return fmt::format("{:.1f}%", share * 100.0); }
std::string fmt_ratio(double ratio) { return fmt::format("{:.2f}x", ratio); }
std::string fmt_dlogprob(const std::optional<double>& v) {
  if (!v) return "-";
  return *v == 0 ? "0" : fmt::format("{:.2g}", *v);
}

std::string drift_summary(const DriftSize& d, const AuditReport* r) {
  if (d.reference < 0) return "no completions";
  if (d.compared == 0) return fmt::format("{}; only the reference ran", d.status);
  std::string s = fmt::format("{} vs reference ({}): {} of {} differ bitwise, {} in tokens", d.status,
                              d.reference_context, d.bit_differ, d.compared, d.token_differ);
  if (d.max_dlogprob) s += fmt::format("; |dlogprob| max {} mean {}", fmt_dlogprob(d.max_dlogprob), fmt_dlogprob(d.mean_dlogprob));
  if (d.first_divergence >= 0)
    s += r ? fmt::format("; first divergence at token {}: {} in the reference, {} in the other", d.first_divergence,
                         token_label(*r, d.reference_token), token_label(*r, d.divergent_token))
           : fmt::format("; first divergence at token {} ({} -> {})", d.first_divergence, d.reference_token,
                         d.divergent_token);
  if (d.topk_kl) s += fmt::format(", top-5 KL {}", fmt_dlogprob(d.topk_kl));
  if (d.fragile) s += fmt::format("; {} fragile steps", *d.fragile);
  return s;
}

std::string case_summary(const CaseResult& c, const AuditReport* r) {
  if (c.n == 0) return fmt::format("no completions ({} errors)", c.errors);
  std::string s = fmt::format("{} unique of {}", c.unique, c.n);
  if (c.tara) {
    if (c.answer_missing > 0)
      s += fmt::format(", answer missing in {}/{}", c.answer_missing, c.n);
    else
      s += fmt::format(", answers {} unique{}", c.answer_unique, *c.tara ? " (TARa)" : "");
  }
  s += ":";
  for (size_t i = 0; i < c.clusters.size(); ++i) {
    const Cluster& k = c.clusters[i];
    s += fmt::format(" c{} x{} {}", i + 1, k.count, short_hash(k.hash));
    if (k.majority) {
      s += " (majority)";
    } else if (r) {
      s += " diverges at " + divergence_label(*r, c, k);
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
// The width the terminal summary is laid out for (0: no limit); set by to_terminal.
thread_local size_t g_width = 0;

size_t table_width(const TextTable& t, std::vector<size_t>* widths = nullptr) {
  std::vector<size_t> w(t.head.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < w.size(); ++i) w[i] = std::max(w[i], display_width(row[i]));
  };
  widen(t.head);
  for (const auto& row : t.rows) widen(row);
  size_t total = 0;
  for (size_t x : w) total += 2 + x;
  if (widths) *widths = w;
  return total;
}

// A table too wide for the terminal, as one record per row: the first cell, then "head value"
// pairs, wrapped at the terminal's width.
std::string records(const TextTable& t, size_t width) {
  std::string o;
  for (const auto& row : t.rows) {
    std::string line = "  " + (row.empty() ? std::string() : row[0]) + ":";
    for (size_t i = 1; i < row.size() && i < t.head.size(); ++i)
      if (!row[i].empty() && row[i] != "-") line += " " + t.head[i] + " " + row[i] + (i + 1 < row.size() ? "," : "");
    if (!line.empty() && line.back() == ',') line.pop_back();
    o += wrap_words(line, width, "      ") + "\n";
  }
  return o;
}

// A plain-text table with aligned columns, indented by two spaces; wider than the terminal, one
// record per row instead (a wrapped table row is unreadable).
std::string aligned(const TextTable& t) {
  std::vector<size_t> w;
  const size_t total = table_width(t, &w);
  if (g_width > 0 && total >= g_width) return records(t, g_width - 1);
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < row.size() && i < w.size(); ++i)
      l += "  " + row[i] + std::string(w[i] - display_width(row[i]), ' ');
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  std::string o = line(t.head);
  for (const auto& row : t.rows) o += line(row);
  return o;
}

// The mode table: every column where the terminal has room; narrower, the columns of least weight
// go first (named below the table), and below the width of the essential ones, one record per mode.
std::string mode_table(const AuditReport& r) {
  TextTable t;
  t.head = {"mode", "cases", "TARr@N", "mean unique", "bit-div", "divergent", "tok/s ratio", "|dlogprob|", "tok!=ref",
            "fragile", "errors", "verdict", "gate"};
  for (const auto& m : r.summary.modes) {
    const ModeDriftSize& d = m.drift_size;
    t.rows.push_back({mode_label(m.mode, m.precision), std::to_string(m.cases), fmt_percent(m.tarr_rate),
                      fmt::format("{:.2f}", m.mean_unique), fmt_percent(m.bit_divergent_share),
                      std::to_string(m.divergent_cases),
                      m.throughput_ratio && m.throughput_ratio_n > 0
                          ? fmt::format("{:.2f}x±{:.2f}", *m.throughput_ratio, m.throughput_ratio_sd.value_or(0))
                          : "not meas.",
                      fmt_dlogprob(d.max_dlogprob), fmt::format("{}/{}", d.token_differ.k, d.token_differ.n),
                      std::to_string(d.fragile),
                      m.failed_requests > m.errors ? fmt::format("{}+{}", m.errors, m.failed_requests - m.errors)
                                                   : std::to_string(m.errors),
                      m.verdict, m.gate.empty() ? (m.gated ? "" : "not gated") : m.gate});
  }
  if (g_width == 0 || table_width(t) < g_width) return aligned(t);
  // least weight first; mode, TARr@N, divergent, verdict and gate always stay
  std::vector<std::string> dropped;
  for (const char* col : {"fragile", "|dlogprob|", "mean unique", "tok!=ref", "errors", "cases", "tok/s ratio",
                          "bit-div"}) {
    auto it = std::find(t.head.begin(), t.head.end(), col);
    const size_t i = static_cast<size_t>(it - t.head.begin());
    dropped.push_back(col);
    t.head.erase(it);
    for (auto& row : t.rows) row.erase(row.begin() + static_cast<std::ptrdiff_t>(i));
    if (table_width(t) < g_width) break;
  }
  std::string out = aligned(t);  // records, if even the essential columns do not fit
  std::string names;
  for (const auto& d : dropped) names += (names.empty() ? "" : ", ") + d;
  return out + wrap_words("  (" + std::to_string(g_width) + " columns: " + names +
                              " left out; a wider terminal or report.md shows them)",
                          g_width - 1, "   ") +
         "\n";
}

// What the terminal's short names mean, in words (report.md has the full glossary).
std::string legend(const std::string& shown) {
  std::vector<std::string> lines = {
      "TARr@N: the share of cases whose N replays were all identical, token for token.",
      "bit-div: the share of cases whose replays differ in any bit (final logits, logprobs), even with the same "
      "tokens."};
  if (shown.find("tok!=ref") != std::string::npos)
    lines.push_back("tok!=ref: completions whose tokens differ from the reference context (batch 1, first position).");
  if (shown.find(" -> below ") != std::string::npos)
    lines.push_back("\"0 of 3 -> below 56%\": none of 3 completions showed it, and with 95% confidence its true rate "
                    "is below 56%; more replays narrow that bound.");
  std::string o;
  for (const auto& l : lines) o += wrap_words("  " + l, g_width > 0 ? g_width - 1 : 0, "    ") + "\n";
  return o;
}

// Prompt variants per task and the response-cache signs of endpoints (src/report/variants_text.cpp).
std::string terminal_variant_sections(const AuditReport& r) {
  std::string out;
  if (!r.variants.empty()) {
    out += "prompt variants:\n" + aligned(variants_table(r));
    for (const auto& f : variant_findings(r)) out += "finding: " + f + "\n";
  }
  if (!r.evidence.empty()) {
    out += "endpoints:\n" + aligned(posture_table(r));
    out += "co-batching:\n" + aligned(cobatch_table(r));
    if (auto seeds = seed_table(r); !seeds.rows.empty()) out += "seed:\n" + aligned(seeds);
  }
  if (auto panel = panel_table(r); !panel.rows.empty()) out += "replica panel:\n" + aligned(panel);
  if (auto dist = distribution_table(r); !dist.rows.empty()) out += "sampled outputs as distributions:\n" + aligned(dist);
  if (auto tp = tp_table(r); !tp.rows.empty()) out += "tensor parallelism against TP 1:\n" + aligned(tp);
  if (auto dv = device_table(r); !dv.rows.empty()) out += "cross-device, each device against the first:\n" + aligned(dv);
  if (auto sp = speculative_table(r); !sp.rows.empty())
    out += "speculative decoding, each setting against off:\n" + aligned(sp);
  if (auto rt = routing_table(r); !rt.rows.empty()) out += "expert routing against the reference:\n" + aligned(rt);
  for (const auto& f : evidence_findings(r)) out += "finding: " + f + "\n";
  // The terminal shows the cache table only when some endpoint's responses look replayed.
  if (auto findings = response_cache_findings(r); !findings.empty()) {
    out += "response cache:\n" + aligned(response_cache_table(r));
    for (const auto& f : findings) out += "finding: " + f + "\n";
  }
  return out;
}

}  // namespace

std::string verdict_cause(const AuditReport& r) {
  const Summary& s = r.summary;
  std::string why;
  if (s.verdict == "errors") {
    bool any_gated = false;
    for (const auto& m : s.modes) {
      any_gated = any_gated || m.gated;
      if (!m.gated || (m.verdict != "errors" && m.verdict != "not run")) continue;
      if (!why.empty()) why += "; ";
      if (m.verdict == "not run") {
        why += fmt::format("'{}' is gated but did not run", mode_label(m.mode, m.precision));
        continue;
      }
      why += fmt::format("'{}': {} of {} requests failed ({}, over --max-error-rate {})", m.mode, m.failed_requests,
                         m.requests, fmt_percent(m.error_rate), fmt_percent(r.thresholds.max_error_rate));
      int completions = 0;
      for (const auto& c : r.cases)
        if (c.mode == m.mode) completions += c.n;
      if (completions == 0) why += ", no completion at all";
      for (const auto& e : error_kinds(r))
        if (e.mode == m.mode) {
          why += fmt::format("; first {} (x{}): {}", e.kind, e.count, e.first);
          break;
        }
    }
    if (!any_gated) why = "no mode of this run is gated; name one in --gate-modes";
  } else if (s.verdict == "divergent") {
    for (const auto& m : s.modes)
      if (m.gated && m.verdict == "divergent") {
        why += fmt::format("{}'{}': {} of {} cases divergent, TARr@N {} (gate: at most {}, TARr@N >= {})",
                           why.empty() ? "" : "; ", mode_label(m.mode, m.precision), m.divergent_cases,
                           m.cases, fmt_percent(m.tarr_rate), r.thresholds.max_divergent,
                           fmt_percent(r.thresholds.min_tarr));
      }
  } else if (s.verdict == "no answer") {
    const std::string flag = r.answer_json_path.empty() ? "--answer-regex" : "--answer-json-path";
    for (const auto& m : s.modes)
      if (m.gated && m.verdict == "no answer")
        why += fmt::format(
            "{}'{}': {} found no answer in {} of {} cases (their outputs are identical, so not "
            "divergent; TARa has nothing to compare): check {} against the outputs",
            why.empty() ? "" : "; ", mode_label(m.mode, m.precision), flag, m.no_answer_cases, m.cases, flag);
  } else if (s.verdict == "unverified") {
    for (const auto& m : s.modes)
      if (m.gated && m.verdict == "unverified") {
        const EndpointEvidence* ev = find_evidence(r, m.mode);
        const bool cache = (!ev || ev->verified) && m.response_cache && cache_confirmed(*m.response_cache);
        why += fmt::format("{}'{}': {}", why.empty() ? "" : "; ", m.mode, cache ? m.response_cache->finding : kUnverifiedWhy);
      }
  } else if (s.verdict == "drift" && r.baseline) {
    why = fmt::format("this run drifted from the baseline '{}' ({} change{})", r.baseline->file,
                      r.baseline->changes.size(), r.baseline->changes.size() == 1 ? "" : "s");
  }
  return why;
}

// Structured output: one line per mode (schema-valid, TARr, TARa on parsed JSON, fields), and the
// retries' effect and cost on their own line.
static std::string structured_terminal(const AuditReport& r) {
  std::string out;
  for (const auto& m : r.summary.modes) {
    if (!m.structured) continue;
    const StructuredSummary& st = *m.structured;
    out += fmt::format("structured {}: schema-valid {}, TARr {}, TARa (JSON) {}", mode_label(m.mode, m.precision),
                       rate_text(st.valid), rate_text(st.tarr), rate_text(st.tara_json));
    for (const auto& f : st.fields) out += fmt::format(", {} agrees {}", f.path, rate_text(f.agree));
    out += "\n";
    if (st.retries > 0 || retry_table(r).rows.size() > 0)
      out += fmt::format("  before retry: schema-valid {}, TARr {}, TARa (JSON) {}; retries cost {} extra requests "
                         "and {} extra tokens\n",
                         rate_text(st.valid_first), rate_text(st.tarr_first), rate_text(st.tara_json_first),
                         st.retries, st.retry_tokens);
  }
  return out;
}

namespace {
std::string to_terminal_raw(const AuditReport& r) {
  const Summary& s = r.summary;
  std::string out;
  out += fmt::format("verdict: {} (exit {})  cases {}  divergent {}  max unique {}  completions {}  errors {}\n",
                     upper(s.verdict.empty() ? "unknown" : s.verdict), exit_code_for(r), s.cases,
                     s.divergent_cases, s.max_unique, s.completions, s.errors);
  std::string why = verdict_cause(r);
  if (!why.empty()) out += "  " + why + "\n";
  {  // which modes the gate covers, and any ungated mode that diverged (src/report/summary_text.cpp)
    const VerdictBanner b = verdict_banner(r);
    out += "  " + b.gate + "\n";
    if (!b.ungated.empty()) out += "  not gated: " + b.ungated + "\n";
  }
  if (std::string note = model_switch_note(r.environment); !note.empty()) out += "note: " + note + "\n";
  out += mode_table(r);
  for (const auto& m : s.modes)
    if (!m.drift_size.finding.empty()) out += "finding: " + m.drift_size.finding + "\n";
  out += structured_terminal(r);
  if (!r.tradeoff.empty()) {
    const std::string prec = r.tradeoff.front().precision;
    out += fmt::format("trade-off{}: throughput vs default (mean ±sd over n cells), reproducibility; all measured "
                       "in this run\n",
                       prec.empty() ? "" : " (" + prec + ")");
    TextTable t;  // fits the terminal like every table here (aligned: one record per row when too wide)
    t.head = {"approach", "throughput", "N", "TARr@N", "TARa@N", "tok!=ref", "|dlogprob|"};
    for (const auto& a : r.tradeoff) {
      if (!a.measured) {
        t.rows.push_back({a.approach, "not measured", "-", "-", "-", "-", "-"});
        continue;
      }
      const std::string speed = a.speed_mean ? fmt::format("{:.2f}x ±{:.2f} (n {})", *a.speed_mean,
                                                           a.speed_sd.value_or(0), a.speed_n)
                                             : "not measured";
      const std::string n = a.n_min == a.n_max ? std::to_string(a.n_min) : fmt::format("{}-{}", a.n_min, a.n_max);
      auto share = [](const Rate& q) { return q.n > 0 ? fmt::format("{}/{}", q.k, q.n) : std::string("-"); };
      t.rows.push_back({a.approach, speed, n,
                        a.tarr.n > 0 ? fmt_percent(static_cast<double>(a.tarr.k) / a.tarr.n) : "-",
                        a.tara ? fmt_percent(static_cast<double>(a.tara->k) / std::max(1, a.tara->n)) : "no extractor",
                        share(a.token_differ), fmt_dlogprob(a.max_dlogprob)});
    }
    out += aligned(t);
  }
  if (!r.advice.empty()) {  // what to do (computed by compute_advice, src/audit/advice.cpp)
    out += "what to do:\n";
    for (const auto& a : r.advice) {
      auto lines = advice_lines(a);
      out += "  - " + lines[0] + "\n";
      for (size_t i = 1; i < lines.size(); ++i) out += "    " + lines[i] + "\n";
    }
  }
  out += terminal_variant_sections(r);
  auto kinds = error_kinds(r);
  if (!kinds.empty()) {
    out += "errors (first of each kind):\n";
    for (const auto& e : kinds) out += fmt::format("  {} {} x{}: {}\n", e.mode, e.kind, e.count, e.first);
  }
  for (const auto& m : s.modes)
    if (m.failed_requests > m.errors)
      out += fmt::format("  {}: {} filler requests failed as well\n", m.mode, m.failed_requests - m.errors);
  auto list = [&](const char* heading, auto pick) {
    int shown = 0;
    for (const auto& c : r.cases) {
      if (!pick(c)) continue;
      if (shown++ == 0) out += heading;
      if (shown > 10) {
        out += "  ... (see the full report)\n";
        break;
      }
      out += fmt::format("  {} [{}] {}: {}\n", prompt_snippet(r, c.prompt_id, 40), c.decoding_id,
                         mode_label(c.mode, c.precision), case_summary(c, &r));
    }
  };
  list("divergent cases:\n", [](const CaseResult& c) { return c.divergent; });
  list("cases without completions:\n", [](const CaseResult& c) { return c.n == 0; });
  list("cases with no answer (the extractor matched none of their identical outputs):\n",
       [](const CaseResult& c) { return c.no_answer; });
  if (r.baseline) out += baseline_text(*r.baseline);
  return out + "in words:\n" + legend(out);
}
}  // namespace

// Prompt ids, task and variant names, endpoint labels and error texts come from files and servers:
// a control byte among them (ESC [ ... rewrites the screen) is shown as \xNN, never sent raw.
std::string to_terminal(const AuditReport& r, int width) {
  g_width = width > 0 ? static_cast<size_t>(width) : 0;
  std::string out = printable_lines(to_terminal_raw(r));
  if (g_width > 0) {  // tables fit already; any other line too long is wrapped at spaces, never by the terminal
    std::string fitted;
    for (const std::string& line : split(out, '\n'))
      fitted += (display_width(line) < g_width ? line : wrap_words(line, g_width - 1, "    ")) + "\n";
    out = fitted;
    if (!out.empty()) out.pop_back();  // split gave one more (empty) piece after the last line break
  }
  g_width = 0;
  return out;
}

std::string baseline_text(const BaselineResult& b) {
  std::string out;
  out += fmt::format("baseline {}: {}{}\n", b.file, b.drifted ? "DRIFT" : "no drift",
                     b.digest_ok ? "" : " (warning: the baseline does not match its recorded digest)");
  for (const auto& c : b.config_changes) out += "  config: " + c + "\n";
  size_t shown = 0;
  for (const auto& c : b.changes) {
    if (++shown > 20) {
      out += fmt::format("  ... {} more (see report.json)\n", b.changes.size() - 20);
      break;
    }
    out += "  " + c + "\n";
  }
  return out;
}

// ============================================================================ drift

namespace {
std::string drift_text_raw(const Drift& d, const std::string& name_a, const std::string& name_b) {
  std::string out;
  if (!d.config.empty()) {
    out += fmt::format("configuration differs between {} and {}:\n", name_a, name_b);
    for (const auto& c : d.config) out += "  " + c + "\n";
  }
  if (!d.drifted()) {
    return out + fmt::format("no drift: {} cases unchanged, verdict {} in both\n", d.unchanged, d.verdict_a);
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
}  // namespace

std::string drift_text(const Drift& d, const std::string& name_a, const std::string& name_b) {
  return printable_lines(drift_text_raw(d, name_a, name_b));
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
          {"config", d.config},
          {"verdict_a", d.verdict_a},
          {"verdict_b", d.verdict_b},
          {"unchanged", d.unchanged},
          {"cases", cases}};
}

}  // namespace repro
