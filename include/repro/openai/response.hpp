// The response of /v1/completions and /v1/chat/completions, full or as stream chunks, in both
// directions: the server writes it (response_json, used by repro/serve), the client reads it
// (parse_response_json, StreamAccumulator: used by repro/remote/client.hpp). Plain functions; the
// readers are fuzzed (fuzz/fuzz_sse.cpp).
//
// Beside OpenAI's fields the server writes choices[].token_ids (the generated ids; in a stream
// chunk, that chunk's ids), which the reader takes (as it takes vLLM's token_ids and TGI's tokens).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace repro {

// ---------------------------------------------------------------- writing

// One generated token's log-probability: its text piece and the alternatives of that step.
struct TokenLogprobOut {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // (piece, logprob), likelier first
};

// A choice's logprobs. Chat: content[{token, logprob, bytes, top_logprobs}]; completions: tokens,
// token_logprobs, text_offset (from `text_offset`, each token's piece after the last) and
// top_logprobs: one {piece: logprob} object per token when `with_top` (two alternatives with one
// piece: the first), else null.
struct LogprobsOut {
  std::vector<TokenLogprobOut> tokens;
  size_t text_offset = 0;
  bool with_top = false;
};

struct ChoiceOut {
  std::string text;                          // message.content, delta.content or text
  std::vector<int> token_ids;
  std::optional<std::string> finish_reason;  // null while a stream goes on
  std::optional<LogprobsOut> logprobs;       // null when not asked
  bool role = false;                         // chat stream: the delta names the role (the first chunk)
};

struct ResponseOut {
  bool chat = false;
  bool chunk = false;  // a stream chunk: object *.chunk (chat), choices[].delta (chat)
  std::string id, model, system_fingerprint;
  int64_t created = 0;
  std::vector<ChoiceOut> choices;  // a stream's usage chunk has none
  std::optional<std::pair<int, int>> usage;  // (prompt_tokens, completion_tokens)
  // SGLang's response-level extension: "sglext": {"routed_experts": base64} (routed_experts.hpp)
  std::optional<std::string> sglext_routed_experts;
};

// {"id", "object", "created", "model", "system_fingerprint", "choices": [...], "usage"?}; choice i has
// "index": i.
nlohmann::json response_json(const ResponseOut& r);
// {"prompt_tokens", "completion_tokens", "total_tokens"}
nlohmann::json usage_json(int prompt, int completion);
nlohmann::json logprobs_json(bool chat, const LogprobsOut& lp);

// ---------------------------------------------------------------- reading

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
  // the text piece of each token the logprobs name (chat content[].token, completions logprobs.tokens),
  // in order; empty when the response had no logprobs or named no pieces
  std::vector<std::string> token_pieces;
  std::string finish_reason, system_fingerprint, model, id;
  int64_t created = 0;
  int prompt_tokens = -1, completion_tokens = -1;
  // repro-audit serve's extension "repro_audit": {"max_batch": N}: the largest batch (sequences in one
  // engine step) among the steps that decoded this request (a stream: the largest any chunk gave);
  // -1 when the server did not say.
  int max_batch = -1;
  // Routed experts as they came (repro/openai/routed_experts.hpp reads them): {"sglext": the
  // response's sglext.routed_experts, "choice": choices[].routed_experts, "prompt": the response's
  // prompt_routed_experts}, each key only when present and not null; null when none came.
  nlohmann::json routed_experts;
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
