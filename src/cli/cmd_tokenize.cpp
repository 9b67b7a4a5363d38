// `repro-audit tokenize`: the token ids and pieces the local engine would see for a completion
// prompt or a chat (a `messages` file, rendered with the model's chat template; the rendered text is
// shown too), so a user can check them against another stack (Hugging Face, vLLM, llama.cpp).
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "repro/chat/chat.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/model.hpp"

namespace repro::cli {

namespace {

struct TokenizeOptions {
  EngineFlags engine;
  std::string text, prompt_file, messages_file;
  bool json = false;
};

int run_tokenize(const TokenizeOptions& o) {
  const int given = !o.text.empty() + !o.prompt_file.empty() + !o.messages_file.empty();
  if (given != 1)
    throw UsageError("tokenize needs exactly one of: --prompt TEXT, --prompt-file FILE, --messages FILE");
  // A messages file: an array of messages, or an object with "messages" (and "tools",
  // "chat_template_kwargs") as a chat completions request carries them; keys keep the file's order.
  nlohmann::ordered_json messages;
  ChatExtras extras;
  if (!o.messages_file.empty()) {
    check_regular_file(o.messages_file, "messages file", uint64_t{64} << 20);
    const nlohmann::ordered_json j = parse_ordered_json_or_throw(read_file(o.messages_file, "messages file"),
                                                 "--messages '" + o.messages_file + "'");
    if (j.is_array()) {
      messages = j;
    } else if (j.is_object() && j.contains("messages")) {
      messages = j["messages"];
      if (j.contains("tools")) extras.tools = j["tools"];
      if (j.contains("chat_template_kwargs")) extras.kwargs = j["chat_template_kwargs"];
    } else {
      throw UsageError("--messages '" + o.messages_file +
                       "': expected an array of messages or an object with \"messages\" (and \"tools\", "
                       "\"chat_template_kwargs\")");
    }
  }
  if (o.engine.parse_special && !o.messages_file.empty())
    throw UsageError("--parse-special applies to completion prompts; a chat rendered by its template always has its "
                     "special tokens matched");
  const std::string path = o.engine.model().empty() ? default_model_path() : o.engine.model();
  auto model = o.engine.load(path);
  const Tokenizer& tok = *model->tokenizer;
  const ChatTemplate& ct = model->chat_template;

  std::string text, rule;
  std::vector<int> ids;
  const bool chat = !o.messages_file.empty();
  if (chat) {
    text = render_chat(messages, ct, "--messages '" + o.messages_file + "'", extras);
    const bool templated = ct.name != "plain";
    ids = templated ? tok.encode_special(text, true) : tok.encode(text, true);
    rule = templated ? "chat, rendered with the chat template; special-token text matched" : "chat, plain format";
  } else {
    text = o.prompt_file.empty() ? o.text : read_file(o.prompt_file, "prompt file");
    ids = o.engine.parse_special ? tok.encode_special(text, true) : tok.encode(text, true);
    rule = o.engine.parse_special ? "completion prompt, --parse-special: special-token text matched"
                                  : "completion prompt: special-token text is plain text (user-defined tokens matched)";
  }
  const std::string normalizer = tok.normalizer().empty() ? "none" : tok.normalizer();
  if (o.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int id : ids) tokens.push_back({{"id", id}, {"text", tok.token_text(id)}, {"piece", tok.piece(id)}});
    nlohmann::json j = {{"model", path},
                        {"tokenizer", tok.kind()},
                        {"normalizer", normalizer},
                        {"rule", rule},
                        {"add_bos", tok.adds_bos()},
                        {"ids", ids},
                        {"tokens", tokens},
                        {"count", ids.size()}};
    if (chat) {
      j["rendered"] = text;
      j["chat_template"] = {{"name", ct.name}, {"origin", ct.origin}};
    }
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return kExitOk;
  }
  fmt::print("model:      {}\n", path);
  fmt::print("tokenizer:  {}, normalizer {}, add_bos {}\n", tok.kind(), normalizer, tok.adds_bos() ? "true" : "false");
  fmt::print("rule:       {}\n", rule);
  if (chat) {
    fmt::print("template:   {} ({})\n", ct.name, ct.origin);
    fmt::print("rendered:\n{}\n", printable_lines(text));
  }
  fmt::print("ids ({}):  [", ids.size());
  for (size_t i = 0; i < ids.size(); ++i) fmt::print("{}{}", i ? ", " : "", ids[i]);
  fmt::print("]\n");
  for (size_t i = 0; i < ids.size(); ++i)
    fmt::print("{:6}  {:8}  {}\n", i, ids[i], printable(tok.token_text(ids[i])));
  return kExitOk;
}

}  // namespace

void setup_tokenize(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* sub = parent.add_subcommand(
      "tokenize", "Token ids and pieces of a completion prompt or a chat (messages rendered with the chat template)");
  EngineFlagSpec spec;
  spec.mode = false;
  spec.chat_template = true;
  spec.parse_special = true;
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--prompt", o->text, "Completion prompt text");
  sub->add_option("--prompt-file", o->prompt_file, "File whose bytes are the completion prompt");
  sub->add_option("--messages", o->messages_file,
                  "JSON file: an array of messages, or {\"messages\", \"tools\", \"chat_template_kwargs\"} as a chat "
                  "request carries them; rendered with the model's chat template (or --chat-template)");
  sub->add_flag("--json", o->json, "Print JSON: ids, tokens (id, text, piece), the rule used and the rendered text");
  sub->callback([o, &runner] { runner = [o] { return run_tokenize(*o); }; });
}

}  // namespace repro::cli
