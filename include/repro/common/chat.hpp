// Chat messages to a prompt text for the local engine (and for `serve`'s /v1/chat/completions).
//
// A model's chat template is recognised, not interpreted: the GGUF's tokenizer.chat_template (a
// Jinja program) is matched by its distinctive markers to one of the formats below, which this
// file renders exactly as that template renders them with add_generation_prompt = true. A template
// with none of the markers is "unknown": rendering messages with it is an error (exit 2) that asks
// for --chat-template, never a silent fallback to another format.
//   plain     the project's documented format for models without a template (tiny Llama-family
//             models): each message as "<role>: <content>\n", then "assistant:"; a single user
//             message renders as its bare content, so chat and completion requests of the same
//             text give the same tokens.
//   chatml    Qwen2 / Qwen2.5 / Qwen3 (markers <|im_start|>, <|im_end|>): "<|im_start|>ROLE\n
//             CONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n". When the template
//             writes a fixed system message for conversations without one (Qwen2.5's "You are
//             Qwen, ..."), that text is taken from the template and rendered the same way.
//   llama3    Llama 3.0 (markers <|start_header_id|>, <|end_header_id|>): "<|start_header_id|>
//             ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>" per message (content trimmed), then the
//             assistant header.
//   llama3.1  Llama 3.1 / 3.2 / 3.3 (llama3 markers and "Cutting Knowledge Date"): a system turn is
//             always written: "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" then
//             the system message (if any). DATE is the template's fixed default date_string; a
//             template that would read the clock (strftime_now) still gets that fixed date, so the
//             prompt does not change from day to day.
//   mistral   Mistral Instruct v0.1 / v0.2 ([INST] without <<SYS>>, [SYSTEM_PROMPT] or
//             [AVAILABLE_TOOLS]): "[INST] USER [/INST]" and "ASSISTANT</s>", strictly alternating
//             from a user message; a system message is an error, as in that template.
//   mistral-v1  Mixtral / Mistral 7B v0.2 with a system prompt (literal ' [INST] '): " [INST] USER
//             [/INST]" and " ASSISTANT</s>"; the system message is written before the first user
//             message's content, followed by "\n\n".
//   mistral-v3  Mistral 7B v0.3, Large 2407 ([AVAILABLE_TOOLS], '[INST] '): "[INST] USER[/INST]" and
//             " ASSISTANT</s>" (assistant content trimmed); the system message goes before the
//             content of the final message when that is a user message (otherwise it is dropped,
//             as the template drops it).
//   mistral-v3-tekken  Mistral Nemo ([AVAILABLE_TOOLS], '[INST]'): as mistral-v3 without the spaces
//             ("[INST]USER[/INST]ASSISTANT</s>", assistant content not trimmed).
//   mistral-v7  Mistral Large 2411 ('[SYSTEM_PROMPT] '): "[SYSTEM_PROMPT] SYSTEM[/SYSTEM_PROMPT]",
//             "[INST] USER[/INST]", " ASSISTANT</s>", in message order, no alternation rule.
//   llama2    Llama 2 chat (<<SYS>>): "[INST] USER [/INST]" and " ASSISTANT </s>" (contents
//             stripped), later user turns preceded by "<s>"; the system message is written as
//             "<<SYS>>\nSYSTEM\n<</SYS>>\n\n" before the first user message's content.
// A template with tools ([AVAILABLE_TOOLS]) is rendered for conversations without tools; a
// message with another role (tool, tool_results) is an error.
// The BOS token a template writes first ({{ bos_token }}) is left out of the text: the tokenizer
// adds BOS when the model file says so (tokenizer.ggml.add_bos_token), as llama.cpp does. Special
// tokens in the rendered text (<|im_start|>, <|eot_id|>, </s>, ...) are matched verbatim by
// Tokenizer::encode_special.
// --chat-template NAME|FILE: one of the names above, or a file holding a Jinja chat template,
// recognised by the same markers.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace repro {

struct ChatTemplate {
  std::string name = "plain";  // one of chat_template_names(), or unknown
  // Where it came from, for `model info` and errors: "no tokenizer.chat_template in the model
  // file", "GGUF tokenizer.chat_template", "--chat-template chatml", "--chat-template FILE".
  std::string origin = "no tokenizer.chat_template in the model file";
  std::string default_system;  // chatml: system message written when the messages have none
  std::string date = "26 Jul 2024";  // llama3.1: the template's date_string
  std::string eos_token = "</s>";    // mistral, llama2: text of the EOS token that ends assistant turns
  std::string bos_token = "<s>";     // llama2: text of the BOS token written before later user turns
  std::string problem;               // unknown: why no format matched
};

// The names --chat-template accepts: "plain, chatml, llama3, llama3.1, llama2, mistral, ...".
std::string chat_template_names();

// Recognises a Jinja chat template by its markers (never throws; name "unknown" with `problem`
// set when no format matches).
ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& origin);

// --chat-template's value: a name, else a file with a Jinja template. Throws UsageError naming the
// flag when it is neither, or when the file's template is not recognised.
ChatTemplate chat_template_from_option(const std::string& value);

// messages: [{"role": "...", "content": "..."}] rendered with the template (the generation prompt
// for the assistant's reply included). Throws UsageError(what + ": ...") when the messages are
// malformed, when the template cannot express them, or when the template is unknown.
std::string render_chat(const nlohmann::json& messages, const ChatTemplate& tmpl, const std::string& what);

// Message content is rendered as written: text in it that spells a control token of the template
// (<|im_start|>, <|eot_id|>, </s>, ...) becomes that token, as in llama.cpp, so a user message can
// open a system turn of its own. The first such marker in the messages' contents (the earliest in
// the first message that has one): its message index, role and marker text; nullopt when none.
struct ContentMarker {
  size_t message = 0;
  std::string role, marker;
};
std::optional<ContentMarker> find_control_text(const nlohmann::json& messages,
                                               const std::vector<std::string>& markers);

// The plain format (remote endpoints apply their own templates; plans keep this as the text).
std::string render_chat(const nlohmann::json& messages, const std::string& what = "messages");

}  // namespace repro
