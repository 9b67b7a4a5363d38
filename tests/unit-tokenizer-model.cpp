// ctest-labels: model
// Tokenizer checks on the real stories260K tokenizer (../shared/models/tok512.bin).
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/model/model.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

std::unique_ptr<Tokenizer> tok512(const std::filesystem::path& dir) {
  return make_tokenizer(read_llama2c_tokenizer((dir / "tok512.bin").string(), 512));
}

// llama2.c's encode() restated plainly (token-level, O(n^2)): the dummy-prefix " " token, each
// UTF-8 code point looked up as a token or spelled as byte tokens (byte + 3), then the best-scoring
// pair of adjacent tokens whose joined text is a token is merged, leftmost on ties, until none is.
std::vector<int> llama2c_encode(const TokenizerData& d, const std::string& text) {
  std::map<std::string, int> lookup;
  for (size_t i = 0; i < d.tokens.size(); ++i) lookup.emplace(d.tokens[i], static_cast<int>(i));
  std::vector<int> ids = {1};
  if (text.empty()) return ids;
  std::vector<int> t = {lookup.at(" ")};
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0xC0) {  // llama2.c groups a lead byte with up to 3 continuation bytes
      while (len < 4 && i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
    }
    auto it = lookup.find(text.substr(i, len));
    if (it != lookup.end()) {
      t.push_back(it->second);
    } else {
      for (size_t k = 0; k < len; ++k) t.push_back(static_cast<unsigned char>(text[i + k]) + 3);
    }
    i += len;
  }
  for (;;) {
    float best = -1e10f;
    int best_id = -1, best_idx = -1;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      auto it = lookup.find(d.tokens[t[i]] + d.tokens[t[i + 1]]);
      if (it != lookup.end() && d.scores[it->second] > best) {
        best = d.scores[it->second];
        best_id = it->second;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx < 0) break;
    t[best_idx] = best_id;
    t.erase(t.begin() + best_idx + 1);
  }
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

}  // namespace

TEST_CASE("tok512.bin: file contents as the models README documents them") {
  REPRO_REQUIRE_MODELS(dir);
  const TokenizerData d = read_llama2c_tokenizer((dir / "tok512.bin").string(), 512);
  REQUIRE(d.tokens.size() == 512);
  CHECK(d.tokens[0] == "<unk>");
  CHECK(d.tokens[1] == "\n<s>\n");
  CHECK(d.tokens[2] == "\n</s>\n");
  CHECK(d.tokens[3] == "<0x00>");
  CHECK(d.tokens[258] == "<0xFF>");
  CHECK(d.tokens[259] == " t");
  CHECK(d.scores[259] == 0.0f);
  CHECK(d.scores[511] == -252.0f);
  CHECK(d.types[0] == static_cast<int>(TokenType::Unknown));
  CHECK(d.types[1] == static_cast<int>(TokenType::Control));
  CHECK(d.types[100] == static_cast<int>(TokenType::Byte));
  CHECK(d.types[300] == static_cast<int>(TokenType::Normal));
  CHECK(d.bos_id == 1);
  CHECK(d.eos_id == 2);
  CHECK(d.space_is_plain);
}

TEST_CASE("tok512.bin: the golden prompt encodes to README's ids") {
  REPRO_REQUIRE_MODELS(dir);
  auto tok = tok512(dir);
  CHECK(tok->vocab_size() == 512);
  CHECK(tok->bos() == 1);
  CHECK(tok->eos() == 2);
  CHECK(tok->kind() == "llama (SentencePiece BPE)");
  CHECK(tok->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(tok->encode("Once upon a time", false) == std::vector<int>{403, 407, 261, 378});
  CHECK(tok->piece(403) == " Once");
  CHECK(tok->piece(1) == "");
  CHECK(tok->piece(2) == "");
  CHECK(tok->encode("", true) == std::vector<int>{1});
}

TEST_CASE("tok512.bin: README's greedy ids decode to README's text") {
  REPRO_REQUIRE_MODELS(dir);
  auto tok = tok512(dir);
  const std::vector<int> ids = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295,
                                433, 426, 385, 328, 432};
  CHECK(tok->decode(ids) ==
        " Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day,");
  // The engine decodes one token at a time: the pieces concatenate to the same text.
  std::string streamed;
  for (int id : ids) streamed += tok->piece(id);
  CHECK(streamed == tok->decode(ids));
  // The 40 ids generated from BOS alone.
  const std::vector<int> from_bos = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                     426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                     295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352};
  CHECK(tok->decode(from_bos).rfind(" Once upon a time, there was a little girl named Lily.", 0) == 0);
}

