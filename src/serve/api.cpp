// The OpenAI wire format of `serve`: validation of requests and the JSON of responses.
#include "repro/serve/api.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "repro/common/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/structured/json_schema.hpp"

namespace repro::serve {

json error_json(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string body_limit_message(const ApiContext& cx) {
  return fmt::format("the request body is larger than this server's limit of {} bytes (--max-body-bytes)",
                     cx.max_body_bytes);
}

json parse_body(const ApiContext& cx, const std::string& body) {
  if (body.size() > cx.max_body_bytes) throw ApiError(413, body_limit_message(cx), "", "request_too_large");
  // Bounded: a value nested deeper than kMaxJsonDepth is refused here, before any copy, walk or
  // dump of it could recurse that deep (1 MB of '[' would overflow a worker's stack).
  json b;
  std::string error;
  if (!parse_json(body, b, &error))
    throw ApiError(400, "the request body is not valid JSON: " + error, "", "invalid_json");
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  return b;
}

namespace {

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

std::optional<double> get_number(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  if (!v.is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key, "invalid_type");
  double d = v.get<double>();
  if (!std::isfinite(d)) throw ApiError(400, fmt::format("'{}' must be a finite number", key), key);
  return d;
}

// An integer field: JSON integers, and floats with an integral value (1.0). Values beyond int64
// are refused as too large, not as "not an integer".
std::optional<int64_t> get_int(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ApiError(400, fmt::format("'{}' is {}, too large (at most {})", key, v.dump(),
                                      std::numeric_limits<int64_t>::max()),
                     key);
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d) {
      if (std::fabs(d) < 9e15) return static_cast<int64_t>(d);
      throw ApiError(400, fmt::format("'{}' is {}, too large (at most {})", key, v.dump(), 9e15), key);
    }
  }
  throw ApiError(400, fmt::format("'{}' must be an integer", key), key, "invalid_type");
}

// A count with an upper limit set by a server flag: any value over the limit (however large) gets
// the message that names the limit and the flag.
std::optional<int64_t> get_count(const json& b, const char* key, int64_t limit, const char* flag) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  bool huge = (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(limit)) ||
              (v.is_number_float() && std::isfinite(v.get<double>()) &&
               std::floor(v.get<double>()) == v.get<double>() && v.get<double>() > static_cast<double>(limit));
  if (huge)
    throw ApiError(400, fmt::format("'{}' is {}, over this server's limit of {} ({})", key, v.dump(), limit, flag),
                   key);
  return get_int(b, key);
}

std::optional<bool> get_bool(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  if (!b[key].is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), key, "invalid_type");
  return b[key].get<bool>();
}

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

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
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

