#include "repro/common/chat.hpp"

#include "repro/common/error.hpp"

namespace repro {

static std::string content_text(const nlohmann::json& c, const std::string& what) {
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

std::string render_chat(const nlohmann::json& messages, const std::string& what) {
  if (!messages.is_array() || messages.empty())
    throw UsageError(what + ": \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
  for (const auto& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
      throw UsageError(what + ": each message needs a \"role\" string and a \"content\"");
  if (messages.size() == 1 && messages[0]["role"] == "user") return content_text(messages[0]["content"], what);
  std::string out;
  for (const auto& m : messages) out += m["role"].get<std::string>() + ": " + content_text(m["content"], what) + "\n";
  out += "assistant:";
  return out;
}

}  // namespace repro
