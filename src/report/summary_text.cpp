// The verdict banner and "what to do" as plain text, shared by every writer (see
// include/repro/report/report.hpp). The advice itself is computed once, by compute_advice
// (src/audit/advice.cpp); here it is only laid out.
#include <fmt/core.h>

#include <algorithm>
#include <cctype>

#include "repro/audit/verdict.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {
std::string upper(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

VerdictBanner verdict_banner(const AuditReport& r) {
  VerdictBanner b;
  const Summary& s = r.summary;
  b.verdict = upper(s.verdict.empty() ? "unknown" : s.verdict);
  std::vector<std::string> gated, ungated_labels, ungated_divergent;
  for (const auto& m : s.modes) {
    BannerMode bm;
    bm.label = mode_label(m.mode, m.precision);
    bm.verdict = upper(m.verdict.empty() ? "unknown" : m.verdict);
    bm.good = m.verdict == "reproducible" || m.verdict == "no answer";
    bm.gated = m.gated;
    bm.detail = fmt::format("{} of {} case{} divergent", m.divergent_cases, m.cases, m.cases == 1 ? "" : "s");
    if (m.errors > 0) bm.detail += fmt::format(", {} error{}", m.errors, m.errors == 1 ? "" : "s");
    bm.detail += m.gated ? fmt::format(", gated: {}", m.gate.empty() ? "-" : m.gate) : ", not gated";
    if (m.gated) {
      if (std::find(gated.begin(), gated.end(), m.mode) == gated.end()) gated.push_back(m.mode);
    } else {
      if (std::find(ungated_labels.begin(), ungated_labels.end(), m.mode) == ungated_labels.end())
        ungated_labels.push_back(m.mode);
      if (m.verdict != "reproducible" && m.verdict != "no answer" && m.verdict != "not run")
        ungated_divergent.push_back(bm.label + " " + bm.verdict);
    }
    b.modes.push_back(std::move(bm));
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string o;
    for (size_t i = 0; i < v.size(); ++i) o += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
    return o;
  };
  b.scope = ungated_labels.empty() ? "gate: every mode" : gated.empty() ? "gate: no mode" : "gate: " + list(gated);
  for (size_t i = 0; i < ungated_divergent.size(); ++i) b.ungated += (i ? "; " : "") + ungated_divergent[i];
  b.mixed = !b.ungated.empty() && (s.verdict == "reproducible" || s.verdict == "no answer");
  b.title = "Verdict: " + b.verdict + " (" + b.scope + ")";
  if (!b.ungated.empty()) b.title += "; not gated: " + b.ungated;
  const std::string thresholds =
      fmt::format("at most {} divergent case{} and TARr@N >= {} per mode", r.thresholds.max_divergent,
                  r.thresholds.max_divergent == 1 ? "" : "s", fmt_percent(r.thresholds.min_tarr));
  if (ungated_labels.empty())
    b.gate = "The gate covers every mode of this run: " + thresholds + ".";
  else if (gated.empty())
    b.gate = "The gate covers no mode of this run (--gate-modes names none of them).";
  else
    b.gate = fmt::format("The gate covers {} only (--gate-modes or the profile): {}; {} {} reported but not gated, so "
                         "{} divergence does not change the exit status.",
                         list(gated), thresholds, list(ungated_labels), ungated_labels.size() == 1 ? "is" : "are",
                         ungated_labels.size() == 1 ? "its" : "their");
  b.gate += fmt::format(" Exit status {}.", exit_code_for(r));
  return b;
}

std::string repro_intro(const CaseResult& c) {
  for (const auto& k : c.clusters)
    if (k.repro_command.find("curl ") != std::string::npos)
      return "Send each cluster's first request again (set OPENAI_API_KEY, or AZURE_OPENAI_API_KEY for Azure, if the "
             "endpoint needs a key; the answer carries its tokens and logprobs where the server returns them):";
  return "Reproduce each cluster's first completion alone (token ids, logprobs and the final-logits hash with --json):";
}

std::vector<std::string> advice_lines(const Advice& a) {
  std::vector<std::string> out;
  out.push_back((a.about.empty() ? "" : a.about + ": ") + a.action);
  if (!a.because.empty()) out.push_back("because " + a.because);
  if (!a.cost.empty()) out.push_back("cost: " + a.cost);
  if (!a.limits.empty()) out.push_back("limits: " + a.limits + (a.source.empty() ? "" : " (" + a.source + ")"));
  else if (!a.source.empty()) out.push_back("documented at " + a.source);
  return out;
}

}  // namespace repro
