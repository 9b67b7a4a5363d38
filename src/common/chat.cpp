#include "repro/common/chat.hpp"

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

}  // namespace

std::string chat_template_names() { return "plain, chatml, llama3, llama3.1, mistral"; }

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
    if (has(t, "<<SYS>>")) {
      c.name = "unknown";
      c.problem = "it is a Llama 2 [INST] <<SYS>> template, which is not supported";
    } else if (has(t, "[SYSTEM_PROMPT]") || has(t, "[AVAILABLE_TOOLS]")) {
      c.name = "unknown";
      c.problem = "it is a Mistral v3/v7 template ([AVAILABLE_TOOLS] / [SYSTEM_PROMPT]), which is not supported";
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
  if (value == "plain" || value == "chatml" || value == "llama3" || value == "llama3.1" || value == "mistral") {
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
  throw UsageError(what + ": chat template '" + t.name + "' is not one of " + chat_template_names());
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
