// Chat messages to a prompt text for the local engine (and for `serve`'s /v1/chat/completions).
//
// A model's chat template (the GGUF's tokenizer.chat_template, or a file given to --chat-template)
// is a Jinja program, and it is interpreted (repro/chat/jinja.hpp) as transformers renders it:
// with `messages` (roles system, user, assistant, tool, developer; content, reasoning_content,
// tool_calls, ... passed as given), `tools` (null when none), `documents` (null),
// `add_generation_prompt` (true: the prompt ends where the assistant's reply begins),
// `bos_token` / `eos_token` (the texts of the vocabulary's BOS and EOS), and the request's
// chat_template_kwargs (enable_thinking, ...) as further variables. A template that uses something
// the interpreter does not have is an error naming it and the template's line (exit 2, or HTTP 400
// in serve); there is no fallback to another format.
//
// The BOS text a template writes first ({{ bos_token }}) is dropped from the rendered text when
// the tokenizer adds BOS itself (tokenizer.ggml.add_bos_token), as llama.cpp does, so the prompt's
// ids carry one BOS, as Hugging Face's apply_chat_template(tokenize=True) gives them. Special
// tokens in the rendered text (<|im_start|>, <|eot_id|>, </s>, ...) are matched verbatim by
// Tokenizer::encode_special.
//
// Without a template, and for --chat-template NAME, the built-in formats render (tools and
// template arguments are refused there: these formats have no place for them):
//   plain     the project's documented format for models without a template (tiny Llama-family
//             models): each message as "<role>: <content>\n", then "assistant:"; a single user
//             message renders as its bare content, so chat and completion requests of the same
//             text give the same tokens.
//   chatml    "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n".
//   llama3    "<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>" per message (content
//             trimmed), then the assistant header.
//   llama3.1  as llama3 with the system turn "Cutting Knowledge Date: December 2023\nToday Date:
//             26 Jul 2024\n\n" + the system message (a fixed date, so the prompt does not change
//             from day to day).
//   mistral   "[INST] USER [/INST]" and "ASSISTANT</s>", strictly alternating from a user message;
//             a system message is an error.
//   mistral-v1  " [INST] USER [/INST]" and " ASSISTANT</s>"; the system message goes before the first
//             user message's content, followed by "\n\n".
//   mistral-v3  "[INST] USER[/INST]" and " ASSISTANT</s>" (assistant content trimmed); the system
//             message goes before the content of the final message when that is a user message.
//   mistral-v3-tekken  as mistral-v3 without the spaces ("[INST]USER[/INST]ASSISTANT</s>").
//   mistral-v7  "[SYSTEM_PROMPT] SYSTEM[/SYSTEM_PROMPT]", "[INST] USER[/INST]", " ASSISTANT</s>".
//   llama2    "[INST] USER [/INST]" and " ASSISTANT </s>" (contents stripped), later user turns
//             preceded by "<s>"; the system message as "<<SYS>>\nSYSTEM\n<</SYS>>\n\n" before the
//             first user message's content.
// These are the renderings of the templates `model synth --chat-template NAME` writes (the
// interpreter gives the same bytes for them; tests/unit-chat.cpp checks it).
// --chat-template NAME|FILE: one of the names above, or a file holding a Jinja chat template.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "repro/chat/jinja.hpp"

namespace repro {

struct ChatTemplate {
  // "jinja" (a template interpreted), "plain" or a built-in format (chat_template_names()), or
  // "unknown": a template that does not parse (`problem` says why; messages are then refused,
  // completion prompts still run).
  std::string name = "plain";
  // Where it came from, for `model info` and errors: "no tokenizer.chat_template in the model
  // file", "GGUF tokenizer.chat_template", "--chat-template chatml", "--chat-template FILE".
  std::string origin = "no tokenizer.chat_template in the model file";
  std::shared_ptr<const jinja::Template> program;  // jinja: the parsed template
  std::string sha256;                              // jinja: SHA-256 of the template's text
  std::string eos_token = "</s>";    // the texts of the vocabulary's EOS and BOS tokens (template
  std::string bos_token = "<s>";     // variables; mistral and llama2 formats write them)
  bool tokenizer_adds_bos = false;   // a leading bos_token in the rendered text is dropped
  std::string problem;               // unknown: why the template does not parse
};

// What a request or a prompts-file line gives the template beside its messages. Objects keep the
// key order of the document they came from (ordered_json): Jinja2 iterates a dict and `tojson`
// prints it in that order, so tools render as Hugging Face renders them.
struct ChatExtras {
  nlohmann::ordered_json tools;   // `tools` (an array; null: none)
  nlohmann::ordered_json kwargs;  // `chat_template_kwargs` (an object of further variables; null: none)
};

// The names --chat-template accepts: "plain, chatml, llama3, llama3.1, llama2, mistral, ...".
std::string chat_template_names();

// Parses a Jinja chat template (never throws; name "unknown" with `problem` set when it does not
// parse).
ChatTemplate chat_template_from_jinja(const std::string& jinja, const std::string& origin);

// --chat-template's value: a name, else a file with a Jinja template. Throws UsageError naming the
// flag when it is neither, or when the file's template does not parse.
ChatTemplate chat_template_from_option(const std::string& value);

// messages: [{"role": "...", "content": "..."}, ...] rendered with the template (the generation
// prompt for the assistant's reply included). Throws UsageError(what + ": ...") when the messages
// or extras are malformed, when the template raises or uses what the interpreter does not have,
// when a built-in format cannot express them, or when the template is unknown. Objects in
// `messages` (tool-call arguments) keep their key order, as in ChatExtras.
std::string render_chat(const nlohmann::ordered_json& messages, const ChatTemplate& tmpl, const std::string& what,
                        const ChatExtras& extras = {});

// Checks `tools` and `chat_template_kwargs` as a request or prompts-file line gives them (an
// array of objects; an object whose keys are not messages, tools, documents or
// add_generation_prompt). Throws UsageError(what + ": ...").
void check_chat_extras(const ChatExtras& extras, const std::string& what);

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
