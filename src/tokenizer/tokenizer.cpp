// Tokenizer factory, shared validation, and the llama2.c tokenizer file reader.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "repro/common/error.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "repro/common/util.hpp"
#include "repro/tokenizer/internal.hpp"

namespace repro {

uint64_t Tokenizer::next_instance() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
namespace detail {

size_t utf8_char_len(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return 1;  // continuation byte or 0xF8..0xFF
  }
  if (i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
  return len;
}

TokenType token_type(const TokenizerData& data, size_t id) {
  if (data.types.empty()) return TokenType::Normal;
  return static_cast<TokenType>(data.types[id]);
}

void check_id(int id, int n) {
  if (id < 0 || id >= n)
    throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n) +
                     " tokens; use ids 0.." + std::to_string(n - 1));
}

void validate_common(const TokenizerData& data) {
  const std::string where = "tokenizer (model '" + data.model + "')";
  if (data.tokens.empty())
    throw UsageError(where + ": the vocabulary is empty; the model file must list its tokens");
  if (data.tokens.size() > (size_t{1} << 30))
    throw UsageError(where + ": " + std::to_string(data.tokens.size()) + " tokens is more than supported (2^30)");
  const size_t n = data.tokens.size();
  if (!data.scores.empty() && data.scores.size() != n)
    throw UsageError(where + ": " + std::to_string(data.scores.size()) + " scores for " + std::to_string(n) +
                     " tokens; the model file must give one score per token");
  if (!data.types.empty() && data.types.size() != n)
    throw UsageError(where + ": " + std::to_string(data.types.size()) + " token types for " + std::to_string(n) +
                     " tokens; the model file must give one type per token");
  for (size_t i = 0; i < data.types.size(); ++i)
    if (data.types[i] < 0 || data.types[i] > 6)
      throw UsageError(where + ": token " + std::to_string(i) + " has type " + std::to_string(data.types[i]) +
                       ", but token types are 0..6");
  for (size_t i = 0; i < data.scores.size(); ++i)
    if (std::isnan(data.scores[i]))
      throw UsageError(where + ": token " + std::to_string(i) + " has a NaN score; scores must be numbers");
  auto check_special = [&](int id, const char* name) {
    if (id < -1 || id >= static_cast<int>(n))
      throw UsageError(where + ": " + name + " id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(n) + " tokens; fix the model file's " + name + " token id");
  };
  check_special(data.bos_id, "BOS");
  check_special(data.eos_id, "EOS");
  check_special(data.unk_id, "unknown");
  check_special(data.eot_id, "end-of-turn");
  check_special(data.eom_id, "end-of-message");
}

}  // namespace detail

void Tokenizer::set_special_tokens(const TokenizerData& d) {
  specials_.clear();
  for (size_t i = 0; i < d.tokens.size() && i < d.types.size(); ++i) {
    const auto t = static_cast<TokenType>(d.types[i]);
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) && !d.tokens[i].empty())
      specials_.push_back({d.tokens[i], static_cast<int>(i), t == TokenType::UserDefined});
  }
  // Longest first; equal lengths by id, so the result never depends on the sort's stability.
  std::sort(specials_.begin(), specials_.end(), [](const Special& a, const Special& b) {
    return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
  });
  controls_.clear();
  for (const Special& s : specials_)
    if (static_cast<TokenType>(d.types[static_cast<size_t>(s.id)]) == TokenType::Control) controls_.push_back(s.text);
  eog_ = end_of_generation_ids(d);
  adds_bos_ = d.add_bos && d.bos_id >= 0;
  adds_eos_ = d.add_eos && d.eos_id >= 0;
  defaulted_ = d.defaulted;
  defaults_for_ = d.defaults_for;
  if (d.normalizer != "" && d.normalizer != "nfc")
    throw UsageError("tokenizer: normalizer '" + d.normalizer + "' is not supported; supported are nfc and none");
  normalizer_ = d.normalizer;
  normalizer_origin_ = d.normalizer_origin;
}

