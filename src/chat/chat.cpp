#include "repro/chat/chat.hpp"

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

// Jinja's trim: leading and trailing whitespace removed, Unicode whitespace included (Python's
// str.strip()).
std::string trim(const std::string& s) { return jinja::strip_whitespace(s); }

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

ChatTemplate chat_template_from_jinja(const std::string& jinja, const std::string& origin) {
  ChatTemplate c;
  c.origin = origin;
  c.sha256 = sha256_hex(jinja);
  try {
    c.program = std::make_shared<const jinja::Template>(jinja, origin);
    c.name = "jinja";
  } catch (const UsageError& e) {
    c.name = "unknown";
    c.problem = e.what();
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
  c = chat_template_from_jinja(read_file(value, "chat template file"), "--chat-template " + value);
  if (c.name == "unknown")
    throw UsageError("--chat-template '" + value + "': the template in the file cannot be interpreted: " + c.problem);
  return c;
}

void check_chat_extras(const ChatExtras& x, const std::string& what) {
  if (!x.tools.is_null()) {
    if (!x.tools.is_array()) throw UsageError(what + ": \"tools\" must be an array of tool objects");
    for (const auto& t : x.tools)
      if (!t.is_object()) throw UsageError(what + ": each entry of \"tools\" must be an object");
  }
  if (!x.kwargs.is_null()) {
    if (!x.kwargs.is_object())
      throw UsageError(what + ": \"chat_template_kwargs\" must be an object of template variables");
    for (const char* k : {"messages", "tools", "documents", "add_generation_prompt"})
      if (x.kwargs.contains(k))
        throw UsageError(what + ": \"chat_template_kwargs\" cannot set '" + k + "'; it is given by the request");
  }
}

namespace {

std::string render_jinja(const nlohmann::ordered_json& messages, const ChatTemplate& t, const std::string& what,
                         const ChatExtras& x) {
  if (!messages.is_array() || messages.empty())
    throw UsageError(what + ": \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
  for (const auto& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw UsageError(what + ": each message needs a \"role\" string");
  check_chat_extras(x, what);
  // The variables transformers' apply_chat_template gives the template (objects in the order their
  // keys were written: a tool's `tojson` prints them so).
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (x.kwargs.is_object()) vars = x.kwargs;
  vars["messages"] = messages;
  vars["tools"] = x.tools.is_array() && !x.tools.empty() ? x.tools : nlohmann::ordered_json();
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = true;
  if (!vars.contains("bos_token") && !t.bos_token.empty()) vars["bos_token"] = t.bos_token;
  if (!vars.contains("eos_token") && !t.eos_token.empty()) vars["eos_token"] = t.eos_token;
  std::string out;
  try {
    out = t.program->render(vars);
  } catch (const UsageError& e) {
    throw UsageError(what + ": " + e.what());
  }
  if (t.tokenizer_adds_bos && !t.bos_token.empty() && out.compare(0, t.bos_token.size(), t.bos_token) == 0)
    out.erase(0, t.bos_token.size());
  return out;
}

}  // namespace

std::string render_chat(const nlohmann::ordered_json& messages, const ChatTemplate& t, const std::string& what,
                        const ChatExtras& extras) {
  if (t.name == "unknown")
    throw UsageError(what + ": the chat template (" + t.origin + ") cannot be interpreted: " + t.problem +
                     "; pass --chat-template with one of " + chat_template_names() + " or a template file");
  if (t.name == "jinja") return render_jinja(messages, t, what, extras);
  check_messages(messages, what);
  if ((extras.tools.is_array() && !extras.tools.empty()) || (extras.kwargs.is_object() && !extras.kwargs.empty()))
    throw UsageError(what + ": the " + t.name + " chat format (" + t.origin +
                     ") has no place for tools or chat_template_kwargs; use a model whose file has a chat template, "
                     "or pass --chat-template FILE with a Jinja template");
  if (t.name == "plain") return render_chat(messages, what);
  std::string out;
  if (t.name == "chatml") {
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
    out += header("system") + "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system +
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
