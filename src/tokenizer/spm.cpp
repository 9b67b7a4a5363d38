// SentencePiece-style BPE (GGUF tokenizer.ggml.model = "llama", llama2.c tok*.bin).
//
// Encoding: optional space prefix, spaces spelled U+2581 (or ' ' for llama2.c files), the text cut
// into UTF-8 code points, then the adjacent pair whose concatenation is a vocabulary token with the
// highest score is merged, leftmost first on ties, until no pair is a token. Candidate pairs live in
// a priority queue over a doubly linked list of symbols, so a prompt of n code points costs
// O(n log n). A symbol left over that is not a token becomes its byte tokens "<0xXX>" (byte
// fallback) or, without those, the unknown token. Control, unknown, byte and unused tokens are
// never matched against plain text.
#include <array>
#include <cstdint>
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/tokenizer/internal.hpp"

namespace repro::detail {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 0..255 when s spells a byte token "<0xXX>", else -1.
int byte_piece_value(const std::string& s) {
  if (s.size() != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
  const int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const TokenizerData& d) : d_(d) {
    validate_common(d_);
    set_special_tokens(d_);
    const size_t n = d_.tokens.size();
    if (d_.scores.empty()) d_.scores.assign(n, 0.0f);
    byte_id_.fill(-1);
    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const TokenType t = token_type(d_, i);
      const std::string& text = d_.tokens[i];
      const int bv = byte_piece_value(text);
      const bool byte_like = bv >= 0 && (t == TokenType::Byte || t == TokenType::Normal || t == TokenType::Undefined);
      if (byte_like) {
        if (byte_id_[bv] < 0) byte_id_[bv] = static_cast<int>(i);
        pieces_[i] = std::string(1, static_cast<char>(bv));
        continue;
      }
      if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused || t == TokenType::Byte) {
        pieces_[i].clear();  // never emitted as text, never matched in text
        continue;
      }
      if (!text.empty()) vocab_.emplace(text, static_cast<int>(i));  // first id wins on duplicates
      if (split_at_spaces_ && has_inner_space(text)) split_at_spaces_ = false;
      pieces_[i] = d_.space_is_plain ? text : replace_marks(text);
    }
  }

  std::vector<int> encode_text(std::string_view text) const override {
    std::vector<int> out;
    if (text.empty()) return out;

    // Normalize: optional prefix space, spaces to U+2581.
    std::string norm;
    norm.reserve(text.size() * 2 + 3);
    const std::string_view space = d_.space_is_plain ? std::string_view(" ") : kSpaceMark;
    if (d_.add_space_prefix) norm += space;
    for (char c : text) {
      if (c == ' ')
        norm += space;
      else
        norm += c;
    }

    // Merges never cross a point where a space follows a non-space when no token holds such a
    // pair (SentencePiece's split-by-whitespace vocabularies): then each word is merged on its own,
    // which keeps the queue small and in cache. Otherwise the whole text is one chunk.
    Scratch scratch;
    size_t chunk = 0;
    if (split_at_spaces_) {
      bool prev_space = true;
      for (size_t i = 0; i < norm.size();) {
        const bool is_space = norm.compare(i, space.size(), space) == 0;
        if (is_space && !prev_space) {
          encode_chunk(std::string_view(norm).substr(chunk, i - chunk), scratch, out);
          chunk = i;
        }
        prev_space = is_space;
        i += is_space ? space.size() : utf8_char_len(norm, i);
      }
    }
    encode_chunk(std::string_view(norm).substr(chunk), scratch, out);
    return out;
  }

  std::string piece(int id) const override {
    check_id(id, vocab_size());
    return pieces_[static_cast<size_t>(id)];
  }
  int vocab_size() const override { return static_cast<int>(d_.tokens.size()); }
  int bos() const override { return d_.bos_id; }
  int eos() const override { return d_.eos_id; }
  std::string token_text(int id) const override {
    check_id(id, vocab_size());
    return d_.tokens[static_cast<size_t>(id)];
  }
  std::string kind() const override { return "llama (SentencePiece BPE)"; }

 private:
  struct Symbol {
    uint32_t start, len;  // bytes of the chunk; len 0 once merged into its left neighbour
    int prev, next;
  };
  struct Cand {
    float score;
    int left, right;
    uint32_t len;  // combined length when queued: a stale entry no longer matches
  };
  struct Worse {
    bool operator()(const Cand& a, const Cand& b) const {
      if (a.score != b.score) return a.score < b.score;
      return a.left > b.left;  // leftmost first on ties
    }
  };
  struct Scratch {
    std::vector<Symbol> sym;
    std::vector<Cand> heap;
  };

  // Merges one chunk (one symbol per code point, a doubly linked list, candidate pairs in a
  // binary heap) and appends its tokens.
  void encode_chunk(std::string_view text, Scratch& sc, std::vector<int>& out) const {
    if (text.empty()) return;
    if (text.size() > UINT32_MAX / 2)
      throw UsageError("tokenizer: a prompt of " + std::to_string(text.size()) +
                       " bytes without spaces is too long; split it");
    auto& sym = sc.sym;
    auto& heap = sc.heap;
    sym.clear();
    heap.clear();
    for (size_t i = 0; i < text.size();) {
      const auto len = static_cast<uint32_t>(utf8_char_len(text, i));
      const int idx = static_cast<int>(sym.size());
      sym.push_back({static_cast<uint32_t>(i), len, idx - 1, idx + 1});
      i += len;
    }
    sym.back().next = -1;

    const Worse worse;
    auto try_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const std::string_view joined(text.data() + sym[l].start, sym[l].len + sym[r].len);
      auto it = vocab_.find(joined);
      if (it == vocab_.end()) return;
      heap.push_back({d_.scores[it->second], l, r, static_cast<uint32_t>(joined.size())});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i) try_pair(static_cast<int>(i), static_cast<int>(i + 1));

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      const Cand c = heap.back();
      heap.pop_back();
      Symbol& l = sym[c.left];
      Symbol& r = sym[c.right];
      if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_pair(l.prev, c.left);
      try_pair(c.left, l.next);
    }

    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string_view s(text.data() + sym[i].start, sym[i].len);
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (char ch : s) {
        const int b = byte_id_[static_cast<unsigned char>(ch)];
        if (b >= 0) {
          out.push_back(b);
        } else if (d_.unk_id >= 0) {
          out.push_back(d_.unk_id);
          break;  // one unknown token per symbol
        } else {
          throw UsageError("tokenizer: the text contains '" + std::string(s) +
                           "', which the vocabulary cannot spell (no byte-fallback and no unknown token); "
                           "remove it from the prompt");
        }
      }
    }
  }

  // Whether s holds a space (as the data spells it) right after something that is not one.
  bool has_inner_space(std::string_view s) const {
    const std::string_view space = d_.space_is_plain ? std::string_view(" ") : kSpaceMark;
    bool prev_space = true;
    for (size_t i = 0; i < s.size();) {
      const bool is_space = s.compare(i, space.size(), space) == 0;
      if (is_space && !prev_space) return true;
      prev_space = is_space;
      i += is_space ? space.size() : 1;
    }
    return false;
  }

  static std::string replace_marks(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
        out += ' ';
        i += kSpaceMark.size();
      } else {
        out += s[i++];
      }
    }
    return out;
  }

  TokenizerData d_;
  TokenMap vocab_;                 // text of normal / user-defined tokens -> id
  std::array<int, 256> byte_id_{}; // byte value -> its byte token, or -1
  std::vector<std::string> pieces_;
  bool split_at_spaces_ = true;    // no token has a space right after a non-space
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const TokenizerData& data) {
  return std::make_unique<SpmTokenizer>(data);
}

}  // namespace repro::detail
