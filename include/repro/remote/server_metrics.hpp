// Server-side evidence of load: how many requests the server itself says it is running, read from
// what the server exposes beside its OpenAI API, while the audit's requests are in flight.
//
// Sources, tried in this order at the server's root (the endpoint URL without its /v1 and query):
//   GET /metrics (Prometheus text, repro/remote/prometheus.hpp): the first of
//     vllm:num_requests_running, sglang:num_running_reqs, llamacpp:requests_processing,
//     repro_audit:num_requests_running that the body has, summed over its label sets (vLLM has one
//     per engine, SGLang one per rank);
//   GET /slots (llama.cpp): the number of slots whose "is_processing" is true.
// A server that has neither, answers garbage, too much (over max_body_bytes) or too slowly (over
// get_timeout_s) makes the evidence "unknown: <reason>"; it never fails or holds up the audit.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "repro/remote/endpoint.hpp"

namespace repro {

struct ServerMetricsOptions {
  double interval_s = 0.05;        // between the starts of two samples
  double get_timeout_s = 1.0;      // one GET (connect included); longer is "too slow"
  size_t max_body_bytes = 8u << 20;  // larger is "too large"
  size_t max_series = 100000;      // samples kept in the series (the summary counts them all)
};

// The server's root URL: the endpoint URL without fragment, query, trailing '/', a trailing "/v1"
// (and, for Azure, "/openai"): http://h:8000/v1 -> http://h:8000.
std::string server_root_url(const EndpointSpec& spec);

// One reading of "requests running".
struct RunningScrape {
  bool ok = false;
  double running = 0;   // ok: the value
  std::string source;   // ok: "vllm:num_requests_running", ..., or "/slots"
  std::string error;    // !ok: one line, why not (no route, not Prometheus text, too large, too slow,
                        // no known metric); never holds the API key
};

// One GET of /metrics (then /slots when /metrics has nothing known); bounded by the options.
RunningScrape scrape_running(const EndpointSpec& spec, const ServerMetricsOptions& opts = {});

struct RunningSample {
  std::chrono::steady_clock::time_point at;  // the middle of the GET that read it (sent .. answered)
  double running = 0;
};

struct ServerMetricsSummary {
  std::string status = "unknown: not sampled";  // "known" or "unknown: <one-line reason>"
  std::string source;     // known: where the count came from (as RunningScrape::source)
  int samples = 0;        // readings taken
  int failed = 0;         // GETs after the first reading that gave none (skipped; see last_error)
  double max_running = 0, mean_running = 0;  // over the readings
  std::string last_error; // the latest failed GET's reason, if any
  std::vector<RunningSample> series;         // the readings, in time order (at most max_series)
  bool known() const { return status == "known"; }
};

// Samples "requests running" on its own thread from start() to stop(): the first GET finds the
// source (as scrape_running), later GETs read only that source. If the first GET finds nothing the
// thread ends and the summary says why; if the server later stops answering (three failed GETs in a
// row) the thread ends and the readings taken so far stand. stop() returns within about
// get_timeout_s. Not copyable; one start() per object.
class ServerMetricsSampler {
 public:
  explicit ServerMetricsSampler(EndpointSpec spec, ServerMetricsOptions opts = {});
  ~ServerMetricsSampler();  // stop()
  ServerMetricsSampler(const ServerMetricsSampler&) = delete;
  ServerMetricsSampler& operator=(const ServerMetricsSampler&) = delete;

  void start();
  ServerMetricsSummary stop();              // stops the thread (idempotent) and returns summary()
  ServerMetricsSummary summary() const;     // so far (safe while running)

 private:
  void loop();
  EndpointSpec spec_;
  ServerMetricsOptions opts_;
  std::thread thread_;
  std::atomic<bool> quit_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ServerMetricsSummary sum_;
  double total_ = 0;
};

}  // namespace repro