TEST_CASE("tok512.bin: round trips") {
  REPRO_REQUIRE_MODELS(dir);
  auto tok = tok512(dir);
  const std::vector<std::string> texts = {
      "Lily's mom said, \"Lily, let's go to the park.\"",
      "She wanted to play with it, but it was too high.\nThe end.",
      "  two leading spaces and trailing  ",
      "Caf\xC3\xA9 na\xC3\xAFve \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC",  // é ï 😀 日本: byte fallback
      "tabs\tand\r\nnewlines\n\n",
      "<s> </s> <unk> <0x41> are plain text here",
      "x",
  };
  for (const auto& t : texts) {
    CAPTURE(t);
    auto ids = tok->encode(t, true);
    REQUIRE(!ids.empty());
    CHECK(ids[0] == 1);
    for (size_t i = 1; i < ids.size(); ++i) {
      CHECK(ids[i] != 1);  // control tokens never come from text
      CHECK(ids[i] != 2);
      CHECK(ids[i] != 0);  // byte fallback covers everything: no <unk>
    }
    CHECK(tok->decode(ids) == " " + t);
  }
  // "é" is a token of its own (485); an emoji is not: byte fallback uses ids byte+3, as llama2.c.
  CHECK(tok->encode("\xC3\xA9", false) == std::vector<int>{410, 485});
  CHECK(tok->encode("\xF0\x9F\x98\x80", false) == std::vector<int>{410, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3});
}

TEST_CASE("tok512.bin: file/vocab mismatch and corrupt files are usage errors") {
  REPRO_REQUIRE_MODELS(dir);
  const std::string path = (dir / "tok512.bin").string();
  CHECK_THROWS_AS(read_llama2c_tokenizer(path, 511), UsageError);  // bytes left over
  CHECK_THROWS_AS(read_llama2c_tokenizer(path, 513), UsageError);  // file too short
  CHECK_THROWS_AS(read_llama2c_tokenizer(path, 32000), UsageError);
  CHECK_THROWS_AS(read_llama2c_tokenizer(path, 0), UsageError);
  CHECK_THROWS_AS(read_llama2c_tokenizer((dir / "no-such-tokenizer.bin").string(), 512), UsageError);
  try {
    read_llama2c_tokenizer(path, 511);
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("tok512.bin") != std::string::npos);
  }
}

TEST_CASE("tok512.bin: agrees with llama2.c's encoding on many texts") {
  REPRO_REQUIRE_MODELS(dir);
  const TokenizerData d = read_llama2c_tokenizer((dir / "tok512.bin").string(), 512);
  auto tok = make_tokenizer(d);
  const std::vector<std::string> words = {"Once", "upon", "a", "time", "there", "was", "little", "girl", "named",
                                          "Lily", ".", ",", "!", "\"", "'s", "She", "loved", "to", "play",
                                          "park", "\n", " ", "caf\xC3\xA9", "\xE2\x80\x9C", "don't", "Tim",
                                          "x", "zzz", "123", "\xF0\x9F\x98\x80", "Bob", "the", "and"};
  std::mt19937 rng(7);
  for (int k = 0; k < 300; ++k) {
    std::string text;
    const int n = static_cast<int>(rng() % 25);
    for (int i = 0; i < n; ++i) {
      if (i && rng() % 3) text += ' ';
      text += words[rng() % words.size()];
    }
    CAPTURE(text);
    const auto ids = tok->encode(text, true);
    CHECK(ids == llama2c_encode(d, text));
    CHECK(tok->decode(ids) == (text.empty() ? "" : " ") + text);
  }
}

TEST_CASE("stories260K.gguf: the embedded tokenizer gives the same ids and pieces as tok512.bin") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  REQUIRE(model->tokenizer);
  const Tokenizer& g = *model->tokenizer;
  auto t = tok512(dir);
  CHECK(g.kind() == "llama (SentencePiece BPE)");
  CHECK(g.vocab_size() == 512);
  CHECK(g.bos() == 1);
  CHECK(g.eos() == 2);
  CHECK(g.encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  for (int id = 0; id < 512; ++id) {
    CAPTURE(id);
    CHECK(g.piece(id) == t->piece(id));
  }
  const std::vector<std::string> texts = {
      "", "Lily's mom said, \"Lily, let's go to the park.\"", "  two  spaces ", "caf\xC3\xA9 \xF0\x9F\x98\x80",
      "line one\nline two\n", "<s> </s> <unk>"};
  for (const auto& s : texts) {
    CAPTURE(s);
    CHECK(g.encode(s, true) == t->encode(s, true));
  }
  // The llama2.c pair loads its tokenizer from tok512.bin beside the checkpoint.
  auto bin = load_model((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  REQUIRE(bin->tokenizer);
  CHECK(bin->tokenizer->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
}
