// The forward pass of a Llama-family model (llama, qwen2, qwen3) over a batch of token rows (internal to the engine),
// written once against the op table (repro/kernels/ops.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/engine/moe.hpp"
#include "repro/kernels/ops.hpp"
#include "repro/model/model.hpp"

namespace repro {

// One row of a forward step: token `token` at position `pos` of the sequence that holds KV slot
// `slot`. The step writes K/V for pos into the slot; attention reads positions 0..pos.
struct TokenRow {
  int slot;
  int token;
  int pos;
  bool want_logits;  // this row's logits are needed (last prompt token, or a decode token)
};

class Forward {
 public:
  // Builds the op table for (opts.device, opts.mode) through kernels::make_ops and binds the
  // model's weights to it (with opts.tp > 1, wo and w_down as tp shards of their columns, one per
  // simulated rank). Throws BackendError when the device is not available, UsageError when the
  // model does not divide into opts.tp (check_tensor_parallel).
  Forward(const Model& model, const EngineOptions& opts);
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Runs every row through the model. Returns logits for the rows with want_logits, in row order:
  // [n_logit_rows][vocab] on the host, valid until the next call.
  const float* run(const std::vector<TokenRow>& rows);

  // KV slots of the op table: a sequence takes one for `positions` positions and gives it back.
  int acquire_slot(int positions) { return ops_->kv_acquire(positions); }
  void release_slot(int slot) { ops_->kv_release(slot); }
  void copy_slot(int dst, int src, int positions) { ops_->kv_copy(dst, src, positions); }

  kernels::OpsInfo describe() const { return ops_->describe(); }

  // A mixture of experts: how row `row` of the last run() was routed in layer `layer` (its experts
  // in routing order, their weights, the top-k margin). Empty for a dense model.
  const Route& route(int row, int layer) const { return routes_[static_cast<size_t>(row) * c_.n_layers + layer]; }

 private:
  struct LayerW {
    kernels::Weight attn_norm, ffn_norm;
    std::vector<kernels::Weight> wq, wk, wv, w_gate, w_up;  // column-parallel: one row shard per rank
    std::vector<kernels::Weight> wo, w_down;     // the row-parallel weights: one K shard per rank
    kernels::Weight bq, bk, bv, q_norm, k_norm;  // data == nullptr when the model has none
    // mixture of experts (empty for a dense model): the router, one weight per expert, the shared expert
    kernels::Weight router, shexp_router, shexp_gate, shexp_up, shexp_down;
    std::vector<kernels::Weight> exp_gate, exp_up, exp_down;
  };
  kernels::Weight bind(const Tensor& t);
  std::vector<kernels::Weight> bind_shards(const Tensor& t);      // K (columns) over the ranks
  std::vector<kernels::Weight> bind_row_shards(const Tensor& t);  // output rows over the ranks
  void reserve(int rows, int logit_rows);
  // The mixture-of-experts feed-forward block of layer w over xb_ (the normed rows), into moe_out_.
  void moe_ffn(const LayerW& w, int layer, int R);
  // y [R][rows] = x * w^T for a column-parallel weight: each rank's rows by the table's kernel.
  void column_parallel(const kernels::Buffer& x, const std::vector<kernels::Weight>& shards, kernels::Buffer& y, int R);
  // y = x * w^T for a row-parallel weight (x [R][K]): returns the all-reduced sum, [R][dim].
  kernels::Buffer& row_parallel(const kernels::Buffer& x, const std::vector<kernels::Weight>& shards, int K, int R);

  const Model& m_;
  const ModelConfig& c_;
  Precision precision_;
  int tp_;
  AllReduce allreduce_;
  std::unique_ptr<kernels::Ops> ops_;
  std::vector<std::vector<uint8_t>> shard_bytes_;  // the ranks' shards of wo and w_down (tp > 1)
  kernels::Weight token_embd_, output_norm_, classifier_;
  std::vector<LayerW> layers_;
  // activations in the table's memory, grown to the largest step seen
  int rows_cap_ = 0, logit_cap_ = 0;
  kernels::Buffer x_, xb_, q_, k_, v_, kn_, att_, gate_, up_, xf_, xfn_, logits_;
  // mixture of experts: router logits [R][n_experts], one expert's rows [R][dim], every token's
  // expert outputs [R][slots][dim], their combine [R][dim], the shared expert's gate logits [R][1]
  kernels::Buffer rlog_, xe_, yk_, moe_out_, sglog_;
  std::vector<float> rlog_host_, sglog_host_, combine_w_;  // host: logits, gate logits, [R][slots] weights
  std::vector<std::vector<int>> expert_rows_, expert_slots_;  // per expert: its tokens, their slot rows
  std::vector<Route> routes_;  // the last step's routing, [R][n_layers]
  kernels::Buffer xs_;                  // one rank's shard of a row-parallel input [R][K / tp]
  kernels::Buffer ys_;                  // one rank's columns of a column-parallel output [R][n / tp]
  std::vector<kernels::Buffer> parts_;  // the ranks' partials [tp][R][dim]; parts_[0] the sum
  std::vector<std::vector<int>> shard_rows_;  // per rank s: the rows m * tp + s of [R * tp][K / tp]
  // per-row inputs of a step, on the host
  std::vector<int> tokens_, pos_, logit_rows_;
  std::vector<kernels::KvRow> kv_rows_;
  std::vector<float> logits_host_;
};

// Beam search on an existing forward pass (Engine::beam_search; src/engine/beam.cpp).
GenResult beam_search(Forward& fwd, const Model& model, const std::vector<int>& prompt, int width, int max_tokens);

}  // namespace repro
