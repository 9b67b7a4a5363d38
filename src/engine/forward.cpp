// ============================================================================================
// The forward pass: one readable pass over a batch of token rows (the Llama block: RMSNorm, RoPE,
// GQA attention with a KV cache, SwiGLU; with what each architecture adds: qwen2's Q/K/V biases,
// qwen3's RMSNorm of each query and key head before RoPE, neox or normal RoPE pairs, Llama 3's
// RoPE frequency factors). The additions are data of the model (a tensor present or absent),
// all row-local, so every architecture keeps the table's batch invariance. Rows from different
// sequences, and several rows of one sequence (prefill), go through every matmul together, so
// the kernels see the real batch.
//
// It is written once, against the op table (repro/kernels/ops.hpp): which kernels run (OpenBLAS or
// the batch-invariant ones, CPU or GPU) is decided by the table that kernels::make_ops built from
// the engine's device and mode; nothing here branches on either.
//
// Precision: activations are stored at the engine's precision where production engines store
// them: the outputs of the norms, of every matmul but the classifier, of RoPE and attention and
// silu * up, and so the KV cache. Kernels accumulate in f32; the residual stream and the logits
// stay f32. Rounding is element-wise, so a batch-invariant table stays invariant at any precision;
// at f32 it is the identity.
//
// Tensor parallelism (opts.tp = N > 1), simulated on one device as Megatron-style TP splits a
// layer: the column-parallel matmuls (wq, wk, wv, w_gate, w_up) split their output rows over the
// ranks: rank s computes rows [s n/N, (s+1) n/N) with the table's kernel and they are put back in
// place (copy_cols). The batch-invariant tables give the bits of the whole product (the kernel
// harness checks it); the default table's sgemm blocks by the shape, so a rank's smaller product
// can round differently, as a GPU's would. Attention runs over all heads at once. The row-parallel
// matmuls (wo, w_down) split K: rank s holds columns
// [s K/N, (s+1) K/N) of the weight and of its input, computes its partial with the table's own
// kernel (Ops::matmul_partial), and the table's all-reduce adds the N partials in the order of
// opts.allreduce (Ops::allreduce). Only the arithmetic is simulated: no communication, no timing.
// ============================================================================================
#include "repro/engine/forward.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"

namespace repro {

using kernels::Buffer;

namespace {
// The table for (device, mode), once every weight type of the model is one it reads.
std::unique_ptr<kernels::Ops> checked_ops(const Model& m, const EngineOptions& opts) {
  std::vector<DType> types;
  auto add = [&](const Tensor& t) {
    if (!t.empty() && std::find(types.begin(), types.end(), t.dtype) == types.end()) types.push_back(t.dtype);
  };
  add(m.token_embd);
  add(m.output_norm);
  add(m.classifier());
  for (const LayerWeights& w : m.layers)
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_down, &w.w_up,
                            &w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm})
      add(*t);
  kernels::check_weight_types(opts.device, opts.mode, types);
  check_tensor_parallel(m, opts.tp);
  return kernels::make_ops(opts.device, opts.mode, opts.threads);
}

// Why tensor-parallel size `tp` does not divide the model (every dimension that fails), or "".
std::string tp_misfit(const Model& m, int tp) {
  const ModelConfig& c = m.config;
  auto n = [](long v) { return std::to_string(v); };
  if (tp < 1 || tp > kernels::kMaxTp || (tp & (tp - 1)) != 0) return "must be 1, 2, 4 or 8";
  std::vector<std::string> why;
  if (c.n_heads % tp) why.push_back("the " + n(c.n_heads) + " attention heads are not divisible by " + n(tp));
  if (c.n_kv_heads % tp) why.push_back("the " + n(c.n_kv_heads) + " KV heads are not divisible by " + n(tp));
  if (c.hidden_dim % tp) why.push_back("the FFN hidden size " + n(c.hidden_dim) + " is not divisible by " + n(tp));
  if (why.empty() && !m.layers.empty()) {
    const LayerWeights& w = m.layers[0];  // every layer stores wo and w_down alike
    for (const Tensor* t : {&w.wo, &w.w_down}) {
      const int blk = quant::block_of(t->dtype).elems;
      if ((t->cols / tp) % blk)
        why.push_back(std::string("each rank's shard of ") + (t == &w.wo ? "wo" : "w_down") + " (" +
                      n(t->cols / tp) + " of its " + n(t->cols) + " columns) is not a whole number of " +
                      dtype_name(t->dtype) + " blocks of " + n(blk));
    }
  }
  std::string out;
  for (const std::string& s : why) out += (out.empty() ? "" : "; ") + s;
  return out;
}
}  // namespace

