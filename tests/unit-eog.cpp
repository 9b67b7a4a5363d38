// The end-of-generation set (Tokenizer::eog) and the defaults of absent tokenizer keys
// (tokenizer_defaults), on GGUF files written here: a byte-level BPE vocabulary with Llama 3 style
// special tokens and no add_bos_token / eot_token_id keys, on the weights of a small synthesized
// model whose output norm is zero, so every logit is 0 and greedy decoding emits token 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/provenance.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/model.hpp"
#include "repro/model/synth.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
using namespace repro::gguf;
using Ids = std::vector<int>;
using Strs = std::vector<std::string>;

namespace {

constexpr int kVocab = 340;

// The vocabulary: <|eot_id|> first (the token the forced model emits), byte b at id b + 1, the
// merges' results, then the special tokens and fillers up to kVocab.
const Strs kMerges = {"H e", "l l", "ll o", "He llo", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "l d", "\xC4\xA0wor ld"};
enum : int {
  EOT = 0,
  Hello = 260,  // 257 + 3: the fourth merge
  Gworld = 265,
  BOT = 266,      // <|begin_of_text|>
  EOTEXT = 267,   // <|end_of_text|> (EOS)
  EOM = 268,      // <|eom_id|>
  IMEND = 269,    // <|im_end|>
  ENDTEXT = 270,  // <|endoftext|>, a normal token here: never taken by its text
  HEADER = 271,   // <|start_header_id|>: control, not an end of turn
  FILLER = 272,
};

TokenizerData bpe_data(const std::string& pre = "llama-bpe") {
  return test::bpe_vocab(pre, {"<|eot_id|>", TokenType::Control}, kMerges,
                         {{"<|begin_of_text|>", TokenType::Control},
                          {"<|end_of_text|>", TokenType::Control},
                          {"<|eom_id|>", TokenType::Control},
                          {"<|im_end|>", TokenType::Control},
                          {"<|endoftext|>", TokenType::Normal},
                          {"<|start_header_id|>", TokenType::Control}},
                         kVocab, BOT, EOTEXT);
}

using test::bpe_model;
using test::edited_synth;

// The synthesized (SentencePiece) model with a zero output norm: it emits token 0, <unk>, which is
// no end of generation.
std::string forced_spm_model() {
  return edited_synth(kVocab, [](const std::string&) { return true; }, {}, true);
}

std::string write(const std::string& name, const std::string& bytes) {
  auto path = test::scratch_dir("eog-" + name) / "m.gguf";
  write_file_atomic(path.string(), bytes);
  return path.string();
}

const std::string& forced_bpe_path() {
  static const std::string p = write("forced-bpe", bpe_model(bpe_data(), true));
  return p;
}

GenRequest request(const Model& m, int max_tokens) {
  GenRequest r;
  r.prompt = m.tokenizer->encode("Hello world", true);
  r.params.max_tokens = max_tokens;
  return r;
}

}  // namespace

TEST_CASE("eog: the set is EOS, eot/eom ids and the end-of-turn texts of control and user-defined tokens") {
  TokenizerData d = bpe_data();
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOTEXT, EOM, IMEND});  // not the normal <|endoftext|>
  d.eot_id = ENDTEXT;  // a named end-of-turn id counts whatever its type
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOTEXT, EOM, IMEND, ENDTEXT});
  d = bpe_data();
  d.types[ENDTEXT] = static_cast<int>(TokenType::UserDefined);
  d.types[IMEND] = static_cast<int>(TokenType::Normal);
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOTEXT, EOM, ENDTEXT});
  d.eos_id = -1;
  d.types[EOTEXT] = static_cast<int>(TokenType::Normal);
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOM, ENDTEXT});
  // gpt-oss (harmony): with <|return|> and <|call|>, <|end|> ends a message and is left out.
  d = bpe_data();
  d.tokens[FILLER] = "<|end|>";
  d.types[FILLER] = static_cast<int>(TokenType::Control);
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOTEXT, EOM, IMEND, FILLER});
  d.tokens[FILLER + 1] = "<|return|>";
  d.types[FILLER + 1] = static_cast<int>(TokenType::Control);
  d.tokens[FILLER + 2] = "<|call|>";
  d.types[FILLER + 2] = static_cast<int>(TokenType::Control);
  CHECK(end_of_generation_ids(d) == Ids{EOT, EOTEXT, EOM, IMEND, FILLER + 1, FILLER + 2});
  for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                        "<|return|>", "<|call|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"}) {
    CAPTURE(t);
    CHECK(std::count(end_of_turn_texts().begin(), end_of_turn_texts().end(), t) == 1);
  }
}

