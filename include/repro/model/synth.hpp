// Seeded synthetic Llama-family models (llama, qwen2, qwen3, and with experts llama/Mixtral, qwen2moe,
// qwen3moe): `repro-audit model synth`. The weights come from an integer PRNG
// (splitmix64) and are turned into floats with exact operations only (an integer times a power of
// two), so the same options give a bit-identical GGUF on every machine and compiler.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

struct SynthOptions {
  // GGUF architecture: llama (normal RoPE), qwen2 (neox RoPE, Q/K/V biases), qwen3 (neox RoPE,
  // per-head Q/K RMSNorm, attention.key_length written); mixtures of experts: llama with n_experts > 0
  // (Mixtral), qwen2moe (qwen2's attention, a shared expert with a sigmoid gate), qwen3moe (qwen3's
  // attention).
  std::string arch = "llama";
  uint64_t seed = 1;
  int dim = 128;
  int hidden_dim = 384;
  int n_layers = 4;
  int n_heads = 4;
  int n_kv_heads = 2;
  int vocab_size = 512;
  int context_length = 512;
  // Weight matrices: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, or q4_k_m (Q4_K with Q6_K for the
  // classifier and some layers' attn_v and ffn_down, as llama-quantize mixes it; norm vectors stay f32). The
  // block types quantize with the project's own quantizer (repro/common/quant.hpp); --dim and
  // --hidden must then be multiples of the block size (32, or 256 for the k-quants).
  std::string type = "f32";
  bool tied = true;          // no output.weight: the classifier reuses token_embd
  int head_dim = 0;          // per head; 0: dim / heads (qwen3 models often have wider heads)
  // "" (none), chatml, llama3, llama3.1 or mistral: writes a tokenizer.chat_template of that format
  // and puts its special tokens (control tokens) at the end of the vocabulary, with EOS set to the
  // template's end-of-turn token (<|im_end|>, <|eot_id|>; mistral keeps </s>).
  std::string chat_template;
  bool rope_freqs = false;   // llama: a rope_freqs tensor of Llama 3.1-style frequency divisors
  // "" (no key), "nfc" or "none": writes the project's key repro.tokenizer.normalizer, which the
  // reader takes over the pre-tokenizer's default (tokenizer_normalizer in tokenizer.hpp).
  std::string normalizer;
  // Mixture of experts: n_experts SwiGLU experts per layer (each hidden_dim wide), n_experts_used
  // per token; written as llama.cpp writes them (<arch>.expert_count, <arch>.expert_used_count,
  // ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps; qwen2moe adds the shared expert
  // ffn_{gate,up,down}_shexp, hidden_dim wide, and its gate ffn_gate_inp_shexp). The routers stay
  // F32, as llama.cpp's quantizer leaves them. 0: a dense model (llama, qwen2, qwen3).
  int n_experts = 0;
  int n_experts_used = 0;
};

// The --arch names synth_model accepts: "llama, qwen2, qwen3".
std::string synth_archs();

// The smallest vocabulary synth_tokenizer can build: <unk>, <s>, </s>, 256 byte tokens and the
// single-character pieces.
int synth_min_vocab();

// A small valid SentencePiece-BPE (llama) vocabulary of exactly vocab_size tokens: <unk>, <s>,
// </s>, <0x00>..<0xFF>, single characters (U+2581, letters, digits, punctuation), then pieces made by
// joining two existing pieces (common English words first), with decreasing scores.
// Throws UsageError when vocab_size is below synth_min_vocab() or above 262144.
TokenizerData synth_tokenizer(int vocab_size);

// The --type names synth_model accepts: "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m".
std::string synth_types();

// The GGUF v3 file bytes of the model the options describe. Throws UsageError naming the flag
// (--dim, --heads, ...) when the options are inconsistent or the model would be too large.
std::string synth_model(const SynthOptions& opts);

// synth_model written atomically to path.
void write_synth_model(const SynthOptions& opts, const std::string& path);

// Named synthesized models, usable wherever a model path is (`--model synth:NAME`):
//   synth:100m       llama, dim 768, 12 layers, 12/12 heads, hidden 2048, vocab 32000, context 1024, f16
//   synth:100m-long  the same weights with a context of 4096
//   synth:long       llama, dim 128, 4 layers, 2/2 heads, hidden 384, vocab 512, context 4096, f32
// Each is written once into the cache directory (repro/common/util.hpp cache_dir()) and reused.
struct SynthSpec {
  const char* name;         // "synth:100m"
  const char* file;         // file name in the cache directory
  const char* description;  // one line
  SynthOptions options;
};
const std::vector<SynthSpec>& synth_specs();
std::string synth_spec_names();                    // "synth:100m, synth:100m-long, synth:long"
bool is_synth_spec(const std::string& model);      // starts with "synth:"
const SynthSpec& find_synth_spec(const std::string& model);  // UsageError listing the names
// The path of a named synthesized model, written into the cache directory the first time (a note
// on stderr says so); any other model argument is returned unchanged.
std::string resolve_model_spec(const std::string& model);

}  // namespace repro