std::vector<int> valid_tp_sizes(const Model& model) {
  std::vector<int> out;
  for (int tp = 1; tp <= kernels::kMaxTp; tp *= 2)
    if (tp_misfit(model, tp).empty()) out.push_back(tp);
  return out;
}

void check_tensor_parallel(const Model& model, int tp, const char* flag) {
  const std::string why = tp_misfit(model, tp);
  if (why.empty()) return;
  std::string sizes;
  const std::vector<int> ok = valid_tp_sizes(model);
  for (size_t i = 0; i < ok.size(); ++i)
    sizes += (i == 0 ? "" : i + 1 == ok.size() ? " or " : ", ") + std::to_string(ok[i]);
  throw UsageError(std::string(flag) + " " + std::to_string(tp) + ": " + why + "; use " + flag + " " + sizes +
                   " (the sizes this model divides into)");
}

Forward::Forward(const Model& model, const EngineOptions& opts)
    : m_(model), c_(model.config), precision_(opts.precision), tp_(opts.tp), allreduce_(opts.allreduce),
      ops_(checked_ops(model, opts)) {
  token_embd_ = bind(m_.token_embd);
  output_norm_ = bind(m_.output_norm);
  classifier_ = bind(m_.classifier());
  for (const LayerWeights& w : m_.layers)
    layers_.push_back({bind(w.attn_norm), bind(w.ffn_norm), bind_row_shards(w.wq), bind_row_shards(w.wk),
                       bind_row_shards(w.wv), bind_row_shards(w.w_gate), bind_row_shards(w.w_up), bind_shards(w.wo),
                       bind_shards(w.w_down), bind(w.bq), bind(w.bk), bind(w.bv), bind(w.q_norm), bind(w.k_norm)});
  parts_.resize(tp_);
  shard_rows_.resize(tp_);
  ops_->kv_configure(c_.n_layers, c_.kv_dim());
}

Forward::~Forward() = default;

// An absent tensor (no bias, no head norm) binds to a weight with no data.
kernels::Weight Forward::bind(const Tensor& t) {
  if (t.empty()) return {};
  return ops_->bind_weight({t.dtype, t.rows, t.cols, t.data});
}

// A row-parallel weight [rows][K] as tp shards [rows][K / tp]: rank s holds columns
// [s K/tp, (s+1) K/tp) of every row (whole blocks of the stored type: check_tensor_parallel).
std::vector<kernels::Weight> Forward::bind_shards(const Tensor& t) {
  if (tp_ == 1) return {bind(t)};
  const int ks = t.cols / tp_;
  const size_t row = quant::row_bytes(t.dtype, t.cols), srow = quant::row_bytes(t.dtype, ks);
  std::vector<kernels::Weight> out;
  for (int s = 0; s < tp_; ++s) {
    std::vector<uint8_t>& bytes = shard_bytes_.emplace_back(srow * t.rows);
    for (int r = 0; r < t.rows; ++r)
      std::memcpy(bytes.data() + r * srow, static_cast<const uint8_t*>(t.data) + r * row + s * srow, srow);
    out.push_back(ops_->bind_weight({t.dtype, t.rows, ks, bytes.data()}));
  }
  return out;
}

// A column-parallel weight [rows][K] as tp views [rows / tp][K]: rank s holds rows
// [s rows/tp, (s+1) rows/tp), contiguous in the stored matrix.
std::vector<kernels::Weight> Forward::bind_row_shards(const Tensor& t) {
  if (tp_ == 1) return {bind(t)};
  const int rs = t.rows / tp_;
  const size_t row = quant::row_bytes(t.dtype, t.cols);
  std::vector<kernels::Weight> out;
  for (int s = 0; s < tp_; ++s)
    out.push_back(ops_->bind_weight(
        {t.dtype, rs, t.cols, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(s) * rs * row}));
  return out;
}

