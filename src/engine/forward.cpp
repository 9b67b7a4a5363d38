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
//
// Mixture of experts (config.is_moe(): llama/Mixtral, qwen2moe, qwen3moe): the feed-forward block
// is a router and n_experts SwiGLU experts. Each token's router logits (a matmul, kept f32) are
// routed on the host (route_token, repro/engine/moe.hpp: one rule in every mode, lower index wins
// ties); the tokens are grouped per expert, and each expert with tokens runs its three matmuls on
// exactly those rows (an expert no token chose is not read). So the matmul's M is the number of
// tokens the expert got: the default table picks its kernel by it, as production engines' grouped
// GEMMs do, and the batch-invariant tables give a row the same bits at any M. Each token's k
// outputs (and qwen2moe's shared expert, gated by a sigmoid) are added in one fixed order
// (Ops::moe_combine). Expert parallelism is not simulated: MoE models run at --tp 1.
// ============================================================================================
#include "repro/engine/forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "repro/engine/moe.hpp"

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
  for (const LayerWeights& w : m.layers) {
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_down, &w.w_up,
                            &w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm, &w.router, &w.shexp_router, &w.shexp_gate,
                            &w.shexp_up, &w.shexp_down})
      add(*t);
    for (const std::vector<Tensor>* v : {&w.exp_gate, &w.exp_up, &w.exp_down})
      for (const Tensor& t : *v) add(t);
  }
  kernels::check_weight_types(opts.device, opts.mode, types);
  check_tensor_parallel(m, opts.tp);
  return kernels::make_ops(opts.device, opts.mode, opts.threads);
}

// Why tensor-parallel size `tp` does not divide the model (every dimension that fails), or "".
std::string tp_misfit(const Model& m, int tp) {
  const ModelConfig& c = m.config;
  auto n = [](long v) { return std::to_string(v); };
  if (tp < 1 || tp > kernels::kMaxTp || (tp & (tp - 1)) != 0) return "must be 1, 2, 4 or 8";
  if (c.is_moe() && tp > 1) return "mixture-of-experts layers are not split over ranks (expert parallelism is not simulated)";
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
  for (const LayerWeights& w : m_.layers) {
    LayerW& lw = layers_.emplace_back();
    lw.attn_norm = bind(w.attn_norm);
    lw.ffn_norm = bind(w.ffn_norm);
    lw.wq = bind_row_shards(w.wq);
    lw.wk = bind_row_shards(w.wk);
    lw.wv = bind_row_shards(w.wv);
    lw.wo = bind_shards(w.wo);
    if (!w.w_gate.empty()) {  // dense feed-forward (a mixture of experts has none)
      lw.w_gate = bind_row_shards(w.w_gate);
      lw.w_up = bind_row_shards(w.w_up);
      lw.w_down = bind_shards(w.w_down);
    }
    lw.bq = bind(w.bq);
    lw.bk = bind(w.bk);
    lw.bv = bind(w.bv);
    lw.q_norm = bind(w.q_norm);
    lw.k_norm = bind(w.k_norm);
    lw.router = bind(w.router);
    lw.shexp_router = bind(w.shexp_router);
    lw.shexp_gate = bind(w.shexp_gate);
    lw.shexp_up = bind(w.shexp_up);
    lw.shexp_down = bind(w.shexp_down);
    for (const Tensor& t : w.exp_gate) lw.exp_gate.push_back(bind(t));
    for (const Tensor& t : w.exp_up) lw.exp_up.push_back(bind(t));
    for (const Tensor& t : w.exp_down) lw.exp_down.push_back(bind(t));
  }
  expert_rows_.resize(static_cast<size_t>(c_.n_experts));
  expert_slots_.resize(static_cast<size_t>(c_.n_experts));
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
  const size_t dim = c_.dim, kv_dim = c_.kv_dim(), q_dim = c_.q_dim();
  // The widest feed-forward activation: the dense FFN, an expert, or the shared expert.
  const size_t hidden = std::max({c_.hidden_dim, c_.expert_hidden_dim, c_.shared_hidden_dim});
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
    if (c_.is_moe()) {
      const size_t slots = c_.n_experts_used + (c_.shared_hidden_dim > 0 ? 1 : 0);
      rlog_ = ops_->alloc(R * static_cast<size_t>(c_.n_experts));  // router logits [R][n_experts]
      xe_ = ops_->alloc(R * dim);                     // one expert's rows [n_e <= R][dim]
      yk_ = ops_->alloc(R * slots * dim);             // expert outputs    [R][slots][dim]
      moe_out_ = ops_->alloc(R * dim);                // their combine     [R][dim]
      sglog_ = ops_->alloc(R);                        // shared gate logit [R][1]
    }
  }
  if (L > logit_cap_) {
    logit_cap_ = L;
    xf_ = ops_->alloc(L * dim);                       // rows with logits  [L][dim]
    xfn_ = ops_->alloc(L * dim);                      // their final norm  [L][dim]
    logits_ = ops_->alloc(L * static_cast<size_t>(c_.vocab_size));  // [L][vocab]
  }
}

