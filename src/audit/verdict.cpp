// Verdicts, the CI gate and the exit status: see include/repro/audit/verdict.hpp.
#include "repro/audit/verdict.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "repro/audit/analysis.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/shards.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

bool mode_gated(const Thresholds& t, const std::string& mode) {
  return t.modes.empty() || std::find(t.modes.begin(), t.modes.end(), mode) != t.modes.end();
}

std::vector<std::string> planned_modes(const AuditReport& r) {
  std::vector<std::string> out;
  const auto& env = r.environment;
  if (env.is_object() && env.contains("endpoints") && env["endpoints"].is_array() && !env["endpoints"].empty()) {
    for (const auto& e : env["endpoints"])
      if (e.is_object() && e.contains("label") && e["label"].is_string()) out.push_back(e["label"].get<std::string>());
    return out;
  }
  if (r.plan.is_object() && r.plan.contains("modes") && r.plan["modes"].is_array())
    for (const auto& m : r.plan["modes"])
      if (m.is_string()) out.push_back(m.get<std::string>());
  return out;
}

namespace {

// Requests finished and failed for one endpoint, probes and fillers, as the runner recorded them.
bool remote_requests(const AuditReport& r, const std::string& mode, int64_t& requests, int64_t& failed) {
  const auto& env = r.environment;
  if (!env.is_object() || !env.contains("remote_stats") || !env["remote_stats"].is_object()) return false;
  const auto& st = env["remote_stats"];
  auto it = st.find(mode);
  if (it == st.end() || !it->is_object()) return false;
  auto get = [&](const char* k) {
    auto f = it->find(k);
    return f != it->end() && f->is_number_integer() ? f->get<int64_t>() : int64_t{0};
  };
  requests = get("requests");
  failed = get("failed");
  return true;
}

}  // namespace

void compute_verdicts(AuditReport& r, std::vector<std::string> mode_order) {
  for (const auto& m : planned_modes(r))
    if (std::find(mode_order.begin(), mode_order.end(), m) == mode_order.end()) mode_order.push_back(m);
  Summary& s = r.summary;
  bool interrupted = s.interrupted;
  s = Summary{};
  s.interrupted = interrupted;
  const Thresholds& t = r.thresholds;
  bool gate_errors = false, gate_divergent = false, gate_no_answer = false, gate_unverified = false,
       any_gated = false;
  // One headline row per (mode, precision) in the order the cases ran; a mode without cases gets one row.
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& m : mode_order) {
    size_t before = rows.size();
    for (const auto& cr : r.cases)
      if (cr.mode == m && std::find(rows.begin() + static_cast<std::ptrdiff_t>(before), rows.end(),
                                    std::make_pair(m, cr.precision)) == rows.end())
        rows.emplace_back(m, cr.precision);
    if (rows.size() == before) rows.emplace_back(m, "");
  }
  for (const auto& [m, prec] : rows) {
    ModeSummary ms;
    ms.mode = m;
    ms.precision = prec;
    ms.gated = mode_gated(t, m);
    int tarr = 0, bitdiv = 0, answered = 0;
    int64_t n_total = 0;
    double unique_sum = 0;
    for (auto& cr : r.cases) {
      if (cr.mode != m || cr.precision != prec) continue;
      // A case without completions is never reproducible, and never divergent: its errors are errors.
      // No answer in identical outputs is its own verdict ("no answer"), never a divergence.
      cr.divergent = cr.n > 0 && (cr.unique > 1 || (cr.tara.has_value() && !*cr.tara && !cr.no_answer));
      cr.failed = ms.gated && (cr.divergent || cr.n == 0);
      ms.cases++;
      ms.divergent_cases += cr.divergent;
      ms.no_answer_cases += cr.no_answer;
      ms.errors += cr.errors;
      n_total += cr.n;
      if (cr.n == 0) continue;
      answered++;
      tarr += cr.tarr;
      bitdiv += cr.bit_divergent;
      unique_sum += cr.unique;
    }
    if (answered > 0) {
      ms.tarr_rate = static_cast<double>(tarr) / answered;
      ms.mean_unique = unique_sum / answered;
      ms.bit_divergent_share = static_cast<double>(bitdiv) / answered;
    }
    if (ms.cases == 0 && shard_lacks(r, m, prec)) continue;  // a shard without cases of this mode
    ms.response_cache = response_cache_signs(r, m, prec);  // endpoints only (src/audit/response_cache.cpp)
    {  // the one throughput ratio of every report (repro/audit/tradeoff.hpp)
      const SpeedRatio sp = speed_ratio(r, m, prec, SpeedCells::greedy_else_sampled);
      ms.throughput_ratio = sp.mean;
      ms.throughput_ratio_sd = sp.sd;
      ms.throughput_ratio_n = sp.n;
    }
    if (!remote_requests(r, m, ms.requests, ms.failed_requests)) {
      ms.requests = n_total + ms.errors;
      ms.failed_requests = ms.errors;
    }
    ms.requests = std::max<int64_t>(ms.requests, n_total + ms.errors);  // resumed runs: earlier probes too
    ms.failed_requests = std::max<int64_t>(ms.failed_requests, ms.errors);
    ms.error_rate = ms.requests > 0 ? static_cast<double>(ms.failed_requests) / static_cast<double>(ms.requests) : 0.0;
    if (ms.cases == 0)
      ms.verdict = "not run";
    else if (n_total == 0 || ms.error_rate > t.max_error_rate + 1e-12)
      ms.verdict = "errors";
    else if (ms.divergent_cases > t.max_divergent || ms.tarr_rate + 1e-12 < t.min_tarr)
      ms.verdict = "divergent";
    else if (const EndpointEvidence* ev = find_evidence(r, m); ev && !ev->verified)
      ms.verdict = "unverified";  // reproducible replays that never shared the server prove nothing
    else if (ms.response_cache && cache_confirmed(*ms.response_cache))
      ms.verdict = "unverified";  // identical outputs replayed from a cache say nothing about the model
    else if (ms.no_answer_cases > 0)
      ms.verdict = "no answer";
    else
      ms.verdict = "reproducible";
    // "no answer": the outputs are reproducible, the answer check had nothing to compare; it passes
    // the gate, and the run's verdict says so (exit 0 with a warning).
    ms.gate = !ms.gated                                                   ? "not gated"
              : ms.verdict == "reproducible" || ms.verdict == "no answer" ? "pass"
                                                                          : "fail";
    if (ms.gated) {
      any_gated = true;
      gate_errors = gate_errors || ms.verdict == "errors" || ms.verdict == "not run";
      gate_divergent = gate_divergent || ms.verdict == "divergent";
      gate_no_answer = gate_no_answer || ms.verdict == "no answer";
      gate_unverified = gate_unverified || ms.verdict == "unverified";
    }
    s.modes.push_back(ms);
  }
  for (const auto& cr : r.cases) {
    s.cases++;
    s.divergent_cases += cr.divergent;
    s.max_unique = std::max(s.max_unique, cr.unique);
    s.completions += cr.n;
    s.errors += cr.errors;
  }
  const bool drift = r.baseline && r.baseline->drifted;
  s.verdict = s.interrupted               ? "interrupted"
              : gate_errors || (!any_gated && !r.shard) ? "errors"
              : gate_divergent            ? "divergent"
              : drift                     ? "drift"
              : gate_unverified           ? "unverified"
              : gate_no_answer            ? "no answer"
                                          : "reproducible";
}

