// Unicode normalization before the BPE split: NFC (Debian's libutf8proc) for the vocabularies whose
// Hugging Face tokenizer.json says {"type": "NFC"} (the qwen2 pre-tokenizer: Qwen2, Qwen2.5, Qwen3),
// or as the project's key repro.tokenizer.normalizer says; never for the text of a token matched
// verbatim, never silently (`model info` shows it and where it came from).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/model/model.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_gguf.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

// A byte-level BPE vocabulary whose merges spell "é" (U+00E9, bytes C3 A9) as one token, id 257.
TokenizerData vocab(const std::string& pre) {
  const std::string merge = test::gpt2_char(0xC3) + " " + test::gpt2_char(0xA9);
  return test::bpe_vocab(pre, {"<|endoftext|>", TokenType::Control}, {merge}, {{"<tok\u0301>", TokenType::UserDefined}},
                         400, -1, 0);
}

std::string model_file(const TokenizerData& d, const std::string& name, const char* key_value) {
  const fs::path dir = test::scratch_dir("normalizer-" + name);
  const std::string path = (dir / "m.gguf").string();
  write_file_atomic(path, test::bpe_model(d, false, [&](gguf::Writer& w) {
                      if (key_value) w.add("repro.tokenizer.normalizer", gguf::Value::string(key_value));
                    }));
  return path;
}

}  // namespace

TEST_CASE("NFC: a decomposed e + U+0301 is one token with a Qwen-style vocabulary, as Hugging Face encodes it") {
  CHECK(tokenizer_normalizer("gpt2", "qwen2") == "nfc");
  CHECK(tokenizer_normalizer("gpt2", "llama-bpe") == "");
  CHECK(tokenizer_normalizer("llama", "default") == "");
  CHECK(nfc_normalize("e\u0301") == "\u00e9");
  CHECK(nfc_normalize("A\u030a\u1100\u1161") == "\u00c5\uac00");
  CHECK(nfc_normalize("\ufb01ne") == "\ufb01ne");  // a compatibility ligature is NFKC's business, not NFC's
  CHECK(nfc_normalize(std::string("a\xff" "e\xcc\x81\xc3", 6)) == std::string("a\xff\xc3\xa9\xc3", 5));  // bad bytes kept

  auto qwen = load_model(model_file(vocab("qwen2"), "qwen2", nullptr));
  CHECK(qwen->tokenizer->normalizer() == "nfc");
  CHECK(qwen->tokenizer->normalizer_origin() == "pre-tokenizer qwen2");
  CHECK(qwen->tokenizer->encode("e\u0301", false) == std::vector<int>{257});
  CHECK(qwen->tokenizer->encode("\u00e9", false) == std::vector<int>{257});
  // A user-defined token's text is matched before normalization, as written.
  CHECK(qwen->tokenizer->encode("<tok\u0301>e\u0301", false) == std::vector<int>{258, 257});

  auto llama = load_model(model_file(vocab("llama-bpe"), "llama-bpe", nullptr));
  CHECK(llama->tokenizer->normalizer().empty());
  CHECK(llama->tokenizer->encode("e\u0301", false).size() == 3);  // e, 0xCC, 0x81: not composed

  // The project's key decides over the pre-tokenizer, both ways; a value it does not know is refused.
  CHECK(load_model(model_file(vocab("qwen2"), "none", "none"))->tokenizer->encode("e\u0301", false).size() == 3);
  auto forced = load_model(model_file(vocab("llama-bpe"), "nfc", "nfc"));
  CHECK(forced->tokenizer->normalizer_origin() == "key repro.tokenizer.normalizer");
  CHECK(forced->tokenizer->encode("e\u0301", false) == std::vector<int>{257});
  const std::string bad = model_file(vocab("qwen2"), "bad", "nfkc");
  CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("'repro.tokenizer.normalizer' is 'nfkc'; it must be \"nfc\" or \"none\""),
                       UsageError);

  // model synth writes the key when asked; `model info` shows it and where it came from; `tokenize`
  // shows the one id.
  const fs::path sdir = test::scratch_dir("normalizer-synth");
  auto s = test::run_cli("model synth --dim 32 --hidden 48 --layers 1 --heads 4 --kv-heads 2 --normalizer nfc --out '" +
                         (sdir / "s.gguf").string() + "'");
  REQUIRE_MESSAGE(s.code == 0, s.output);
  s = test::run_cli("model info '" + (sdir / "s.gguf").string() + "'");
  CHECK(s.output.find("normalizer:      NFC (key repro.tokenizer.normalizer)") != std::string::npos);
  s = test::run_cli("model synth --normalizer nfkc --out '" + (sdir / "t.gguf").string() + "'");
  CHECK(s.code == 2);
  CHECK(s.output.find("--normalizer 'nfkc' is not supported; supported: nfc, none") != std::string::npos);
  auto r = test::run_cli("model info '" + model_file(vocab("qwen2"), "info", nullptr) + "'");
  INFO(r.output);
  CHECK(r.output.find("normalizer:      NFC (pre-tokenizer qwen2)") != std::string::npos);
  r = test::run_cli("tokenize --json --model '" + model_file(vocab("qwen2"), "tok", nullptr) + "' --prompt \"$(printf 'e\\314\\201')\"");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["ids"] == nlohmann::json::array({257}));
  CHECK(j["normalizer"] == "nfc");
}
