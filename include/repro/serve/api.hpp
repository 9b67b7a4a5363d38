// The OpenAI wire format of `serve`: request validation (every field checked, 4xx with the
// OpenAI error object) and the response bodies (full responses and streamed chunks).
// Plain functions over JSON: no sockets, no threads (the routes are in server.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"

namespace repro::serve {

using json = nlohmann::json;

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

// {"error": {"message", "type", "param", "code"}}
json error_json(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code);
// Compact JSON; invalid UTF-8 is replaced, never thrown.
std::string dump(const json& j);

// What the server needs to validate and answer requests.
struct ApiContext {
  const Model* model = nullptr;  // with a tokenizer
  std::string name;              // the served model name
  std::string fingerprint;       // system_fingerprint
  size_t max_body_bytes = 1 << 20;
  int max_tokens_limit = 4096;
};

// One validated generation request.
struct Parsed {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  int top_logprobs = 0;     // alternatives per token (chat top_logprobs, completions logprobs: N)
  std::string prompt_text;  // for text_offset
  GenRequest gen;
};

std::string body_limit_message(const ApiContext& cx);
// The body as a JSON object; 413 over the limit, 400 when it is not JSON or not an object.
json parse_body(const ApiContext& cx, const std::string& body);
// Validates every field; throws ApiError (400/404) naming the field.
Parsed parse_request(const ApiContext& cx, const json& body, bool chat);

// Length of the prefix of `text` that can be streamed now: it holds back any stop string (the engine
// cuts it) and any suffix that could still grow into one, and never splits a UTF-8 sequence.
size_t streamable(const std::string& text, const std::vector<std::string>& stops);

json base_object(const ApiContext& cx, const std::string& id, const char* object, int64_t created);
json usage_json(int prompt, int completion);
// Logprobs of tokens[from, to) in the format of the endpoint; `offset` is the text offset of `from`.
// `top` (may be shorter than tokens) holds the alternatives of each step.
json logprobs_json(const ApiContext& cx, const Parsed& p, const std::vector<int>& tokens,
                   const std::vector<float>& lps, const std::vector<std::vector<TokenLogprob>>& top, size_t from,
                   size_t to, size_t offset);
json full_response(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                   int64_t created);

// The fuzz entry of fuzz/fuzz_request.cpp, here so that the test suite replays
// fuzz/corpus/request/ through the same code without clang. Byte 0 selects the route (bit 0: chat)
// and, in bit 1, a small --max-body-bytes (256); the rest is the request body. It goes through
// parse_body and parse_request against a small built-in vocabulary; a refusal must be an ApiError
// with a 4xx status whose JSON renders, and an accepted request must hold what the engine needs
// (a prompt, max_tokens within the limit and the context, sampling values in range). Anything
// else traps. Returns 0.
int fuzz_request_one(const uint8_t* data, size_t size);

}  // namespace repro::serve
