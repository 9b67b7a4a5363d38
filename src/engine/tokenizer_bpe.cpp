// GPT-2 style byte-level BPE (GGUF tokenizer.ggml.model = "gpt2").
#include "repro/error.hpp"
#include "src/engine/tokenizer_internal.hpp"

namespace repro::detail {

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerData& data) {
  validate_common(data);
  throw UsageError("tokenizer model 'gpt2' (byte-level BPE) is not implemented yet in this build");
}

}  // namespace repro::detail
