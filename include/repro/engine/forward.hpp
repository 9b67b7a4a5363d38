// The forward pass of a Llama-family model over a batch of token rows (internal to the engine).
#pragma once
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/kernels/kernels.hpp"
#include "repro/common/threadpool.hpp"

namespace repro {

// One sequence's KV cache: [n_layers][capacity][kv_dim] for K and for V.
struct KvCache {
  int capacity = 0;  // positions
  int kv_dim = 0;
  std::vector<float> k, v;
  void init(const ModelConfig& c, int positions);
  float* k_at(int layer, int pos) { return k.data() + (static_cast<size_t>(layer) * capacity + pos) * kv_dim; }
  float* v_at(int layer, int pos) { return v.data() + (static_cast<size_t>(layer) * capacity + pos) * kv_dim; }
};

// One row of a forward step: token `token` of the sequence whose cache is `cache`, at position `pos`.
// The step writes K/V for pos into the cache; attention reads positions 0..pos.
struct TokenRow {
  KvCache* cache;
  int token;
  int pos;
  bool want_logits;  // this row's logits are needed (last prompt token, or a decode token)
};

class Forward {
 public:
  Forward(const Model& model, Mode mode, int threads);
  // Runs every row through the model. Returns logits for the rows with want_logits, in row order:
  // [n_logit_rows][vocab], valid until the next call.
  const float* run(const std::vector<TokenRow>& rows);
  Mode mode() const { return mode_; }
  ThreadPool& pool() { return pool_; }

 private:
  void matmul(const float* x, const float* w, float* y, int M, int N, int K);
  void rmsnorm(const float* x, const float* g, float* y, int M, int D);
  void rope(float* x, int n_heads, int pos);

  const Model& m_;
  const ModelConfig& c_;
  Mode mode_;
  ThreadPool pool_;
  std::vector<float> rope_cos_, rope_sin_;  // [position][rope_dim / 2], grown on demand
  int rope_positions_ = 0;
  // scratch, grown to the largest step seen
  std::vector<float> x_, xb_, q_, k_, v_, att_, proj_, gate_, up_, xf_, logits_;
  std::vector<kernels::AttentionRow> att_rows_;
};

}  // namespace repro
