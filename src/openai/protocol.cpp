// OpenAI-compatible wire format: provider presets (URL, headers, body fields), Server-Sent-Events
// parsing, and response parsing for /v1/chat/completions and /v1/completions, streamed or not.
// Plain functions with no I/O: the libFuzzer target fuzz/fuzz_sse.cpp builds this file alone.
//
// Provider presets (documented in man/repro-audit.1):
//   openai, vllm, sglang, llamacpp, ollama, tgi: <base>[/v1]/chat/completions | /completions,
//     `Authorization: Bearer <key>`; base may or may not end in /v1.
//   azure: <base>/openai/deployments/<api_model>/{chat/completions|completions}?api-version=V,
//     `api-key: <key>` header, no "model" field.
//   stream_options.include_usage (usage in the last chunk): openai, azure, vllm, sglang.
//   vllm: return_token_ids (token ids in choices[].token_ids; older servers ignore it).
//   llamacpp: cache_prompt=true (explicit, so the cold/warm probe measures the prompt cache).
//   ollama: no logprobs (its OpenAI API does not return them).
//   tgi: top_p is sent only when < 1 and temperature only when > 0 (TGI rejects top_p=1, T=0).
//   top_k: sent when > 0, except azure (UsageError: not an Azure OpenAI parameter).
//   structured output (RequestParams::json_schema): response_format in each provider's dialect
//     (response_format_fields); json_schema's name is the schema's "title" when it is a valid name.
//   extra_body: JSON merge patch applied last (a null value removes a field).
#include "repro/openai/protocol.hpp"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"

