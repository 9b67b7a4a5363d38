// GPT-2 style byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): Llama-3, Qwen2, SmolLM, GPT-2 vocabularies.
//
// Encoding: the text is cut into pre-tokens by the model's pre-tokenizer regex (PCRE2, UTF + UCP,
// JIT when available); bytes that no alternative matches (invalid UTF-8) form pre-tokens of their
// own, so every byte of the input is encoded. Each pre-token's bytes are spelled with GPT-2's
// byte-to-unicode alphabet, one symbol per byte, and the adjacent pair with the lowest merge rank is
// merged (leftmost first) until no pair has a merge: a priority queue over a linked list of
// symbols, O(n log n), no cache. The Llama-3 pre-tokenizer also takes a pre-token that is a token
// as it stands ("ignore_merges", as its tokenizer.json says).
//
// This file encodes the text between the tokens Tokenizer::encode matches verbatim (user-defined
// ones such as <think>; control ones such as <|begin_of_text|> only in encode_special): text that
// spells a control token is otherwise encoded as ordinary bytes. BOS (EOS) is added only when asked
// for, when the model's add_bos (add_eos) is set, and when the model has one.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/tokenizer/internal.hpp"

namespace repro::detail {
namespace {

// GPT-2's pre-tokenizer.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3: case-insensitive contractions, one non-letter glued before a word, digits in runs of
// at most three, punctuation runs keep their trailing newlines.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3, but every digit is a pre-token of its own.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// SmolLM (and StarCoder-style vocabularies): every digit is split out first, then the pieces
// between digits are cut by a GPT-2 pattern (without GPT-2's last alternative, plain \s+).
constexpr const char* kDigitPattern = R"(\p{N})";
constexpr const char* kSmollmPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

struct PreSpec {
  const char* pattern;
  bool ignore_merges;
  const char* name;
  const char* first = nullptr;  // a pattern that splits the text before `pattern` cuts each piece
};

PreSpec pre_spec(const std::string& pre) {
  if (pre == "default" || pre == "gpt2" || pre.empty()) return {kGpt2Pattern, false, "gpt2"};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe")
    return {kLlama3Pattern, true, "llama3"};
  if (pre == "qwen2") return {kQwen2Pattern, false, "qwen2"};
  if (pre == "smollm" || pre == "starcoder") return {kSmollmPattern, false, "smollm", kDigitPattern};
  throw UsageError("tokenizer pre-tokenizer '" + pre +
                   "' is not supported; supported are 'default'/'gpt2', 'llama-bpe'/'llama3', 'qwen2' and "
                   "'smollm'/'starcoder'");
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes stand for themselves, the
// other 68 bytes take the code points 256, 257, ... in byte order.
struct ByteAlphabet {
  std::array<uint32_t, 256> cp{};
  std::array<std::string, 256> utf8;
  std::unordered_map<uint32_t, uint8_t> back;
  ByteAlphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = keep ? static_cast<uint32_t>(b) : next++;
      append_utf8(utf8[b], cp[b]);
      back.emplace(cp[b], static_cast<uint8_t>(b));
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Decodes one well-formed UTF-8 code point at s[i] (caller checked the length).
uint32_t decode_cp(std::string_view s, size_t i, size_t len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (len == 1) return b0;
  uint32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

class Regex {
 public:
  explicit Regex(const char* pattern) {
    int err = 0;
    PCRE2_SIZE erroff = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UsageError(std::string("tokenizer: PCRE2 cannot compile the pre-tokenizer pattern: ") +
                       reinterpret_cast<const char*>(msg) + "; this PCRE2 build lacks Unicode support");
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for each pre-token, covering every byte of text in order.
  template <class F>
  void split(std::string_view text, F&& f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (!md) throw std::bad_alloc();
    struct Free {
      pcre2_match_data* m;
      ~Free() { pcre2_match_data_free(m); }
    } guard{md};
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, 0, md, nullptr)
                    : pcre2_match(code_, subject, text.size(), pos, 0, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
        rc = pcre2_match(code_, subject, text.size(), pos, 0, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        f(pos, text.size());
        return;
      }
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw UsageError(std::string("tokenizer: the pre-tokenizer regex failed on the text: ") +
                         reinterpret_cast<const char*>(msg) + "; shorten or simplify the prompt");
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0];
      size_t e = ov[1];
      if (b > pos) f(pos, b);  // bytes no alternative matched (invalid UTF-8)
      if (b >= text.size()) return;
      if (e <= b) e = b + utf8_char_len(text, b);  // never loop on an empty match
      f(b, e);
      pos = e;
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// The pre-tokenizer of a spec: its `first` pattern (if any) splits the text, then its main pattern
// cuts every piece; f(begin, end) in text offsets, covering every byte in order.
class PreTokenizer {
 public:
  explicit PreTokenizer(const PreSpec& spec)
      : main_(spec.pattern), first_(spec.first ? std::make_unique<Regex>(spec.first) : nullptr) {}
  template <class F>
  void split(std::string_view text, F&& f) const {
    if (!first_) return main_.split(text, f);
    first_->split(text, [&](size_t b, size_t e) {
      main_.split(text.substr(b, e - b), [&](size_t b2, size_t e2) { f(b + b2, b + e2); });
    });
  }

 private:
  Regex main_;
  std::unique_ptr<Regex> first_;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const TokenizerData& d) : d_(d) {
    validate_common(d_);
    set_special_tokens(d_);
    const PreSpec spec = pre_spec(d_.pre);
    regex_ = std::make_unique<PreTokenizer>(spec);
    ignore_merges_ = spec.ignore_merges;
    pre_name_ = spec.name;
    const size_t n = d_.tokens.size();
    const ByteAlphabet& ab = alphabet();

    for (size_t i = 0; i < n; ++i) {
      const TokenType t = token_type(d_, i);
      if (t == TokenType::Control || t == TokenType::Unused) continue;
      all_.emplace(d_.tokens[i], static_cast<int>(i));  // first id wins on duplicates
    }
    byte_id_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      auto it = all_.find(ab.utf8[b]);
      if (it != all_.end()) byte_id_[b] = it->second;
      else if (d_.unk_id < 0)
        throw UsageError("tokenizer (model 'gpt2'): the vocabulary has no token for byte " + std::to_string(b) +
                         " and no unknown token; a byte-level BPE vocabulary must spell all 256 bytes");
    }

    merges_.reserve(d_.merges.size());
    for (size_t r = 0; r < d_.merges.size(); ++r) {
      const std::string& m = d_.merges[r];
      int a = -1, b = -1;
      // The separator is a space that leaves a token on both sides (tokens themselves hold no
      // raw spaces in byte-level vocabularies, but try every split to be safe).
      for (size_t sp = m.find(' ', 1); sp != std::string::npos && a < 0; sp = m.find(' ', sp + 1)) {
        auto ia = all_.find(std::string_view(m).substr(0, sp));
        auto ib = all_.find(std::string_view(m).substr(sp + 1));
        if (ia != all_.end() && ib != all_.end()) {
          a = ia->second;
          b = ib->second;
        }
      }
      if (a < 0)
        throw UsageError("tokenizer (model 'gpt2'): merge " + std::to_string(r) + " '" + m +
                         "' does not name two tokens of the vocabulary; the model file's merges do not "
                         "match its tokens");
      auto ir = all_.find(d_.tokens[a] + d_.tokens[b]);
      if (ir == all_.end())
        throw UsageError("tokenizer (model 'gpt2'): merge " + std::to_string(r) + " '" + m +
                         "' makes a token that is not in the vocabulary; the model file's merges do not "
                         "match its tokens");
      merges_.emplace(key(a, b), Merge{static_cast<int>(r), ir->second});  // lowest rank wins
    }

    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const TokenType t = token_type(d_, i);
      const std::string& s = d_.tokens[i];
      if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) continue;
      if (t == TokenType::UserDefined) {
        pieces_[i] = s;  // user-defined tokens are stored as plain text
        continue;
      }
      std::string out;
      for (size_t k = 0; k < s.size();) {
        const size_t len = utf8_char_len(s, k);
        const bool ok = len > 1 || static_cast<unsigned char>(s[k]) < 0x80;
        auto it = ok ? ab.back.find(decode_cp(s, k, len)) : ab.back.end();
        if (it != ab.back.end())
          out += static_cast<char>(it->second);
        else
          out.append(s, k, len);  // not a byte-alphabet character: keep its UTF-8
        k += len;
      }
      pieces_[i] = std::move(out);
    }
  }

  std::vector<int> encode_text(std::string_view text) const override {
    std::vector<int> out;
    Scratch scratch;
    regex_->split(text, [&](size_t b, size_t e) { encode_word(text.substr(b, e - b), scratch, out); });
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
  std::string kind() const override { return "gpt2 (byte-level BPE, " + pre_name_ + ")"; }

 private:
  struct Merge {
    int rank, result;
  };
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  struct Symbol {
    int id, prev, next;
    bool alive;
  };
  struct Cand {
    int rank, left, right, a, b;
  };
  struct Worse {
    bool operator()(const Cand& x, const Cand& y) const {
      if (x.rank != y.rank) return x.rank > y.rank;
      return x.left > y.left;  // leftmost first on ties
    }
  };
  struct Scratch {
    std::string spelled;
    std::vector<Symbol> sym;
    std::vector<Cand> heap;
  };

  // BPE on one pre-token: one symbol per byte in a doubly linked list, candidate pairs in a
  // binary heap by (rank, position); appends the resulting ids.
  void encode_word(std::string_view word, Scratch& sc, std::vector<int>& out) const {
    if (word.empty()) return;
    const ByteAlphabet& ab = alphabet();
    if (ignore_merges_) {
      std::string& spelled = sc.spelled;
      spelled.clear();
      for (char c : word) spelled += ab.utf8[static_cast<unsigned char>(c)];
      auto it = all_.find(spelled);
      if (it != all_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    if (word.size() == 1) {  // nothing to merge
      const int id = byte_id_[static_cast<unsigned char>(word[0])];
      out.push_back(id >= 0 ? id : d_.unk_id);
      return;
    }
    auto& sym = sc.sym;
    auto& heap = sc.heap;
    sym.clear();
    heap.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      const int id = byte_id_[static_cast<unsigned char>(word[i])];
      const int idx = static_cast<int>(i);
      sym.push_back({id >= 0 ? id : d_.unk_id, idx - 1, idx + 1, true});
    }
    sym.back().next = -1;

    const Worse worse;
    auto try_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      auto it = merges_.find(key(sym[l].id, sym[r].id));
      if (it == merges_.end()) return;
      heap.push_back({it->second.rank, l, r, sym[l].id, sym[r].id});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i) try_pair(static_cast<int>(i), static_cast<int>(i + 1));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      const Cand c = heap.back();
      heap.pop_back();
      Symbol& l = sym[c.left];
      Symbol& r = sym[c.right];
      if (!l.alive || !r.alive || l.next != c.right || l.id != c.a || r.id != c.b) continue;  // stale
      l.id = merges_.at(key(c.a, c.b)).result;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_pair(l.prev, c.left);
      try_pair(c.left, l.next);
    }
    for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
  }

  TokenizerData d_;
  std::unique_ptr<PreTokenizer> regex_;
  bool ignore_merges_ = false;
  std::string pre_name_;
  TokenMap all_;                                 // token text -> id (no control / unused tokens)
  std::array<int, 256> byte_id_{};               // byte -> token of its alphabet character
  std::unordered_map<uint64_t, Merge> merges_;   // (left id, right id) -> rank, merged id
  std::vector<std::string> pieces_;
};

}  // namespace

std::vector<std::string> bpe_pre_tokenize(const std::string& pre, std::string_view text) {
  PreTokenizer re(pre_spec(pre));
  std::vector<std::string> out;
  re.split(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerData& data) {
  return std::make_unique<BpeTokenizer>(data);
}

}  // namespace repro::detail
