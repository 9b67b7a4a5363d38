// Co-batching evidence and the UNVERIFIED rule: see include/repro/audit/cobatch.hpp.
#include "repro/audit/cobatch.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "repro/common/util.hpp"

namespace repro {

int overlap_with_others(const std::vector<Interval>& all, size_t self, int& others_min, double& others_mean) {
  const Interval me = all[self];
  others_min = 0;
  others_mean = 0;
  if (me.end <= me.start) {
    // An instant: count what was in flight at that moment.
    int n = 0;
    for (size_t k = 0; k < all.size(); ++k)
      if (k != self && all[k].start <= me.start && all[k].end >= me.start) ++n;
    others_min = n;
    others_mean = n;
    return n;
  }
  // Sweep the others' starts and ends clipped to my lifetime: the count is constant between events.
  std::vector<std::pair<double, int>> ev;
  int at_start = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    if (k == self) continue;
    const Interval o = all[k];
    if (o.end <= me.start || o.start >= me.end) continue;
    if (o.start <= me.start)
      ++at_start;
    else
      ev.emplace_back(o.start, +1);
    if (o.end < me.end) ev.emplace_back(o.end, -1);
  }
  std::sort(ev.begin(), ev.end());
  int cur = at_start, lo = at_start, hi = at_start;
  double t = me.start, area = 0;
  for (size_t i = 0; i < ev.size();) {
    const double at = ev[i].first;
    area += cur * (at - t);
    t = at;
    for (; i < ev.size() && ev[i].first == at; ++i) cur += ev[i].second;  // simultaneous events at once
    if (t < me.end) {
      lo = std::min(lo, cur);
      hi = std::max(hi, cur);
    }
  }
  area += cur * (me.end - t);
  others_min = lo;
  others_mean = area / (me.end - me.start);
  return hi;
}

const EndpointEvidence* find_evidence(const AuditReport& report, const std::string& endpoint) {
  for (const auto& e : report.evidence)
    if (e.endpoint == endpoint) return &e;
  return nullptr;
}

EndpointEvidence& evidence_for(AuditReport& report, const std::string& endpoint) {
  for (auto& e : report.evidence)
    if (e.endpoint == endpoint) return e;
  report.evidence.push_back(EndpointEvidence{});
  report.evidence.back().endpoint = endpoint;
  return report.evidence.back();
}

void record_level(AuditReport& report, const std::string& endpoint, int concurrency,
                  const std::vector<Completion>& probes, const ServerMetricsSummary& server) {
  EndpointEvidence& ev = evidence_for(report, endpoint);
  auto it = std::find_if(ev.levels.begin(), ev.levels.end(),
                         [&](const CoBatchLevel& l) { return l.concurrency == concurrency; });
  if (it == ev.levels.end()) {
    CoBatchLevel l;
    l.concurrency = concurrency;
    l.control = concurrency == 1;
    l.others_min = -1;
    it = ev.levels.insert(std::upper_bound(ev.levels.begin(), ev.levels.end(), l,
                                           [](const CoBatchLevel& a, const CoBatchLevel& b) {
                                             return a.concurrency < b.concurrency;
                                           }),
                          l);
  }
  CoBatchLevel& l = *it;
  for (const auto& c : probes) {
    if (c.send_s < 0 || c.others_min < 0) continue;
    const int most = std::max(c.others_min, c.others_max);
    l.others_mean = (l.others_mean * l.probes + c.others_mean) / (l.probes + 1);
    l.others_min = l.others_min < 0 ? c.others_min : std::min(l.others_min, c.others_min);
    l.others_max = std::max(l.others_max, most);
    ++l.probes;
    if (c.server_max_batch >= 0)
      l.response_max_batch = std::max(l.response_max_batch.value_or(0), c.server_max_batch);
  }
  if (l.others_min < 0 && l.probes == 0) l.others_min = 0;
  const std::string source = server.source.empty()       ? ""
                             : server.source == "/slots" ? "GET /slots"
                                                         : "GET /metrics " + server.source;
  if (server.known()) {
    const int n = l.server_samples;
    l.server_running_mean = (l.server_running_mean.value_or(0) * n + server.mean_running * server.samples) /
                            std::max(1, n + server.samples);
    l.server_running_max = std::max(l.server_running_max.value_or(0), server.max_running);
    l.server_samples += server.samples;
    l.server_source = source;
    l.server_status = "known";
  } else if (l.server_status != "known") {
    l.server_status = server.status;
    l.server_source = source;
  }
}

namespace {

std::string fmt1(double v) { return fmt::format("{:.1f}", v); }

void decide_level(CoBatchLevel& l) {
  if (l.control) {
    l.co_batched = false;
    l.evidence = "control arm: the probe was sent alone (" + fmt1(l.others_mean) +
                 " other requests in flight on average)";
    return;
  }
  if (l.probes == 0) {
    l.co_batched = false;
    l.evidence = "no probe finished with timing";
    return;
  }
  if (l.others_max < 1) {
    l.co_batched = false;
    l.evidence = "not co-batched: no other request was in flight while a probe ran (client side)";
    return;
  }
  const std::string client = "client: up to " + std::to_string(l.others_max + 1) + " requests in flight, " +
                             fmt1(l.others_mean + 1) + " on average";
  if (l.response_max_batch) {
    l.co_batched = *l.response_max_batch >= 2;
    l.evidence = (l.co_batched ? "co-batched: " : "not co-batched: ") + client +
                 "; server: the largest batch a probe shared was " + std::to_string(*l.response_max_batch);
    return;
  }
  if (l.server_status == "known" && l.server_running_max) {
    l.co_batched = *l.server_running_max >= 2;
    l.evidence = (l.co_batched ? "co-batched: " : "not co-batched: ") + client + "; server: at most " +
                 fmt1(*l.server_running_max) + " requests running (" + l.server_source + ", " +
                 std::to_string(l.server_samples) + " samples)";
    return;
  }
  l.co_batched = true;
  l.evidence = "co-batched (client side only): " + client + "; the server's running count is " + l.server_status;
}

}  // namespace

void decide_evidence(AuditReport& report) {
  for (auto& ev : report.evidence) {
    ev.verified = false;
    for (auto& l : ev.levels) {
      decide_level(l);
      ev.verified = ev.verified || l.co_batched;
    }
    ev.finding.clear();
    if (!ev.verified) {
      bool above_one = false;
      for (const auto& l : ev.levels) above_one = above_one || !l.control;
      ev.finding = std::string(kUnverifiedWhy) +
                   (above_one ? "" : " (the plan ran concurrency 1 only: add levels, e.g. --concurrency 1,8)");
    }
  }
}

std::string posture_line(const EndpointPosture& p) {
  std::string s = "engine " + p.engine + (p.version.empty() ? "" : " " + p.version);
  s += ", deterministic mode " + p.deterministic + ", batch invariance " + p.batch_invariance;
  return s;
}

}  // namespace repro
