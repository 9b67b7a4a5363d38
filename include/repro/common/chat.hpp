// Chat messages to a prompt text for the local engine (and for `serve`'s /v1/chat/completions).
// Tiny Llama-family models carry no usable template, so the project uses one plain, documented
// template: each message as "<role>: <content>\n", then "assistant:" to open the reply.
// A single user message with no system message renders as its bare content, so a chat request and
// a completion request for the same text give the same tokens.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace repro {

// messages: [{"role": "...", "content": "..."}]. Throws UsageError(what + ": ...") when malformed;
// content may be a string or an array of {"type":"text","text":...} parts.
std::string render_chat(const nlohmann::json& messages, const std::string& what = "messages");

}  // namespace repro
