// The completion request: its JSON writer (the client's) and its parser (the server's). The parser
// keeps one fixed order of checks, so that a request with several problems always gets the same
// answer; the checks that need the model (the prompt's tokens, a schema) are the rules' hooks, called
// at their place in that order.
#include "repro/openai/request.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "repro/common/json.hpp"

namespace repro {

using nlohmann::json;
// The parser reads the body with its keys in the document's order: messages, tools and
// chat_template_kwargs reach the chat template as the client wrote them.
using ojson = nlohmann::ordered_json;

json error_json(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// ---------------------------------------------------------------- writer

json response_format_json(const ResponseFormat& f) {
  if (f.type == "json_schema")
    return {{"type", "json_schema"}, {"json_schema", {{"name", f.name}, {"schema", f.schema}, {"strict", f.strict}}}};
  json j = {{"type", f.type}};
  if (!f.schema.is_null()) j["schema"] = f.schema;
  return j;
}

json request_json(const CompletionRequest& r) {
  json b = json::object();
  if (r.model) b["model"] = *r.model;
  if (r.chat) {
    b["messages"] = r.messages;
    if (!r.tools.is_null()) b["tools"] = r.tools;
    if (!r.chat_template_kwargs.is_null()) b["chat_template_kwargs"] = r.chat_template_kwargs;
  } else if (!r.prompt_ids.empty()) {
    b["prompt"] = r.prompt_ids;
  } else {
    b["prompt"] = r.prompt;
  }
  if (r.max_tokens) b["max_tokens"] = *r.max_tokens;
  if (r.temperature) b["temperature"] = *r.temperature;
  if (r.top_p) b["top_p"] = *r.top_p;
  if (r.top_k) b["top_k"] = *r.top_k;
  if (r.seed) b["seed"] = *r.seed;
  if (r.ignore_eos) b["ignore_eos"] = *r.ignore_eos;
  if (!r.stop.empty()) b["stop"] = r.stop;
  if (r.logprobs) {
    if (r.chat) {
      b["logprobs"] = true;
      if (r.top_logprobs > 0) b["top_logprobs"] = r.top_logprobs;
    } else {
      b["logprobs"] = r.top_logprobs;
    }
  }
  if (!r.response_format.type.empty()) b["response_format"] = response_format_json(r.response_format);
  if (r.stream) b["stream"] = true;
  if (r.include_usage) b["stream_options"] = {{"include_usage", true}};
  if (r.return_routed_experts) b["return_routed_experts"] = true;
  return b;
}

// ---------------------------------------------------------------- parser

std::string body_limit_message(size_t max_body_bytes) {
  return fmt::format("the request body is larger than this server's limit of {} bytes (--max-body-bytes)",
                     max_body_bytes);
}

ojson parse_request_body(const std::string& body, size_t max_body_bytes) {
  if (body.size() > max_body_bytes) throw ApiError(413, body_limit_message(max_body_bytes), "", "request_too_large");
  // Bounded: a value nested deeper than kMaxJsonDepth is refused here, before any copy, walk or
  // dump of it could recurse that deep (1 MB of '[' would overflow a worker's stack).
  ojson b;
  std::string error;
  if (!parse_json(body, b, &error))
    throw ApiError(400, "the request body is not valid JSON: " + error, "", "invalid_json");
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  return b;
}

namespace {

bool present(const ojson& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

std::optional<double> get_number(const ojson& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const ojson& v = b[key];
  if (!v.is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key, "invalid_type");
  double d = v.get<double>();
  if (!std::isfinite(d)) throw ApiError(400, fmt::format("'{}' must be a finite number", key), key);
  return d;
}

// An integer field: JSON integers, and floats with an integral value (1.0). Values beyond int64
// are refused as too large, not as "not an integer".
std::optional<int64_t> get_int(const ojson& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const ojson& v = b[key];
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
std::optional<int64_t> get_count(const ojson& b, const char* key, int64_t limit, const char* flag) {
  if (!present(b, key)) return std::nullopt;
  const ojson& v = b[key];
  bool huge = (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(limit)) ||
              (v.is_number_float() && std::isfinite(v.get<double>()) &&
               std::floor(v.get<double>()) == v.get<double>() && v.get<double>() > static_cast<double>(limit));
  if (huge)
    throw ApiError(400, fmt::format("'{}' is {}, over this server's limit of {} ({})", key, v.dump(), limit, flag),
                   key);
  return get_int(b, key);
}

std::optional<bool> get_bool(const ojson& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  if (!b[key].is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), key, "invalid_type");
  return b[key].get<bool>();
}

}  // namespace

CompletionRequest parse_completion_request(const ojson& b, bool chat, const RequestRules& rules) {
  CompletionRequest r;
  r.chat = chat;

  if (present(b, "model")) {
    if (!b["model"].is_string()) throw ApiError(400, "'model' must be a string", "model", "invalid_type");
    if (b["model"].get<std::string>() != rules.model)
      throw ApiError(404,
                     fmt::format("the model '{}' does not exist on this server; it serves '{}' (GET /v1/models)",
                                 b["model"].get<std::string>(), rules.model),
                     "model", "model_not_found");
    r.model = b["model"].get<std::string>();
  }

  // ---- prompt ----
  if (chat) {
    if (!present(b, "messages"))
      throw ApiError(400, "'messages' is required: an array of {\"role\", \"content\"} objects", "messages",
                     "missing_required_parameter");
    r.messages = b["messages"];
    if (present(b, "tools")) {
      if (!b["tools"].is_array() || !std::all_of(b["tools"].begin(), b["tools"].end(), [](const ojson& t) { return t.is_object(); }))
        throw ApiError(400, "'tools' must be an array of tool objects", "tools", "invalid_type");
      r.tools = b["tools"];
    }
    if (present(b, "chat_template_kwargs")) {
      if (!b["chat_template_kwargs"].is_object())
        throw ApiError(400, "'chat_template_kwargs' must be an object of template variables", "chat_template_kwargs",
                       "invalid_type");
      r.chat_template_kwargs = b["chat_template_kwargs"];
    }
  } else {
    if (!present(b, "prompt"))
      throw ApiError(400, "'prompt' is required: a string (or an array holding one string)", "prompt",
                     "missing_required_parameter");
    ojson pr = b["prompt"];
    auto all_ints = [](const ojson& a) {
      return a.is_array() && !a.empty() &&
             std::all_of(a.begin(), a.end(), [](const ojson& x) { return x.is_number_integer(); });
    };
    if (pr.is_array() && pr.size() == 1 && (pr[0].is_string() || all_ints(pr[0]))) pr = ojson(pr[0]);
    if (pr.is_string()) {
      r.prompt = pr.get<std::string>();
    } else if (all_ints(pr)) {
      for (const auto& x : pr) r.prompt_ids.push_back(x.get<int64_t>());
    } else if (pr.is_array() && pr.size() != 1) {
      throw ApiError(400, "'prompt' holds several prompts; this server takes one prompt per request", "prompt");
    } else {
      throw ApiError(400, "'prompt' must be a string, an array of one string, or an array of token ids", "prompt",
                     "invalid_type");
    }
  }
  const int n_prompt = rules.prompt_tokens ? rules.prompt_tokens(r) : 0;
  if (rules.prompt_tokens && n_prompt == 0)
    throw ApiError(400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");

  // ---- decoding parameters ----
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

  const int ctx = rules.context_length;
  const char* mt_name = chat && !present(b, "max_tokens") && present(b, "max_completion_tokens")
                            ? "max_completion_tokens"
                            : "max_tokens";
  std::optional<int64_t> mt = get_count(b, mt_name, rules.max_tokens_limit, "--max-tokens-limit");
  if (mt) {
    if (*mt < 1) throw ApiError(400, fmt::format("'{}' must be at least 1", mt_name), mt_name);
    if (*mt > rules.max_tokens_limit)
      throw ApiError(400,
                     fmt::format("'{}' is {}, over this server's limit of {} (--max-tokens-limit)", mt_name, *mt,
                                 rules.max_tokens_limit),
                     mt_name);
    if (n_prompt + *mt > ctx)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) plus '{}' ({}) is over the model's context length of {} "
                                 "tokens; shorten the prompt or lower '{}'",
                                 n_prompt, mt_name, *mt, ctx, mt_name),
                     mt_name, "context_length_exceeded");
    r.max_tokens = *mt;
  } else {
    // Completions default to 16 tokens (OpenAI); chat to whatever the context and the limit allow.
    int room = ctx - n_prompt;
    if (room < 1)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) fills the model's context length of {} tokens; shorten it",
                                 n_prompt, ctx),
                     chat ? "messages" : "prompt", "context_length_exceeded");
    r.max_tokens = std::min({chat ? rules.max_tokens_limit : 16, rules.max_tokens_limit, room});
  }

  if (auto t = get_number(b, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) throw ApiError(400, "'temperature' must be between 0 and 2", "temperature");
    r.temperature = *t;
  }
  if (auto t = get_number(b, "top_p")) {
    if (!(*t > 0.0 && *t <= 1.0)) throw ApiError(400, "'top_p' must be in (0, 1]", "top_p");
    r.top_p = *t;
  }
  if (auto k = get_int(b, "top_k")) {
    if (*k < -1) throw ApiError(400, "'top_k' must be -1 or 0 (off) or a positive integer", "top_k");
    r.top_k = *k;
  }
  if (auto s = get_int(b, "seed")) r.seed = static_cast<uint64_t>(*s);
  r.ignore_eos = get_bool(b, "ignore_eos");

  if (present(b, "stop")) {
    const ojson& s = b["stop"];
    std::vector<ojson> items;
    if (s.is_string()) items.push_back(s);
    else if (s.is_array()) items.assign(s.begin(), s.end());
    else throw ApiError(400, "'stop' must be a string or an array of strings", "stop", "invalid_type");
    if (items.size() > 16) throw ApiError(400, "'stop' holds more than 16 strings", "stop");
    for (const auto& x : items) {
      if (!x.is_string() || x.get<std::string>().empty())
        throw ApiError(400, "'stop' must hold non-empty strings", "stop", "invalid_type");
      r.stop.push_back(x.get<std::string>());
    }
  }

  // Alternatives: chat's top_logprobs (0..20, needs logprobs: true), completions' logprobs: N (0..5).
  if (chat) {
    if (auto lp = get_bool(b, "logprobs")) r.logprobs = *lp;
    if (auto tl = get_int(b, "top_logprobs")) {
      if (*tl < 0 || *tl > 20) throw ApiError(400, "'top_logprobs' must be between 0 and 20", "top_logprobs");
      if (*tl > 0 && !r.logprobs)
        throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
      r.top_logprobs = static_cast<int>(*tl);
    }
  } else if (present(b, "logprobs")) {
    const ojson& lp = b["logprobs"];
    if (lp.is_boolean()) {
      r.logprobs = lp.get<bool>();
    } else {
      auto n = get_int(b, "logprobs");
      if (*n < 0 || *n > 5) throw ApiError(400, "'logprobs' must be an integer between 0 and 5", "logprobs");
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(*n);
    }
  }

  // Structured output: json_schema -> that schema; json_object -> the schema given or any JSON
  // object; text (or none) -> free text.
  if (present(b, "response_format")) {
    const ojson& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw ApiError(400, "'response_format' must be an object with a 'type': text, json_object or json_schema",
                     "response_format", "invalid_type");
    ResponseFormat& f = r.response_format;
    f.type = rf["type"].get<std::string>();
    if (f.type == "json_object") {
      f.schema = rf.contains("schema") && rf["schema"].is_object() ? rf["schema"] : ojson{{"type", "object"}};
    } else if (f.type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema") ||
          !rf["json_schema"]["schema"].is_object())
        throw ApiError(400, "'response_format' of type json_schema needs 'json_schema': {\"name\", \"schema\": {...}}",
                       "response_format");
      const ojson& js = rf["json_schema"];
      f.schema = js["schema"];
      if (auto n = js.find("name"); n != js.end() && n->is_string()) f.name = n->get<std::string>();
      if (auto s = js.find("strict"); s != js.end() && s->is_boolean()) f.strict = s->get<bool>();
    } else if (f.type != "text") {
      throw ApiError(400, "'response_format' type must be text, json_object or json_schema (got '" + f.type + "')",
                     "response_format");
    }
    if (!f.schema.is_null() && rules.check_schema) rules.check_schema(f.schema);
  }

  if (auto s = get_bool(b, "stream")) r.stream = *s;
  if (present(b, "stream_options")) {
    if (!b["stream_options"].is_object())
      throw ApiError(400, "'stream_options' must be an object", "stream_options", "invalid_type");
    if (auto u = get_bool(b["stream_options"], "include_usage")) r.include_usage = *u;
  }
  if (auto re = get_bool(b, "return_routed_experts")) r.return_routed_experts = *re;
  return r;
}

}  // namespace repro
