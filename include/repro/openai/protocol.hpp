// The OpenAI-compatible wire protocol, shared by the client (src/remote) and the server (src/serve):
// endpoint spec and provider presets, request building, SSE and JSON response parsing. Plain
// functions and small types; no I/O. Nothing here knows about audits or reports.
//
// Security: EndpointSpec::api_key lives in memory only. It is sent as `Authorization: Bearer` (or
// Azure's `api-key` header) and never written into an error string, a response, the stats or the
// verbose log: every string the client produces passes through scrub_secret().
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>


namespace repro {

// ---------------------------------------------------------------- endpoint and presets

enum class Provider { openai, azure, vllm, sglang, llamacpp, ollama, tgi };

// "openai" ... "tgi"; throws UsageError naming --provider and the accepted values.
Provider parse_provider(const std::string& name);
const char* provider_name(Provider p);

struct EndpointSpec {
  std::string label;               // label (the audit reports it as the mode)
  std::string url;                 // base: http://127.0.0.1:8000 or http://host:8000/v1 or https://x.openai.azure.com
  std::string api_model;           // "model" field; Azure: the deployment name
  std::string api = "chat";        // "chat" | "completions"
  Provider provider = Provider::openai;
  bool stream = false;
  nlohmann::json extra_body = nlohmann::json::object();  // merged (top level, overriding) into every request
  std::string api_key;             // memory only; empty = no auth header
  std::string azure_api_version = "2024-06-01";
  std::string ca_cert;             // PEM bundle for TLS verification (verification is always on)
  double connect_timeout_s = 10;
  double read_timeout_s = 120;     // no byte received for this long -> timeout (checked in the loop)
  double total_timeout_s = 120;    // one attempt, end to end, however the bytes trickle (--timeout)
  size_t max_response_bytes = 64u << 20;  // one response, streamed or not; more is an error
  int max_retries = 3;             // retries after the first attempt
  double backoff_base_s = 0.5;     // delay before retry k (k=1..): base*2^(k-1), jittered into [d/2, d]
  double backoff_max_s = 30;
  double retry_after_max_s = 120;  // a larger Retry-After is capped to this
  bool verbose = false;            // log requests/responses (headers redacted) to `log`
  std::function<void(const std::string&)> log;  // verbose sink; default stderr
};

// "--endpoint" value: "label=URL" or bare "URL" (label = URL). Throws UsageError on a bad URL.
EndpointSpec parse_endpoint_arg(const std::string& arg);

// URL with any user:password@ and the values of secret-looking query parameters (api_key, key,
// token, access_token, sig, signature, password, secret, ...) replaced by [REDACTED] (for every
// output: reports, logs, errors, labels).
std::string redact_url(const std::string& url);
// `s` with every occurrence of `secret` replaced by "[REDACTED]" (no-op for an empty secret).
std::string scrub_secret(std::string s, const std::string& secret);
// The values redact_url replaces in `url`: user:password (and the password alone), secret query values.
std::vector<std::string> url_secrets(const std::string& url);
// URL credentials shorter than this are not scrubbed from text (a 2-character query value would
// rewrite every occurrence of those characters); the API key always is.
inline constexpr size_t kMinSecretLength = 6;
// Every secret of these endpoints, longest first: API keys and URL credentials (url_secrets).
std::vector<std::string> endpoint_secrets(const std::vector<EndpointSpec>& endpoints);
// `s` with every one of `secrets` replaced by "[REDACTED]".
std::string scrub_secrets(std::string s, const std::vector<std::string>& secrets);

// ---------------------------------------------------------------- requests

// Decoding parameters of one request (the audit's DecodingConfig, as the wire sees it).
struct RequestDecoding {
  std::string id;                  // the caller's name for this config (for error messages)
  double temperature = 0;
  double top_p = 1;
  int top_k = 0;
  int max_tokens = 32;
};

struct RequestParams {
  std::string prompt;              // completions API (and chat when messages is empty)
  nlohmann::json messages;         // chat API: [{"role","content"}]; null/empty -> one user message = prompt
  RequestDecoding decoding;
  uint64_t seed = 0;
  bool send_seed = true;
  std::vector<std::string> stop;
  bool logprobs = false;
  // Structured output: a JSON Schema the answer must conform to, sent as the provider's
  // response_format (see response_format_fields); {"type":"json_object"} asks for any JSON object;
  // null sends nothing.
  nlohmann::json json_schema;
};

// The body fields that ask this provider for structured output (merged into the request body):
//   openai, azure, vllm, sglang, ollama: response_format {"type":"json_schema","json_schema":{"name",
//     "schema","strict":true}} (objects without "additionalProperties" get false, the meaning this
//     tool gives them), or {"type":"json_object"};
//   llamacpp: a top-level "json_schema" (read on both APIs; json_object: {"type":"object"});
//   tgi: response_format {"type":"json","value":schema} (TGI's grammar; json_object: {"type":"object"}).
// Empty object when `json_schema` is null.
nlohmann::json response_format_fields(Provider p, const nlohmann::json& json_schema);

struct HttpRequestSpec {
  std::string url;                 // full URL with path and query
  std::vector<std::string> headers;  // "Name: value" (auth headers included: never log these raw)
  std::string body;                // JSON
};

// Request URL, headers and body for this provider preset (see the man page for the quirks).
// Throws UsageError for parameters the provider cannot take (e.g. top_k on Azure/OpenAI).
HttpRequestSpec build_request(const EndpointSpec& spec, const RequestParams& params);
nlohmann::json build_request_body(const EndpointSpec& spec, const RequestParams& params);
// Whether this preset sends logprobs when asked (Ollama's OpenAI API does not return them).
bool provider_supports_logprobs(Provider p);

// ---------------------------------------------------------------- parsing (plain functions; fuzzed)

// Incremental Server-Sent-Events parser: any chunking, LF / CRLF / CR line ends, comments (":"),
// multi-line data fields (joined by "\n"), fields other than data ignored. Each complete event's
// data is appended to `out`. A line longer than max_line bytes sets error().
class SseParser {
 public:
  explicit SseParser(size_t max_line = 8u << 20) : max_line_(max_line) {}
  void feed(std::string_view chunk, std::vector<std::string>& out);
  const std::string& error() const { return error_; }

