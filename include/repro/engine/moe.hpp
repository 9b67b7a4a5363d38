// Mixture-of-experts routing: from a token's router logits to the experts it is sent to and their
// weights. One plain loop on the host, the same in every mode and on every device, so routing is
// never where modes differ: only the logits the router matmul hands it can differ (in default
// mode, by the batch's shape), and then near-ties flip the choice.
#pragma once
#include <vector>

#include "repro/model/model.hpp"

namespace repro {

// The routing of one token: k experts, in the order they were chosen (highest weight first), and
// the weight of each in the combine.
struct Route {
  std::vector<int> experts;
  std::vector<float> weights;
  // The chosen k-th expert's gate value minus the best unchosen one's (before normalisation):
  // how far the selection is from flipping; +infinity when every expert is chosen.
  float margin = 0;
};

// Routes one token from its router logits [n_experts]:
//   1. gate values: softmax over all experts (max subtracted, exp, sum in expert order, divide)
//      or sigmoid of each logit (config.gating);
//   2. top-k by gate value, k = config.n_experts_used; ties: the lower expert index wins (a
//      documented, mode-independent rule; a sort on equal keys would otherwise decide);
//   3. the k weights are the selected gate values, divided by their sum (summed in selection
//      order) when config.norm_topk (llama/Mixtral, qwen3moe), as they are otherwise (qwen2moe).
Route route_token(const ModelConfig& config, const float* logits);

}  // namespace repro
