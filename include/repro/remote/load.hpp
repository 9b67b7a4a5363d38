// Closed-loop load on one OpenAI-compatible endpoint, for `bench --endpoint`: `concurrency` streams,
// each sending the same request `requests_per_stream` times back to back (the next one as soon as
// the last answered), so exactly `concurrency` requests are in flight until the streams run dry.
// Counts what came back (requests, tokens from the usage block, latencies) and the wall time from
// the first request sent to the last answer. Runs one RemoteClient loop on the calling thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "repro/remote/endpoint.hpp"
#include "repro/remote/request.hpp"

namespace repro {

struct LoadRun {
  int concurrency = 0;
  int64_t requests = 0, succeeded = 0, failed = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // summed over succeeded requests (usage block)
  double wall_s = 0;
  std::vector<double> latency_s;  // succeeded requests, start to end of the last attempt
  std::vector<double> ttft_s;     // streaming: start to the first generated text
  std::map<std::string, int64_t> errors;  // failure cause -> requests
  std::string first_error;        // the first failure's message (API key scrubbed by the client)
  bool stopped = false;           // *stop ended the run early

  double requests_per_s() const { return wall_s > 0 ? static_cast<double>(succeeded) / wall_s : 0.0; }
  double completion_tokens_per_s() const {
    return wall_s > 0 ? static_cast<double>(completion_tokens) / wall_s : 0.0;
  }
};

// Throws UsageError for concurrency outside 1..65536, requests_per_stream < 1 or a bad spec.
LoadRun run_load(const EndpointSpec& spec, const RequestParams& params, int concurrency, int requests_per_stream,
                 const std::atomic<bool>* stop = nullptr);

// The p-quantile (0..1) of `v` by linear interpolation between closest ranks; 0 when empty.
double quantile(std::vector<double> v, double p);

}  // namespace repro