namespace repro {

using nlohmann::json;

// ---------------------------------------------------------------- presets

Provider parse_provider(const std::string& name) {
  static const std::pair<const char*, Provider> table[] = {
      {"openai", Provider::openai},     {"azure", Provider::azure},   {"vllm", Provider::vllm},
      {"sglang", Provider::sglang},     {"llamacpp", Provider::llamacpp}, {"llama.cpp", Provider::llamacpp},
      {"ollama", Provider::ollama},     {"tgi", Provider::tgi}};
  for (auto& [n, p] : table)
    if (name == n) return p;
  throw UsageError("--provider '" + name +
                   "' is not known; use one of openai, azure, vllm, sglang, llamacpp, ollama, tgi");
}

const char* provider_name(Provider p) {
  switch (p) {
    case Provider::openai: return "openai";
    case Provider::azure: return "azure";
    case Provider::vllm: return "vllm";
    case Provider::sglang: return "sglang";
    case Provider::llamacpp: return "llamacpp";
    case Provider::ollama: return "ollama";
    case Provider::tgi: return "tgi";
  }
  return "openai";
}

bool provider_supports_logprobs(Provider p) { return p != Provider::ollama; }

static bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
static bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

EndpointSpec parse_endpoint_arg(const std::string& arg) {
  EndpointSpec spec;
  std::string url = arg;
  size_t eq = arg.find('=');
  size_t scheme = arg.find("://");
  if (eq != std::string::npos && (scheme == std::string::npos || eq < scheme)) {
    spec.label = arg.substr(0, eq);
    url = arg.substr(eq + 1);
    if (spec.label.empty())
      throw UsageError("--endpoint '" + redact_url(arg) + "': empty label before '='; write label=URL");
  }
  if (!starts_with(url, "http://") && !starts_with(url, "https://"))
    throw UsageError("--endpoint '" + redact_url(arg) +
                     "': the URL must start with http:// or https://, e.g. http://127.0.0.1:8000/v1");
  {  // trailing slashes of the path (before any query) carry no meaning
    size_t q = url.find_first_of("?#");
    std::string path = url.substr(0, q), rest = q == std::string::npos ? "" : url.substr(q);
    while (ends_with(path, "/") && !ends_with(path, "//")) path.pop_back();
    url = path + rest;
  }
  spec.url = url;
  if (spec.label.empty()) spec.label = redact_url(url);
  return spec;
}

namespace {

// redact_url, and the values it replaced (for url_secrets).
std::string redact_url_collect(const std::string& url, std::vector<std::string>* found) {
  std::string out = url;
  size_t s = out.find("://");
  if (s != std::string::npos) {
    size_t host_start = s + 3;
    size_t host_end = out.find_first_of("/?#", host_start);
    if (host_end == std::string::npos) host_end = out.size();
    size_t at = host_end > host_start ? out.rfind('@', host_end - 1) : std::string::npos;
    if (at != std::string::npos && at >= host_start) {
      if (found) {
        std::string userinfo = out.substr(host_start, at - host_start);
        found->push_back(userinfo);
        if (size_t colon = userinfo.find(':'); colon != std::string::npos)
          found->push_back(userinfo.substr(colon + 1));
      }
      out = out.substr(0, host_start) + "[REDACTED]@" + out.substr(at + 1);
    }
  }
  // Query (and fragment) parameters whose name looks like a credential.
  size_t q = out.find_first_of("?#");
  if (q == std::string::npos) return out;
  static const char* kSecretNames[] = {"key", "apikey", "api_key", "api-key", "token", "access_token",
                                       "auth", "authorization", "sig", "signature", "password", "passwd",
                                       "pwd", "secret", "client_secret", "code", "session", "credential"};
  std::string res = out.substr(0, q + 1);
  size_t i = q + 1;
  while (i <= out.size()) {
    size_t end = out.find_first_of("&#;", i);
    if (end == std::string::npos) end = out.size();
    std::string part = out.substr(i, end - i);
    size_t eq = part.find('=');
    std::string name = part.substr(0, eq);
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool secret = false;
    for (const char* n : kSecretNames)
      if (lower == n || (lower.size() > std::strlen(n) && lower.compare(lower.size() - std::strlen(n) - 1, std::string::npos,
                                                                          std::string("_") + n) == 0))
        secret = true;
    if (secret && eq != std::string::npos) {
      if (found && eq + 1 < part.size()) found->push_back(part.substr(eq + 1));
      part = name + "=[REDACTED]";
    }
    res += part;
    if (end < out.size()) res += out[end];
    i = end + 1;
  }
  return res;
}

}  // namespace

std::string redact_url(const std::string& url) {
  return redact_url_collect(url, nullptr);
}

std::vector<std::string> url_secrets(const std::string& url) {
  std::vector<std::string> found;
  redact_url_collect(url, &found);
  return found;
}

std::vector<std::string> endpoint_secrets(const std::vector<EndpointSpec>& endpoints) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v, size_t min_length) {
    if (!v.empty() && v.size() >= min_length && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const auto& e : endpoints) {
    add(e.api_key, 1);  // the key, however short
    for (const auto& v : url_secrets(e.url)) add(v, kMinSecretLength);
  }
  // Longest first: a secret that contains another is replaced whole.
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

std::string scrub_secrets(std::string s, const std::vector<std::string>& secrets) {
  for (const auto& k : secrets) s = scrub_secret(std::move(s), k);
  return s;
}

std::string scrub_secret(std::string s, const std::string& secret) {
  if (secret.empty()) return s;
  size_t pos = 0;
  while ((pos = s.find(secret, pos)) != std::string::npos) {
    s.replace(pos, secret.size(), "[REDACTED]");
    pos += 10;
  }
  return s;
}

// ---------------------------------------------------------------- requests

namespace {

// Every object schema with "properties" and no "additionalProperties" gets false: undeclared keys are
// refused here by default (repro/structured/json_schema.hpp), and OpenAI's strict mode needs it said.
json closed_objects(const json& s) {
  if (s.is_array()) {
    json a = json::array();
    for (const auto& e : s) a.push_back(closed_objects(e));
    return a;
  }
  if (!s.is_object()) return s;
  json o = json::object();
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    // keys whose values are schemas (or maps / lists of schemas); enum and const values stay as they are
    if (k == "properties" && it->is_object()) {
      json props = json::object();
      for (auto p = it->begin(); p != it->end(); ++p) props[p.key()] = closed_objects(*p);
      o[k] = props;
    } else if (k == "items" || k == "anyOf" || k == "additionalProperties") {
      o[k] = closed_objects(*it);
    } else {
      o[k] = *it;
    }
  }
  if (o.contains("properties") && !o.contains("additionalProperties")) o["additionalProperties"] = false;
  return o;
}

std::string schema_name(const json& schema) {
  if (schema.is_object() && schema.contains("title") && schema["title"].is_string()) {
    std::string t = schema["title"].get<std::string>();
    bool ok = !t.empty() && t.size() <= 64;
    for (char c : t) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    if (ok) return t;
  }
  return "output";
}

}  // namespace

