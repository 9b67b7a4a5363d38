// The client's requests for each provider preset: URL, headers and the body, which is the wire
// request (repro/openai/request.hpp: request_json) with the preset's quirks.
//
// Provider presets (documented in man/repro-audit.1):
//   openai, vllm, sglang, llamacpp, ollama, tgi: <base>[/v1]/chat/completions | /completions,
//     `Authorization: Bearer <key>`; base may or may not end in /v1.
//   azure: <base>/openai/deployments/<api_model>/{chat/completions|completions}?api-version=V,
//     `api-key: <key>` header, no "model" field.
//   stream_options.include_usage (usage in the last chunk): openai, azure, vllm, sglang.
//   vllm: return_token_ids (token ids in choices[].token_ids; older servers ignore it).
//   sglang with RequestParams::routed_experts: return_routed_experts=true (vllm needs no field).
//   llamacpp: cache_prompt=true (explicit, so the cold/warm probe measures the prompt cache).
//   ollama: no logprobs (its OpenAI API does not return them).
//   tgi: top_p is sent only when < 1 and temperature only when > 0 (TGI rejects top_p=1, T=0).
//   top_k: sent when > 0, except azure (UsageError: not an Azure OpenAI parameter).
//   structured output (RequestParams::json_schema): response_format in each provider's dialect
//     (response_format_fields); json_schema's name is the schema's "title" when it is a valid name.
//   extra_body: JSON merge patch applied last (a null value removes a field).
#include "repro/remote/request.hpp"

#include <cctype>

#include "repro/common/error.hpp"
#include "repro/openai/request.hpp"

namespace repro {

using nlohmann::json;

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
    default: {
      ResponseFormat rf;
      if (any_object) {
        rf.type = "json_object";
      } else {
        rf.type = "json_schema";
        rf.name = schema_name(schema);
        rf.schema = closed_objects(schema);
      }
      f["response_format"] = response_format_json(rf);
    }
  }
  return f;
}

json build_request_body(const EndpointSpec& spec, const RequestParams& p) {
  const Provider pv = spec.provider;
  CompletionRequest r;
  r.chat = spec.api == "chat";
  if (pv != Provider::azure) r.model = spec.api_model;
  if (r.chat) {
    if (p.messages.is_array() && !p.messages.empty())
      r.messages = p.messages;
    else
      r.messages = json::array({{{"role", "user"}, {"content", p.prompt}}});
    r.tools = p.tools;
    r.chat_template_kwargs = p.chat_template_kwargs;
  } else {
    r.prompt = p.prompt;
  }
  r.max_tokens = p.decoding.max_tokens;
  if (pv == Provider::tgi) {
    if (p.decoding.temperature > 0) r.temperature = p.decoding.temperature;
    if (p.decoding.top_p < 1) r.top_p = p.decoding.top_p;
  } else {
    r.temperature = p.decoding.temperature;
    r.top_p = p.decoding.top_p;
  }
  if (p.decoding.top_k > 0) {
    if (pv == Provider::azure)
      throw UsageError("decoding config '" + p.decoding.id +
                       "' sets top_k, which Azure OpenAI does not accept; drop top_k for endpoint '" +
                       spec.label + "'");
    r.top_k = p.decoding.top_k;
  }
  if (p.send_seed) r.seed = p.seed;
  r.stop = p.stop;
  if (p.logprobs && provider_supports_logprobs(pv)) {
    r.logprobs = true;            // chat: "logprobs": true
    r.top_logprobs = r.chat ? 0 : 1;  // completions: "logprobs": 1
  }
  if (spec.stream) {
    r.stream = true;
    r.include_usage = pv == Provider::openai || pv == Provider::azure || pv == Provider::vllm || pv == Provider::sglang;
  }
  json b = request_json(r);
  if (pv == Provider::vllm) b["return_token_ids"] = true;
  if (pv == Provider::llamacpp) b["cache_prompt"] = true;
  if (p.routed_experts && pv == Provider::sglang) b["return_routed_experts"] = true;
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
  while (base.ends_with("/")) base.pop_back();
  const char* tail = chat ? "/chat/completions" : "/completions";
  if (spec.provider == Provider::azure) {
    if (base.ends_with("/openai")) base.resize(base.size() - 7);
    base += "/openai/deployments/" + spec.api_model + tail;
    // The URL's own api-version wins over the preset's.
    const bool has_version = ("&" + query).find("&api-version=") != std::string::npos;
    if (!has_version) query = "api-version=" + spec.azure_api_version + (query.empty() ? "" : "&" + query);
  } else {
    base += std::string(base.ends_with("/v1") ? "" : "/v1") + tail;
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
  // The body's own fields in sorted order; the chat data (messages, tools, chat_template_kwargs)
  // as it was written, key order kept, since the endpoint's chat template prints tools and
  // tool-call arguments in the order it receives them (what --extra-body replaces stays replaced).
  const json b = build_request_body(spec, p);
  nlohmann::ordered_json body = b;
  if (chat) {
    const bool extra = spec.extra_body.is_object();
    auto keep = [&](const char* key, const nlohmann::ordered_json& v) {
      if (!v.is_null() && body.contains(key) && !(extra && spec.extra_body.contains(key))) body[key] = v;
    };
    if (p.messages.is_array() && !p.messages.empty()) keep("messages", p.messages);
    keep("tools", p.tools);
    keep("chat_template_kwargs", p.chat_template_kwargs);
  }
  r.body = body.dump();
  return r;
}

}  // namespace repro
