// `repro-audit bench --endpoint`: a server under load. For each concurrency level C it runs a closed
// loop on every endpoint (repro/remote/load.hpp): C streams, each sending the same greedy request
// `requests` times back to back, so C requests stay in flight. A run's requests/s and completion
// tokens/s are its answered requests and usage-block tokens over its wall time. Every cell is warmed
// up (`warmup` runs, not counted) and measured `repeats` times, the endpoints interleaved run by run
// (rotating which goes first; repro/bench/stats.hpp) so a change of machine load hits all of them;
// each row has mean, standard deviation and min-max, the latency quantiles over all measured
// requests, and the ratio to the first endpoint.
//
// run_endpoints() measures and builds the JSON; what is printed is the observer's.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/bench/stats.hpp"
#include "repro/remote/endpoint.hpp"

namespace repro::bench {

struct EndpointConfig : Runs {
  std::vector<EndpointSpec> endpoints;  // at least one, checked
  std::vector<int> concurrency;         // levels, in order
  int requests = 4;                     // per stream and run
};

// What one endpoint did at one level over its measured runs.
struct EndpointRow {
  std::string endpoint;  // label
  int concurrency = 0;
  int64_t requests = 0, failed = 0, completion_tokens = 0, prompt_tokens = 0;
  std::map<std::string, int64_t> errors;  // failure cause -> requests
  std::string first_error;
  Stats requests_per_s, tokens_per_s;     // per run
  double tokens_per_request = 0;          // completion tokens per answered request
  double tokens_per_s_vs_first = 0;       // mean tokens/s over the first endpoint's
  double latency_p50 = 0, latency_p95 = 0, latency_max = 0;  // over all measured requests
  std::optional<double> ttft_p50, ttft_p95;                  // streamed: time to first token
};

class EndpointObserver {
 public:
  virtual ~EndpointObserver() = default;
  virtual void start(const EndpointConfig&, const std::string& load_average) {}
  // One level measured: a row per endpoint, in the order of EndpointConfig::endpoints.
  virtual void level(int concurrency, const std::vector<EndpointRow>&) {}
};

struct EndpointResult {
  nlohmann::json json;  // what `bench --endpoint --json` writes
  int64_t failed = 0;   // failed requests over every cell
  std::string first_error;  // "label: message" of the first failure
  bool any_noisy = false;
  std::string load_average_end;
};

EndpointResult run_endpoints(const EndpointConfig& cfg, EndpointObserver& observer);

}  // namespace repro::bench
