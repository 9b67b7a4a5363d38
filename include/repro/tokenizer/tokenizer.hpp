// Tokenizers: SentencePiece-style BPE (GGUF `tokenizer.ggml.model = llama`, llama2.c tok*.bin) and
// GPT-2 style byte-level BPE (`tokenizer.ggml.model = gpt2`, Llama-3 / Qwen2 / SmolLM pre-tokenizers via PCRE2).
#pragma once
#include <algorithm>
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
  int eot_id = -1, eom_id = -1;      // end of turn / end of message (tokenizer.ggml.eot_token_id, eom_token_id)
  bool add_bos = true;               // encode(text, true) starts with BOS
  bool add_eos = false;              // encode(text, true) ends with EOS
  // The keys the file lacks whose values came from tokenizer_defaults() ("add_bos_token",
  // "add_eos_token", "bos_token_id", "eos_token_id"), and what chose them ("pre-tokenizer llama-bpe").
  std::vector<std::string> defaulted;
  std::string defaults_for;
  // Unicode normalization applied to text before it is split (never to the text of a token matched
  // verbatim): "" none, "nfc" canonical composition. normalizer_origin says how it is known
  // (tokenizer_normalizer: "pre-tokenizer qwen2", "key repro.tokenizer.normalizer").
  std::string normalizer;
  std::string normalizer_origin;
  bool add_space_prefix = true;      // llama: prepend a space to the text before encoding
  bool space_is_plain = false;       // llama2.c files spell space as ' ' rather than U+2581
};

// What a GGUF tokenizer means by the keys it lacks (tokenizer.ggml.add_bos_token, add_eos_token,
// bos_token_id, eos_token_id), as llama.cpp reads such files:
//   model llama (SentencePiece): add BOS, no EOS; BOS id 1, EOS id 2 (when inside the vocabulary).
//   model gpt2 (byte-level BPE): no EOS; BOS added for the pre-tokenizers llama3, llama-v3,
//     llama-bpe, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano, tekken and chameleon,
//     not for the others (default, gpt2, gpt-2, qwen2, smollm, starcoder, deepseek-*, ...). No default
//     ids: llama.cpp's placeholder 11 for BPE files is a comma in most vocabularies, so a BPE file
//     without bos_token_id has no BOS here.
struct TokenizerDefaults {
  bool add_bos = false;
  bool add_eos = false;
  int bos_id = -1, eos_id = -1;  // -1: no default id
  std::string origin;            // what chose them: "tokenizer model llama", "pre-tokenizer llama-bpe"
};
TokenizerDefaults tokenizer_defaults(const std::string& model, const std::string& pre);

// The Unicode normalization a vocabulary's text needs before it is split. A GGUF file has no
// llama.cpp key for it (Hugging Face keeps it in tokenizer.json's "normalizer"), so it is known:
//   1. from the project's key repro.tokenizer.normalizer ("nfc" or "none") when the file has it
//      (`model synth --normalizer` writes it; a user can add it to any file);
//   2. else from the pre-tokenizer: "qwen2" (Qwen2, Qwen2.5, Qwen3, QwQ: their tokenizer.json has
//      {"type": "NFC"}) means NFC; every other pre-tokenizer and SentencePiece means none.
// `model info` and `tokenize` show it and where it came from. Returns "nfc" or "".
std::string tokenizer_normalizer(const std::string& model, const std::string& pre);

// Canonical composition (NFC, Debian's libutf8proc) of the well-formed UTF-8 runs of text; bytes
// that are not well-formed UTF-8 are kept as they are, between the normalized runs.
std::string nfc_normalize(std::string_view text);

