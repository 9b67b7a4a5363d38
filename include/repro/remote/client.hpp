// The libcurl client for OpenAI-compatible endpoints: a single-thread libcurl-multi loop with
// retries, timeouts and backoff, returning its own response type (RemoteResult), and one plain GET
// (http_get) under the same rules. It speaks the wire protocol of repro/openai/protocol.hpp and knows
// nothing of audits: the audit layer (src/audit/remote_probe.cpp) turns responses into Completion
// records. libcurl is used here only.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "repro/openai/protocol.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/remote/redact.hpp"
#include "repro/remote/request.hpp"

namespace repro {

// ---------------------------------------------------------------- endpoint configuration

// The API key: from `file` when non-empty (trimmed; throws UsageError naming --api-key-file when
// unreadable or empty), else from the environment variable `env_name` (empty when unset).
std::string load_api_key(const std::string& env_name, const std::string& file);

// Checks the spec (url scheme http/https, api chat|completions, model set, timeouts > 0, ca_cert
// readable); throws UsageError naming the flag and the fix.
void validate_endpoint(const EndpointSpec& spec);

// One response header line "name: value" (any case, trailing CR/LF allowed): the normalised
// "name: value" (name lower-case) when it reports that a cache served the response, else empty.
// Hits: x-cache, x-cache-status, x-proxy-cache, x-vercel-cache, helicone-cache and any name ending in
// "cache-status" (cf-cache-status, ...) whose value contains HIT or STALE (any case); age above 0.
std::string cache_hit_header(std::string_view line);

// Seconds on the monotonic clock the client stamps requests with (RemoteResult::t_send, ...).
double monotonic_seconds();

// ---------------------------------------------------------------- one GET

struct HttpGetResult {
  FailCause cause = FailCause::none;  // transport failure: connect, tls, timeout, reset or other
  std::string error;                  // libcurl's message when cause != none (never holds the key)
  long status = 0;
  std::string content_type, location;  // location: where a redirect points (redirects are not followed)
  std::string server;                  // the Server response header (at most 200 bytes), empty when absent
  std::string body;
};

// One GET of `url` with `headers` (a Content-Type header is left out), under the client's rules: TLS
// verification on (--ca-cert), no redirects followed, http and https only, the proxy bypass of the
// client; connect timeout spec.connect_timeout_s, the whole GET at most min(spec.read_timeout_s, 60)
// seconds; a body over max_bytes ends it (cause other).
HttpGetResult http_get(const EndpointSpec& spec, const std::string& url, const std::vector<std::string>& headers,
                       size_t max_bytes);

// ---------------------------------------------------------------- the client

struct RemoteStats {
  int64_t requests = 0;            // logical requests finished (success or failure), probes + fillers
  int64_t attempts = 0;            // HTTP attempts started
  int64_t retries = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;              // logical requests failed after retries (aborted excluded)
  int64_t aborted = 0;             // cancelled by the stop flag or at the end of a closed loop
  int64_t probe_failed = 0, filler_failed = 0;
  std::map<std::string, int64_t> attempt_errors;  // cause -> failed attempts (retried or not)
  std::map<std::string, int64_t> final_errors;    // cause -> failed logical requests
  int max_in_flight = 0;
  double wall_s = 0;
  double client_cpu_s = 0;         // CPU time of the thread that ran the loop
  long rss_start_kb = 0, rss_peak_in_flight_kb = 0;  // process RSS before the loop / at max in flight
  void merge(const RemoteStats& o);
  nlohmann::json to_json() const;
  // The inverse of to_json(); fields that are absent or of another type read as zero.
  static RemoteStats from_json(const nlohmann::json& j);
};

// One logical request's outcome (after retries).
struct RemoteResult {
  ParsedResponse response;         // parsed fields (text scrubbed of the API key); empty on failure
  std::string decoding_id;         // RequestParams::decoding.id
  uint64_t seed = 0;               // RequestParams::seed
  double latency_s = 0;            // last attempt: start to end
  double ttft_s = 0;               // streaming: start to the first generated text
  std::string cache_header;        // cache-hit headers of the last attempt's response (cache_hit_header), "; "-joined
  int attempts = 1;
  // The last attempt's send, first response byte and end (the last byte, a failure or an abort) on
  // the monotonic clock (monotonic_seconds()); -1 when unknown (never sent, no byte received).
  double t_send = -1, t_first_byte = -1, t_last_byte = -1;
  std::string error;               // non-empty on failure: "<cause>: <detail> (after N attempts)"
  FailCause cause = FailCause::none;
  bool aborted = false;
};

// Single-thread libcurl-multi engine. submit() may be called from callbacks (closed loop).
class RemoteClient {
 public:
  explicit RemoteClient(EndpointSpec spec, int max_connections = 1024);
  ~RemoteClient();
  RemoteClient(const RemoteClient&) = delete;
  RemoteClient& operator=(const RemoteClient&) = delete;

  using Callback = std::function<void(RemoteResult&&)>;
  // Queues a logical request (retried per the spec); `done` runs on the loop thread.
  void submit(const RequestParams& params, Callback done);
  // Runs until nothing is in flight or queued, *stop becomes true, or cancel() was called; then
  // aborts what is left (their callbacks run with aborted=true).
  void run(const std::atomic<bool>* stop = nullptr);
  void cancel() { cancelled_ = true; }
  int in_flight() const;
  RemoteStats& stats() { return stats_; }
  const EndpointSpec& spec() const { return spec_; }

  struct Impl;

 private:
  EndpointSpec spec_;
  Impl* impl_;
  RemoteStats stats_;
  bool cancelled_ = false;
};

}  // namespace repro
