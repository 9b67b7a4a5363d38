// The client's requests: what one request asks for (RequestParams), and its URL, headers and body for
// an endpoint's provider preset. The body is the wire request of repro/openai/request.hpp
// (request_json) with the preset's quirks applied.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/remote/endpoint.hpp"

namespace repro {

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
  nlohmann::ordered_json messages;  // chat API: [{"role","content"}]; null/empty -> one user message = prompt
  // chat API: sent when not null. These three are sent with their keys in the order they were
  // written (the endpoint's chat template prints tools in that order).
  nlohmann::ordered_json tools, chat_template_kwargs;
  RequestDecoding decoding;
  uint64_t seed = 0;
  bool send_seed = true;
  std::vector<std::string> stop;
  bool logprobs = false;
  // ask for the routed experts in the provider's dialect (sglang: return_routed_experts; vllm: the
  // server flag alone; other providers: none known, nothing sent)
  bool routed_experts = false;
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

}  // namespace repro
