// What `serve` adds to the wire format (repro/openai/protocol.hpp): the checks that need the model
// (the prompt's tokens, the vocabulary, schemas), the engine request a validated body becomes, and the
// response bodies built from the engine's results (token pieces, logprobs). Plain functions: no
// sockets, no threads (the routes are in server.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/openai/protocol.hpp"

namespace repro::serve {

using json = nlohmann::json;

// The error object and the request and response JSON are the wire format's (repro/openai).
using repro::ApiError;

// What the server needs to validate and answer requests.
struct ApiContext {
  const Model* model = nullptr;  // with a tokenizer
  std::string name;              // the served model name
  std::string fingerprint;       // system_fingerprint
  size_t max_body_bytes = 1 << 20;
  int max_tokens_limit = 4096;
  bool parse_special = false;  // /v1/completions text prompts: Tokenizer::encode_special, else encode
};

// One validated generation request.
struct Parsed {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  int top_logprobs = 0;     // alternatives per token (chat top_logprobs, completions logprobs: N)
  // SGLang's return_routed_experts on a mixture of experts (the engine records the routes; the
  // response carries sglext.routed_experts); a dense model answers without them
  bool routed_experts = false;
  std::string prompt_text;  // for text_offset
  GenRequest gen;
};

// The body (read by parse_request_body) as an engine request: the wire format's parser
// (parse_completion_request) with this model's checks; throws ApiError (400/404) naming the field.
Parsed parse_request(const ApiContext& cx, const nlohmann::ordered_json& body, bool chat);

// Length of the prefix of `text` that can be streamed now: it holds back any stop string (the engine
// cuts it) and any suffix that could still grow into one, and never splits a UTF-8 sequence.
size_t streamable(const std::string& text, const std::vector<std::string>& stops);

// Logprobs of tokens[from, to) as the wire writes them; `offset` is the text offset of `from`.
// `top` (may be shorter than tokens) holds the alternatives of each step.
LogprobsOut logprobs_out(const ApiContext& cx, const Parsed& p, const std::vector<int>& tokens,
                         const std::vector<float>& lps, const std::vector<std::vector<TokenLogprob>>& top,
                         size_t from, size_t to, size_t offset);
json full_response(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                   int64_t created);
// The stream chunk of SGLang's routed experts (no choices; sglext.routed_experts), sent after the
// last choice chunk; null when the request did not ask for them or the engine recorded none.
json routed_experts_chunk(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                          int64_t created);
// One stream chunk: the text `delta`, the ids tokens[from, to) and their logprobs when asked (`offset`:
// the text offset of `from` in the generated text), `role` on the first chat chunk, `finish` on the last.
json stream_chunk(const ApiContext& cx, const Parsed& p, const std::string& id, int64_t created,
                  const std::string& delta, bool role, const std::vector<int>& tokens, const std::vector<float>& lps,
                  const std::vector<std::vector<TokenLogprob>>& top, size_t from, size_t to, size_t offset,
                  std::optional<std::string> finish);
// serve's extension of a completion response (the full response; in a stream, the chunk with the
// finish_reason and the usage chunk): "repro_audit": {"max_batch": N}, N the largest batch (sequences in
// one engine step) among the steps that decoded this request. A client proves co-batching with it.
inline constexpr const char* kBatchExtension = "repro_audit";
void add_batch_extension(json& response, int max_batch);
// The stream's usage chunk (stream_options.include_usage): no choices.
json usage_chunk(const ApiContext& cx, const Parsed& p, const std::string& id, int64_t created, int completion_tokens);

// The fuzz entry of fuzz/fuzz_request.cpp, here so that the test suite replays
// fuzz/corpus/request/ through the same code without clang. Byte 0 selects the route (bit 0: chat)
// and, in bit 1, a small --max-body-bytes (256); the rest is the request body. It goes through
// parse_request_body and parse_request against a small built-in vocabulary; a refusal must be an ApiError
// with a 4xx status whose JSON renders, and an accepted request must hold what the engine needs
// (a prompt, max_tokens within the limit and the context, sampling values in range). Anything
// else traps. Returns 0.
int fuzz_request_one(const uint8_t* data, size_t size);

}  // namespace repro::serve
