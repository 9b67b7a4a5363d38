// `repro-audit bench --endpoint`: a server under load (repro/bench/endpoint.hpp measures it). This
// file checks the flags, prints each concurrency level's table as it is measured (mean, standard
// deviation and min-max per run, the latency quantiles over all measured requests, the ratio to the
// first endpoint) and writes the JSON. Any failed request is reported and makes the exit status 3.
#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>

#include "repro/bench/endpoint.hpp"
#include "repro/cli/bench.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/remote/load.hpp"
#include "repro/remote/redact.hpp"

namespace repro::cli {

namespace {

class EndpointPrinter : public bench::EndpointObserver {
 public:
  explicit EndpointPrinter(const EndpointBenchOptions& o) : o_(o) {}

  void start(const bench::EndpointConfig& cfg, const std::string& load_start) override {
    fmt::print("repro-audit bench --endpoint: closed loop, C requests in flight, each of the C streams sends {} "
               "request{} per run; prompt \"{}\", greedy, max-tokens {}, api {}, {}; warm-up {}, {} runs per cell "
               "(endpoints interleaved), load average {}\n",
               o_.requests, o_.requests == 1 ? "" : "s", o_.prompt, o_.max_tokens, o_.remote.api,
               o_.remote.stream ? "streamed" : "not streamed", o_.warmup, o_.repeats,
               load_start.empty() ? "unknown" : load_start);
    for (const auto& e : cfg.endpoints) fmt::print("  {}: {}\n", e.label, redact_url(e.url));
  }

  void level(int c, const std::vector<bench::EndpointRow>& rows) override {
    fmt::print("\nconcurrency {}: per run mean ±stddev [min-max]; latency over all measured requests\n", c);
    fmt::print("{:>16} {:>30} {:>32} {:>10} {:>9} {:>17} {:>8}\n", "endpoint", "requests/s", "completion tokens/s",
               "tok/req", "x first", "latency p50/p95 s", "failed");
    for (const auto& r : rows)
      fmt::print("{:>16} {:>30} {:>32} {:>10.1f} {:>9.2f} {:>17} {:>8}\n", r.endpoint,
                 bench::stats_cell(r.requests_per_s, o_.noise_cv), bench::stats_cell(r.tokens_per_s, o_.noise_cv),
                 r.tokens_per_request, r.tokens_per_s_vs_first,
                 fmt::format("{:.3f}/{:.3f}", r.latency_p50, r.latency_p95), r.failed);
    std::fflush(stdout);
  }

 private:
  const EndpointBenchOptions& o_;
};

}  // namespace

int run_bench_endpoints(const EndpointBenchOptions& o) {
  bench::EndpointConfig cfg;
  cfg.concurrency = parse_int_list(o.concurrency, "--concurrency");
  if (o.max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  if (o.requests < 1 || o.requests > 100000)
    throw UsageError("--requests must be in 1..100000 (requests each concurrent stream sends per measured run)");
  o.check();
  static_cast<bench::Runs&>(cfg) = o;
  cfg.endpoints = o.remote.build();
  cfg.requests = o.requests;

  EndpointPrinter printer(o);
  const bench::EndpointResult res = bench::run_endpoints(cfg, printer);
  o.finish(res.any_noisy, res.load_average_end, res.json);
  if (res.failed > 0) {
    fmt::print(stderr, "error: {} request{} failed (first: {}); check the endpoint, --api-model and --timeout\n",
               res.failed, res.failed == 1 ? "" : "s", res.first_error);
    return kExitBackend;
  }
  return kExitOk;
}

}  // namespace repro::cli
