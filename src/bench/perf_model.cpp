// The performance model of a forward step (repro/bench/perf_model.hpp).
#include "repro/bench/perf_model.hpp"

#include <algorithm>

#include "repro/common/quant.hpp"

namespace repro::bench {
namespace {

int64_t tensor_bytes(const Tensor& t) {
  if (t.empty()) return 0;
  return static_cast<int64_t>(quant::row_bytes(t.dtype, t.cols)) * t.rows;
}

}  // namespace

ModelCosts model_costs(const Model& model) {
  ModelCosts m;
  const ModelConfig& mc = model.config;
  for (const LayerWeights& w : model.layers) {
    for (const Tensor* t : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.router, &w.shexp_router,
                            &w.shexp_gate, &w.shexp_up, &w.shexp_down}) {
      m.layer_matmul_params += static_cast<int64_t>(t->size());
      m.layer_matmul_bytes += tensor_bytes(*t);
    }
    if (!w.exp_gate.empty())
      for (const Tensor* t : {&w.exp_gate[0], &w.exp_up[0], &w.exp_down[0]}) {  // every expert has one shape and type
        m.expert_params += static_cast<int64_t>(t->size());
        m.expert_bytes += tensor_bytes(*t);
      }
  }
  m.n_experts = mc.n_experts;
  m.experts_used = mc.n_experts_used;
  // k experts per row: what one row reads and computes.
  m.layer_matmul_params += m.experts_used * m.expert_params;
  m.layer_matmul_bytes += m.experts_used * m.expert_bytes;
  const Tensor& cls = model.classifier();
  m.classifier_params = static_cast<int64_t>(cls.size());
  m.classifier_bytes = tensor_bytes(cls);
  const ModelConfig& c = model.config;
  m.kv_bytes_per_position = 2LL * c.n_layers * c.kv_dim() * static_cast<int64_t>(sizeof(float));
  m.attention_flops_per_position = 4LL * c.n_layers * c.q_dim();
  return m;
}

double ModelCosts::weight_bytes_for(double rows) const {
  if (n_experts == 0) return static_cast<double>(weight_bytes());
  const double experts = std::min(static_cast<double>(n_experts), experts_used * rows);
  return static_cast<double>(weight_bytes()) + (experts - experts_used) * static_cast<double>(expert_bytes);
}

StepCost decode_cost(const ModelCosts& m, const std::vector<int>& prompt_lengths, int max_tokens) {
  StepCost s;
  const int steps = max_tokens - 1;
  if (prompt_lengths.empty() || steps < 1) return s;
  const double T = max_tokens;
  double positions = 0;  // attended positions summed over rows and timed steps
  for (int p : prompt_lengths) positions += steps * static_cast<double>(p) + T * (T - 1) / 2;  // sum_s (p + s)
  const double rows = static_cast<double>(prompt_lengths.size()) * steps;
  s.tokens_per_step = static_cast<double>(prompt_lengths.size());
  s.weight_bytes = m.weight_bytes_for(s.tokens_per_step);
  s.kv_bytes = static_cast<double>(m.kv_bytes_per_position) * positions / steps;
  s.flops_per_token = 2.0 * static_cast<double>(m.layer_matmul_params + m.classifier_params) +
                      static_cast<double>(m.attention_flops_per_position) * positions / rows;
  return s;
}

StepCost prefill_cost(const ModelCosts& m, int prompt_len) {
  StepCost s;
  if (prompt_len < 1) return s;
  const double P = prompt_len;
  s.tokens_per_step = P;
  s.weight_bytes = m.weight_bytes_for(P);
  s.kv_bytes = static_cast<double>(m.kv_bytes_per_position) * P;  // written once
  // Row at position i attends i + 1 positions: P (P + 1) / 2 in all; one classifier row.
  s.flops_per_token = 2.0 * static_cast<double>(m.layer_matmul_params) +
                      2.0 * static_cast<double>(m.classifier_params) / P +
                      static_cast<double>(m.attention_flops_per_position) * (P + 1) / 2;
  return s;
}

Ceiling ceiling_of(const StepCost& cost, double gb_per_s, double gflop_per_s) {
  Ceiling c;
  if (cost.bytes_per_step() > 0) c.memory_tokens_per_s = gb_per_s * 1e9 / cost.bytes_per_step() * cost.tokens_per_step;
  if (cost.flops_per_token > 0) c.compute_tokens_per_s = gflop_per_s * 1e9 / cost.flops_per_token;
  const bool mem = c.memory_tokens_per_s <= c.compute_tokens_per_s;
  c.tokens_per_s = mem ? c.memory_tokens_per_s : c.compute_tokens_per_s;
  c.kind = mem ? "mem" : "compute";
  return c;
}

}  // namespace repro::bench