void Forward::column_parallel(const kernels::Buffer& x, const std::vector<kernels::Weight>& shards, kernels::Buffer& y,
                              int R) {
  kernels::Ops& ops = *ops_;
  if (tp_ == 1) return ops.matmul(x, shards[0], y, R);
  const int rs = shards[0].rows;
  for (int s = 0; s < tp_; ++s) {
    ops.matmul(x, shards[s], ys_, R);
    ops.copy_cols(ys_, R, rs, y, rs * tp_, s * rs);
  }
}

kernels::Buffer& Forward::row_parallel(const kernels::Buffer& x, const std::vector<kernels::Weight>& shards, int K,
                                       int R) {
  kernels::Ops& ops = *ops_;
  const int ks = K / tp_;
  if (tp_ == 1) {
    ops.matmul_partial(x, shards[0], K, parts_[0], R);
  } else {
    // x [R][K] read as [R * tp][K / tp]: rank s's shard of row m is row m * tp + s.
    for (int s = 0; s < tp_; ++s) {
      ops.gather_rows(x, shard_rows_[s].data(), R, ks, xs_);
      ops.matmul_partial(xs_, shards[s], K, parts_[s], R);
    }
  }
  ops.allreduce(parts_.data(), tp_, allreduce_, precision_, static_cast<size_t>(R) * c_.dim);
  return parts_[0];
}

void Forward::reserve(int R, int L) {
  const size_t dim = c_.dim, kv_dim = c_.kv_dim(), q_dim = c_.q_dim(), hidden = c_.hidden_dim;
  if (R > rows_cap_) {
    rows_cap_ = R;
    x_ = ops_->alloc(R * dim);                        // residual stream   [R][dim]
    xb_ = ops_->alloc(R * dim);                       // normed input      [R][dim]
    q_ = ops_->alloc(R * q_dim);                      // queries           [R][q_dim]
    k_ = ops_->alloc(R * kv_dim);                     // keys              [R][kv_dim]
    v_ = ops_->alloc(R * kv_dim);                     // values            [R][kv_dim]
    att_ = ops_->alloc(R * q_dim);                    // attention output  [R][q_dim]
    kn_ = ops_->alloc(R * kv_dim);                    // normed keys       [R][kv_dim] (qwen3)
    for (auto& p : parts_) p = ops_->alloc(R * dim);  // rank partials  [tp][R][dim]
    xs_ = ops_->alloc(R * std::max(q_dim, hidden) / tp_);  // a rank's shard [R][K / tp]
    ys_ = ops_->alloc(R * std::max(q_dim, hidden) / tp_);  // a rank's columns [R][n / tp]
    for (int s = 0; s < tp_; ++s) {
      shard_rows_[s].resize(R);
      for (int m = 0; m < R; ++m) shard_rows_[s][m] = m * tp_ + s;
    }
    gate_ = ops_->alloc(R * hidden);                  // SwiGLU gate       [R][hidden]
    up_ = ops_->alloc(R * hidden);                    // SwiGLU up         [R][hidden]
  }
  if (L > logit_cap_) {
    logit_cap_ = L;
    xf_ = ops_->alloc(L * dim);                       // rows with logits  [L][dim]
    xfn_ = ops_->alloc(L * dim);                      // their final norm  [L][dim]
    logits_ = ops_->alloc(L * static_cast<size_t>(c_.vocab_size));  // [L][vocab]
  }
}

