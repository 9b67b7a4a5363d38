// What the shard tests compare between a merged report and the unsharded run: the analysis that does
// not depend on timing (cases, cross-mode tables, the verdict and counts, each completion's cell,
// tokens and hashes, the plan).
#pragma once
#include <nlohmann/json.hpp>

namespace repro::test {

inline nlohmann::json analysis_of(const nlohmann::json& r) {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& x : r["completions"])
    c.push_back({x["prompt_id"], x["decoding"], x["mode"], x["precision"], x["batch_size"], x["position"],
                 x["filler_set"], x["repeat"], x["tokens"], x["logits_sha256"]});
  return {{"cases", r["cases"]},
          {"cross_mode", r["cross_mode"]},
          {"verdict", r["summary"]["verdict"]},
          {"n", r["summary"]["cases"]},
          {"divergent", r["summary"]["divergent_cases"]},
          {"completions", c},
          {"plan", r["plan"]}};
}

}  // namespace repro::test
