// The response, full or streamed: its writer (the server's) and its readers (the client's), for
// /v1/chat/completions and /v1/completions. Plain functions with no I/O: the libFuzzer target
// fuzz/fuzz_sse.cpp builds the readers from this file and sse.cpp.
#include "repro/openai/response.hpp"

#include <strings.h>

#include <cstdlib>
#include <ctime>

#include "repro/common/json.hpp"

namespace repro {

using nlohmann::json;

// ---------------------------------------------------------------- writer

json usage_json(int prompt, int completion) {
  return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

namespace {

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

}  // namespace

json logprobs_json(bool chat, const LogprobsOut& lp) {
  if (chat) {
    json content = json::array();
    for (const auto& t : lp.tokens) {
      json tops = json::array();
      for (const auto& [piece, v] : t.top) tops.push_back({{"token", piece}, {"logprob", v}, {"bytes", bytes_of(piece)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", tops}});
    }
    return json{{"content", content}};
  }
  // Completions (legacy format): top_logprobs is one {piece: logprob} object per token, or null.
  json toks = json::array(), vals = json::array(), offs = json::array(), tops = json::array();
  size_t offset = lp.text_offset;
  for (const auto& t : lp.tokens) {
    toks.push_back(t.token);
    vals.push_back(t.logprob);
    offs.push_back(offset);
    offset += t.token.size();
    json m = json::object();
    for (const auto& [piece, v] : t.top)
      if (!m.contains(piece)) m[piece] = v;  // two ids with one piece: the likelier one
    tops.push_back(m);
  }
  return json{{"tokens", toks}, {"token_logprobs", vals}, {"top_logprobs", lp.with_top ? tops : json(nullptr)},
              {"text_offset", offs}};
}

json response_json(const ResponseOut& r) {
  const char* object = !r.chat ? "text_completion" : r.chunk ? "chat.completion.chunk" : "chat.completion";
  json j = {{"id", r.id}, {"object", object}, {"created", r.created}, {"model", r.model},
            {"system_fingerprint", r.system_fingerprint}};
  json choices = json::array();
  for (size_t i = 0; i < r.choices.size(); ++i) {
    const ChoiceOut& c = r.choices[i];
    json choice = {{"index", static_cast<int>(i)},
                   {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json(nullptr)},
                   {"token_ids", c.token_ids}};
    if (!r.chat) {
      choice["text"] = c.text;
    } else if (r.chunk) {
      json d = {{"content", c.text}};
      if (c.role) d["role"] = "assistant";
      choice["delta"] = d;
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    }
    choice["logprobs"] = c.logprobs ? logprobs_json(r.chat, *c.logprobs) : json(nullptr);
    choices.push_back(choice);
  }
  j["choices"] = choices;
  if (r.usage) j["usage"] = usage_json(r.usage->first, r.usage->second);
  if (r.sglext_routed_experts) j["sglext"] = {{"routed_experts", *r.sglext_routed_experts}};
  return j;
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
  if (auto it = j.find("repro_audit"); it != j.end() && it->is_object()) {
    auto mb = it->find("max_batch");
    if (mb != it->end() && mb->is_number_integer()) {
      const int64_t v = mb->get<int64_t>();
      if (v >= 1 && v <= INT32_MAX && v > r.max_batch) r.max_batch = static_cast<int>(v);
    }
  }
  if (auto it = j.find("sglext"); it != j.end() && it->is_object())
    if (auto re = it->find("routed_experts"); re != it->end() && !re->is_null()) r.routed_experts["sglext"] = *re;
  if (auto it = j.find("prompt_routed_experts"); it != j.end() && !it->is_null()) r.routed_experts["prompt"] = *it;
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
  if (auto re = choice.find("routed_experts"); re != choice.end() && !re->is_null()) r.routed_experts["choice"] = *re;
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
        auto t = e.find("token");
        if (t != e.end() && t->is_string()) r.token_pieces.push_back(t->get<std::string>());
      }
  } else if (auto tl = lp->find("token_logprobs"); tl != lp->end() && tl->is_array()) {
    for (auto& v : *tl)
      if (v.is_number()) r.logprobs.push_back(static_cast<float>(v.get<double>()));
    if (auto tk = lp->find("tokens"); tk != lp->end() && tk->is_array())
      for (auto& t : *tk)
        if (t.is_string()) r.token_pieces.push_back(t.get<std::string>());
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

// `text` (a body, or one stream event: `what`) as a JSON object into j, its metadata into r; false,
// with r's cause and error set, when it is not an object or it carries an error object.
static bool read_object(std::string_view text, const char* what, const char* error_prefix, json& j,
                        ParsedResponse& r) {
  std::string why;
  if (!parse_json(text, j, &why) || !j.is_object()) {
    r.cause = FailCause::invalid_json;
    r.error = std::string(what) + " is not a JSON object: '" + clip(text, 80) + "'" +
              (why.empty() ? "" : " (" + why + ")");
    return false;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    r.cause = FailCause::server_error;
    r.error = error_prefix + error_object_message(*e);
    return false;
  }
  take_meta(j, r);
  return true;
}

ParsedResponse parse_response_json(std::string_view body, bool chat) {
  ParsedResponse r;
  json j;
  if (!read_object(body, "response", "server error: ", j, r)) return r;
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
  if (!read_object(data, "stream event", "server error in stream: ", j, r_)) return false;
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
