// Tokenizers on hand-made vocabularies (no model files): SentencePiece BPE and GPT-2 byte-level BPE.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "repro/tokenizer/internal.hpp"
#include "test_util.hpp"

using namespace repro;

namespace doctest {
template <>
struct StringMaker<std::vector<int>> {
  static String convert(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return (s + "]").c_str();
  }
};
template <>
struct StringMaker<std::vector<std::string>> {
  static String convert(const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
    return (s + "]").c_str();
  }
};
}  // namespace doctest

namespace {

using Ids = std::vector<int>;
using Strs = std::vector<std::string>;

std::string byte_piece(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

// SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens (ids 3..258), then `normal` in order.
TokenizerData spm_data(const std::vector<std::pair<std::string, float>>& normal, bool with_bytes = true) {
  TokenizerData d;
  d.model = "llama";
  auto add = [&](const std::string& t, float s, TokenType ty) {
    d.tokens.push_back(t);
    d.scores.push_back(s);
    d.types.push_back(static_cast<int>(ty));
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  if (with_bytes)
    for (int b = 0; b < 256; ++b) add(byte_piece(b), 0, TokenType::Byte);
  for (const auto& [t, s] : normal) add(t, s, TokenType::Normal);
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  return d;
}

int id_of(const TokenizerData& d, const std::string& t) {
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i] == t) return static_cast<int>(i);
  FAIL("no token " << t);
  return -1;
}

const std::string kMark = "\xE2\x96\x81";  // U+2581

// Straightforward O(n^2) SentencePiece BPE, written independently of the tokenizer: merge the
// best-scoring adjacent pair (leftmost on ties) until none is a normal token, then byte fallback.
Ids spm_reference(const TokenizerData& d, std::string text, bool bos) {
  Ids out;
  if (bos) out.push_back(d.bos_id);
  if (text.empty()) return out;
  const std::string sp = d.space_is_plain ? " " : kMark;
  std::string norm = d.add_space_prefix ? sp : "";
  for (char c : text) norm += c == ' ' ? sp : std::string(1, c);
  std::map<std::string, int> vocab;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.types[i] == static_cast<int>(TokenType::Normal)) vocab.emplace(d.tokens[i], static_cast<int>(i));
  Strs sym;
  for (size_t i = 0; i < norm.size();) {
    size_t len = detail::utf8_char_len(norm, i);
    sym.push_back(norm.substr(i, len));
    i += len;
  }
  for (;;) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = vocab.find(sym[i] + sym[i + 1]);
      if (it != vocab.end() && (best < 0 || d.scores[it->second] > best_score)) {
        best = static_cast<int>(i);
        best_score = d.scores[it->second];
      }
    }
    if (best < 0) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + best + 1);
  }
  for (const auto& s : sym) {
    auto it = vocab.find(s);
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char c : s) out.push_back(id_of(d, byte_piece(c)));
  }
  return out;
}

// Random text mixing ASCII letters, spaces, newlines and multi-byte characters.
std::string random_text(std::mt19937& rng, size_t max_chars) {
  static const Strs alphabet = {"a", "b", "c", "h", "e", "l", "o", "t", " ", " ", "\n", "\xC3\xA9",
                                "\xF0\x9F\x98\x80", "\xE6\x97\xA5", "!", "1", "A", "\t"};
  std::uniform_int_distribution<size_t> n(0, max_chars), pick(0, alphabet.size() - 1);
  std::string s;
  for (size_t i = n(rng); i > 0; --i) s += alphabet[pick(rng)];
  return s;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// SentencePiece BPE

TEST_CASE("spm: merges follow scores, ties go leftmost") {
  const int base = 3 + 256;
  {
    auto d = spm_data({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}});
    d.add_space_prefix = false;
    auto tok = make_tokenizer(d);
    CHECK(tok->encode("abc", false) == Ids{base + 0, base + 4});  // bc scores higher: a + bc
  }
  {
    auto d = spm_data({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}});
    d.add_space_prefix = false;
    auto tok = make_tokenizer(d);
    CHECK(tok->encode("abc", false) == Ids{base + 3, base + 2});  // ab + c
  }
  {
    auto d = spm_data({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -1}, {"aa", -1}});
    d.add_space_prefix = false;
    auto tok = make_tokenizer(d);
    CHECK(tok->encode("abc", false) == Ids{base + 3, base + 2});     // tie: leftmost pair first
    CHECK(tok->encode("aaa", false) == Ids{base + 5, base + 0});     // aa a
    CHECK(tok->encode("aaaaa", false) == Ids{base + 5, base + 5, base + 0});
  }
}

