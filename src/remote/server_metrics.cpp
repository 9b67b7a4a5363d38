// Server-side "requests running" (repro/remote/server_metrics.hpp): one plain GET at a time through
// the client's http_get (its TLS rules, no redirects, the proxy bypass), with a short timeout and a
// body cap, read by the Prometheus text reader or, for llama.cpp's /slots, by parse_json.
#include "repro/remote/server_metrics.hpp"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "repro/common/json.hpp"
#include "repro/remote/client.hpp"
#include "repro/remote/prometheus.hpp"
#include "repro/remote/redact.hpp"
#include "repro/remote/request.hpp"

namespace repro {

namespace {

using Clock = std::chrono::steady_clock;

// The gauges of requests in the running batch, by engine, in the order they are looked for.
const char* const kRunningMetrics[] = {"vllm:num_requests_running", "sglang:num_running_reqs",
                                       "llamacpp:requests_processing", "repro_audit:num_requests_running"};
const char* const kSlotsSource = "/slots";

// One line, printable, at most 240 bytes.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (s.size() > 240) s = s.substr(0, 237) + "...";
  return s;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// The endpoint as the GETs see it: the same TLS and proxy rules, the short timeout.
EndpointSpec get_spec(const EndpointSpec& spec, const ServerMetricsOptions& o) {
  EndpointSpec s = spec;
  s.connect_timeout_s = o.get_timeout_s;
  s.read_timeout_s = o.get_timeout_s;
  s.total_timeout_s = o.get_timeout_s;
  s.verbose = false;
  return s;
}

// The auth headers the endpoint's requests carry (build_request's: Bearer, or Azure's api-key).
std::vector<std::string> auth_headers(const EndpointSpec& spec) {
  std::vector<std::string> out;
  try {
    RequestParams p;
    p.prompt = "x";
    for (auto& h : build_request(spec, p).headers)
      if (strncasecmp(h.c_str(), "authorization:", 14) == 0 || strncasecmp(h.c_str(), "api-key:", 8) == 0)
        out.push_back(h);
  } catch (...) {
    // a spec build_request refuses gets no auth header; the GET then says what the server wants
  }
  return out;
}

struct Got {
  bool ok = false;
  bool unreachable = false;  // timeout or no connection: asking another route is pointless
  std::string body, error;
};

Got get(const EndpointSpec& spec, const ServerMetricsOptions& o, const std::string& path, const char* accept) {
  Got g;
  std::vector<std::string> headers = auth_headers(spec);
  headers.push_back(std::string("Accept: ") + accept);
  const EndpointSpec s = get_spec(spec, o);
  HttpGetResult r = http_get(s, server_root_url(spec) + path, headers, o.max_body_bytes);
  const std::string what = "GET " + path + ": ";
  if (r.cause != FailCause::none) {
    std::string low = r.error;
    for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (r.cause == FailCause::timeout) {
      g.error = what + "too slow: no complete answer within " + seconds_text(o.get_timeout_s);
      g.unreachable = true;
    } else if (r.cause == FailCause::connect) {
      g.error = what + "cannot connect (" + r.error + ")";
      g.unreachable = true;
    } else if (r.cause == FailCause::other && low.find("writ") != std::string::npos) {
      g.error = what + "too large: more than " + std::to_string(o.max_body_bytes) + " bytes";
    } else {
      g.error = what + cause_name(r.cause) + " (" + r.error + ")";
    }
  } else if (r.status >= 300 && r.status < 400) {
    g.error = what + "redirected (HTTP " + std::to_string(r.status) + "); redirects are not followed";
  } else if (r.status == 404 || r.status == 405 || r.status == 501) {
    g.error = what + "no such route (HTTP " + std::to_string(r.status) + ")";
  } else if (r.status != 200) {
    g.error = what + "HTTP " + std::to_string(r.status);
    const std::string m = error_message_from_body(r.body);
    if (!m.empty()) g.error += ": " + m;
  } else {
    g.ok = true;
    g.body = std::move(r.body);
  }
  g.error = one_line(scrub_secret(g.error, spec.api_key));
  return g;
}

// "requests running" from a /metrics body: the metric `want` (or, when empty, the first known one).
RunningScrape from_metrics(const std::string& body, const std::string& want, size_t max_bytes) {
  RunningScrape out;
  prom::Exposition e;
  std::string err;
  prom::ParseLimits lim;
  lim.max_bytes = max_bytes;
  if (!prom::parse_prometheus_text(body, e, &err, lim)) {
    out.error = "GET /metrics: not Prometheus text (" + err + ")";
    return out;
  }
  for (const char* name : kRunningMetrics) {
    if (!want.empty() && want != name) continue;
    std::optional<double> v = e.sum(name);
    if (!v) continue;
    if (!std::isfinite(*v) || *v < 0) {
      out.error = std::string("GET /metrics: ") + name + " is not a count (" + std::to_string(*v) + ")";
      return out;
    }
    out.ok = true;
    out.running = *v;
    out.source = name;
    return out;
  }
  out.error = want.empty() ? "GET /metrics: none of the known running-requests gauges (vllm:num_requests_running, "
                             "sglang:num_running_reqs, llamacpp:requests_processing, "
                             "repro_audit:num_requests_running) among its " +
                                 std::to_string(e.families.size()) + " metric families"
                           : "GET /metrics: " + want + " is gone";
  return out;
}

// llama.cpp's /slots: a JSON array of slot objects; the count of those with "is_processing": true.
RunningScrape from_slots(const std::string& body) {
  RunningScrape out;
  nlohmann::json j;
  std::string why;
  if (!parse_json(body, j, &why) || !j.is_array()) {
    out.error = "GET /slots: not a JSON array of slots" + (why.empty() ? std::string() : " (" + why + ")");
    return out;
  }
  int processing = 0, reporting = 0;
  for (const auto& slot : j) {
    if (!slot.is_object()) continue;
    auto it = slot.find("is_processing");
    if (it == slot.end() || !it->is_boolean()) continue;
    ++reporting;
    if (it->get<bool>()) ++processing;
  }
  if (reporting == 0) {
    out.error = "GET /slots: no slot has an \"is_processing\" flag";
    return out;
  }
  out.ok = true;
  out.running = processing;
  out.source = kSlotsSource;
  return out;
}

// One reading from `source` ("" = find it: /metrics first, then /slots).
RunningScrape read_running(const EndpointSpec& spec, const ServerMetricsOptions& o, const std::string& source) {
  RunningScrape metrics;
  if (source != kSlotsSource) {
    Got g = get(spec, o, "/metrics", "text/plain;version=0.0.4");
    if (g.ok) {
      metrics = from_metrics(g.body, source, o.max_body_bytes);
    } else {
      metrics.error = g.error;
    }
    metrics.error = one_line(scrub_secret(metrics.error, spec.api_key));
    if (metrics.ok || !source.empty() || g.unreachable) return metrics;
  }
  RunningScrape slots;
  Got g = get(spec, o, "/slots", "application/json");
  if (g.ok) slots = from_slots(g.body);
  else slots.error = g.error;
  slots.error = one_line(scrub_secret(slots.error, spec.api_key));
  if (!slots.ok && source.empty()) slots.error = metrics.error + "; " + slots.error;
  return slots;
}

}  // namespace

std::string server_root_url(const EndpointSpec& spec) {
  // As build_request (src/remote/request.cpp) takes the base apart: no fragment, no query, no
  // trailing '/'; then the API's own prefix goes.
  std::string u = spec.url.substr(0, spec.url.find('#'));
  u = u.substr(0, u.find('?'));
  auto trim = [&u] {
    while (u.ends_with("/") && !u.ends_with("//")) u.pop_back();
  };
  trim();
  if (u.ends_with("/v1")) u.resize(u.size() - 3);
  else if (spec.provider == Provider::azure && u.ends_with("/openai")) u.resize(u.size() - 7);
  trim();
  return u;
}

RunningScrape scrape_running(const EndpointSpec& spec, const ServerMetricsOptions& opts) {
  return read_running(spec, opts, "");
}

ServerMetricsSampler::ServerMetricsSampler(EndpointSpec spec, ServerMetricsOptions opts)
    : spec_(std::move(spec)), opts_(opts) {}

ServerMetricsSampler::~ServerMetricsSampler() { stop(); }

void ServerMetricsSampler::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() || quit_) return;
  sum_ = ServerMetricsSummary{};
  sum_.status = "unknown: no answer yet";
  thread_ = std::thread([this] { loop(); });
}

