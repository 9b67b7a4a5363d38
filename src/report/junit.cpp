// JUnit XML: one testsuite per mode, one testcase per case. Divergent cases in gated modes fail with
// the cluster summary as message; cases without any completion are errors.
#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "repro/audit/stats.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {

// XML 1.0 text/attribute escaping; control characters XML cannot carry become U+FFFD.
std::string xml(const std::string& s) {
  std::string o;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      case '\n': o += "&#10;"; break;
      case '\t': o += "&#9;"; break;
      case '\r': o += "&#13;"; break;
      default:
        if (c < 0x20)
          o += "\xEF\xBF\xBD";
        else
          o += ch;
    }
  }
  return o;
}

std::string head(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
  return s.substr(0, n) + "...";
}

}  // namespace

std::string to_junit(const AuditReport& r) {
  // One suite per mode and precision: "default.bf16" (the mode alone without a precision).
  auto suite = [](const std::string& mode, const std::string& precision) {
    return precision.empty() ? mode : mode + "." + precision;
  };
  std::vector<std::string> modes;
  for (const auto& c : r.cases)
    if (std::find(modes.begin(), modes.end(), suite(c.mode, c.precision)) == modes.end())
      modes.push_back(suite(c.mode, c.precision));
  for (const auto& m : r.summary.modes)  // a gated mode that never ran still gets its suite (an error)
    if (std::find(modes.begin(), modes.end(), suite(m.mode, m.precision)) == modes.end())
      modes.push_back(suite(m.mode, m.precision));
  std::map<std::string, double> seconds;  // per case key: summed latency of its completions
  for (const auto& c : r.completions)
    seconds[c.prompt_id + "\x1f" + c.decoding_id + "\x1f" + suite(c.mode, c.precision)] += c.latency_s;

  int tests = 0, failures = 0, errors = 0;
  std::string body;
  const VerdictBanner banner = verdict_banner(r);
  for (const auto& m : modes) {
    int t = 0, f = 0, e = 0, sk = 0;
    double suite_time = 0;
    std::string cases;
    for (const auto& c : r.cases) {
      if (suite(c.mode, c.precision) != m) continue;
      double time = seconds[c.prompt_id + "\x1f" + c.decoding_id + "\x1f" + m];
      suite_time += time;
      ++t;
      cases += fmt::format("    <testcase classname=\"repro-audit.{}\" name=\"{} [{}]\" time=\"{:.3f}\"", xml(m),
                           xml(c.prompt_id), xml(c.decoding_id), time);
      std::string summary = case_summary(c, &r);
      if (c.n == 0 && c.failed) {
        ++e;
        cases += fmt::format(">\n      <error message=\"{}\" type=\"no-completions\"/>\n    </testcase>\n", xml(summary));
      } else if (c.failed) {
        ++f;
        // the factor the divergence follows, so the CI log says why, not only that
        std::string follows;
        for (const auto& fa : c.factors)
          if (fa.explains) follows += (follows.empty() ? "" : ", ") + fa.factor;
        summary = (follows.empty() ? "no single factor explains the clusters"
                                   : "explained by " + follows + " (each value maps to one cluster)") +
                  "; " + summary;
        std::string detail;
        for (size_t i = 0; i < c.clusters.size(); ++i)
          detail += fmt::format("c{} x{} {}: {}\n", i + 1, c.clusters[i].count, c.clusters[i].hash,
                                head(c.clusters[i].text, 200));
        cases += fmt::format(">\n      <failure message=\"{}\" type=\"divergent\">{}</failure>\n    </testcase>\n",
                             xml(summary), xml(detail));
      } else if (c.no_answer) {  // nothing to compare: the answer check did not happen
        ++sk;
        cases += fmt::format(
            ">\n      <skipped message=\"{}\"/>\n      <system-out>{}</system-out>\n    </testcase>\n",
            xml(fmt::format("no answer: the answer extractor matched none of the {} completions", c.n)),
            xml(summary));
      } else {
        cases += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml(summary));
      }
    }
    // The gate's error check of a gated mode: failed requests over --max-error-rate, or nothing answered.
    for (const auto& ms : r.summary.modes) {
      if (suite(ms.mode, ms.precision) != m || !ms.gated || (ms.verdict != "errors" && ms.verdict != "not run")) continue;
      ++t, ++e;
      cases += fmt::format("    <testcase classname=\"repro-audit.{}\" name=\"error rate\" time=\"0.000\">\n"
                           "      <error message=\"{}\" type=\"errors\"/>\n    </testcase>\n",
                           xml(m), xml(fmt::format("{} of {} requests failed ({:.1f}%, max {:.1f}%)", ms.failed_requests,
                                                   ms.requests, 100 * ms.error_rate, 100 * r.thresholds.max_error_rate)));
    }
    // An endpoint whose concurrency levels never co-batched the probe: the replays prove nothing.
    for (const auto& ms : r.summary.modes) {
      if (suite(ms.mode, ms.precision) != m || ms.verdict != "unverified") continue;
      ++t;
      const EndpointEvidence* ev = find_evidence(r, ms.mode);
      const bool cache = (!ev || ev->verified) && ms.response_cache && cache_confirmed(*ms.response_cache);
      const std::string why = cache ? ms.response_cache->finding : ev ? ev->finding : std::string(kUnverifiedWhy);
      if (ms.gated) {
        ++f;
        cases += fmt::format("    <testcase classname=\"repro-audit.{}\" name=\"{}\" time=\"0.000\">\n"
                             "      <failure message=\"{}\" type=\"unverified\"/>\n    </testcase>\n",
                             xml(m), cache ? "response cache" : "co-batching", xml("UNVERIFIED: " + why));
      } else {
        ++sk;
        cases += fmt::format("    <testcase classname=\"repro-audit.{}\" name=\"{}\" time=\"0.000\">\n"
                             "      <skipped message=\"{}\"/>\n    </testcase>\n",
                             xml(m), cache ? "response cache" : "co-batching", xml("UNVERIFIED: " + why));
      }
    }
    body += fmt::format(
        "  <testsuite name=\"repro-audit.{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" "
        "skipped=\"{}\" time=\"{:.3f}\">\n",
        xml(m), t, f, e, sk, suite_time);
    // The mode's own verdict and what the gate covers (the banner of every format, src/report/summary_text.cpp).
    for (size_t i = 0; i < banner.modes.size() && i < r.summary.modes.size(); ++i) {
      if (suite(r.summary.modes[i].mode, r.summary.modes[i].precision) != m) continue;
      const BannerMode& bm = banner.modes[i];
      body += fmt::format("    <properties>\n      <property name=\"verdict\" value=\"{}\"/>\n      <property "
                          "name=\"gate\" value=\"{}\"/>\n    </properties>\n",
                          xml(bm.verdict + ": " + bm.detail), xml(banner.gate));
    }
    // Structured output (plan with a JSON Schema): the mode's schema-valid rate and JSON agreement,
    // after validation with retry and before, as properties (measurements, not tests).
    for (const auto& ms : r.summary.modes) {
      if (suite(ms.mode, ms.precision) != m || !ms.structured) continue;
      const StructuredSummary& st = *ms.structured;
      body += "    <properties>\n";
      auto prop = [&](const std::string& name, const std::string& value) {
        body += fmt::format("      <property name=\"structured.{}\" value=\"{}\"/>\n", xml(name), xml(value));
      };
      prop("schema_valid", rate_text(st.valid));
      prop("schema_valid_before_retry", rate_text(st.valid_first));
      prop("tarr", rate_text(st.tarr));
      prop("tara_json", rate_text(st.tara_json));
      prop("retries", fmt::format("{} extra requests, {} extra tokens", st.retries, st.retry_tokens));
      for (const auto& fr : st.fields) prop("field." + fr.path, rate_text(fr.agree));
      body += "    </properties>\n";
    }
    // An endpoint's evidence as properties: posture, co-batching per level, seed probes.
    if (const EndpointEvidence* ev = find_evidence(r, m)) {
      body += "    <properties>\n";
      auto prop = [&](const std::string& name, const std::string& value) {
        body += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", xml(name), xml(value));
      };
      prop("posture", posture_line(ev->posture));
      for (const auto& l : ev->levels)
        prop("cobatching.concurrency_" + std::to_string(l.concurrency), l.evidence);
      for (const auto& s : ev->seeds)
        prop("seed." + s.api, s.result + ": " + s.detail);
      prop("verified", ev->verified ? "yes" : "UNVERIFIED: " + ev->finding);
      body += "    </properties>\n";
    }
    body += cases;
    body += "  </testsuite>\n";
    tests += t, failures += f, errors += e;
  }
  if (!r.advice.empty()) {  // what to do (src/audit/advice.cpp), as properties: advice, not tests
    body += "  <testsuite name=\"repro-audit.advice\" tests=\"0\" failures=\"0\" errors=\"0\" skipped=\"0\" "
            "time=\"0.000\">\n    <properties>\n";
    for (size_t i = 0; i < r.advice.size(); ++i) {
      std::string text;
      for (const auto& l : advice_lines(r.advice[i])) text += (text.empty() ? "" : "; ") + l;
      body += fmt::format("      <property name=\"advice.{}\" value=\"{}\"/>\n", i + 1, xml(text));
    }
    body += "    </properties>\n  </testsuite>\n";
  }
  if (!r.tradeoff.empty()) {  // the trade-off table as properties of a suite without testcases: measurements, not tests
    body += "  <testsuite name=\"repro-audit.tradeoff\" tests=\"0\" failures=\"0\" errors=\"0\" skipped=\"0\" "
            "time=\"0.000\">\n    <properties>\n";
    for (const auto& t : r.tradeoff)
      body += fmt::format("      <property name=\"tradeoff.{}\" value=\"{}\"/>\n", xml(t.approach), xml(tradeoff_line(t)));
    body += "    </properties>\n  </testsuite>\n";
  }
  if (r.baseline) {  // `run --baseline`: drift from the golden report is a failing testcase
    const BaselineResult& b = *r.baseline;
    std::string tc = fmt::format("    <testcase classname=\"repro-audit.baseline\" name=\"drift against {}\" time=\"0.000\"",
                                 xml(b.file));
    std::string detail;
    for (const auto& c : b.config_changes) detail += "configuration: " + c + "\n";
    for (const auto& c : b.changes) detail += c + "\n";
    if (b.drifted)
      tc += fmt::format(">\n      <failure message=\"{}\" type=\"drift\">{}</failure>\n    </testcase>\n",
                        xml(fmt::format("{} change(s) against the baseline", b.changes.size())), xml(detail));
    else
      tc += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml("no drift\n" + detail));
    body += fmt::format("  <testsuite name=\"repro-audit.baseline\" tests=\"1\" failures=\"{}\" errors=\"0\" "
                        "skipped=\"0\" time=\"0.000\">\n{}  </testsuite>\n",
                        b.drifted ? 1 : 0, tc);
    tests += 1, failures += b.drifted ? 1 : 0;
  }
  if (r.merge) {  // `report merge`: the coverage check is a testcase; an incomplete merge fails it
    const MergeInfo& m = *r.merge;
    const std::string summary = shard_intro(r);
    std::string tc = "    <testcase classname=\"repro-audit.merge\" name=\"coverage\" time=\"0.000\"";
    if (!m.complete)
      tc += fmt::format(">\n      <failure message=\"{}\" type=\"incomplete\">{}</failure>\n    </testcase>\n",
                        xml(fmt::format("{} shard(s) and {} case(s) of the plan missing", m.missing_shards.size(),
                                        m.missing_cases.size())),
                        xml(summary));
    else
      tc += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml(summary));
    body += fmt::format("  <testsuite name=\"repro-audit.merge\" tests=\"1\" failures=\"{}\" errors=\"0\" "
                        "skipped=\"0\" time=\"0.000\">\n{}  </testsuite>\n",
                        m.complete ? 0 : 1, tc);
    tests += 1, failures += m.complete ? 0 : 1;
  }
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format("<testsuites name=\"repro-audit\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n", tests, failures,
                   errors);
  o += body;
  o += "</testsuites>\n";
  return o;
}

}  // namespace repro