// ---- mixture-of-experts feed-forward block: xb_ [R][dim] (normed) -> moe_out_ [R][dim] ----
void Forward::moe_ffn(const LayerW& w, int layer, int R) {
  kernels::Ops& ops = *ops_;
  const Precision p = precision_;
  const int dim = c_.dim, E = c_.n_experts, k = c_.n_experts_used, eh = c_.expert_hidden_dim;
  const bool shared = c_.shared_hidden_dim > 0;
  const int S = k + (shared ? 1 : 0);  // slots per token: its k experts in routing order, then the shared one

  // ---- router: logits [R][E] = xb_ * router^T (router: [E][dim]; kept f32), routed on the host ----
  ops.matmul(xb_, w.router, rlog_, R);
  rlog_host_.resize(static_cast<size_t>(R) * E);
  ops.download(rlog_, 0, rlog_host_.data(), rlog_host_.size());
  combine_w_.assign(static_cast<size_t>(R) * S, 0.0f);
  for (int e = 0; e < E; ++e) {
    expert_rows_[e].clear();
    expert_slots_[e].clear();
  }
  for (int r = 0; r < R; ++r) {
    Route& route = routes_[static_cast<size_t>(r) * c_.n_layers + layer];
    route = route_token(c_, rlog_host_.data() + static_cast<size_t>(r) * E);
    for (int j = 0; j < k; ++j) {
      const int e = route.experts[j];
      expert_rows_[e].push_back(r);            // tokens in row order
      expert_slots_[e].push_back(r * S + j);   // where its output goes in yk_
      combine_w_[static_cast<size_t>(r) * S + j] = route.weights[j];
    }
  }

  // ---- experts: each one with tokens runs SwiGLU on exactly its n_e rows (M = n_e) ----
  for (int e = 0; e < E; ++e) {
    const int n = static_cast<int>(expert_rows_[e].size());
    if (n == 0) continue;                                    // never read: no token chose it
    const size_t nh = static_cast<size_t>(n) * eh;
    ops.gather_rows(xb_, expert_rows_[e].data(), n, dim, xe_);   // [n][dim]
    ops.matmul(xe_, w.exp_gate[e], gate_, n);                    // exp_gate[e]: [eh][dim]
    ops.matmul(xe_, w.exp_up[e], up_, n);                        // exp_up[e]:   [eh][dim]
    ops.round_to(p, gate_, nh);
    ops.round_to(p, up_, nh);
    ops.silu_mul(gate_, up_, nh);
    ops.round_to(p, gate_, nh);
    // exp_down[e]: [dim][eh]; as row_parallel at TP 1 (matmul_partial: the tp-invariant order)
    ops.matmul_partial(gate_, w.exp_down[e], eh, parts_[0], n);
    ops.round_to(p, parts_[0], static_cast<size_t>(n) * dim);
    ops.scatter_rows(parts_[0], expert_slots_[e].data(), n, dim, yk_);
  }

  // ---- shared expert (qwen2moe): every token, weighted by sigmoid(shexp_router . x) ----
  if (shared) {
    const int sh = c_.shared_hidden_dim;
    const size_t nh = static_cast<size_t>(R) * sh;
    ops.matmul(xb_, w.shexp_router, sglog_, R);              // shexp_router: [1][dim]
    sglog_host_.resize(static_cast<size_t>(R));
    ops.download(sglog_, 0, sglog_host_.data(), sglog_host_.size());
    ops.matmul(xb_, w.shexp_gate, gate_, R);                 // shexp_gate: [sh][dim]
    ops.matmul(xb_, w.shexp_up, up_, R);                     // shexp_up:   [sh][dim]
    ops.round_to(p, gate_, nh);
    ops.round_to(p, up_, nh);
    ops.silu_mul(gate_, up_, nh);
    ops.round_to(p, gate_, nh);
    ops.matmul_partial(gate_, w.shexp_down, sh, parts_[0], R);  // shexp_down: [dim][sh]
    ops.round_to(p, parts_[0], static_cast<size_t>(R) * dim);
    expert_slots_[0].clear();  // reused as the shared slot of each token
    for (int r = 0; r < R; ++r) {
      expert_slots_[0].push_back(r * S + k);
      combine_w_[static_cast<size_t>(r) * S + k] = 1.0f / (1.0f + std::exp(-sglog_host_[r]));
    }
    ops.scatter_rows(parts_[0], expert_slots_[0].data(), R, dim, yk_);
  }

  // ---- combine: out[r] = sum over slots in order of weight * output (one order, every mode) ----
  ops.moe_combine(yk_, combine_w_.data(), R, S, dim, p, moe_out_);
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
  if (c_.is_moe()) routes_.resize(static_cast<size_t>(R) * c_.n_layers);
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
    if (c_.is_moe()) {
      moe_ffn(w, l, R);                                // the experts' combine, rounded to p
      ops.add(x_, moe_out_, nd);
      continue;
    }
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
