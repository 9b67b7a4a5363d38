// Tokenizers: SentencePiece-style BPE (GGUF `tokenizer.ggml.model = llama`, llama2.c tok*.bin) and
// GPT-2 style byte-level BPE (`tokenizer.ggml.model = gpt2`, Llama-3 / Qwen2 / SmolLM pre-tokenizers via PCRE2).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace repro {

// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : int { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Everything a tokenizer needs, as read from a GGUF file or a llama2.c tokenizer file.
struct TokenizerData {
  std::string model = "llama";       // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre = "default";       // gpt2 pre-tokenizer: "default"/"gpt2", "llama-bpe"/"llama3", "qwen2", "smollm"
  std::vector<std::string> tokens;   // piece text; llama pieces use U+2581 for space (llama2.c: ' ')
  std::vector<float> scores;         // llama: merge priority (higher merges first)
  std::vector<int> types;            // TokenType per token; empty = all Normal
  std::vector<std::string> merges;   // gpt2: "a b" in rank order
  int bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = true;
  bool add_space_prefix = true;      // llama: prepend a space to the text before encoding
  bool space_is_plain = false;       // llama2.c files spell space as ' ' rather than U+2581
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids; prepends BOS when add_bos and the model has one. Text that spells a control
  // token is encoded as ordinary text.
  virtual std::vector<int> encode(std::string_view text, bool add_bos) const = 0;
  // As encode, but the text of every special token (types control, user-defined and unknown, e.g.
  // <|im_start|>, </s>) is matched verbatim and becomes that token, as llama.cpp's parse_special:
  // longest special tokens first, the text between them encoded on its own. For prompts rendered
  // by a chat template.
  std::vector<int> encode_special(std::string_view text, bool add_bos) const;
  // The text of every control token (type control: <|im_start|>, <|eot_id|>, </s>, ...), longest
  // first: text that encode_special turns into a turn marker of a chat template.
  const std::vector<std::string>& control_tokens() const { return controls_; }
  // The bytes one token contributes to the output text (control tokens give "").
  virtual std::string piece(int id) const = 0;
  // Concatenated pieces of ids (no leading-space stripping).
  std::string decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) out += piece(id);
    return out;
  }
  virtual int vocab_size() const = 0;
  virtual int bos() const = 0;
  virtual int eos() const = 0;
  virtual std::string kind() const = 0;  // "llama (SentencePiece BPE)" / "gpt2 (byte-level BPE, <pre>)"
  // A number no other tokenizer of this process has had: caches keyed by it (the vocabulary trie
  // of constrained decoding) never mistake a new tokenizer at a freed one's address for the old one.
  uint64_t instance() const { return instance_; }

 protected:
  // Called by each tokenizer's constructor: the special tokens encode_special matches.
  void set_special_tokens(const TokenizerData& d);

 private:
  std::vector<std::pair<std::string, int>> specials_;  // (text, id), longest first
  std::vector<std::string> controls_;                  // the control tokens' texts, longest first
  static uint64_t next_instance();
  uint64_t instance_ = next_instance();
};

// Builds the tokenizer the data describes; throws UsageError on inconsistent data.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerData& data);

// Reads a llama2.c tokenizer file (tok512.bin, tokenizer.bin) for a model of vocab_size tokens.
TokenizerData read_llama2c_tokenizer(const std::string& path, int vocab_size);

}  // namespace repro