// End of generation (EOG): the tokens after which a model has finished its answer. The engine
// stops a sequence at any of them (and at a generated BOS). The set is, as llama.cpp builds it:
// EOS, the end-of-turn and end-of-message ids the file names (eot_id, eom_id), and every control
// or user-defined token whose text is one of end_of_turn_texts(). When a vocabulary has <|return|>
// and <|call|> (gpt-oss's harmony format), its <|end|> ends a message, not the answer, and is left
// out. A token of another type (normal text) is never taken by its text.
const std::vector<std::string>& end_of_turn_texts();
// The EOG ids of the data, ascending.
std::vector<int> end_of_generation_ids(const TokenizerData& data);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids; with add_special, prepends BOS when the model's add_bos is set and it has one, and
  // appends EOS when its add_eos is set and it has one. The text of every user-defined token (type
  // user-defined: <think>, <tool_call>) is matched verbatim and becomes that token, longest first,
  // before the rest is split, as llama.cpp and Hugging Face do whether or not special tokens are
  // parsed; the text between them is normalized (normalizer(): NFC for Qwen vocabularies, as
  // Hugging Face does) and encoded on its own. Text that spells a control token
  // (<|im_start|>) is encoded as ordinary text.
  std::vector<int> encode(std::string_view text, bool add_special) const { return encode_parts(text, add_special, false); }
  // As encode, but the text of every special token (types control, user-defined and unknown, e.g.
  // <|im_start|>, </s>) is matched verbatim and becomes that token, as llama.cpp's parse_special:
  // longest special tokens first, the text between them encoded on its own. For prompts rendered
  // by a chat template, and completion prompts under --parse-special (as Hugging Face, vLLM's
  // /v1/completions and llama.cpp's server encode them).
  std::vector<int> encode_special(std::string_view text, bool add_special) const {
    return encode_parts(text, add_special, true);
  }
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
  // The token's text as the vocabulary spells it (<|eot_id|>, "\xe2\x96\x81the"); piece() where the
  // tokenizer keeps no vocabulary text.
  virtual std::string token_text(int id) const { return piece(id); }
  // The lowest id whose token_text is text, else the lowest id whose (non-empty) piece is text;
  // -1 when none is.
  int find_token(std::string_view text) const;
  // The end-of-generation set (see end_of_generation_ids), ascending; add_eog() adds an id (a
  // --stop-token) and makes this a new instance(). A tokenizer built without the data (no
  // set_special_tokens) has an empty eog() and is_eog(id) is id == eos().
  const std::vector<int>& eog() const { return eog_; }
  bool is_eog(int id) const {
    if (id < 0) return false;
    if (eog_.empty()) return id == eos();
    return std::binary_search(eog_.begin(), eog_.end(), id);
  }
  void add_eog(int id);
  // The add_bos / add_eos settings encode follows, and the keys among add_bos_token, add_eos_token,
  // bos_token_id, eos_token_id that were defaulted (TokenizerData::defaulted, defaults_for).
  bool adds_bos() const { return adds_bos_; }
  bool adds_eos() const { return adds_eos_; }
  const std::vector<std::string>& defaulted() const { return defaulted_; }
  const std::string& defaults_for() const { return defaults_for_; }
  // The normalization applied before splitting ("" none, "nfc") and what chose it.
  const std::string& normalizer() const { return normalizer_; }
  const std::string& normalizer_origin() const { return normalizer_origin_; }
  virtual std::string kind() const = 0;  // "llama (SentencePiece BPE)" / "gpt2 (byte-level BPE, <pre>)"
  // A number no other tokenizer of this process has had: caches keyed by it (the vocabulary trie
  // of constrained decoding) never mistake a new tokenizer at a freed one's address for the old one.
  uint64_t instance() const { return instance_; }

 protected:
  // Called by each tokenizer's constructor: the special tokens encode and encode_special match.
  void set_special_tokens(const TokenizerData& d);
  // The ids of text that no token matched verbatim came out of: no BOS, no EOS, no special tokens.
  virtual std::vector<int> encode_text(std::string_view text) const = 0;

 private:
  struct Special {
    std::string text;
    int id;
    bool user_defined;  // matched by encode too; the others (control, unknown) by encode_special only
  };
  std::vector<int> encode_parts(std::string_view text, bool add_special, bool controls) const;
  std::vector<Special> specials_;                      // longest first
  std::vector<std::string> controls_;                  // the control tokens' texts, longest first
  std::vector<int> eog_;                               // ascending; empty until set_special_tokens
  bool adds_bos_ = false, adds_eos_ = false;
  std::vector<std::string> defaulted_;
  std::string defaults_for_;
  std::string normalizer_, normalizer_origin_;
  static uint64_t next_instance();
  uint64_t instance_ = next_instance();
};

// Builds the tokenizer the data describes; throws UsageError on inconsistent data.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerData& data);

// Reads a llama2.c tokenizer file (tok512.bin, tokenizer.bin) for a model of vocab_size tokens.
TokenizerData read_llama2c_tokenizer(const std::string& path, int vocab_size);

}  // namespace repro
