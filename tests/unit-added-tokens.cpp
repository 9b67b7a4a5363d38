// Added tokens: user-defined tokens (<think>, <tool_call>) are matched in all text, longest first,
// before the BPE split; control tokens (<|im_start|>) only with special parsing (encode_special,
// --parse-special), as llama.cpp and Hugging Face encode them. On a byte-level BPE vocabulary built
// here, and through `generate` and serve's request parsing on a GGUF file holding it.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/common/util.hpp"
#include "repro/model/model.hpp"
#include "repro/serve/api.hpp"
#include "repro/engine/engine.hpp"
#include "repro/serve/server.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
using Ids = std::vector<int>;

namespace {

constexpr int kVocab = 340;

// <|im_end|> first (the token the forced model emits: an end of turn), byte b at id b + 1, the
// merges' results, then the added tokens and fillers up to kVocab.
const std::vector<std::string> kMerges = {"H e", "l l", "ll o", "He llo"};
enum : int {
  IMEND = 0,
  Hello = 260,   // 257 + 3: the fourth merge
  THINK = 261,   // <think>       user-defined
  ENDTHINK,      // </think>      user-defined
  TOOL,          // <tool>        user-defined
  TOOLCALL,      // <tool_call>   user-defined
  CALL,          // call>         user-defined: inside <tool_call>, which is longer and wins
  IMSTART,       // <|im_start|>  control
  BOT,           // <|begin_of_text|> control (BOS, not added by the qwen2 pre-tokenizer)
  EOTEXT,        // <|end_of_text|>   control (EOS)
  THINKTEXT,     // <thinking>    normal: never matched by its text
};

int byte(char c) { return static_cast<unsigned char>(c) + 1; }
Ids bytes(const std::string& s) {
  Ids out;
  for (char c : s) out.push_back(byte(c));
  return out;
}
Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TokenizerData added_data(const std::string& pre = "qwen2") {
  TokenizerData d = test::bpe_vocab(pre, {"<|im_end|>", TokenType::Control}, kMerges,
                                    {{"<think>", TokenType::UserDefined},
                                     {"</think>", TokenType::UserDefined},
                                     {"<tool>", TokenType::UserDefined},
                                     {"<tool_call>", TokenType::UserDefined},
                                     {"call>", TokenType::UserDefined},
                                     {"<|im_start|>", TokenType::Control},
                                     {"<|begin_of_text|>", TokenType::Control},
                                     {"<|end_of_text|>", TokenType::Control},
                                     {"<thinking>", TokenType::Normal}},
                                    kVocab, BOT, EOTEXT);
  d.add_bos = false;
  return d;
}

}  // namespace

TEST_CASE("added tokens: user-defined tokens are matched in plain text, the text around them as alone") {
  auto tok = make_tokenizer(added_data());
  CHECK(tok->encode("<think>", false) == Ids{THINK});
  CHECK(tok->encode("<think>Hello</think>", false) == Ids{THINK, Hello, ENDTHINK});
  CHECK(tok->encode("Hello<think> Hello</think>Hello", false) ==
        Ids{Hello, THINK, byte(' '), Hello, ENDTHINK, Hello});
  CHECK(tok->encode("<think>", true) == Ids{THINK});  // qwen2: no BOS
  // encode_special matches them the same way.
  CHECK(tok->encode_special("<think>Hello</think>", false) == Ids{THINK, Hello, ENDTHINK});
  // Text that merely resembles one, and a normal token's text, are encoded as text.
  CHECK(tok->encode("<think", false) == bytes("<think"));
  CHECK(tok->encode("<thinking>", false) == bytes("<thinking>"));
  CHECK(tok->decode(tok->encode("a<think>b</think>c", false)) == "a<think>b</think>c");
  // The llama3 pre-tokenizer (a pre-token that is a whole token is taken as it stands) alike.
  auto llama3 = make_tokenizer(added_data("llama-bpe"));
  CHECK(llama3->encode("Hello<think>Hello", false) == Ids{Hello, THINK, Hello});
}