TEST_CASE("eog: the tokenizer's set, is_eog, add_eog and find_token") {
  auto tok = make_tokenizer(bpe_data());
  CHECK(tok->eog() == Ids{EOT, EOTEXT, EOM, IMEND});
  CHECK(tok->is_eog(EOM));
  CHECK_FALSE(tok->is_eog(HEADER));
  CHECK_FALSE(tok->is_eog(-1));
  const uint64_t before = tok->instance();
  tok->add_eog(HEADER);
  CHECK(tok->eog() == Ids{EOT, EOTEXT, EOM, IMEND, HEADER});
  CHECK(tok->instance() != before);  // a cached vocabulary trie of the old set is not reused
  CHECK_THROWS_AS(tok->add_eog(kVocab), UsageError);
  CHECK(tok->find_token("<|im_end|>") == IMEND);
  CHECK(tok->find_token("Hello") == Hello);
  CHECK(tok->find_token("\xC4\xA0world") == Gworld);  // the vocabulary's spelling
  CHECK(tok->find_token(" world") == Gworld);          // else the decoded text
  CHECK(tok->find_token("<|nope|>") == -1);
}

TEST_CASE("eog: defaults of absent keys per tokenizer model and pre-tokenizer") {
  TokenizerDefaults spm = tokenizer_defaults("llama", "default");
  CHECK(spm.add_bos);
  CHECK_FALSE(spm.add_eos);
  CHECK(spm.bos_id == 1);
  CHECK(spm.eos_id == 2);
  CHECK(spm.origin == "tokenizer model llama");
  for (const char* pre : {"llama-bpe", "llama3", "llama-v3", "falcon3", "tekken", "chameleon"}) {
    CAPTURE(pre);
    TokenizerDefaults d = tokenizer_defaults("gpt2", pre);
    CHECK(d.add_bos);
    CHECK_FALSE(d.add_eos);
    CHECK(d.bos_id == -1);
    CHECK(d.origin == std::string("pre-tokenizer ") + pre);
  }
  for (const char* pre : {"default", "gpt2", "gpt-2", "qwen2", "smollm", "starcoder", "deepseek-llm"}) {
    CAPTURE(pre);
    CHECK_FALSE(tokenizer_defaults("gpt2", pre).add_bos);
  }
}

TEST_CASE("eog: a Llama 3 style GGUF without add_bos_token adds BOS; the file's key wins when present") {
  auto m = load_model(forced_bpe_path());
  const Tokenizer& tok = *m->tokenizer;
  CHECK(tok.encode("Hello world", true) == Ids{BOT, Hello, Gworld});
  CHECK(tok.encode("Hello world", false) == Ids{Hello, Gworld});
  CHECK(tok.encode_special("Hello world<|eot_id|>", true) == Ids{BOT, Hello, Gworld, EOT});
  CHECK(tok.adds_bos());
  CHECK_FALSE(tok.adds_eos());
  CHECK(tok.defaulted() == Strs{"add_bos_token", "add_eos_token"});
  CHECK(tok.defaults_for() == "pre-tokenizer llama-bpe");
  CHECK(tok.eog() == Ids{EOT, EOTEXT, EOM, IMEND});

  auto keyed = load_model(write("keyed", bpe_model(bpe_data(), false, [](Writer& w) {
    w.add("tokenizer.ggml.add_bos_token", Value::boolean(false));
    w.add("tokenizer.ggml.add_eos_token", Value::boolean(true));
    w.add("tokenizer.ggml.eot_token_id", Value::u(ValueType::UINT32, ENDTEXT));
  })));
  CHECK(keyed->tokenizer->encode("Hello world", true) == Ids{Hello, Gworld, EOTEXT});
  CHECK(keyed->tokenizer->encode_special("Hello<|im_end|>", true) == Ids{Hello, IMEND, EOTEXT});
  CHECK(keyed->tokenizer->defaulted().empty());
  CHECK(keyed->tokenizer->eog() == Ids{EOT, EOTEXT, EOM, IMEND, ENDTEXT});

  auto qwen = load_model(write("qwen2", bpe_model(bpe_data("qwen2"), false)));
  CHECK(qwen->tokenizer->encode("Hello world", true) == Ids{Hello, Gworld});
  CHECK(qwen->tokenizer->defaults_for() == "pre-tokenizer qwen2");
}