 private:
  void line(std::string_view l, std::vector<std::string>& out);
  std::string buf_, data_, error_;
  bool has_data_ = false, last_cr_ = false;
  size_t max_line_;
};

// Failure causes, for stats and error strings ("<cause>: <detail>").
enum class FailCause {
  none, http_429, http_5xx, http_4xx, timeout, connect, reset, stream_cut, invalid_json,
  empty_choices, server_error, tls, aborted, other
};
const char* cause_name(FailCause c);
bool cause_retryable(FailCause c);

// The parsed response fields of one request (stream or not).
struct ParsedResponse {
  std::string text;
  bool tokens_known = false;
  std::vector<int> tokens;
  std::vector<float> logprobs;
  std::string finish_reason, system_fingerprint, model, id;
  int64_t created = 0;
  int prompt_tokens = -1, completion_tokens = -1;
  bool saw_done = false;           // stream: "data: [DONE]"
  int events = 0;                  // stream: data events seen
  FailCause cause = FailCause::none;
  std::string error;               // detail when cause != none
};

// Accumulates streamed chunks (chat deltas or completion text pieces).
class StreamAccumulator {
 public:
  explicit StreamAccumulator(bool chat) : chat_(chat) {}
  // One SSE event's data. Returns true when the event carried generated text (for TTFT).
  bool add_event(const std::string& data);
  // At end of stream: sets cause stream_cut when neither [DONE] nor a finish_reason came,
  // empty_choices when no chunk carried a choice.
  void finish();
  ParsedResponse& result() { return r_; }

 private:
  bool chat_;
  bool saw_choice_ = false;
  ParsedResponse r_;
};

// A non-streamed JSON body of /v1/chat/completions (chat=true) or /v1/completions.
ParsedResponse parse_response_json(std::string_view body, bool chat);
// One choice object (either API, either stream delta or full message) into r; used by both paths.
void parse_choice(const nlohmann::json& choice, bool chat, ParsedResponse& r);
// OpenAI-style error body -> short message ("error.message" or the first 200 bytes).
std::string error_message_from_body(std::string_view body);
// Retry-After header value: delay-seconds or an HTTP-date; -1 when absent/unparsable.
double parse_retry_after(std::string_view value, int64_t now_unix);

}  // namespace repro