Parsed parse_request(const ApiContext& cx, const json& b, bool chat) {
  const Model& model = *cx.model;
  const std::string& name = cx.name;
  Parsed p;
  p.chat = chat;
  const Tokenizer& tok = *model.tokenizer;

  if (present(b, "model")) {
    if (!b["model"].is_string()) throw ApiError(400, "'model' must be a string", "model", "invalid_type");
    if (b["model"].get<std::string>() != name)
      throw ApiError(404,
                     fmt::format("the model '{}' does not exist on this server; it serves '{}' (GET /v1/models)",
                                 b["model"].get<std::string>(), name),
                     "model", "model_not_found");
  }

  // ---- prompt ----
  std::vector<int>& ids = p.gen.prompt;
  if (chat) {
    if (!present(b, "messages"))
      throw ApiError(400, "'messages' is required: an array of {\"role\", \"content\"} objects", "messages",
                     "missing_required_parameter");
    try {
      p.prompt_text = render_chat(b["messages"], model.chat_template, "'messages'");
    } catch (const UsageError& e) {
      throw ApiError(400, e.what(), "messages", "invalid_value");
    }
    // A template's special tokens (<|im_start|>, ...) are matched verbatim; the plain format's text is
    // encoded as any completion prompt.
    ids = model.chat_template.name == "plain" ? tok.encode(p.prompt_text, true) : tok.encode_special(p.prompt_text, true);
  } else {
    if (!present(b, "prompt"))
      throw ApiError(400, "'prompt' is required: a string (or an array holding one string)", "prompt",
                     "missing_required_parameter");
    json pr = b["prompt"];
    auto all_ints = [](const json& a) {
      return a.is_array() && !a.empty() &&
             std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number_integer(); });
    };
    if (pr.is_array() && pr.size() == 1 && (pr[0].is_string() || all_ints(pr[0]))) pr = json(pr[0]);
    if (pr.is_string()) {
      p.prompt_text = pr.get<std::string>();
      ids = tok.encode(p.prompt_text, true);
    } else if (all_ints(pr)) {
      for (const auto& x : pr) {
        int64_t id = x.get<int64_t>();
        if (id < 0 || id >= model.config.vocab_size)
          throw ApiError(400, fmt::format("'prompt' token id {} is outside the vocabulary (0..{})", id,
                                          model.config.vocab_size - 1),
                         "prompt");
        ids.push_back(static_cast<int>(id));
      }
      p.prompt_text = tok.decode(ids);
    } else if (pr.is_array() && pr.size() != 1) {
      throw ApiError(400, "'prompt' holds several prompts; this server takes one prompt per request", "prompt");
    } else {
      throw ApiError(400, "'prompt' must be a string, an array of one string, or an array of token ids", "prompt",
                     "invalid_type");
    }
  }
  if (ids.empty()) throw ApiError(400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");

  // ---- decoding parameters ----
  DecodeParams& d = p.gen.params;
  if (auto n = get_int(b, "n"); n && *n != 1)
    throw ApiError(400, "'n' must be 1: this server returns one choice per request", "n");
  if (auto n = get_int(b, "best_of"); n && *n != 1)
    throw ApiError(400, "'best_of' must be 1: this server returns one choice per request", "best_of");
  if (auto e = get_bool(b, "echo"); e && *e) throw ApiError(400, "'echo' is not supported", "echo");
  for (const char* pen : {"presence_penalty", "frequency_penalty"})
    if (auto v = get_number(b, pen); v && *v != 0.0)
      throw ApiError(400, fmt::format("'{}' is not supported; omit it or send 0", pen), pen);
  if (present(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    throw ApiError(400, "'logit_bias' is not supported", "logit_bias");

  const int ctx = model.config.context_length;
  const int n_prompt = static_cast<int>(ids.size());
  const char* mt_name = chat && !present(b, "max_tokens") && present(b, "max_completion_tokens")
                            ? "max_completion_tokens"
                            : "max_tokens";
  std::optional<int64_t> mt = get_count(b, mt_name, cx.max_tokens_limit, "--max-tokens-limit");
  if (mt) {
    if (*mt < 1) throw ApiError(400, fmt::format("'{}' must be at least 1", mt_name), mt_name);
    if (*mt > cx.max_tokens_limit)
      throw ApiError(400,
                     fmt::format("'{}' is {}, over this server's limit of {} (--max-tokens-limit)", mt_name, *mt,
                                 cx.max_tokens_limit),
                     mt_name);
    if (n_prompt + *mt > ctx)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) plus '{}' ({}) is over the model's context length of {} "
                                 "tokens; shorten the prompt or lower '{}'",
                                 n_prompt, mt_name, *mt, ctx, mt_name),
                     mt_name, "context_length_exceeded");
    d.max_tokens = static_cast<int>(*mt);
  } else {
    // Completions default to 16 tokens (OpenAI); chat to whatever the context and the limit allow.
    int room = ctx - n_prompt;
    if (room < 1)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) fills the model's context length of {} tokens; shorten it",
                                 n_prompt, ctx),
                     chat ? "messages" : "prompt", "context_length_exceeded");
    d.max_tokens = std::min({chat ? cx.max_tokens_limit : 16, cx.max_tokens_limit, room});
  }

  if (auto t = get_number(b, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) throw ApiError(400, "'temperature' must be between 0 and 2", "temperature");
    d.temperature = static_cast<float>(*t);
  }
  if (auto t = get_number(b, "top_p")) {
    if (!(*t > 0.0 && *t <= 1.0)) throw ApiError(400, "'top_p' must be in (0, 1]", "top_p");
    d.top_p = static_cast<float>(*t);
  }
  if (auto k = get_int(b, "top_k")) {
    if (*k < -1) throw ApiError(400, "'top_k' must be -1 or 0 (off) or a positive integer", "top_k");
    d.top_k = *k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(*k, model.config.vocab_size));
  }
  if (auto s = get_int(b, "seed")) d.seed = static_cast<uint64_t>(*s);
  if (auto ig = get_bool(b, "ignore_eos")) d.stop_at_eos = !*ig;

  if (present(b, "stop")) {
    const json& s = b["stop"];
    std::vector<json> items;
    if (s.is_string()) items.push_back(s);
    else if (s.is_array()) items.assign(s.begin(), s.end());
    else throw ApiError(400, "'stop' must be a string or an array of strings", "stop", "invalid_type");
    if (items.size() > 16) throw ApiError(400, "'stop' holds more than 16 strings", "stop");
    for (const auto& x : items) {
      if (!x.is_string() || x.get<std::string>().empty())
        throw ApiError(400, "'stop' must hold non-empty strings", "stop", "invalid_type");
      d.stop.push_back(x.get<std::string>());
    }
  }

  // Alternatives: chat's top_logprobs (0..20, needs logprobs: true), completions' logprobs: N (0..5).
  if (chat) {
    if (auto lp = get_bool(b, "logprobs")) p.want_logprobs = *lp;
    if (auto tl = get_int(b, "top_logprobs")) {
      if (*tl < 0 || *tl > 20) throw ApiError(400, "'top_logprobs' must be between 0 and 20", "top_logprobs");
      if (*tl > 0 && !p.want_logprobs)
        throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
      p.top_logprobs = static_cast<int>(*tl);
    }
  } else if (present(b, "logprobs")) {
    const json& lp = b["logprobs"];
    if (lp.is_boolean()) {
      p.want_logprobs = lp.get<bool>();
    } else {
      auto n = get_int(b, "logprobs");
      if (*n < 0 || *n > 5) throw ApiError(400, "'logprobs' must be an integer between 0 and 5", "logprobs");
      p.want_logprobs = true;
      p.top_logprobs = static_cast<int>(*n);
    }
  }
  p.gen.params.top_logprobs = p.top_logprobs;
  p.gen.params.logprobs = p.want_logprobs;  // the vocabulary-wide log-softmax only when asked

  // Structured output: response_format json_schema -> constrained decoding to that schema
  // (repro/structured/json_schema.hpp); json_object -> any JSON object; text (or none) -> free text.
  if (present(b, "response_format")) {
    const json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw ApiError(400, "'response_format' must be an object with a 'type': text, json_object or json_schema",
                     "response_format", "invalid_type");
    const std::string type = rf["type"].get<std::string>();
    json schema;
    if (type == "json_object") {
      schema = rf.contains("schema") && rf["schema"].is_object() ? rf["schema"] : json{{"type", "object"}};
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema") ||
          !rf["json_schema"]["schema"].is_object())
        throw ApiError(400, "'response_format' of type json_schema needs 'json_schema': {\"name\", \"schema\": {...}}",
                       "response_format");
      schema = rf["json_schema"]["schema"];
    } else if (type != "text") {
      throw ApiError(400, "'response_format' type must be text, json_object or json_schema (got '" + type + "')",
                     "response_format");
    }
    if (!schema.is_null()) {
      try {
        d.json_schema = std::make_shared<const JsonConstraint>(schema, "'response_format'", tok);
      } catch (const UsageError& e) {
        throw ApiError(400, e.what(), "response_format");
      }
    }
  }

  if (auto s = get_bool(b, "stream")) p.stream = *s;
  if (present(b, "stream_options")) {
    if (!b["stream_options"].is_object())
      throw ApiError(400, "'stream_options' must be an object", "stream_options", "invalid_type");
    if (auto u = get_bool(b["stream_options"], "include_usage")) p.include_usage = *u;
  }
  return p;
}