TEST_CASE("eog: a SentencePiece GGUF without bos/eos ids takes 1 and 2") {
  auto m = load_model(write("spm-no-ids", edited_synth(kVocab,
                                               [](const std::string& k) {
                                                 return k != "tokenizer.ggml.bos_token_id" &&
                                                        k != "tokenizer.ggml.eos_token_id" &&
                                                        k != "tokenizer.ggml.add_bos_token";
                                               },
                                               {}, false)));
  CHECK(m->tokenizer->bos() == 1);
  CHECK(m->tokenizer->eos() == 2);
  CHECK(m->tokenizer->encode("the", true).front() == 1);
  CHECK(m->tokenizer->defaulted() == Strs{"bos_token_id", "eos_token_id", "add_bos_token", "add_eos_token"});
  CHECK(m->tokenizer->eog() == Ids{2});
  const auto r = test::run_cli("model info '" + m->path + "'");
  CHECK(r.code == 0);
  CHECK(r.output.find("bos_token_id:    1 (defaulted for tokenizer model llama; the file has no key)") != std::string::npos);
  CHECK(r.output.find("eos_token_id:    2 (defaulted for tokenizer model llama; the file has no key)") != std::string::npos);
}

TEST_CASE("eog: the engine stops at an end-of-generation token that is not EOS") {
  auto m = load_model(forced_bpe_path());
  Engine engine(*m, {Mode::BatchInvariant, 1});
  GenRequest req = request(*m, 6);
  GenResult r = engine.generate({req}).front();
  CHECK(r.tokens == Ids{EOT});  // <|eot_id|>, while EOS is <|end_of_text|>
  CHECK(r.finish_reason == "stop");
  CHECK(r.text.empty());
  req.params.stop_at_eos = false;  // ignore_eos: runs to max_tokens
  r = engine.generate({req}).front();
  CHECK(r.tokens == Ids(6, EOT));
  CHECK(r.finish_reason == "length");
  // Beam search ends its beams there too.
  CHECK(engine.beam_search(request(*m, 6).prompt, 2, 6).tokens == Ids{EOT});
}

TEST_CASE("eog: a schema-constrained document may end at any end-of-generation token") {
  auto m = load_model(forced_bpe_path());
  Engine engine(*m, {Mode::BatchInvariant, 1});
  GenRequest req = request(*m, 12);
  req.params.json_schema = std::make_shared<JsonConstraint>(nlohmann::json{{"type", "boolean"}}, "test", *m->tokenizer);
  // All logits are 0, so the lowest allowed id wins: one leading whitespace byte ('\n', id 11), then
  // 'f' (id 0x67) before 't' and the rest of "false"; complete, <|eot_id|> (0) ends it (with EOS
  // alone allowed the last token would be EOS, 267).
  GenResult r = engine.generate({req}).front();
  CHECK(r.text == "\nfalse");
  CHECK(r.tokens.back() == EOT);
  CHECK(r.finish_reason == "stop");
}

TEST_CASE("eog: the audit's model record lists the set when it is more than EOS") {
  auto m = load_model(forced_bpe_path());
  CHECK(model_identity(*m, m->path)["eog_tokens"] == nlohmann::json(Ids{EOT, EOTEXT, EOM, IMEND}));
  auto spm = load_model(write("spm-plain", forced_spm_model()));
  CHECK_FALSE(model_identity(*spm, spm->path).contains("eog_tokens"));  // {EOS}: the record is unchanged
  spm->tokenizer->add_eog(0);
  CHECK(model_identity(*spm, spm->path)["eog_tokens"] == nlohmann::json(Ids{0, 2}));
}

TEST_CASE("eog: model info shows the set and which settings were defaulted") {
  const auto r = test::run_cli("model info '" + forced_bpe_path() + "'");
  REQUIRE(r.code == 0);
  CHECK(r.output.find("add_bos_token:   true (defaulted for pre-tokenizer llama-bpe; the file has no key)\n") !=
        std::string::npos);
  CHECK(r.output.find("add_eos_token:   false (defaulted for pre-tokenizer llama-bpe; the file has no key)\n") !=
        std::string::npos);
  CHECK(r.output.find("eog tokens:      0 <|eot_id|>, 267 <|end_of_text|>, 268 <|eom_id|>, 269 <|im_end|>\n") !=
        std::string::npos);
  CHECK(r.output.find("bos_token_id:") == std::string::npos);  // the file names its ids
  const auto j = test::run_cli("model info --json '" + forced_bpe_path() + "'");
  REQUIRE(j.code == 0);
  const auto v = nlohmann::json::parse(j.output);
  CHECK(v["tokenizer"]["eog"] == nlohmann::json::parse(R"([{"id":0,"text":"<|eot_id|>"},{"id":267,"text":"<|end_of_text|>"},
                                                           {"id":268,"text":"<|eom_id|>"},{"id":269,"text":"<|im_end|>"}])"));
  CHECK(v["tokenizer"]["add_bos"] == true);
  CHECK(v["tokenizer"]["defaulted"] == nlohmann::json::parse(R"(["add_bos_token","add_eos_token"])"));
  CHECK(v["tokenizer"]["defaults_for"] == "pre-tokenizer llama-bpe");
}

