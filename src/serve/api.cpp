// serve's side of the wire format: the model's checks of a request, and responses from engine results.
#include "repro/serve/api.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "repro/chat/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/openai/routed_experts.hpp"
#include "repro/structured/json_schema.hpp"

namespace repro::serve {

namespace {

// Largest m <= n such that s[0, m) does not end inside a UTF-8 sequence.
size_t utf8_complete(const std::string& s, size_t n) {
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;
}

}  // namespace

size_t streamable(const std::string& text, const std::vector<std::string>& stops) {
  size_t safe = text.size();
  for (const auto& s : stops) {
    size_t pos = text.find(s);
    if (pos != std::string::npos) safe = std::min(safe, pos);
    for (size_t k = std::min(s.size() - 1, text.size()); k > 0; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        safe = std::min(safe, text.size() - k);
        break;
      }
  }
  return utf8_complete(text, safe);
}

Parsed parse_request(const ApiContext& cx, const nlohmann::ordered_json& b, bool chat) {
  const Model& model = *cx.model;
  const Tokenizer& tok = *model.tokenizer;
  Parsed p;
  p.chat = chat;
  DecodeParams& d = p.gen.params;

  RequestRules rules;
  rules.model = cx.name;
  rules.max_tokens_limit = cx.max_tokens_limit;
  rules.context_length = model.config.context_length;
  rules.prompt_tokens = [&](const CompletionRequest& r) {
    std::vector<int>& ids = p.gen.prompt;
    if (chat) {
      try {
        p.prompt_text = render_chat(r.messages, model.chat_template, "'messages'",
                                    ChatExtras{r.tools, r.chat_template_kwargs});
      } catch (const UsageError& e) {
        throw ApiError(400, e.what(), "messages", "invalid_value");
      }
      // A template's special tokens (<|im_start|>, ...) are matched verbatim; the plain format's text
      // is encoded as any completion prompt.
      ids = model.chat_template.name == "plain" ? tok.encode(p.prompt_text, true)
                                                : tok.encode_special(p.prompt_text, true);
    } else if (!r.prompt_ids.empty()) {
      for (int64_t id : r.prompt_ids) {
        if (id < 0 || id >= model.config.vocab_size)
          throw ApiError(400, fmt::format("'prompt' token id {} is outside the vocabulary (0..{})", id,
                                          model.config.vocab_size - 1),
                         "prompt");
        ids.push_back(static_cast<int>(id));
      }
      p.prompt_text = tok.decode(ids);
    } else {
      p.prompt_text = r.prompt;
      ids = cx.parse_special ? tok.encode_special(p.prompt_text, true) : tok.encode(p.prompt_text, true);
    }
    return static_cast<int>(ids.size());
  };
  // Structured output: constrained decoding to the schema (repro/structured/json_schema.hpp).
  rules.check_schema = [&](const json& schema) {
    try {
      d.json_schema = std::make_shared<const JsonConstraint>(schema, "'response_format'", tok);
    } catch (const UsageError& e) {
      throw ApiError(400, e.what(), "response_format");
    }
  };
  const CompletionRequest r = parse_completion_request(b, chat, rules);

  d.max_tokens = static_cast<int>(*r.max_tokens);
  if (r.temperature) d.temperature = static_cast<float>(*r.temperature);
  if (r.top_p) d.top_p = static_cast<float>(*r.top_p);
  if (r.top_k) d.top_k = *r.top_k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(*r.top_k, model.config.vocab_size));
  if (r.seed) d.seed = *r.seed;
  if (r.ignore_eos) d.stop_at_eos = !*r.ignore_eos;
  d.stop = r.stop;
  p.want_logprobs = r.logprobs;
  p.top_logprobs = r.top_logprobs;
  d.top_logprobs = p.top_logprobs;
  d.logprobs = p.want_logprobs;  // the vocabulary-wide log-softmax only when asked
  p.stream = r.stream;
  p.include_usage = r.include_usage;
  p.routed_experts = r.return_routed_experts && model.config.is_moe();
  if (p.routed_experts) d.routing_trace = true;
  return p;
}