TEST_CASE("added tokens: the longest user-defined token wins") {
  auto tok = make_tokenizer(added_data());
  CHECK(tok->encode("<tool_call>", false) == Ids{TOOLCALL});  // not "<tool_" + call>
  CHECK(tok->encode("<tool>", false) == Ids{TOOL});
  CHECK(tok->encode("call>", false) == Ids{CALL});
  CHECK(tok->encode("<tool><tool_call>call><tool>", false) == Ids{TOOL, TOOLCALL, CALL, TOOL});
  CHECK(tok->encode("x<tool_call>y", false) == Ids{byte('x'), TOOLCALL, byte('y')});
}

TEST_CASE("added tokens: control-token text is matched only with special parsing") {
  auto tok = make_tokenizer(added_data());
  const std::string text = "<|im_start|>Hello<think>";
  const Ids plain = tok->encode(text, false);
  CHECK(plain == cat({bytes("<|im_start|>"), Ids{Hello, THINK}}));
  CHECK(tok->encode_special(text, false) == Ids{IMSTART, Hello, THINK});
  CHECK(tok->encode("<|im_end|>", false) == bytes("<|im_end|>"));
  CHECK(tok->encode_special("<|im_end|>", false) == Ids{IMEND});
  CHECK(tok->decode(plain) == text);
}

TEST_CASE("added tokens: generate matches user-defined tokens, and control tokens with --parse-special") {
  const auto path = test::scratch_dir("added-tokens") / "m.gguf";
  write_file_atomic(path.string(), test::bpe_model(added_data(), true));
  auto prompt_ids = [&](const std::string& extra) {
    const auto r = test::run_cli("generate --model '" + path.string() +
                                 "' --prompt '<|im_start|>Hello<think>' --max-tokens 1 --json " + extra);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.output);
    CHECK(j["tokens"] == nlohmann::json(Ids{IMEND}));  // the forced model ends its turn at once
    return j["prompt_ids"].get<Ids>();
  };
  CHECK(prompt_ids("") == cat({bytes("<|im_start|>"), Ids{Hello, THINK}}));
  CHECK(prompt_ids("--parse-special") == Ids{IMSTART, Hello, THINK});
  const auto help = test::run_cli("generate --help");
  CHECK(help.output.find("--parse-special") != std::string::npos);
}

TEST_CASE("added tokens: serve's /v1/completions parses control-token text under --parse-special") {
  const auto path = test::scratch_dir("added-tokens-serve") / "m.gguf";
  write_file_atomic(path.string(), test::bpe_model(added_data(), false));
  auto m = load_model(path.string());
  serve::ApiContext cx;
  cx.model = m.get();
  cx.name = "m";
  const nlohmann::json body = {{"model", "m"}, {"prompt", "<|im_start|>Hello<think>"}, {"max_tokens", 1}};
  CHECK(serve::parse_request(cx, body, false).gen.prompt == cat({bytes("<|im_start|>"), Ids{Hello, THINK}}));
  cx.parse_special = true;
  CHECK(serve::parse_request(cx, body, false).gen.prompt == Ids{IMSTART, Hello, THINK});
}

TEST_CASE("added tokens: run --parse-special encodes completion prompts so, and the report's plan says which rule") {
  const auto path = test::scratch_dir("added-tokens-run") / "m.gguf";
  write_file_atomic(path.string(), test::bpe_model(added_data(), true));
  auto run = [&](const std::string& name, const std::string& extra) {
    const auto dir = test::scratch_dir("added-tokens-run-" + name) / "out";
    const auto r = test::run_cli("run --model '" + path.string() + "' --prompt '<|im_start|>Hello<think>' " +
                                 "--modes batch-invariant --precisions f32 --batch-sizes 1 --max-tokens 2 --repeats 1 --quiet --out '" +
                                 dir.string() + "' " + extra);
    INFO(r.output);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(test::slurp(dir / "report.json"));
  };
  auto plain = run("plain", "");
  CHECK(plain["plan"]["parse_special"] == false);
  REQUIRE(!plain["completions"].empty());
  for (const auto& c : plain["completions"]) CHECK(c["prompt_tokens"] == 14);  // 12 bytes, Hello, <think>
  auto special = run("special", "--parse-special");
  CHECK(special["plan"]["parse_special"] == true);
  REQUIRE(!special["completions"].empty());
  for (const auto& c : special["completions"]) CHECK(c["prompt_tokens"] == 3);  // <|im_start|>, Hello, <think>
  // The report records the ids the engine was given under each rule.
  REQUIRE(special["prompt_token_ids"].size() == 1);
  CHECK(special["prompt_token_ids"].begin().value() == nlohmann::json(Ids{IMSTART, Hello, THINK}));
  CHECK(plain["prompt_token_ids"].begin().value().size() == 14);
}