std::string case_verdict(const CaseResult& c) {
  return c.n == 0 ? "no completions" : c.divergent ? "divergent" : c.no_answer ? "no answer" : "reproducible";
}

int exit_code_for(const AuditReport& r) {
  const auto& v = r.summary.verdict;
  if (r.summary.interrupted || v == "interrupted") return kExitInterrupted;
  if (v == "errors") return kExitBackend;
  if (v == "divergent" || v == "drift" || v == "incomplete") return kExitDivergent;
  if (v == "unverified") return kExitUnverified;
  return kExitOk;
}

void check_gate_modes(const std::vector<std::string>& gate_modes, const std::vector<std::string>& run_modes,
                      const std::string& flag) {
  for (const auto& g : gate_modes) {
    if (std::find(run_modes.begin(), run_modes.end(), g) != run_modes.end()) continue;
    std::string list;
    for (const auto& m : run_modes) list += (list.empty() ? "" : ", ") + m;
    std::string near = closest_match(g, run_modes);
    throw UsageError(flag + ": '" + g + "' is not a mode or endpoint label of this run" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; this run has " + list +
                     "; name one of them in --gate-modes");
  }
}

std::vector<ErrorKind> error_kinds(const AuditReport& r) {
  std::vector<ErrorKind> out;
  std::map<std::pair<std::string, std::string>, size_t> at;
  for (const auto& c : r.completions) {
    if (c.error.empty()) continue;
    // "<cause>: <detail> (after N attempts)"
    std::string cause = c.error.substr(0, c.error.find(':'));
    std::string detail = c.error.find(": ") == std::string::npos ? c.error : c.error.substr(c.error.find(": ") + 2);
    if (auto p = detail.rfind(" (after "); p != std::string::npos) detail.resize(p);
    std::string kind = cause;
    if (detail.rfind("HTTP ", 0) == 0) kind = detail.substr(0, std::min(detail.size(), detail.find_first_of(":", 5)));
    auto key = std::make_pair(c.mode, kind);
    auto it = at.find(key);
    if (it == at.end()) {
      at[key] = out.size();
      out.push_back({c.mode, kind, sanitize_utf8(detail), 1});
    } else {
      out[it->second].count++;
    }
  }
  return out;
}

// ============================================================================ charts data

std::vector<BatchPoint> unique_by_batch(const AuditReport& r) {
  struct Acc {
    double unique_sum = 0, off_sum = 0;
    int cases = 0, completions = 0;
  };
  std::vector<std::string> mode_order;
  std::map<std::pair<std::string, int>, Acc> acc;
  for (const auto& cr : r.cases) {
    const std::string label = mode_label(cr.mode, cr.precision);
    if (std::find(mode_order.begin(), mode_order.end(), label) == mode_order.end()) mode_order.push_back(label);
    std::map<int, std::set<int>> uniq;  // batch size -> clusters seen
    std::map<int, std::pair<int, int>> off;  // batch size -> (off-majority, total)
    for (size_t k = 0; k < cr.clusters.size(); ++k) {
      for (int ci : cr.clusters[k].members) {
        if (ci < 0 || ci >= static_cast<int>(r.completions.size())) continue;
        int b = r.completions[ci].batch_size;
        uniq[b].insert(static_cast<int>(k));
        off[b].first += k != 0;
        off[b].second++;
      }
    }
    for (const auto& [b, set] : uniq) {
      auto& a = acc[{label, b}];
      a.unique_sum += static_cast<double>(set.size());
      a.off_sum += static_cast<double>(off[b].first) / off[b].second;
      a.cases++;
      a.completions += off[b].second;
    }
  }
  std::vector<BatchPoint> out;
  for (const auto& m : mode_order)
    for (const auto& [k, a] : acc)
      if (k.first == m)
        out.push_back({m, k.second, a.unique_sum / a.cases, a.off_sum / a.cases, a.completions});
  return out;
}

}  // namespace repro