LogprobsOut logprobs_out(const ApiContext& cx, const Parsed& p, const std::vector<int>& tokens,
                         const std::vector<float>& lps, const std::vector<std::vector<TokenLogprob>>& top,
                         size_t from, size_t to, size_t offset) {
  const Tokenizer& tok = *cx.model->tokenizer;
  LogprobsOut o;
  o.text_offset = offset;
  o.with_top = p.top_logprobs > 0;
  for (size_t i = from; i < to && i < lps.size(); ++i) {
    TokenLogprobOut t;
    t.token = tok.piece(tokens[i]);
    t.logprob = lps[i];
    if (i < top.size())
      for (const auto& a : top[i]) t.top.emplace_back(tok.piece(a.id), a.logprob);
    o.tokens.push_back(std::move(t));
  }
  return o;
}

namespace {

// The id, object, model and fingerprint of a response (a stream chunk when `chunk`), no choices yet.
ResponseOut response_head(const ApiContext& cx, const Parsed& p, const std::string& id, int64_t created, bool chunk) {
  ResponseOut o;
  o.chat = p.chat;
  o.chunk = chunk;
  o.id = id;
  o.model = cx.name;
  o.system_fingerprint = cx.fingerprint;
  o.created = created;
  return o;
}

// SGLang's rows: one per position fed to the model (the prompt's, then each generated token's but
// the last), each the expert ids of every layer; nullopt when the request did not ask or none came.
std::optional<std::string> sglext_routes(const Parsed& p, const GenResult& r) {
  if (!p.routed_experts || r.routing.empty()) return std::nullopt;
  RouteRows rows;
  auto add = [&](const std::vector<Route>& per_layer) {
    std::vector<std::vector<int>> row;
    for (const Route& route : per_layer) row.push_back(route.experts);
    rows.push_back(std::move(row));
  };
  for (const auto& pl : r.prompt_routing) add(pl);
  for (const auto& pl : r.routing) add(pl);
  return encode_routed_experts_sglang(rows);
}

}  // namespace

json routed_experts_chunk(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                          int64_t created) {
  ResponseOut o = response_head(cx, p, id, created, true);
  o.sglext_routed_experts = sglext_routes(p, r);
  return o.sglext_routed_experts ? response_json(o) : json();
}

json full_response(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                   int64_t created) {
  ResponseOut o = response_head(cx, p, id, created, false);
  ChoiceOut c;
  c.text = r.text;
  c.token_ids = r.tokens;
  c.finish_reason = r.finish_reason;
  if (p.want_logprobs)
    c.logprobs = logprobs_out(cx, p, r.tokens, r.logprobs, r.top_logprobs, 0, r.tokens.size(), p.prompt_text.size());
  o.choices.push_back(std::move(c));
  o.usage = std::make_pair(static_cast<int>(p.gen.prompt.size()), static_cast<int>(r.tokens.size()));
  o.sglext_routed_experts = sglext_routes(p, r);
  return response_json(o);
}

json stream_chunk(const ApiContext& cx, const Parsed& p, const std::string& id, int64_t created,
                  const std::string& delta, bool role, const std::vector<int>& tokens, const std::vector<float>& lps,
                  const std::vector<std::vector<TokenLogprob>>& top, size_t from, size_t to, size_t offset,
                  std::optional<std::string> finish) {
  ResponseOut o = response_head(cx, p, id, created, true);
  ChoiceOut c;
  c.text = delta;
  c.role = p.chat && role;
  c.finish_reason = std::move(finish);
  c.token_ids.assign(tokens.begin() + static_cast<long>(from), tokens.begin() + static_cast<long>(to));
  if (p.want_logprobs && to > from)
    c.logprobs = logprobs_out(cx, p, tokens, lps, top, from, to, p.prompt_text.size() + offset);
  o.choices.push_back(std::move(c));
  return response_json(o);
}

void add_batch_extension(json& response, int max_batch) {
  response[kBatchExtension] = json{{"max_batch", max_batch}};
}

json usage_chunk(const ApiContext& cx, const Parsed& p, const std::string& id, int64_t created, int completion_tokens) {
  ResponseOut o = response_head(cx, p, id, created, true);
  o.usage = std::make_pair(static_cast<int>(p.gen.prompt.size()), completion_tokens);
  return response_json(o);
}