json response_format_fields(Provider pv, const json& js) {
  json f = json::object();
  if (js.is_null()) return f;
  const bool any_object = js.is_object() && js.value("type", json()) == "json_object";
  const json schema = any_object ? json{{"type", "object"}} : js;
  switch (pv) {
    case Provider::llamacpp:
      f["json_schema"] = schema;
      break;
    case Provider::tgi:
      f["response_format"] = {{"type", "json"}, {"value", schema}};
      break;
    default:
      if (any_object)
        f["response_format"] = {{"type", "json_object"}};
      else
        f["response_format"] = {
            {"type", "json_schema"},
            {"json_schema", {{"name", schema_name(schema)}, {"schema", closed_objects(schema)}, {"strict", true}}}};
  }
  return f;
}

json build_request_body(const EndpointSpec& spec, const RequestParams& p) {
  const bool chat = spec.api == "chat";
  const Provider pv = spec.provider;
  json b = json::object();
  if (pv != Provider::azure) b["model"] = spec.api_model;
  if (chat) {
    if (p.messages.is_array() && !p.messages.empty())
      b["messages"] = p.messages;
    else
      b["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
  } else {
    b["prompt"] = p.prompt;
  }
  b["max_tokens"] = p.decoding.max_tokens;
  if (pv == Provider::tgi) {
    if (p.decoding.temperature > 0) b["temperature"] = p.decoding.temperature;
    if (p.decoding.top_p < 1) b["top_p"] = p.decoding.top_p;
  } else {
    b["temperature"] = p.decoding.temperature;
    b["top_p"] = p.decoding.top_p;
  }
  if (p.decoding.top_k > 0) {
    if (pv == Provider::azure)
      throw UsageError("decoding config '" + p.decoding.id +
                       "' sets top_k, which Azure OpenAI does not accept; drop top_k for endpoint '" +
                       spec.label + "'");
    b["top_k"] = p.decoding.top_k;
  }
  if (p.send_seed) b["seed"] = p.seed;
  if (!p.stop.empty()) b["stop"] = p.stop;
  if (p.logprobs && provider_supports_logprobs(pv)) {
    if (chat)
      b["logprobs"] = true;
    else
      b["logprobs"] = 1;
  }
  if (spec.stream) {
    b["stream"] = true;
    if (pv == Provider::openai || pv == Provider::azure || pv == Provider::vllm || pv == Provider::sglang)
      b["stream_options"] = {{"include_usage", true}};
  }
  if (pv == Provider::vllm) b["return_token_ids"] = true;
  if (pv == Provider::llamacpp) b["cache_prompt"] = true;
  const json structured = response_format_fields(pv, p.json_schema);
  for (auto it = structured.begin(); it != structured.end(); ++it) b[it.key()] = *it;
  if (spec.extra_body.is_object() && !spec.extra_body.empty()) b.merge_patch(spec.extra_body);
  return b;
}

HttpRequestSpec build_request(const EndpointSpec& spec, const RequestParams& p) {
  HttpRequestSpec r;
  const bool chat = spec.api == "chat";
  // The API path goes after the base URL's path and before its query, which is kept
  // (http://h/v1?api-version=X -> http://h/v1/chat/completions?api-version=X); a fragment is dropped.
  std::string base = spec.url.substr(0, spec.url.find('#'));
  std::string query;
  if (size_t q = base.find('?'); q != std::string::npos) {
    query = base.substr(q + 1);
    base.resize(q);
  }
  while (ends_with(base, "/")) base.pop_back();
  const char* tail = chat ? "/chat/completions" : "/completions";
  if (spec.provider == Provider::azure) {
    if (ends_with(base, "/openai")) base.resize(base.size() - 7);
    base += "/openai/deployments/" + spec.api_model + tail;
    // The URL's own api-version wins over the preset's.
    const bool has_version = ("&" + query).find("&api-version=") != std::string::npos;
    if (!has_version) query = "api-version=" + spec.azure_api_version + (query.empty() ? "" : "&" + query);
  } else {
    base += std::string(ends_with(base, "/v1") ? "" : "/v1") + tail;
  }
  r.url = query.empty() ? base : base + "?" + query;
  r.headers.push_back("Content-Type: application/json");
  r.headers.push_back(spec.stream ? "Accept: text/event-stream" : "Accept: application/json");
  r.headers.push_back("Expect:");
  if (!spec.api_key.empty()) {
    if (spec.provider == Provider::azure)
      r.headers.push_back("api-key: " + spec.api_key);
    else
      r.headers.push_back("Authorization: Bearer " + spec.api_key);
  }
  r.body = build_request_body(spec, p).dump();
  return r;
}

// ---------------------------------------------------------------- SSE

void SseParser::feed(std::string_view chunk, std::vector<std::string>& out) {
  size_t i = 0;
  while (i < chunk.size()) {
    if (last_cr_) {
      last_cr_ = false;
      if (chunk[i] == '\n') {  // the LF of a CRLF split across chunks
        ++i;
        continue;
      }
    }
    size_t e = chunk.find_first_of("\r\n", i);
    if (e == std::string_view::npos) {
      if (buf_.size() + (chunk.size() - i) > max_line_) {
        if (error_.empty()) error_ = "SSE line longer than " + std::to_string(max_line_) + " bytes";
        buf_.clear();
      } else {
        buf_.append(chunk.substr(i));
      }
      return;
    }
    if (buf_.empty()) {
      line(chunk.substr(i, e - i), out);
    } else {
      if (buf_.size() + (e - i) > max_line_) {
        if (error_.empty()) error_ = "SSE line longer than " + std::to_string(max_line_) + " bytes";
        buf_.clear();
      } else {
        buf_.append(chunk.substr(i, e - i));
        line(buf_, out);
      }
      buf_.clear();
    }
    if (chunk[e] == '\r') {
      if (e + 1 < chunk.size()) {
        i = chunk[e + 1] == '\n' ? e + 2 : e + 1;
      } else {
        last_cr_ = true;
        i = e + 1;
      }
    } else {
      i = e + 1;
    }
  }
}

void SseParser::line(std::string_view l, std::vector<std::string>& out) {
  if (l.empty()) {
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l[0] == ':') return;  // comment / keep-alive
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  if (has_data_) data_.push_back('\n');
  if (data_.size() + value.size() > max_line_) {
    if (error_.empty()) error_ = "SSE event longer than " + std::to_string(max_line_) + " bytes";
    return;
  }
  data_.append(value);
  has_data_ = true;
}

// ---------------------------------------------------------------- causes

const char* cause_name(FailCause c) {
  switch (c) {
    case FailCause::none: return "none";
    case FailCause::http_429: return "http_429";
    case FailCause::http_5xx: return "http_5xx";
    case FailCause::http_4xx: return "http_4xx";
    case FailCause::timeout: return "timeout";
    case FailCause::connect: return "connect";
    case FailCause::reset: return "reset";
    case FailCause::stream_cut: return "stream_cut";
    case FailCause::invalid_json: return "invalid_json";
    case FailCause::empty_choices: return "empty_choices";
    case FailCause::server_error: return "server_error";
    case FailCause::tls: return "tls";
    case FailCause::aborted: return "aborted";
    case FailCause::other: return "other";
  }
  return "other";
}

bool cause_retryable(FailCause c) {
  switch (c) {
    case FailCause::http_429: case FailCause::http_5xx: case FailCause::timeout:
    case FailCause::connect: case FailCause::reset: case FailCause::stream_cut:
    case FailCause::invalid_json: case FailCause::empty_choices: case FailCause::server_error:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------- responses

static std::string clip(std::string_view s, size_t n = 200) {
  std::string out(s.substr(0, n));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (s.size() > n) out += "...";
  return out;
}

static void take_meta(const json& j, ParsedResponse& r) {
  if (auto it = j.find("id"); it != j.end() && it->is_string() && r.id.empty()) r.id = it->get<std::string>();
  if (auto it = j.find("model"); it != j.end() && it->is_string() && r.model.empty())
    r.model = it->get<std::string>();
  if (auto it = j.find("created"); it != j.end() && it->is_number_integer() && r.created == 0)
    r.created = it->get<int64_t>();
  if (auto it = j.find("system_fingerprint"); it != j.end() && it->is_string() && r.system_fingerprint.empty())
    r.system_fingerprint = it->get<std::string>();
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) {
    auto pt = it->find("prompt_tokens"), ct = it->find("completion_tokens");
    if (pt != it->end() && pt->is_number_integer()) r.prompt_tokens = static_cast<int>(pt->get<int64_t>());
    if (ct != it->end() && ct->is_number_integer()) r.completion_tokens = static_cast<int>(ct->get<int64_t>());
  }
}

static std::string error_object_message(const json& e) {
  if (e.is_string()) return clip(e.get<std::string>());
  if (e.is_object()) {
    auto m = e.find("message");
    if (m != e.end() && m->is_string()) return clip(m->get<std::string>());
  }
  return clip(e.dump());
}

static void take_ids(const json& arr, ParsedResponse& r) {
  if (!arr.is_array()) return;
  for (auto& t : arr)
    if (t.is_number_integer()) {
      int64_t v = t.get<int64_t>();
      if (v >= INT32_MIN && v <= INT32_MAX) r.tokens.push_back(static_cast<int>(v));
    }
  r.tokens_known = true;
}

void parse_choice(const json& choice, bool chat, ParsedResponse& r) {
  if (!choice.is_object()) return;
  if (chat) {
    const json* m = nullptr;
    if (auto it = choice.find("delta"); it != choice.end() && it->is_object()) m = &*it;
    else if (auto it2 = choice.find("message"); it2 != choice.end() && it2->is_object()) m = &*it2;
    if (m) {
      auto c = m->find("content");
      if (c != m->end() && c->is_string()) r.text += c->get_ref<const std::string&>();
    }
  } else {
    auto t = choice.find("text");
    if (t != choice.end() && t->is_string()) r.text += t->get_ref<const std::string&>();
  }
  if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) r.finish_reason = f->get<std::string>();
  if (auto ids = choice.find("token_ids"); ids != choice.end()) take_ids(*ids, r);
  else if (auto toks = choice.find("tokens"); toks != choice.end() && toks->is_array() &&
                                                !toks->empty() && (*toks)[0].is_number_integer())
    take_ids(*toks, r);
  auto lp = choice.find("logprobs");
  if (lp == choice.end() || !lp->is_object()) return;
  if (auto content = lp->find("content"); content != lp->end() && content->is_array()) {
    for (auto& e : *content)
      if (e.is_object()) {
        auto v = e.find("logprob");
        if (v != e.end() && v->is_number()) r.logprobs.push_back(static_cast<float>(v->get<double>()));
      }
  } else if (auto tl = lp->find("token_logprobs"); tl != lp->end() && tl->is_array()) {
    for (auto& v : *tl)
      if (v.is_number()) r.logprobs.push_back(static_cast<float>(v.get<double>()));
  }
}

static const json* first_choice(const json& choices) {
  if (!choices.is_array() || choices.empty()) return nullptr;
  for (auto& c : choices)
    if (c.is_object()) {
      auto idx = c.find("index");
      if (idx == c.end() || (idx->is_number_integer() && idx->get<int64_t>() == 0)) return &c;
    }
  return nullptr;
}

ParsedResponse parse_response_json(std::string_view body, bool chat) {
  ParsedResponse r;
  json j;
  std::string why;
  if (!parse_json(body, j, &why) || !j.is_object()) {
    r.cause = FailCause::invalid_json;
    r.error = "response is not a JSON object: '" + clip(body, 80) + "'" + (why.empty() ? "" : " (" + why + ")");
    return r;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    r.cause = FailCause::server_error;
    r.error = "server error: " + error_object_message(*e);
    return r;
  }
  take_meta(j, r);
  auto ch = j.find("choices");
  const json* c = ch == j.end() ? nullptr : first_choice(*ch);
  if (!c) {
    r.cause = FailCause::empty_choices;
    r.error = "response has no choices";
    return r;
  }
  parse_choice(*c, chat, r);
  return r;
}

bool StreamAccumulator::add_event(const std::string& data) {
  if (r_.cause != FailCause::none) return false;  // the first failure sticks
  ++r_.events;
  if (data == "[DONE]") {
    r_.saw_done = true;
    return false;
  }
  json j;
  std::string why;
  if (!parse_json(data, j, &why) || !j.is_object()) {
    r_.cause = FailCause::invalid_json;
    r_.error = "stream event is not a JSON object: '" + clip(data, 80) + "'" + (why.empty() ? "" : " (" + why + ")");
    return false;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    r_.cause = FailCause::server_error;
    r_.error = "server error in stream: " + error_object_message(*e);
    return false;
  }
  take_meta(j, r_);
  auto ch = j.find("choices");
  if (ch == j.end()) return false;
  const json* c = first_choice(*ch);
  if (!c) return false;  // e.g. the usage-only last chunk
  saw_choice_ = true;
  size_t before = r_.text.size();
  parse_choice(*c, chat_, r_);
  return r_.text.size() > before;
}

void StreamAccumulator::finish() {
  if (r_.cause != FailCause::none) return;
  if (!saw_choice_) {
    r_.cause = r_.events == 0 ? FailCause::stream_cut : FailCause::empty_choices;
    r_.error = r_.events == 0 ? "stream ended before any event" : "stream carried no choices";
  } else if (!r_.saw_done && r_.finish_reason.empty()) {
    r_.cause = FailCause::stream_cut;
    r_.error = "stream cut: ended without finish_reason or [DONE] after " + std::to_string(r_.events) + " events";
  }
}

std::string error_message_from_body(std::string_view body) {
  json j;
  if (parse_json(body, j) && j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) return error_object_message(*e);
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return clip(m->get<std::string>());
  }
  return clip(body);
}

double parse_retry_after(std::string_view v, int64_t now_unix) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r' || v.back() == '\n')) v.remove_suffix(1);
  if (v.empty()) return -1;
  bool digits = true, dot = false;
  for (char c : v) {
    if (c == '.' && !dot) dot = true;
    else if (c < '0' || c > '9') digits = false;
  }
  if (digits) {
    if (v.size() > 9) return 1e9;
    return std::strtod(std::string(v).c_str(), nullptr);
  }
  std::string s(v);
  struct tm tm {};
  const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (!end) return -1;
  int64_t t = static_cast<int64_t>(timegm(&tm));
  return t > now_unix ? static_cast<double>(t - now_unix) : 0.0;
}

}  // namespace repro
