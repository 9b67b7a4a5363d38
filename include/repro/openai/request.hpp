// The request of /v1/completions and /v1/chat/completions, in both directions: the client writes it
// (request_json, used by repro/remote/request.hpp) and the server reads it (parse_completion_request,
// used by repro/serve/api.hpp, every field checked, in a fixed order), with the OpenAI error object
// the server answers a refused request with. Plain functions over JSON: no I/O, no model.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace repro {

// ---------------------------------------------------------------- the error object

// A request the server refuses: HTTP status and the OpenAI error object's fields.
struct ApiError : std::runtime_error {
  int status;
  std::string param, code, type;
  ApiError(int status_, std::string message, std::string param_ = "", std::string code_ = "invalid_value",
           std::string type_ = "invalid_request_error")
      : std::runtime_error(std::move(message)),
        status(status_),
        param(std::move(param_)),
        code(std::move(code_)),
        type(std::move(type_)) {}
};

// {"error": {"message", "type", "param", "code"}} (an empty param or code is null)
nlohmann::json error_json(const std::string& message, const std::string& type, const std::string& param,
                          const std::string& code);
// Compact JSON for the wire; invalid UTF-8 is replaced, never thrown.
std::string dump(const nlohmann::json& j);

// ---------------------------------------------------------------- the request

// response_format: "" (none sent), "text", "json_object" (schema: an optional schema the server
// also accepts there) or "json_schema" ({"name", "schema", "strict"}).
struct ResponseFormat {
  std::string type;
  std::string name;
  nlohmann::json schema;
  bool strict = true;
};

struct CompletionRequest {
  bool chat = false;                     // /v1/chat/completions (messages) or /v1/completions (prompt)
  std::optional<std::string> model;
  nlohmann::ordered_json messages;       // chat: [{"role", "content"}, ...]
  // chat: `tools` (an array of objects) and `chat_template_kwargs` (an object: further chat-template
  // variables, e.g. enable_thinking, as vLLM and SGLang take them); null when absent. These three
  // keep the body's key order: a chat template iterates and prints them in that order.
  nlohmann::ordered_json tools, chat_template_kwargs;
  std::string prompt;                    // completions: the prompt text...
  std::vector<int64_t> prompt_ids;       // ...or its token ids (read: an array of integers)
  std::optional<int64_t> max_tokens;     // read: max_tokens, or chat's max_completion_tokens
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<bool> ignore_eos;
  std::vector<std::string> stop;
  bool logprobs = false;                 // chat: logprobs true; completions: logprobs N
  int top_logprobs = 0;                  // alternatives per token (chat top_logprobs, completions N)
  ResponseFormat response_format;
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  // SGLang's return_routed_experts: the experts each position was routed to (a mixture of experts);
  // the answer is the response's sglext.routed_experts (repro/openai/routed_experts.hpp)
  bool return_routed_experts = false;
};

// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}, or {"type"} (and "schema"
// when set) for the other types.
nlohmann::json response_format_json(const ResponseFormat& f);
// The request body (what is unset is not sent). Chat: "logprobs": true and "top_logprobs" when
// above 0; completions: "logprobs": top_logprobs.
nlohmann::json request_json(const CompletionRequest& r);

// What the server's parser needs beside the body: its limits, and the checks that need the model.
struct RequestRules {
  std::string model;             // the served name: a request for another model is 404
  int max_tokens_limit = 4096;   // --max-tokens-limit
  int context_length = std::numeric_limits<int>::max();  // prompt tokens + max_tokens must fit in it
  // Called once the prompt (messages, text or token ids) is read: encodes it and returns its token
  // count; may throw ApiError (a template that cannot render, a token id outside the vocabulary).
  std::function<int(const CompletionRequest&)> prompt_tokens;
  // Called with the schema of a response_format that has one; may throw ApiError.
  std::function<void(const nlohmann::json& schema)> check_schema;
};

// "the request body is larger than this server's limit of N bytes (--max-body-bytes)"
std::string body_limit_message(size_t max_body_bytes);
// The body as a JSON object, keys in the body's order; 413 over the limit, 400 when it is not JSON
// or not an object.
nlohmann::ordered_json parse_request_body(const std::string& body, size_t max_body_bytes);
// Validates every field in a fixed order (the first problem is the one reported); throws ApiError
// (400/404) naming the field. The result has max_tokens set (the default when absent: 16 for
// completions, else what the limit and the context allow).
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, bool chat, const RequestRules& rules);

}  // namespace repro
