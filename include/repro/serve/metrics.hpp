// What `serve` exposes on GET /metrics (Prometheus text, docs/REMOTE.md "serve's /metrics"): the
// scheduler's counts, kept in a prometheus-cpp registry (Debian's prometheus-cpp core: Registry,
// Counter/Gauge/Histogram families, TextSerializer). The scheduler (scheduler.cpp) reports steps,
// tokens, queue and batch sizes and finished requests; the routes (server.cpp) report the requests
// they refuse before queueing them and render() the text. Every method is thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace repro::serve {

// The server's posture, as the constant `repro_audit:server_info` gauge carries it in its labels.
struct MetricsInfo {
  std::string version, commit, mode, device, precision, model, model_sha256, fingerprint;
  int max_batch = 1;  // the effective limit (1 when the mode decodes every request alone)
};

class Metrics {
 public:
  explicit Metrics(const MetricsInfo& info);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  void step(int batch);                    // one engine step ran `batch` sequences
  void prompt_tokens(int64_t n);           // a request's prompt entered the batch
  void generated_tokens(int64_t n);
  void set_running(int n);                 // sequences in the batch now
  void set_waiting(int n);                 // requests queued for a batch slot now
  void set_max_batch(int n);               // the effective limit, once the engine is built
  // A generation request ended: "ok", "cancelled" (its client went away), or the HTTP status of its
  // error ("400", "401", "500", "503", ...).
  void finished(const std::string& status);
  std::string render() const;              // the text exposition (version 0.0.4)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace repro::serve
