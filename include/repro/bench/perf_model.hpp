// A performance model of the engine's forward step: what a decode or prefill step reads and
// computes, from the model's shapes and stored types, and the tokens/s ceilings that follow from
// the machine's measured memory bandwidth and compute peak (repro/bench/ceilings.hpp).
// `repro-audit bench` prints each cell's mean as a share of its ceiling.
//
// What is counted (per step of R token rows):
//   weight bytes   every matmul weight read once per step, in its stored type (F32, F16, block
//                  formats): per layer wq, wk, wv, wo, w_gate, w_up, w_down, and the classifier
//                  (token_embd when tied). Norm gains, biases and the R embedding rows are left out
//                  (a few KiB). A mixture of experts: the routers and shared experts every step, and
//                  min(n_experts, k x R) experts per layer (at most every token choosing other
//                  experts: an upper bound on what the step reads, exact at R = 1).
//   KV bytes       decode: the K and V cache each row's attention reads (f32, all layers, every
//                  position it attends); prefill: the K and V the prompt writes, once.
//   FLOPs          2 per multiply-add: the layer matmuls per row (a mixture of experts: the router,
//                  the shared expert and the k experts the row is routed to), the classifier for rows whose
//                  logits are wanted (every decode row, the last prompt row), and attention
//                  (q.k and p.v: 4 * q_dim per layer per attended position).
//   Left out: element-wise ops, norms, softmax, activations' traffic, which are small at these
//   shapes; so the ceilings are upper bounds.
// Ceilings: memory = bandwidth / bytes per step * tokens per step; compute = peak / FLOPs per
// token; the row's ceiling is the lower one, and it names which binds ("mem" or "compute").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "repro/model/model.hpp"

namespace repro::bench {

struct ModelCosts {
  int64_t layer_matmul_params = 0;     // elements of wq, wk, wv, wo, w_gate, w_up, w_down, all layers
  int64_t classifier_params = 0;       // vocab x dim
  int64_t layer_matmul_bytes = 0;      // the same, in their stored type
  int64_t classifier_bytes = 0;
  int64_t kv_bytes_per_position = 0;   // K and V of one position, all layers, f32: 2 * layers * kv_dim * 4
  int64_t attention_flops_per_position = 0;  // one query row against one cached position: 4 * layers * q_dim
  // Mixture of experts: one expert's gate, up and down matrices summed over the layers (elements
  // and stored bytes), the experts per layer and per token. layer_matmul_* then hold the rest of
  // the layer (attention, routers, shared experts) plus k experts' elements and bytes.
  int64_t expert_params = 0;
  int64_t expert_bytes = 0;
  int n_experts = 0, experts_used = 0;
  int64_t weight_bytes() const { return layer_matmul_bytes + classifier_bytes; }
  // The weight bytes a step of `rows` token rows reads: the experts of min(n_experts, k x rows).
  double weight_bytes_for(double rows) const;
};
ModelCosts model_costs(const Model& model);

// One step (decode: averaged over the timed steps) as the model counts it.
struct StepCost {
  double tokens_per_step = 0;   // decode: batch size; prefill: prompt length
  double weight_bytes = 0;      // per step
  double kv_bytes = 0;          // per step
  double flops_per_token = 0;
  double bytes_per_step() const { return weight_bytes + kv_bytes; }
};

// The decode steps bench times: sequences with these prompt lengths, each generating max_tokens
// tokens; the first comes from the prefill step (not timed), then steps s = 1..max_tokens-1 feed
// token s of every sequence, whose attention covers prompt + s positions.
StepCost decode_cost(const ModelCosts& m, const std::vector<int>& prompt_lengths, int max_tokens);

// One sequence's prompt of prompt_len tokens in one step; logits for its last row only.
StepCost prefill_cost(const ModelCosts& m, int prompt_len);

struct Ceiling {
  double memory_tokens_per_s = 0;
  double compute_tokens_per_s = 0;
  double tokens_per_s = 0;      // the lower of the two
  std::string kind;             // "mem" or "compute": which one binds
};
Ceiling ceiling_of(const StepCost& cost, double gb_per_s, double gflop_per_s);

}  // namespace repro::bench