TEST_CASE("eog: generate stops at an end-of-turn token, and at --stop-token ID|TEXT") {
  auto gen = [](const std::string& model, const std::string& extra) {
    const auto r = test::run_cli("generate --model '" + model + "' --prompt Hello --max-tokens 5 --json " + extra);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.output);
  };
  nlohmann::json j = gen(forced_bpe_path(), "");
  CHECK(j["tokens"] == nlohmann::json(Ids{EOT}));
  CHECK(j["finish_reason"] == "stop");
  CHECK(j["prompt_ids"].front() == BOT);

  const std::string spm = write("forced-spm", forced_spm_model());
  j = gen(spm, "");
  CHECK(j["tokens"] == nlohmann::json(Ids(5, 0)));  // <unk> is no end of generation
  CHECK(j["finish_reason"] == "length");
  for (const char* flag : {"--stop-token '<unk>'", "--stop-token 0", "--stop-token 5 --stop-token '<unk>'"}) {
    CAPTURE(flag);
    j = gen(spm, flag);
    CHECK(j["tokens"] == nlohmann::json(Ids{0}));
    CHECK(j["finish_reason"] == "stop");
  }
}

TEST_CASE("eog: --stop-token errors name the flag (exit 2) on generate, run and serve") {
  const std::string m = forced_bpe_path();
  auto r = test::run_cli("generate --model '" + m + "' --stop-token 340");
  CHECK(r.code == 2);
  CHECK(r.output == "error: --stop-token 340: no such token id; the vocabulary has ids 0..339\n");
  r = test::run_cli("generate --model '" + m + "' --stop-token 99999999999999999999");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --stop-token 99999999999999999999: no such token id") == 0);
  r = test::run_cli("generate --model '" + m + "' --stop-token '<|nope|>'");
  CHECK(r.code == 2);
  CHECK(r.output ==
        "error: --stop-token '<|nope|>': no token of the vocabulary has this text; give a token id (0..339) or a "
        "token's text as the vocabulary spells it, e.g. <|eot_id|>\n");
  const auto dir = test::scratch_dir("eog-run");
  r = test::run_cli("run --model '" + m + "' --prompt Hi --stop-token '<|nope|>' --out '" + (dir / "r.json").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("--stop-token '<|nope|>': no token of the vocabulary has this text") != std::string::npos);
  r = test::run_cli("serve --model '" + m + "' --port 0 --stop-token 340");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --stop-token 340: no such token id") != std::string::npos);
}

TEST_CASE("eog: run records --stop-token in the report, and --resume stops at the same tokens") {
  const std::string spm = write("forced-spm-run", forced_spm_model());
  const auto dir = test::scratch_dir("eog-resume") / "out";
  auto r = test::run_cli("run --model '" + spm + "' --prompt Hi --stop-token '<unk>' --max-tokens 4 --repeats 1 --out '" +
                         dir.string() + "'");
  REQUIRE(r.code == 0);
  const auto report = nlohmann::json::parse(test::slurp(dir / "report.json"));
  CHECK(report["environment"]["model"]["eog_tokens"] == nlohmann::json(Ids{0, 2}));
  for (const auto& c : report["completions"]) {
    CHECK(c["tokens"] == nlohmann::json(Ids{0}));
    CHECK(c["finish_reason"] == "stop");
  }
  // Without --stop-token the resumed run takes the recorded set; another set is refused.
  r = test::run_cli("run --resume '" + dir.string() + "'");
  CHECK(r.code == 0);
  CHECK(r.output.find("nothing to resume") != std::string::npos);
  r = test::run_cli("run --resume '" + dir.string() + "' --stop-token 5");
  CHECK(r.code == 2);
  CHECK(r.output.find("the run stopped generation at tokens [0,2], this one would stop at [2,5]; give the --stop-token "
                      "flags the run was started with, or none") != std::string::npos);
}