const float* Forward::run(const std::vector<TokenRow>& rows) {
  kernels::Ops& ops = *ops_;
  const int R = static_cast<int>(rows.size());
  const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden = c_.hidden_dim, vocab = c_.vocab_size;
  const size_t nd = static_cast<size_t>(R) * dim, nkv = static_cast<size_t>(R) * kv_dim,
               nq = static_cast<size_t>(R) * c_.q_dim(), nh = static_cast<size_t>(R) * hidden;
  const Precision p = precision_;
  tokens_.resize(R);
  pos_.resize(R);
  kv_rows_.resize(R);
  logit_rows_.clear();
  for (int r = 0; r < R; ++r) {
    tokens_[r] = rows[r].token;
    pos_[r] = rows[r].pos;
    kv_rows_[r] = {rows[r].slot, rows[r].pos};
    if (rows[r].want_logits) logit_rows_.push_back(r);
  }
  const int L = static_cast<int>(logit_rows_.size());
  reserve(R, L);
  const kernels::AttentionDims att{c_.n_heads, c_.n_kv_heads, c_.head_dim()};
  const kernels::RopeDims rope{c_.head_dim(), c_.rope_dim, c_.rope_theta, c_.rope_neox, c_.rope_freq_scale,
                               m_.rope_freqs.empty() ? nullptr : m_.rope_freqs.data()};

  ops.begin_step(kv_rows_.data(), R);  // what stays constant over the layers (positions, KV rows)

  // ---- token embedding: x[r] = token_embd[token]  (token_embd: [vocab][dim]) ----
  ops.embed(token_embd_, tokens_.data(), R, x_);

  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerW& w = layers_[l];

    // ---- attention block ----
    ops.rmsnorm(x_, w.attn_norm, xb_, R, c_.rms_eps);   // attn_norm: [dim]
    ops.round_to(p, xb_, nd);
    column_parallel(xb_, w.wq, q_, R);                 // wq: [q_dim][dim]
    column_parallel(xb_, w.wk, k_, R);                 // wk: [kv_dim][dim]
    column_parallel(xb_, w.wv, v_, R);                 // wv: [kv_dim][dim]
    if (w.bq.data) ops.add_bias(q_, w.bq, R);          // qwen2: bq [q_dim], bk, bv [kv_dim]
    if (w.bk.data) ops.add_bias(k_, w.bk, R);
    if (w.bv.data) ops.add_bias(v_, w.bv, R);
    if (w.q_norm.data) {
      // qwen3: RMSNorm of every head (rows of head_dim) of Q and K, one gain per head element.
      ops.rmsnorm(q_, w.q_norm, att_, R * c_.n_heads, c_.rms_eps);
      ops.rmsnorm(k_, w.k_norm, kn_, R * c_.n_kv_heads, c_.rms_eps);
      std::swap(q_, att_);
      std::swap(k_, kn_);
    }
    ops.rope(q_, pos_.data(), R, c_.n_heads, rope);
    ops.rope(k_, pos_.data(), R, c_.n_kv_heads, rope);
    ops.round_to(p, q_, nq);
    ops.round_to(p, k_, nkv);
    ops.round_to(p, v_, nkv);
    // K/V of every row go into its sequence's slot before any row attends (prefill rows of one
    // sequence attend to each other causally through the cache).
    ops.kv_store(k_, v_, kv_rows_.data(), R, l);
    ops.attention(q_, kv_rows_.data(), R, l, att, att_);
    ops.round_to(p, att_, nq);
    ops.add(x_, row_parallel(att_, w.wo, c_.q_dim(), R), nd);  // wo: [dim][q_dim], rounded to p

    // ---- feed-forward block (SwiGLU) ----
    ops.rmsnorm(x_, w.ffn_norm, xb_, R, c_.rms_eps);    // ffn_norm: [dim]
    ops.round_to(p, xb_, nd);
    column_parallel(xb_, w.w_gate, gate_, R);          // w_gate: [hidden][dim]
    column_parallel(xb_, w.w_up, up_, R);              // w_up:   [hidden][dim]
    ops.round_to(p, gate_, nh);
    ops.round_to(p, up_, nh);
    ops.silu_mul(gate_, up_, nh);                      // silu(gate) * up
    ops.round_to(p, gate_, nh);
    ops.add(x_, row_parallel(gate_, w.w_down, hidden, R), nd);  // w_down: [dim][hidden], rounded to p
  }

  // ---- final norm and classifier, only for rows whose logits are wanted ----
  ops.gather_rows(x_, logit_rows_.data(), L, dim, xf_);
  ops.rmsnorm(xf_, output_norm_, xfn_, L, c_.rms_eps);  // output_norm: [dim]
  ops.round_to(p, xfn_, static_cast<size_t>(L) * dim);
  ops.matmul(xfn_, classifier_, logits_, L);            // output: [vocab][dim]; logits stay f32
  logits_host_.resize(static_cast<size_t>(L) * vocab);
  ops.download(logits_, 0, logits_host_.data(), logits_host_.size());
  return logits_host_.data();
}

}  // namespace repro