TEST_CASE("added tokens: an endpoint's special-token rule (preset or --endpoint-parse-special) is recorded and compared") {
  const auto path = test::scratch_dir("added-tokens-endpoint") / "m.gguf";
  write_file_atomic(path.string(), test::bpe_model(added_data(), true));
  auto model = load_model(path.string());
  ServerOptions so;
  so.port = 0;
  so.parse_special = true;  // the server matches control-token text, as vLLM's /v1/completions does
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  const std::string remote = "run --quiet --endpoint srv=" + server.url() + " --api-model " + server.model_name() +
                             " --api completions --provider vllm --concurrency 1 --repeats 1 --max-tokens 2 "
                             "--prompt '<|im_start|>Hello<think>' ";
  auto report = [&](const std::string& name, const std::string& extra) {
    const auto out = test::scratch_dir("added-tokens-endpoint-" + name) / "out";
    const auto r = test::run_cli(remote + "--out '" + out.string() + "' " + extra);
    INFO(r.output);
    REQUIRE(r.code == 4);  // concurrency 1 only: UNVERIFIED (nothing was co-batched), the report is written
    return out;
  };
  // The vllm preset's rule: special-token text is parsed; the server indeed gave 3 prompt tokens.
  const auto preset = report("preset", "");
  auto j = nlohmann::json::parse(test::slurp(preset / "report.json"));
  CHECK(j["environment"]["endpoints"][0]["parse_special"] == "yes");
  CHECK(j["environment"]["endpoints"][0]["parse_special_source"] == "preset vllm");
  REQUIRE(!j["completions"].empty());
  for (const auto& c : j["completions"]) CHECK(c["prompt_tokens"] == 3);
  // Declared per endpoint.
  j = nlohmann::json::parse(test::slurp(report("declared", "--endpoint-parse-special srv=no") / "report.json"));
  CHECK(j["environment"]["endpoints"][0]["parse_special"] == "no");
  CHECK(j["environment"]["endpoints"][0]["parse_special_source"] == "--endpoint-parse-special");
  auto r = test::run_cli(remote + "--endpoint-parse-special other=yes --out '" +
                         (test::scratch_dir("added-tokens-endpoint-bad") / "o").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("--endpoint-parse-special 'other=yes': no --endpoint is labelled 'other'") != std::string::npos);
  r = test::run_cli(remote + "--endpoint-parse-special maybe");
  CHECK(r.code == 2);
  CHECK(r.output.find("give yes or no") != std::string::npos);
  // --parse-special is the local engine's rule: refused with --endpoint, and the other way round.
  r = test::run_cli(remote + "--parse-special");
  CHECK(r.code == 2);
  CHECK(r.output.find("declare its rule with --endpoint-parse-special") != std::string::npos);
  r = test::run_cli("run --model '" + path.string() + "' --prompt x --endpoint-parse-special yes");
  CHECK(r.code == 2);
  CHECK(r.output.find("--endpoint-parse-special declares an endpoint's rule and needs --endpoint") != std::string::npos);
  // diff of a local run against the endpoint's names both rules.
  const auto local = test::scratch_dir("added-tokens-endpoint-local") / "out";
  r = test::run_cli("run --quiet --model '" + path.string() + "' --prompt '<|im_start|>Hello<think>' --parse-special "
                    "--modes batch-invariant --precisions f32 --batch-sizes 1 --max-tokens 2 --repeats 1 --out '" +
                    local.string() + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = test::run_cli("diff '" + (local / "report.json").string() + "' '" + (preset / "report.json").string() + "'");
  INFO(r.output);
  CHECK(r.output.find("special-token text in completion prompts parsed") != std::string::npos);
  CHECK(r.output.find("\"srv\":\"yes\"") != std::string::npos);
  server.stop();
}