json base_object(const ApiContext& cx, const std::string& id, const char* object, int64_t created) {
  return json{{"id", id}, {"object", object}, {"created", created}, {"model", cx.name},
              {"system_fingerprint", cx.fingerprint}};
}

json usage_json(int prompt, int completion) {
  return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json logprobs_json(const ApiContext& cx, const Parsed& p, const std::vector<int>& tokens,
                   const std::vector<float>& lps, const std::vector<std::vector<TokenLogprob>>& top, size_t from,
                   size_t to, size_t offset) {
  const Tokenizer& tok = *cx.model->tokenizer;
  static const std::vector<TokenLogprob> kNone;
  auto alts = [&](size_t i) -> const std::vector<TokenLogprob>& { return i < top.size() ? top[i] : kNone; };
  if (p.chat) {
    json content = json::array();
    for (size_t i = from; i < to && i < lps.size(); ++i) {
      std::string piece = tok.piece(tokens[i]);
      json tops = json::array();
      for (const auto& a : alts(i)) {
        std::string ap = tok.piece(a.id);
        tops.push_back({{"token", ap}, {"logprob", a.logprob}, {"bytes", bytes_of(ap)}});
      }
      content.push_back({{"token", piece}, {"logprob", lps[i]}, {"bytes", bytes_of(piece)}, {"top_logprobs", tops}});
    }
    return json{{"content", content}};
  }
  // Completions (legacy format): top_logprobs is one {piece: logprob} object per token, or null.
  json toks = json::array(), vals = json::array(), offs = json::array(), tops = json::array();
  for (size_t i = from; i < to && i < lps.size(); ++i) {
    std::string piece = tok.piece(tokens[i]);
    toks.push_back(piece);
    vals.push_back(lps[i]);
    offs.push_back(offset);
    offset += piece.size();
    json m = json::object();
    for (const auto& a : alts(i)) {
      std::string ap = tok.piece(a.id);
      if (!m.contains(ap)) m[ap] = a.logprob;  // two ids with one piece: the likelier one
    }
    tops.push_back(m);
  }
  return json{{"tokens", toks}, {"token_logprobs", vals}, {"top_logprobs", p.top_logprobs > 0 ? tops : json(nullptr)},
              {"text_offset", offs}};
}

json full_response(const ApiContext& cx, const Parsed& p, const GenResult& r, const std::string& id,
                   int64_t created) {
  json j = base_object(cx, id, p.chat ? "chat.completion" : "text_completion", created);
  json choice = {{"index", 0}, {"finish_reason", r.finish_reason}, {"token_ids", r.tokens}};
  if (p.chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  else choice["text"] = r.text;
  choice["logprobs"] = p.want_logprobs ? logprobs_json(cx, p, r.tokens, r.logprobs, r.top_logprobs, 0,
                                                       r.tokens.size(), p.prompt_text.size())
                                       : json(nullptr);
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(static_cast<int>(p.gen.prompt.size()), static_cast<int>(r.tokens.size()));
  return j;
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
    const json b = parse_body(cx, body);
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
