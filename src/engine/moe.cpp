// Mixture-of-experts routing (repro/engine/moe.hpp): plain loops, one order.
#include "repro/engine/moe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace repro {

Route route_token(const ModelConfig& c, const float* logits) {
  const int E = c.n_experts, k = c.n_experts_used;
  // ---- 1. gate values ----
  std::vector<float> gate(static_cast<size_t>(E));
  if (c.gating == MoeGating::Softmax) {
    float mx = logits[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, logits[e]);
    float sum = 0;
    for (int e = 0; e < E; ++e) {
      gate[e] = std::exp(logits[e] - mx);
      sum += gate[e];
    }
    for (int e = 0; e < E; ++e) gate[e] = gate[e] / sum;
  } else {
    for (int e = 0; e < E; ++e) gate[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  // ---- 2. top-k: k passes, each the largest value not yet taken; strict > keeps the lowest
  // index among equal values ----
  Route r;
  std::vector<char> taken(static_cast<size_t>(E), 0);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || gate[e] > gate[best])) best = e;
    taken[best] = 1;
    r.experts.push_back(best);
    r.weights.push_back(gate[best]);
  }
  // ---- the margin: the k-th chosen gate value over the best one left out ----
  r.margin = std::numeric_limits<float>::infinity();
  for (int e = 0; e < E; ++e)
    if (!taken[e]) {
      const float m = r.weights.back() - gate[e];
      if (m < r.margin) r.margin = m;
    }
  // ---- 3. normalisation of the k weights ----
  if (c.norm_topk) {
    float sum = 0;
    for (float w : r.weights) sum += w;
    for (float& w : r.weights) w = w / sum;
  }
  return r;
}

}  // namespace repro
