// Closed-loop endpoint load (see repro/remote/load.hpp).
#include "repro/remote/load.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include "repro/common/error.hpp"
#include "repro/remote/client.hpp"

namespace repro {

double quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

LoadRun run_load(const EndpointSpec& spec, const RequestParams& params, int concurrency, int requests_per_stream,
                 const std::atomic<bool>* stop) {
  validate_endpoint(spec);
  if (concurrency < 1 || concurrency > 65536)
    throw UsageError("--concurrency " + std::to_string(concurrency) + " is out of range; use 1..65536");
  if (requests_per_stream < 1) throw UsageError("--requests must be at least 1 (requests per stream and run)");
  LoadRun run;
  run.concurrency = concurrency;
  RemoteClient client(spec, concurrency + 4);
  std::function<void(int)> send = [&](int left) {
    client.submit(params, [&, left](RemoteResult&& res) {
      if (res.aborted) {
        run.stopped = true;
        return;
      }
      ++run.requests;
      if (res.cause != FailCause::none || !res.error.empty()) {
        ++run.failed;
        ++run.errors[res.cause != FailCause::none ? std::string(cause_name(res.cause)) : std::string("error")];
        if (run.first_error.empty()) run.first_error = res.error;
      } else {
        ++run.succeeded;
        const ParsedResponse& r = res.response;
        run.prompt_tokens += std::max(0, r.prompt_tokens);
        run.completion_tokens += r.completion_tokens >= 0 ? r.completion_tokens
                                 : r.tokens_known         ? static_cast<int64_t>(r.tokens.size())
                                                          : 0;
        run.latency_s.push_back(res.latency_s);
        if (spec.stream) run.ttft_s.push_back(res.ttft_s);
      }
      if (left > 1) send(left - 1);
    });
  };
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int i = 0; i < concurrency; ++i) send(requests_per_stream);
  client.run(stop);
  run.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return run;
}

}  // namespace repro
