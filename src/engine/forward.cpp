// ============================================================================================
// The forward pass: one readable pass over a batch of token rows (Llama: RMSNorm, RoPE, GQA
// attention with a KV cache, SwiGLU). Rows from different sequences, and several rows of one
// sequence (prefill), go through every matmul together, so the kernels see the real batch.
//
// Every op outside the three kernels (embedding lookup, RoPE, SiLU*up, residual adds) is
// element-wise: its value for a row never depends on other rows. The three kernels (matmul,
// RMSNorm, attention) are chosen by mode: `default` takes the fastest path per shape (OpenBLAS),
// `batch-invariant` the project's kernels with one reduction order per output element.
// ============================================================================================
#include "repro/engine/forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace repro {

void KvCache::init(const ModelConfig& c, int positions) {
  capacity = positions;
  kv_dim = c.kv_dim();
  size_t n = static_cast<size_t>(c.n_layers) * positions * kv_dim;
  k.assign(n, 0.0f);
  v.assign(n, 0.0f);
}

Forward::Forward(const Model& model, Mode mode, int threads)
    : m_(model), c_(model.config), mode_(mode), pool_(threads) {}

void Forward::matmul(const float* x, const float* w, float* y, int M, int N, int K) {
  if (mode_ == Mode::Default)
    kernels::matmul_default(x, w, y, M, N, K, pool_);
  else
    kernels::matmul_invariant(x, w, y, M, N, K, pool_);
}

void Forward::rmsnorm(const float* x, const float* g, float* y, int M, int D) {
  if (mode_ == Mode::Default)
    kernels::rmsnorm_default(x, g, y, M, D, c_.rms_eps, pool_);
  else
    kernels::rmsnorm_invariant(x, g, y, M, D, c_.rms_eps, pool_);
}