std::vector<int> Tokenizer::encode_parts(std::string_view text, bool add_special, bool controls) const {
  // Fragments: raw text (id -1) or a matched token. Each token matched verbatim (user-defined ones
  // always, control and unknown ones with `controls`), longest first, splits every raw fragment at
  // each of its occurrences (leftmost first).
  struct Frag {
    std::string_view text;
    int id;
  };
  std::vector<Frag> frags{{text, -1}};
  for (const Special& sp : specials_) {
    if (!controls && !sp.user_defined) continue;
    std::vector<Frag> next;
    for (const Frag& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t at = rest.find(sp.text); at != std::string_view::npos; at = rest.find(sp.text)) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({std::string_view(), sp.id});
        rest = rest.substr(at + sp.text.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    frags = std::move(next);
  }
  std::vector<int> out;
  if (add_special && adds_bos_) out.push_back(bos());
  for (const Frag& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      const std::vector<int> ids = normalizer_.empty() ? encode_text(f.text) : encode_text(nfc_normalize(f.text));
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }
  if (add_special && adds_eos_) out.push_back(eos());
  return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerData& data) {
  if (data.model == "llama") return detail::make_spm_tokenizer(data);
  if (data.model == "gpt2") return detail::make_bpe_tokenizer(data);
  throw UsageError("tokenizer model '" + data.model +
                   "' is not supported; supported are 'llama' (SentencePiece BPE) and 'gpt2' (byte-level BPE)");
}

namespace {

int32_t read_i32(const char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only, as llama2.c itself
  return v;
}

bool is_byte_piece(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

}  // namespace

TokenizerData read_llama2c_tokenizer(const std::string& path, int vocab_size) {
  const std::string what = "llama2.c tokenizer file '" + path + "'";
  if (vocab_size <= 0)
    throw UsageError(what + ": the model's vocab_size is " + std::to_string(vocab_size) +
                     "; it must be positive (is the checkpoint corrupt?)");
  // A regular file of at most 1 GiB (a device such as /dev/null, a FIFO or a directory is refused).
  const uintmax_t fsize = check_regular_file(path, "llama2.c tokenizer file", uint64_t{1} << 30);
  // Every record needs at least 8 bytes (score + length): reject before allocating.
  if (4 + 8 * static_cast<uintmax_t>(vocab_size) > fsize)
    throw UsageError(what + ": " + std::to_string(fsize) + " bytes cannot hold " + std::to_string(vocab_size) +
                     " tokens; the tokenizer does not match the model (or the file is truncated)");
  const std::string buf = read_file(path, "llama2.c tokenizer file");
  if (buf.size() != fsize) throw UsageError(what + ": the file changed while it was read; retry");

  TokenizerData d;
  d.model = "llama";
  d.pre = "default";
  d.bos_id = vocab_size > 1 ? 1 : -1;
  d.eos_id = vocab_size > 2 ? 2 : -1;
  d.unk_id = 0;
  d.add_bos = true;
  d.add_space_prefix = true;
  d.space_is_plain = true;
  d.tokens.reserve(vocab_size);
  d.scores.reserve(vocab_size);
  d.types.reserve(vocab_size);

  const int32_t max_len = read_i32(buf.data());
  if (max_len <= 0)
    throw UsageError(what + ": max_token_length is " + std::to_string(max_len) +
                     "; it must be positive (is this a llama2.c tokenizer file?)");
  size_t off = 4;
  for (int i = 0; i < vocab_size; ++i) {
    if (buf.size() - off < 8)
      throw UsageError(what + ": the file ends inside token " + std::to_string(i) + " of " +
                       std::to_string(vocab_size) + "; the file is truncated or belongs to a smaller vocabulary");
    float score;
    std::memcpy(&score, buf.data() + off, 4);
    const int32_t len = read_i32(buf.data() + off + 4);
    off += 8;
    if (len < 0 || static_cast<size_t>(len) > buf.size() - off)
      throw UsageError(what + ": token " + std::to_string(i) + " has length " + std::to_string(len) + " but only " +
                       std::to_string(buf.size() - off) + " bytes remain; the file is corrupt or truncated");
    if (std::isnan(score))
      throw UsageError(what + ": token " + std::to_string(i) + " has a NaN score; the file is corrupt");
    std::string piece(buf.data() + off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    TokenType t = TokenType::Normal;
    if (i == 0)
      t = TokenType::Unknown;
    else if (i == 1 || i == 2)
      t = TokenType::Control;
    else if (i <= 258 && is_byte_piece(piece))
      t = TokenType::Byte;
    d.tokens.push_back(std::move(piece));
    d.scores.push_back(score);
    d.types.push_back(static_cast<int>(t));
  }
  if (off != buf.size())
    throw UsageError(what + ": " + std::to_string(buf.size() - off) + " bytes remain after " +
                     std::to_string(vocab_size) +
                     " tokens; the tokenizer holds more tokens than the model's vocabulary — use the "
                     "tokenizer file that belongs to this model");
  return d;
}

}  // namespace repro
