// A Llama-family model in memory: hyper-parameters, weights (each with its element type), tokenizer.
// Weight matrices are row-major [out][in] (GGUF ne = [in, out]); y = W x means y[o] = sum_i W[o][i] x[i].
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "repro/chat/chat.hpp"
#include "repro/common/dtype.hpp"
#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

// How router logits become expert weights (llama.cpp's <arch>.expert_gating_func: 1 softmax, 2 sigmoid).
enum class MoeGating { Softmax, Sigmoid };

struct ModelConfig {
  std::string arch = "llama";  // GGUF general.architecture: llama, qwen2, qwen3, qwen2moe, qwen3moe
  int dim = 0;             // embedding length
  int hidden_dim = 0;      // feed-forward length
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;      // GQA: n_heads / n_kv_heads query heads share one KV head
  int vocab_size = 0;
  int context_length = 0;
  int head_size = 0;       // per head (<arch>.attention.key_length); 0: dim / n_heads
  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  int q_dim() const { return head_dim() * n_heads; }     // width of Q and of the attention output
  int kv_dim() const { return head_dim() * n_kv_heads; }
  int rope_dim = 0;        // rotated dims per head (the first rope_dim of each head)
  bool rope_neox = false;  // pairs (i, i + rope_dim / 2) (qwen2, qwen3) instead of (2i, 2i+1) (llama)
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / <arch>.rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;
  // Mixture of experts (<arch>.expert_count > 0): each layer's feed-forward block is n_experts
  // SwiGLU experts of expert_hidden_dim, of which the router picks n_experts_used per token
  // (repro/engine/moe.hpp), plus a shared expert of shared_hidden_dim when > 0 (qwen2moe).
  int n_experts = 0;          // <arch>.expert_count; 0: a dense model
  int n_experts_used = 0;     // <arch>.expert_used_count (k of top-k)
  int expert_hidden_dim = 0;  // <arch>.expert_feed_forward_length (llama: feed_forward_length)
  int shared_hidden_dim = 0;  // <arch>.expert_shared_feed_forward_length (qwen2moe); 0: no shared expert
  MoeGating gating = MoeGating::Softmax;  // <arch>.expert_gating_func (absent: softmax)
  bool norm_topk = false;     // the k selected weights are divided by their sum (llama, qwen3moe)
  bool is_moe() const { return n_experts > 0; }
};

// One weight: its element type, its shape [rows][cols] (row-major; a vector is one row) and its
// data. `storage` keeps the data alive: the mapped model file for GGUF matrices, which stay in
// their stored type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and are read in place; an owned
// f32 array for norm gains and llama2.c checkpoints.
struct Tensor {
  DType dtype = DType::F32;
  int rows = 0, cols = 0;
  const void* data = nullptr;
  std::shared_ptr<const void> storage;

  bool empty() const { return data == nullptr; }
  size_t size() const { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }  // elements
  // The elements of an F32 tensor (std::logic_error for another dtype).
  const float* f32() const;
  static Tensor from_f32(std::vector<float> values, int rows, int cols);
};

struct LayerWeights {
  Tensor attn_norm;  // [dim]
  Tensor wq;         // [q_dim][dim]
  Tensor wk;         // [kv_dim][dim]
  Tensor wv;         // [kv_dim][dim]
  Tensor wo;         // [dim][q_dim]
  Tensor bq, bk, bv; // [q_dim], [kv_dim], [kv_dim]: qwen2's attention biases (empty otherwise)
  Tensor q_norm;     // [head_dim]: qwen3's RMSNorm of each query head before RoPE (empty otherwise)
  Tensor k_norm;     // [head_dim]: the same for each key head
  Tensor ffn_norm;   // [dim]
  Tensor w_gate;     // [hidden][dim]   (llama2.c w1)
  Tensor w_down;     // [dim][hidden]   (llama2.c w2)
  Tensor w_up;       // [hidden][dim]   (llama2.c w3)
  // Mixture of experts (config.is_moe(); the dense w_gate, w_down, w_up are then empty). Each
  // expert's matrices are views into the file's 3-D tensors ffn_{gate,up,down}_exps (ne = [in, out,
  // expert]: expert e's [out][in] matrix is contiguous), so only the experts a token is routed to
  // are read.
  Tensor router;                       // ffn_gate_inp: [n_experts][dim]
  std::vector<Tensor> exp_gate;        // ffn_gate_exps: n_experts x [expert_hidden][dim]
  std::vector<Tensor> exp_up;          // ffn_up_exps:   n_experts x [expert_hidden][dim]
  std::vector<Tensor> exp_down;        // ffn_down_exps: n_experts x [dim][expert_hidden]
  Tensor shexp_gate, shexp_up;         // ffn_{gate,up}_shexp: [shared_hidden][dim] (qwen2moe; empty otherwise)
  Tensor shexp_down;                   // ffn_down_shexp: [dim][shared_hidden]
  Tensor shexp_router;                 // ffn_gate_inp_shexp: [1][dim], the shared expert's sigmoid gate
};

struct Model {
  ModelConfig config;
  Tensor token_embd;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  Tensor output_norm; // [dim]
  Tensor output;      // [vocab][dim]; empty when tied to token_embd
  std::vector<float> rope_freqs;  // [rope_dim / 2] per-pair frequency divisors (Llama 3.1 rope_freqs); empty: none
  const Tensor& classifier() const { return output.empty() ? token_embd : output; }
  std::unique_ptr<Tokenizer> tokenizer;

  // Provenance, for `model info` and reports.
  std::string path;
  std::string file_sha256;
  std::string format;                          // "GGUF v3", "llama2.c"
  std::map<std::string, int64_t> tensor_types; // type name -> tensor count, e.g. {"F32": 48}
  int64_t n_params = 0;
  // Weight bytes read in place from the mapped model file, and weight bytes held in owned f32
  // arrays (norm gains; every weight of a llama2.c checkpoint).
  int64_t mapped_bytes = 0;
  int64_t owned_bytes = 0;
  // The chat template `messages` prompts are rendered with (repro/chat/chat.hpp): recognised
  // from the GGUF's tokenizer.chat_template, or "plain" when the file has none; --chat-template
  // replaces it.
  ChatTemplate chat_template;
};

// Loads a GGUF (v2/v3, arch llama (dense or with experts), qwen2, qwen3, qwen2moe or qwen3moe; matrices kept in their stored type, memory-mapped) or a llama2.c checkpoint
// (tokenizer_path names its tokenizer .bin; when empty, tokenizer.bin / tok<vocab>.bin beside it).
// Throws UsageError naming the file, what is wrong and what is supported.
std::unique_ptr<Model> load_model(const std::string& path, const std::string& tokenizer_path = "");

}  // namespace repro