TEST_CASE("spm: the result of one merge takes part in later merges") {
  auto d = spm_data({{kMark, -1}, {"t", -1}, {"h", -1}, {"e", -1}, {"he", 5}, {kMark + "t", 4},
                     {kMark + "the", 3}, {"the", 1}});
  auto tok = make_tokenizer(d);
  const int m = 259, he = 263, mt = 264, mthe = 265, t = 260, h = 261, e = 262;
  CHECK(tok->encode("the", true) == Ids{1, mthe});  // he, then ▁t, then ▁t + he
  CHECK(tok->encode("the the", false) == Ids{mthe, mthe});
  d.add_space_prefix = false;
  auto no_prefix = make_tokenizer(d);
  CHECK(no_prefix->encode("the", false) == Ids{266});  // he, then t + he = "the"
  CHECK(no_prefix->encode("th", false) == Ids{t, h});
  CHECK(no_prefix->encode("hee", false) == Ids{he, e});
  CHECK(no_prefix->encode(" the", false) == Ids{mthe});
  CHECK(no_prefix->encode("eh", false) == Ids{e, h});
  CHECK(no_prefix->encode(" ", false) == Ids{m});
  CHECK(no_prefix->encode(" t", false) == Ids{mt});
  CHECK(tok->piece(mthe) == " the");
  CHECK(tok->piece(m) == " ");
}

