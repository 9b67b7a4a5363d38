// Pieces shared by the tokenizer implementations (tokenizer.cpp, tokenizer_spm.cpp,
// tokenizer_bpe.cpp). Not part of the public interface.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "repro/tokenizer/tokenizer.hpp"

namespace repro::detail {

// Hash that lets an unordered_map<std::string, ...> be searched with a string_view
// without building a temporary std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

// Length in bytes of the UTF-8 code point starting at s[i], when it is well formed (shortest
// form, no surrogates, <= U+10FFFF); 1 for a byte that does not start a well-formed code point.
size_t utf8_char_len(std::string_view s, size_t i);

// Checks what both tokenizer kinds need: a non-empty vocabulary, per-token arrays of the right
// length, special ids inside the vocabulary. Throws UsageError with one line naming the problem.
void validate_common(const TokenizerData& data);

// Token type of id (Normal when the data has no types).
TokenType token_type(const TokenizerData& data, size_t id);

// Throws UsageError when id is not a token of a vocabulary of n tokens.
void check_id(int id, int n);

// The pre-tokens the gpt2 pre-tokenizer `pre` cuts text into (exposed for tests).
std::vector<std::string> bpe_pre_tokenize(const std::string& pre, std::string_view text);

std::unique_ptr<Tokenizer> make_spm_tokenizer(const TokenizerData& data);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerData& data);

}  // namespace repro::detail