// ---- fuzz entry (fuzz/fuzz_request.cpp; replayed by tests/unit-serve-hostile.cpp) ----

namespace {

// A SentencePiece vocabulary small enough to build per process: the special tokens, the 256 byte
// tokens (byte fallback spells any text) and a few merges, plus ChatML's markers.
const Model& fuzz_model(bool chatml) {
  static const auto make = [](bool cm) {
    TokenizerData d;
    d.model = "llama";
    auto add = [&](const std::string& t, TokenType type, float score) {
      d.tokens.push_back(t);
      d.types.push_back(static_cast<int>(type));
      d.scores.push_back(score);
    };
    add("<unk>", TokenType::Unknown, 0);
    add("<s>", TokenType::Control, 0);
    add("</s>", TokenType::Control, 0);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), TokenType::Byte, 0);
    const char* words[] = {"\xE2\x96\x81", "a", "e", "t", "h", "\xE2\x96\x81t", "\xE2\x96\x81th", "\xE2\x96\x81the",
                           "\xE2\x96\x81\x61", "{", "}", "\"", ":", ",", "1", "[", "]", "\xE2\x96\x81L", "i", "l", "y"};
    float score = 0;
    for (const char* w : words) add(w, TokenType::Normal, score -= 1);
    add("<|im_start|>", TokenType::Control, 0);
    add("<|im_end|>", TokenType::Control, 0);
    d.unk_id = 0;
    d.bos_id = 1;
    d.eos_id = 2;
    auto m = std::make_unique<Model>();
    m->config.vocab_size = static_cast<int>(d.tokens.size());
    m->config.context_length = 256;
    m->tokenizer = make_tokenizer(d);
    if (cm) {
      m->chat_template.name = "chatml";
      m->chat_template.eos_token = "<|im_end|>";
    }
    return m;
  };
  static const std::unique_ptr<Model> plain = make(false), chat = make(true);
  return chatml ? *chat : *plain;
}

}  // namespace

int fuzz_request_one(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const bool chat = sel & 1;
  ApiContext cx;
  cx.model = &fuzz_model(sel & 4);
  cx.name = "fuzz";
  cx.fingerprint = "ra-fuzz";
  cx.max_body_bytes = (sel & 2) ? 256 : 1 << 20;
  cx.max_tokens_limit = 128;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto b = parse_request_body(body, cx.max_body_bytes);
    const Parsed p = parse_request(cx, b, chat);
    const DecodeParams& d = p.gen.params;
    const int vocab = cx.model->config.vocab_size, ctx = cx.model->config.context_length;
    bool ok = !p.gen.prompt.empty() && d.max_tokens >= 1 && d.max_tokens <= cx.max_tokens_limit &&
              static_cast<int>(p.gen.prompt.size()) + d.max_tokens <= ctx && d.temperature >= 0 &&
              d.temperature <= 2 && d.top_p > 0 && d.top_p <= 1 && d.top_k >= 0 && d.top_k <= vocab &&
              d.stop.size() <= 16 && p.top_logprobs >= 0 && p.top_logprobs <= 20 && p.chat == chat;
    for (int id : p.gen.prompt) ok = ok && id >= 0 && id < vocab;
    for (const auto& s : d.stop) ok = ok && !s.empty();
    if (!ok) __builtin_trap();
    // The response bodies a request like this gets (two tokens, with logprobs when asked).
    GenResult r;
    r.tokens = {3, 4};
    r.logprobs = {-0.5f, -1.5f};
    r.top_logprobs = {{{3, -0.5f}}, {{4, -1.5f}}};
    r.text = "ab";
    r.finish_reason = "length";
    (void)dump(full_response(cx, p, r, "cmpl-fuzz", 0));
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 499 || std::string(e.what()).empty()) __builtin_trap();
    (void)dump(error_json(e.what(), e.type, e.param, e.code));
  } catch (...) {
    __builtin_trap();  // anything but a refusal would be a 500 from the server
  }
  return 0;
}

}  // namespace repro::serve