TEST_CASE("spm: empty text, BOS, byte fallback, unknown") {
  auto d = spm_data({{kMark, -1}, {"a", -1}, {"\xC3\xA9", -1}});
  auto tok = make_tokenizer(d);
  CHECK(tok->encode("", true) == Ids{1});
  CHECK(tok->encode("", false) == Ids{});
  CHECK(tok->encode("a", true) == Ids{1, 259, 260});
  // "é" is a token; "ï" (C3 AF) and the emoji (F0 9F 98 80) go to their byte tokens (3 + byte).
  CHECK(tok->encode("\xC3\xA9", false) == Ids{259, 261});
  CHECK(tok->encode("\xC3\xAF", false) == Ids{259, 3 + 0xC3, 3 + 0xAF});
  CHECK(tok->encode("\xF0\x9F\x98\x80", false) == Ids{259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
  // Pieces of byte tokens are raw bytes: one at a time they still build the UTF-8 character.
  std::string streamed;
  for (int id : tok->encode("\xF0\x9F\x98\x80", false)) streamed += tok->piece(id);
  CHECK(streamed == " \xF0\x9F\x98\x80");
  // Invalid UTF-8 bytes are byte tokens too.
  CHECK(tok->encode("\xFF" "a", false) == Ids{259, 3 + 0xFF, 260});
  // Control and unknown tokens: empty pieces, never produced from text that spells them.
  CHECK(tok->piece(0) == "");
  CHECK(tok->piece(1) == "");
  CHECK(tok->piece(2) == "");
  CHECK(tok->piece(3 + 'A') == "A");
  for (int id : tok->encode("<s></s><unk><0x41>", false)) {
    CHECK(id != 0);
    CHECK(id != 1);
    CHECK(id != 2);
  }
  CHECK(tok->decode(tok->encode("<s></s><unk><0x41>", true)) == " <s></s><unk><0x41>");
  CHECK_THROWS_AS(tok->piece(-1), UsageError);
  CHECK_THROWS_AS(tok->piece(tok->vocab_size()), UsageError);

  // Without byte tokens a character outside the vocabulary becomes <unk> (once per character).
  auto nb = spm_data({{kMark, -1}, {"a", -1}}, false);
  auto tok_nb = make_tokenizer(nb);
  CHECK(tok_nb->encode("a\xF0\x9F\x98\x80" "a", false) == Ids{3, 4, 0, 4});
  nb.unk_id = -1;
  auto tok_none = make_tokenizer(nb);
  CHECK_THROWS_AS(tok_none->encode("\xF0\x9F\x98\x80", false), UsageError);

  d.add_bos = false;  // the model says: no BOS
  CHECK(make_tokenizer(d)->encode("a", true) == Ids{259, 260});
  CHECK(tok->bos() == 1);
  CHECK(tok->eos() == 2);
  CHECK(tok->vocab_size() == 262);
  CHECK(tok->kind() == "llama (SentencePiece BPE)");
}

TEST_CASE("spm: llama2.c spelling (plain spaces) and U+2581 spelling give the same ids") {
  std::vector<std::pair<std::string, float>> v = {{"_", -1}, {"o", -1}, {"n", -1}, {"c", -1}, {"e", -1},
                                                  {"_o", 2},  {"nc", 3}, {"_onc", 1}, {"_once", 0}};
  auto plain = v, marked = v;
  for (auto& [t, s] : plain)
    for (auto& ch : t)
      if (ch == '_') ch = ' ';
  for (auto& [t, s] : marked) {
    std::string r;
    for (char ch : t) r += ch == '_' ? kMark : std::string(1, ch);
    t = r;
  }
  auto dp = spm_data(plain), dm = spm_data(marked);
  dp.space_is_plain = true;
  auto tp = make_tokenizer(dp), tm = make_tokenizer(dm);
  for (const std::string s : {"once", "once once", " once", "one", "con ce  "}) {
    CAPTURE(s);
    CHECK(tp->encode(s, true) == tm->encode(s, true));
    CHECK(tp->decode(tp->encode(s, true)) == " " + s);
    CHECK(tm->decode(tm->encode(s, true)) == " " + s);
  }
  CHECK(tp->encode("once", false) == Ids{259 + 8});
}

TEST_CASE("spm: agrees with a plain O(n^2) reference on random vocabularies and texts") {
  std::mt19937 rng(1234);
  const Strs chars = {kMark, "a", "b", "c", "h", "e", "l", "o", "t", "\n", "\xC3\xA9"};
  for (int round = 0; round < 20; ++round) {
    // Pairs and triples of characters with scores from a small set: many ties.
    std::vector<std::pair<std::string, float>> v;
    std::map<std::string, bool> seen;
    std::uniform_int_distribution<size_t> pc(0, chars.size() - 1);
    std::uniform_int_distribution<int> score(-4, 0);
    for (const auto& c : chars)
      if (c != "\xC3\xA9") v.push_back({c, -100}), seen[c] = true;
    for (int k = 0; k < 60; ++k) {
      std::string t = chars[pc(rng)] + chars[pc(rng)];
      if (k % 3 == 0) t += chars[pc(rng)];
      // a triple is only reachable when one of its pairs exists; either way it must not break
      // Even rounds: SentencePiece-like vocabularies (no space inside a token after a non-space),
      // which the tokenizer merges word by word; odd rounds: anything goes, one chunk.
      if (round % 2 == 0 && t.find(kMark, 1) != std::string::npos) continue;
      if (!seen[t]) v.push_back({t, static_cast<float>(score(rng))}), seen[t] = true;
    }
    for (bool prefix : {true, false}) {
      auto d = spm_data(v);
      d.add_space_prefix = prefix;
      auto tok = make_tokenizer(d);
      for (int k = 0; k < 50; ++k) {
        const std::string text = random_text(rng, 40);
        CAPTURE(text);
        const Ids got = tok->encode(text, true);
        CHECK(got == spm_reference(d, text, true));
        CHECK(tok->decode(got) == (prefix && !text.empty() ? " " : "") + text);
      }
    }
  }
}

TEST_CASE("spm: long prompts stay fast (priority queue, not quadratic)") {
  auto d = spm_data({{kMark, -1}, {"a", -1}, {"b", -1}, {"ab", 0}, {"abab", 1}, {kMark + "a", -3}});
  auto tok = make_tokenizer(d);
  std::string text;
  for (int i = 0; i < 200000; ++i) text += (i % 7 == 3) ? " " : (i % 2 ? "a" : "b");
  const Ids ids = tok->encode(text, false);
  CHECK(tok->decode(ids) == " " + text);
}

TEST_CASE("spm: inconsistent data is a usage error") {
  auto good = spm_data({{"a", 0}});
  CHECK_NOTHROW(make_tokenizer(good));
  TokenizerData empty;
  CHECK_THROWS_AS(make_tokenizer(empty), UsageError);
  auto d = good;
  d.bos_id = static_cast<int>(d.tokens.size());
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.eos_id = -7;
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.unk_id = 100000;
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.scores.pop_back();
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.types.push_back(1);
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.types[5] = 9;
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.scores[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = good;
  d.model = "wordpiece";
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  try {
    d.bos_id = 9999;
    d.model = "llama";
    make_tokenizer(d);
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("BOS") != std::string::npos);
  }
  // Scores and types may be absent: all tokens normal with score 0.
  TokenizerData bare;
  bare.tokens = {"a", "b", "ab"};
  auto t = make_tokenizer(bare);
  bare.add_space_prefix = false;
  CHECK(make_tokenizer(bare)->encode("abba", false) == Ids{2, 1, 0});
}

// ------------------------------------------------------------------------------------------------
// GPT-2 byte-level BPE

namespace {

using test::gpt2_char;

// 256 byte tokens (id = byte), then the results of `merges` in order, then extra tokens.
TokenizerData bpe_data(const Strs& merges, const std::string& pre = "gpt2") {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(gpt2_char(b));
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    d.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  d.merges = merges;
  d.types.assign(d.tokens.size(), static_cast<int>(TokenType::Normal));
  return d;
}

const Strs kMerges = {
    "Ġ t", "h e", "Ġt he", "l l", "ll o", "H e", "He llo", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
    "a a", "b c", "a b", "Ċ Ċ",
};
enum : int { Gt = 256, He_ = 257, Gthe, LL, LLO, He, Hello, Gw, OR, Gwor, LD, Gworld, AA, BC, AB, NN, EOT, XYZ };

TokenizerData bpe_test_data(const std::string& pre = "gpt2") {
  auto d = bpe_data(kMerges, pre);
  d.tokens.push_back("<|endoftext|>");
  d.types.push_back(static_cast<int>(TokenType::Control));
  d.tokens.push_back("xyz");  // no merges lead to it
  d.types.push_back(static_cast<int>(TokenType::Normal));
  d.bos_id = EOT;
  d.eos_id = EOT;
  return d;
}

}  // namespace

TEST_CASE("gpt2 alphabet in the test matches GPT-2's well-known spellings") {
  CHECK(gpt2_char(' ') == "\xC4\xA0");   // Ġ U+0120
  CHECK(gpt2_char('\n') == "\xC4\x8A");  // Ċ U+010A
  CHECK(gpt2_char(0) == "\xC4\x80");     // U+0100
  CHECK(gpt2_char(0xAD) == "\xC5\x83");  // soft hyphen: U+0143, the last remapped byte
  CHECK(gpt2_char('A') == "A");
  CHECK(gpt2_char(0xE9) == "\xC3\xA9");  // é stands for itself
}

TEST_CASE("gpt2 BPE: hand-worked encodings on a synthesized vocabulary") {
  auto tok = make_tokenizer(bpe_test_data());
  CHECK(tok->kind() == "gpt2 (byte-level BPE, gpt2)");
  CHECK(tok->vocab_size() == 256 + 16 + 2);
  // "Hello": l l (rank 3), ll o (4), H e (5), He llo (6).  " the": Ġ t (0), h e (1), Ġt he (2).
  // " world": Ġ w (7), o r (8), Ġw or (9), l d (10), Ġwor ld (11).
  CHECK(tok->encode("Hello the world", false) == Ids{Hello, Gthe, Gworld});
  CHECK(tok->encode("Hello", false) == Ids{Hello});
  CHECK(tok->encode("hello", false) == Ids{He_, LLO});  // h e (1), l l (3), ll o (4); "he llo" is no merge
  CHECK(tok->encode("abc", false) == Ids{'a', BC});          // b c (13) beats a b (14)
  CHECK(tok->encode("ab", false) == Ids{AB});
  CHECK(tok->encode("aaa", false) == Ids{AA, 'a'});          // leftmost first
  CHECK(tok->encode("aaaa", false) == Ids{AA, AA});
  CHECK(tok->encode("a\n\n\nb", false) == Ids{'a', NN, '\n', 'b'});
  CHECK(tok->encode("", false) == Ids{});
  CHECK(tok->encode("", true) == Ids{EOT});
  CHECK(tok->encode("xyz", false) == Ids{'x', 'y', 'z'});  // gpt2: no ignore_merges
  CHECK(tok->piece(Gworld) == " world");
  CHECK(tok->piece(NN) == "\n\n");
  CHECK(tok->piece(EOT) == "");
  CHECK(tok->piece(0xE9) == "\xE9");  // one raw byte
  CHECK(tok->piece(0) == std::string(1, '\0'));
}

TEST_CASE("gpt2 BPE: control tokens are not parsed out of text; BOS rules") {
  auto d = bpe_test_data();
  auto tok = make_tokenizer(d);
  const Ids ids = tok->encode("<|endoftext|>", true);
  REQUIRE(ids.size() > 2);
  CHECK(ids[0] == EOT);
  for (size_t i = 1; i < ids.size(); ++i) CHECK(ids[i] != EOT);
  CHECK(tok->decode(ids) == "<|endoftext|>");
  d.add_bos = false;
  CHECK(make_tokenizer(d)->encode("ab", true) == Ids{AB});
  d.add_bos = true;
  d.bos_id = -1;
  CHECK(make_tokenizer(d)->encode("ab", true) == Ids{AB});
}

TEST_CASE("gpt2 BPE: encode_special matches control and user-defined tokens verbatim, longest first") {
  auto d = bpe_test_data("llama-bpe");
  d.tokens.push_back("<|endoftext|>x");  // longer special token that starts like another one
  d.types.push_back(static_cast<int>(TokenType::UserDefined));
  const int longer = static_cast<int>(d.tokens.size()) - 1;
  auto tok = make_tokenizer(d);
  CHECK(tok->encode_special("<|endoftext|>Hello world<|endoftext|>", false) == Ids{EOT, Hello, Gworld, EOT});
  CHECK(tok->encode_special("ab<|endoftext|>xab", true) == Ids{EOT, AB, longer, AB});
  // Text between special tokens is encoded as alone; no special tokens: as encode.
  CHECK(tok->encode_special("Hello world", true) == tok->encode("Hello world", true));
  CHECK(tok->encode_special("", true) == Ids{EOT});
  CHECK(tok->encode_special("<|endoftext", false) == tok->encode("<|endoftext", false));
}

TEST_CASE("gpt2 BPE: llama3 takes a pre-token that is a whole token as it stands") {
  auto tok = make_tokenizer(bpe_test_data("llama-bpe"));
  CHECK(tok->kind() == "gpt2 (byte-level BPE, llama3)");
  CHECK(tok->encode("xyz", false) == Ids{XYZ});
  CHECK(tok->encode("Hello world", false) == Ids{Hello, Gworld});
  CHECK(tok->encode("hello,world", false) == Ids{He_, LLO, ',', 'w', OR, LD});  // ",world" pre-token
  auto qwen = make_tokenizer(bpe_test_data("qwen2"));
  CHECK(qwen->encode("xyz", false) == Ids{'x', 'y', 'z'});
}

TEST_CASE("gpt2 pre-tokenizers split as their regexes say") {
  using detail::bpe_pre_tokenize;
  const std::string s = "Hello world's 12345 test!!\n\n";
  CHECK(bpe_pre_tokenize("llama-bpe", s) == Strs{"Hello", " world", "'s", " ", "123", "45", " test", "!!\n\n"});
  CHECK(bpe_pre_tokenize("llama3", s) == bpe_pre_tokenize("llama-bpe", s));
  CHECK(bpe_pre_tokenize("qwen2", s) ==
        Strs{"Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " test", "!!\n\n"});
  CHECK(bpe_pre_tokenize("gpt2", s) == Strs{"Hello", " world", "'s", " 12345", " test", "!!", "\n\n"});
  CHECK(bpe_pre_tokenize("default", s) == bpe_pre_tokenize("gpt2", s));

  CHECK(bpe_pre_tokenize("llama3", "I'M here") == Strs{"I", "'M", " here"});
  CHECK(bpe_pre_tokenize("gpt2", "I'M here") == Strs{"I", "'", "M", " here"});
  CHECK(bpe_pre_tokenize("llama3", "  leading") == Strs{" ", " leading"});
  CHECK(bpe_pre_tokenize("gpt2", "a  b") == Strs{"a", " ", " b"});
  // smollm: digits split out first, then GPT-2's pattern without its last "\s+" on each piece.
  CHECK(bpe_pre_tokenize("smollm", "abc 123 x") == Strs{"abc", " ", "1", "2", "3", " x"});
  CHECK(bpe_pre_tokenize("smollm", "a   5") == Strs{"a", "   ", "5"});  // one regex would cut "  ", " "
  CHECK(bpe_pre_tokenize("smollm", "Hello world's") == Strs{"Hello", " world", "'s"});
  CHECK(bpe_pre_tokenize("starcoder", "x1") == bpe_pre_tokenize("smollm", "x1"));
  CHECK(bpe_pre_tokenize("llama3", "a\n\nb") == Strs{"a", "\n\n", "b"});
  CHECK(bpe_pre_tokenize("llama3", "$100 and 1234567") == Strs{"$", "100", " and", " ", "123", "456", "7"});
  CHECK(bpe_pre_tokenize("llama3", "hello,world") == Strs{"hello", ",world"});
  CHECK(bpe_pre_tokenize("gpt2", "hello,world") == Strs{"hello", ",", "world"});
  CHECK(bpe_pre_tokenize("llama3", "\xE6\x97\xA5\xE6\x9C\xAC \xD1\x82\xD0\xB5\xD0\xBA\xD1\x81\xD1\x82") ==
        Strs{"\xE6\x97\xA5\xE6\x9C\xAC", " \xD1\x82\xD0\xB5\xD0\xBA\xD1\x81\xD1\x82"});  // 日本 текст
  CHECK(bpe_pre_tokenize("llama3", "x  \n") == Strs{"x", "  \n"});
  CHECK(bpe_pre_tokenize("llama3", "end  ") == Strs{"end", "  "});
  // Bytes that are not UTF-8 are kept, as pre-tokens of their own.
  CHECK(bpe_pre_tokenize("llama3", "ab\xFF\xFE" "cd") == Strs{"ab", "\xFF\xFE", "cd"});
  CHECK(bpe_pre_tokenize("gpt2", "") == Strs{});
  CHECK_THROWS_AS(bpe_pre_tokenize("bert", "x"), UsageError);
}

TEST_CASE("gpt2 BPE: decode(encode(x)) == x for arbitrary bytes") {
  std::mt19937 rng(99);
  for (const char* pre : {"gpt2", "llama3", "qwen2"}) {
    auto tok = make_tokenizer(bpe_test_data(pre));
    for (int k = 0; k < 300; ++k) {
      std::string s;
      const int n = static_cast<int>(rng() % 64);
      for (int i = 0; i < n; ++i) {
        const unsigned r = rng() % 10;
        if (r < 6) s += "Hello the world aab\n "[rng() % 21];
        else s += static_cast<char>(rng() % 256);
      }
      CAPTURE(s);
      CHECK(tok->decode(tok->encode(s, false)) == s);
    }
    std::string big;  // a long run of one pre-token
    for (int i = 0; i < 100000; ++i) big += "ab"[i % 3 == 0];
    CHECK(tok->decode(tok->encode(big, false)) == big);
  }
}

TEST_CASE("gpt2 BPE: inconsistent data is a usage error") {
  CHECK_NOTHROW(make_tokenizer(bpe_test_data()));
  auto d = bpe_test_data();
  d.merges.push_back("q nosuchtoken");
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.merges.push_back("x y");  // both are tokens, "xy" is not
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.merges.push_back("xy");  // no separator
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.pre = "no-such-pre";
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.bos_id = 5000;
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.tokens.clear();
  d.types.clear();
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  d = bpe_test_data();
  d.tokens[' '] = "space";  // the byte 0x20 has no token and there is no <unk>
  CHECK_THROWS_AS(make_tokenizer(d), UsageError);
  try {
    d = bpe_test_data();
    d.merges.push_back("q nosuchtoken");
    make_tokenizer(d);
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("q nosuchtoken") != std::string::npos);
  }
}