ServerMetricsSummary ServerMetricsSampler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(mu_);
  if (sum_.samples == 0 && sum_.status == "unknown: no answer yet")
    sum_.status = "unknown: stopped before the server answered";
  return sum_;
}

ServerMetricsSummary ServerMetricsSampler::summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sum_;
}

void ServerMetricsSampler::loop() {
  std::string source;
  int failed_in_row = 0;
  auto next = Clock::now();
  const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.interval_s));
  while (!quit_) {
    const auto t0 = Clock::now();
    RunningScrape r = read_running(spec_, opts_, source);
    const auto t1 = Clock::now();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (r.ok) {
        if (source.empty()) {
          source = r.source;
          sum_.source = r.source;
          sum_.status = "known";
        }
        failed_in_row = 0;
        ++sum_.samples;
        total_ += r.running;
        sum_.max_running = sum_.samples == 1 ? r.running : std::max(sum_.max_running, r.running);
        sum_.mean_running = total_ / sum_.samples;
        if (sum_.series.size() < opts_.max_series) sum_.series.push_back({t0 + (t1 - t0) / 2, r.running});
      } else if (source.empty()) {
        sum_.status = "unknown: " + r.error;  // nothing known is exposed: stop asking
        return;
      } else {
        ++sum_.failed;
        sum_.last_error = r.error;
        if (++failed_in_row >= 3) return;  // the server stopped answering; the readings stand
      }
    }
    next += interval;
    const auto now = Clock::now();
    if (next < now) next = now;
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_until(lk, next, [this] { return quit_.load(); });
  }
}

}  // namespace repro