// RoPE on adjacent pairs (2i, 2i+1) of the first rope_dim dims of each head, as llama2.c's run.c
// and llama.cpp's "normal" rope for arch llama. cos/sin per (position, pair) come from a table, so
// a row's rotation depends only on its position.
void Forward::rope(float* x, int n_heads, int pos) {
  const int hd = c_.head_dim();
  const int half = c_.rope_dim / 2;
  if (pos >= rope_positions_) {
    int n = std::max(pos + 1, rope_positions_ * 2);
    rope_cos_.resize(static_cast<size_t>(n) * half);
    rope_sin_.resize(static_cast<size_t>(n) * half);
    for (int p = rope_positions_; p < n; ++p)
      for (int i = 0; i < half; ++i) {
        float freq = 1.0f / std::pow(c_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c_.rope_dim));
        float angle = static_cast<float>(p) * freq;
        rope_cos_[static_cast<size_t>(p) * half + i] = std::cos(angle);
        rope_sin_[static_cast<size_t>(p) * half + i] = std::sin(angle);
      }
    rope_positions_ = n;
  }
  const float* cs = &rope_cos_[static_cast<size_t>(pos) * half];
  const float* sn = &rope_sin_[static_cast<size_t>(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<size_t>(h) * hd;
    for (int i = 0; i < half; ++i) {
      float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

static void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

const float* Forward::run(const std::vector<TokenRow>& rows) {
  const int R = static_cast<int>(rows.size());
  const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden = c_.hidden_dim, hd = c_.head_dim();
  const int vocab = c_.vocab_size;
  grow(x_, static_cast<size_t>(R) * dim);       // residual stream   [R][dim]
  grow(xb_, static_cast<size_t>(R) * dim);      // normed input      [R][dim]
  grow(q_, static_cast<size_t>(R) * dim);       // queries           [R][dim]
  grow(k_, static_cast<size_t>(R) * kv_dim);    // keys              [R][kv_dim]
  grow(v_, static_cast<size_t>(R) * kv_dim);    // values            [R][kv_dim]
  grow(att_, static_cast<size_t>(R) * dim);     // attention output  [R][dim]
  grow(proj_, static_cast<size_t>(R) * std::max(dim, hidden));
  grow(gate_, static_cast<size_t>(R) * hidden); // SwiGLU gate       [R][hidden]
  grow(up_, static_cast<size_t>(R) * hidden);   // SwiGLU up         [R][hidden]
  att_rows_.resize(R);

  // ---- token embedding: x[r] = token_embd[token]  (token_embd: [vocab][dim]) ----
  for (int r = 0; r < R; ++r)
    std::memcpy(&x_[static_cast<size_t>(r) * dim], &m_.token_embd[static_cast<size_t>(rows[r].token) * dim],
                sizeof(float) * dim);

  const kernels::AttentionShape shape{c_.n_heads, c_.n_kv_heads, hd, kv_dim};
  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& w = m_.layers[l];

    // ---- attention block ----
    rmsnorm(x_.data(), w.attn_norm.data(), xb_.data(), R, dim);     // attn_norm: [dim]
    matmul(xb_.data(), w.wq.data(), q_.data(), R, dim, dim);         // wq: [dim][dim]
    matmul(xb_.data(), w.wk.data(), k_.data(), R, kv_dim, dim);      // wk: [kv_dim][dim]
    matmul(xb_.data(), w.wv.data(), v_.data(), R, kv_dim, dim);      // wv: [kv_dim][dim]
    for (int r = 0; r < R; ++r) {
      rope(&q_[static_cast<size_t>(r) * dim], c_.n_heads, rows[r].pos);
      rope(&k_[static_cast<size_t>(r) * kv_dim], c_.n_kv_heads, rows[r].pos);
      // K/V of every row go into its sequence's cache before any row attends (prefill rows of one
      // sequence attend to each other causally through the cache).
      std::memcpy(rows[r].cache->k_at(l, rows[r].pos), &k_[static_cast<size_t>(r) * kv_dim], sizeof(float) * kv_dim);
      std::memcpy(rows[r].cache->v_at(l, rows[r].pos), &v_[static_cast<size_t>(r) * kv_dim], sizeof(float) * kv_dim);
    }
    for (int r = 0; r < R; ++r)
      att_rows_[r] = {&q_[static_cast<size_t>(r) * dim], rows[r].cache->k_at(l, 0), rows[r].cache->v_at(l, 0),
                      rows[r].pos + 1, &att_[static_cast<size_t>(r) * dim]};
    if (mode_ == Mode::Default)
      kernels::attention_default(att_rows_.data(), R, shape, pool_);
    else
      kernels::attention_invariant(att_rows_.data(), R, shape, pool_);
    matmul(att_.data(), w.wo.data(), proj_.data(), R, dim, dim);     // wo: [dim][dim]
    for (size_t i = 0; i < static_cast<size_t>(R) * dim; ++i) x_[i] += proj_[i];

    // ---- feed-forward block (SwiGLU) ----
    rmsnorm(x_.data(), w.ffn_norm.data(), xb_.data(), R, dim);       // ffn_norm: [dim]
    matmul(xb_.data(), w.w_gate.data(), gate_.data(), R, hidden, dim);  // w_gate: [hidden][dim]
    matmul(xb_.data(), w.w_up.data(), up_.data(), R, hidden, dim);      // w_up:   [hidden][dim]
    for (size_t i = 0; i < static_cast<size_t>(R) * hidden; ++i) {
      float g = gate_[i];
      gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];  // silu(gate) * up
    }
    matmul(gate_.data(), w.w_down.data(), proj_.data(), R, dim, hidden);  // w_down: [dim][hidden]
    for (size_t i = 0; i < static_cast<size_t>(R) * dim; ++i) x_[i] += proj_[i];
  }

  // ---- final norm and classifier, only for rows whose logits are wanted ----
  int L = 0;
  for (const auto& row : rows) L += row.want_logits ? 1 : 0;
  grow(xf_, static_cast<size_t>(L) * dim);
  grow(logits_, static_cast<size_t>(L) * vocab);
  for (int r = 0, j = 0; r < R; ++r)
    if (rows[r].want_logits)
      std::memcpy(&xf_[static_cast<size_t>(j++) * dim], &x_[static_cast<size_t>(r) * dim], sizeof(float) * dim);
  rmsnorm(xf_.data(), m_.output_norm.data(), xb_.data(), L, dim);      // output_norm: [dim]
  matmul(xb_.data(), m_.output_weights(), logits_.data(), L, vocab, dim);  // output: [vocab][dim]
  return logits_.data();
}

}  // namespace repro
