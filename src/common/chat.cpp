#include "repro/common/chat.hpp"

#include <algorithm>
#include <filesystem>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

std::string content_text(const nlohmann::json& c, const std::string& what) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (const auto& part : c) {
      if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
        throw UsageError(what + ": a content part has no \"text\" string; only text parts are supported");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  throw UsageError(what + ": \"content\" must be a string or an array of text parts");
}

void check_messages(const nlohmann::json& messages, const std::string& what) {
  if (!messages.is_array() || messages.empty())
    throw UsageError(what + ": \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
  for (const auto& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
      throw UsageError(what + ": each message needs a \"role\" string and a \"content\"");
}

// Jinja's trim: leading and trailing whitespace removed.
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool has(const std::string& s, const char* marker) { return s.find(marker) != std::string::npos; }

// The body of a Jinja string literal with escapes \n, \t, \\, \', \" resolved.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// ChatML: a literal '<|im_start|>system\n...<|im_end|>\n' written whole (no concatenation inside)
// is the system message the template adds when the conversation has none.
std::string chatml_default_system(const std::string& t) {
  const std::string open = "<|im_start|>system\\n";
  for (size_t at = t.find(open); at != std::string::npos; at = t.find(open, at + 1)) {
    const size_t body = at + open.size();
    const size_t end = t.find("<|im_end|>", body);
    if (end == std::string::npos) break;
    const std::string text = t.substr(body, end - body);
    if (text.find_first_of("'\"{}+") == std::string::npos) return unescape(text);
  }
  return "";
}

// Llama 3.1: the date the template falls back to (set date_string = "26 Jul 2024").
std::string llama31_date(const std::string& t) {
  const std::string key = "date_string = \"";
  const size_t at = t.find(key);
  if (at == std::string::npos) return "26 Jul 2024";
  const size_t end = t.find('"', at + key.size());
  if (end == std::string::npos || end - (at + key.size()) > 40) return "26 Jul 2024";
  return t.substr(at + key.size(), end - at - key.size());
}

// After an optional first system message, user and assistant strictly alternate from a user
// message (the [INST] templates raise an exception otherwise). Returns the index of the first
// non-system message and the system text.
size_t check_alternation(const nlohmann::json& messages, const std::string& name, const std::string& what,
                         std::string& system) {
  size_t first = 0;
  if (messages[0]["role"] == "system") {
    system = content_text(messages[0]["content"], what);
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const std::string role = messages[i]["role"].get<std::string>();
    if (role != "user" && role != "assistant")
      throw UsageError(what + ": the " + name + " chat template supports user and assistant messages after an optional "
                       "first system message, not '" + role + "' (message " + std::to_string(i) + ")");
    if ((role == "user") != ((i - first) % 2 == 0))
      throw UsageError(what + ": the " + name + " chat template needs messages alternating user/assistant/user/... "
                       "after the optional system message; message " + std::to_string(i) + " is " + role);
  }
  return first;
}

// Llama 2 chat: the system message is wrapped in <<SYS>> into the first user turn; every user turn
// is BOS + "[INST] " + content.strip() + " [/INST]", every assistant turn " " + content.strip() +
// " " + EOS. The first BOS is the tokenizer's (left out of the text); later ones are written.
std::string render_llama2(const nlohmann::json& messages, const ChatTemplate& t, const std::string& what) {
  std::string system, out;
  const size_t first = check_alternation(messages, "llama2", what, system);
  const bool has_system = first == 1;
  for (size_t i = first; i < messages.size(); ++i) {
    std::string content = content_text(messages[i]["content"], what);
    if (i == first && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (messages[i]["role"] == "user")
      out += (i == first ? "" : t.bos_token) + "[INST] " + trim(content) + " [/INST]";
    else
      out += " " + trim(content) + " " + t.eos_token;
  }
  return out;
}

// Mistral v1 (Mixtral, Mistral 7B v0.2 with a system prompt), v3 (7B v0.3, Large 2407) and
// v3-tekken (Nemo): the system message goes into one user turn, v1 the first, v3 the last one
// when it is the final message (a conversation that ends with an assistant turn drops it, as the
// template does).
//   v1         " [INST] " + [system + "\n\n"] + content + " [/INST]"   assistant " " + content + EOS
//   v3         "[INST] " + [system + "\n\n"] + content + "[/INST]"     assistant " " + trim(content) + EOS
//   v3-tekken  "[INST]" + [system + "\n\n"] + content + "[/INST]"      assistant content + EOS
std::string render_mistral_system_merged(const nlohmann::json& messages, const ChatTemplate& t,
                                         const std::string& what) {
  std::string system, out;
  const size_t first = check_alternation(messages, t.name, what, system);
  const bool has_system = first == 1;
  const bool v1 = t.name == "mistral-v1", tekken = t.name == "mistral-v3-tekken";
  for (size_t i = first; i < messages.size(); ++i) {
    const std::string content = content_text(messages[i]["content"], what);
    if (messages[i]["role"] == "user") {
      const bool with_system = has_system && (v1 ? i == first : i + 1 == messages.size());
      const std::string body = (with_system ? system + "\n\n" : "") + content;
      out += v1 ? " [INST] " + body + " [/INST]" : tekken ? "[INST]" + body + "[/INST]" : "[INST] " + body + "[/INST]";
    } else {
      out += v1 ? " " + content + t.eos_token : tekken ? content + t.eos_token : " " + trim(content) + t.eos_token;
    }
  }
  return out;
}

}  // namespace

std::string chat_template_names() {
  return "plain, chatml, llama3, llama3.1, llama2, mistral, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7";
}

ChatTemplate recognise_chat_template(const std::string& t, const std::string& origin) {
  ChatTemplate c;
  c.origin = origin;
  if (has(t, "<|im_start|>") && has(t, "<|im_end|>")) {
    c.name = "chatml";
    c.default_system = chatml_default_system(t);
  } else if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) {
    if (has(t, "Cutting Knowledge Date")) {
      c.name = "llama3.1";
      c.date = llama31_date(t);
    } else {
      c.name = "llama3";
    }
  } else if (has(t, "[INST]") && has(t, "[/INST]")) {
    // The Mistral generations differ in the spaces around [INST] inside the string literals.
    const bool spaced = has(t, "[INST] '") || has(t, "[INST] \"");
    const bool tight = has(t, "[INST]'") || has(t, "[INST]\"");
    if (has(t, "<<SYS>>")) {
      c.name = "llama2";
    } else if (has(t, "[SYSTEM_PROMPT]")) {
      if (has(t, "[SYSTEM_PROMPT] '") || has(t, "[SYSTEM_PROMPT] \"")) {
        c.name = "mistral-v7";
      } else {
        c.name = "unknown";
        c.problem = "it is a Mistral v7-tekken template ([SYSTEM_PROMPT] without a space), which is not supported";
      }
    } else if (has(t, "[AVAILABLE_TOOLS]")) {
      if (spaced) {
        c.name = "mistral-v3";
      } else if (tight) {
        c.name = "mistral-v3-tekken";
      } else {
        c.name = "unknown";
        c.problem = "it is a Mistral [AVAILABLE_TOOLS] template whose [INST] spacing was not found";
      }
    } else if (has(t, "' [INST] '") || has(t, "\" [INST] \"")) {
      c.name = "mistral-v1";
    } else {
      c.name = "mistral";
    }
  } else {
    c.name = "unknown";
    c.problem = "it has none of the markers of ChatML (<|im_start|>), Llama 3 (<|start_header_id|>) or Mistral "
                "([INST])";
  }
  return c;
}

ChatTemplate chat_template_from_option(const std::string& value) {
  ChatTemplate c;
  c.origin = "--chat-template " + value;
  static const char* const kNames[] = {"plain",      "chatml",     "llama3",     "llama3.1",          "llama2",
                                       "mistral",    "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7"};
  if (std::find(std::begin(kNames), std::end(kNames), value) != std::end(kNames)) {
    c.name = value;
    return c;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(value, ec))
    throw UsageError("--chat-template '" + value + "' is neither a template name (" + chat_template_names() +
                     ") nor a readable file holding a Jinja chat template");
  check_regular_file(value, "chat template file", uint64_t{1} << 20);
  c = recognise_chat_template(read_file(value, "chat template file"), "--chat-template " + value);
  if (c.name == "unknown")
    throw UsageError("--chat-template '" + value + "': the template in the file is not recognised: " + c.problem +
                     "; pass one of " + chat_template_names() + " instead");
  return c;
}

std::string render_chat(const nlohmann::json& messages, const ChatTemplate& t, const std::string& what) {
  check_messages(messages, what);
  if (t.name == "plain") return render_chat(messages, what);
  if (t.name == "unknown")
    throw UsageError(what + ": the chat template (" + t.origin + ") is not recognised: " + t.problem +
                     "; pass --chat-template with one of " + chat_template_names() + " or a template file");
  std::string out;
  if (t.name == "chatml") {
    if (!t.default_system.empty() && messages[0]["role"] != "system")
      out += "<|im_start|>system\n" + t.default_system + "<|im_end|>\n";
    for (const auto& m : messages)
      out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + content_text(m["content"], what) + "<|im_end|>\n";
    return out + "<|im_start|>assistant\n";
  }
  auto header = [](const std::string& role) { return "<|start_header_id|>" + role + "<|end_header_id|>\n\n"; };
  if (t.name == "llama3") {
    for (const auto& m : messages)
      out += header(m["role"].get<std::string>()) + trim(content_text(m["content"], what)) + "<|eot_id|>";
    return out + header("assistant");
  }
  if (t.name == "llama3.1") {
    size_t first = 0;
    std::string system;
    if (messages[0]["role"] == "system") {
      system = trim(content_text(messages[0]["content"], what));
      first = 1;
    }
    out += header("system") + "Cutting Knowledge Date: December 2023\nToday Date: " + t.date + "\n\n" + system +
           "<|eot_id|>";
    for (size_t i = first; i < messages.size(); ++i)
      out += header(messages[i]["role"].get<std::string>()) + trim(content_text(messages[i]["content"], what)) +
             "<|eot_id|>";
    return out + header("assistant");
  }
  if (t.name == "mistral") {
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string role = messages[i]["role"].get<std::string>();
      const bool user_turn = i % 2 == 0;
      if (role != "user" && role != "assistant")
        throw UsageError(what + ": the mistral chat template supports only user and assistant messages, not '" +
                         role + "'; put the instructions into the first user message");
      if ((role == "user") != user_turn)
        throw UsageError(what + ": the mistral chat template needs messages alternating user/assistant/user/..., "
                         "starting with user; message " + std::to_string(i) + " is " + role);
      const std::string text = content_text(messages[i]["content"], what);
      out += user_turn ? "[INST] " + text + " [/INST]" : text + t.eos_token;
    }
    return out;
  }
  if (t.name == "llama2") return render_llama2(messages, t, what);
  if (t.name == "mistral-v1" || t.name == "mistral-v3" || t.name == "mistral-v3-tekken")
    return render_mistral_system_merged(messages, t, what);
  if (t.name == "mistral-v7") {
    for (const auto& m : messages) {
      const std::string role = m["role"].get<std::string>(), text = content_text(m["content"], what);
      if (role == "user") out += "[INST] " + text + "[/INST]";
      else if (role == "system") out += "[SYSTEM_PROMPT] " + text + "[/SYSTEM_PROMPT]";
      else if (role == "assistant") out += " " + text + t.eos_token;
      else throw UsageError(what + ": the mistral-v7 chat template supports only user, system and assistant messages, not '" +
                            role + "'");
    }
    return out;
  }
  throw UsageError(what + ": chat template '" + t.name + "' is not one of " + chat_template_names());
}

std::optional<ContentMarker> find_control_text(const nlohmann::json& messages,
                                               const std::vector<std::string>& markers) {
  if (!messages.is_array()) return std::nullopt;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("content")) continue;
    const std::string text = content_text(m["content"], "messages");
    size_t best = std::string::npos;
    std::string found;
    for (const auto& mk : markers) {  // longest first: of two at one offset, the longer one wins
      if (mk.empty()) continue;
      size_t at = text.find(mk);
      if (at < best) best = at, found = mk;
    }
    if (best != std::string::npos)
      return ContentMarker{i, m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "",
                           found};
  }
  return std::nullopt;
}

std::string render_chat(const nlohmann::json& messages, const std::string& what) {
  check_messages(messages, what);
  if (messages.size() == 1 && messages[0]["role"] == "user") return content_text(messages[0]["content"], what);
  std::string out;
  for (const auto& m : messages) out += m["role"].get<std::string>() + ": " + content_text(m["content"], what) + "\n";
  out += "assistant:";
  return out;
}

}  // namespace repro
