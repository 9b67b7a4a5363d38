// serve's Prometheus metrics (repro/serve/metrics.hpp) on prometheus-cpp's core library. Names carry
// the `repro_audit:` prefix, as vLLM's carry `vllm:`; counters end in `_total` (prometheus-cpp 1.0
// writes the family name as given). docs/REMOTE.md lists them.
#include "repro/serve/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>

namespace repro::serve {

struct Metrics::Impl {
  std::shared_ptr<prometheus::Registry> reg = std::make_shared<prometheus::Registry>();
  prometheus::Gauge* running = nullptr;
  prometheus::Gauge* waiting = nullptr;
  prometheus::Histogram* batch = nullptr;
  prometheus::Counter* prompt = nullptr;
  prometheus::Counter* generated = nullptr;
  prometheus::Counter* steps = nullptr;
  prometheus::Gauge* max_batch = nullptr;
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  std::mutex mu;  // guards `by_status` (Family::Add is thread-safe; the cache saves its lookups)
  std::map<std::string, prometheus::Counter*> by_status;

  prometheus::Counter& status(const std::string& st) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = by_status.find(st);
    if (it == by_status.end()) it = by_status.emplace(st, &requests->Add({{"status", st}})).first;
    return *it->second;
  }
};

Metrics::Metrics(const MetricsInfo& info) : impl_(std::make_unique<Impl>()) {
  using namespace prometheus;
  Registry& r = *impl_->reg;
  impl_->running = &BuildGauge()
                        .Name("repro_audit:num_requests_running")
                        .Help("Requests in the engine's running batch (decoding, or prefilled at the next step).")
                        .Register(r)
                        .Add({});
  impl_->waiting = &BuildGauge()
                        .Name("repro_audit:num_requests_waiting")
                        .Help("Requests queued for a batch slot.")
                        .Register(r)
                        .Add({});
  // Integer batch sizes: every size up to 8, then powers of two up to 1024.
  Histogram::BucketBoundaries bounds = {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024};
  impl_->batch = &BuildHistogram()
                      .Name("repro_audit:step_batch_size")
                      .Help("Sequences in each engine step (the batch the kernels saw).")
                      .Register(r)
                      .Add({}, bounds);
  impl_->steps = &BuildCounter()
                      .Name("repro_audit:engine_steps_total")
                      .Help("Engine steps run.")
                      .Register(r)
                      .Add({});
  impl_->prompt = &BuildCounter()
                       .Name("repro_audit:prompt_tokens_total")
                       .Help("Prompt tokens of the requests that entered the batch.")
                       .Register(r)
                       .Add({});
  impl_->generated = &BuildCounter()
                          .Name("repro_audit:generation_tokens_total")
                          .Help("Tokens generated.")
                          .Register(r)
                          .Add({});
  impl_->requests = &BuildCounter()
                         .Name("repro_audit:requests_total")
                         .Help("Generation requests ended, by status: ok, cancelled (the client left), or the "
                               "HTTP status of the error.")
                         .Register(r);
  impl_->max_batch = &BuildGauge()
                          .Name("repro_audit:max_batch")
                          .Help("The most sequences one step may decode (--max-batch; 1 when the mode decodes "
                                "requests alone).")
                          .Register(r)
                          .Add({});
  impl_->max_batch->Set(info.max_batch);
  BuildGauge()
      .Name("repro_audit:server_info")
      .Help("The server's posture in the labels; the value is always 1.")
      .Register(r)
      .Add({{"engine", "repro-audit"},
            {"version", info.version},
            {"commit", info.commit},
            {"mode", info.mode},
            {"device", info.device},
            {"precision", info.precision},
            {"model", info.model},
            {"model_sha256", info.model_sha256},
            {"system_fingerprint", info.fingerprint}})
      .Set(1);
  for (const char* s : {"ok", "cancelled"}) impl_->status(s);  // present (at 0) from the start
}

Metrics::~Metrics() = default;

void Metrics::step(int batch) {
  impl_->steps->Increment();
  impl_->batch->Observe(batch);
}
void Metrics::prompt_tokens(int64_t n) { impl_->prompt->Increment(static_cast<double>(n)); }
void Metrics::generated_tokens(int64_t n) { impl_->generated->Increment(static_cast<double>(n)); }
void Metrics::set_running(int n) { impl_->running->Set(n); }
void Metrics::set_waiting(int n) { impl_->waiting->Set(n); }
void Metrics::set_max_batch(int n) { impl_->max_batch->Set(n); }

void Metrics::finished(const std::string& status) { impl_->status(status).Increment(); }

std::string Metrics::render() const { return prometheus::TextSerializer().Serialize(impl_->reg->Collect()); }

}  // namespace repro::serve
