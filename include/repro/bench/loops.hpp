// The two measurements of the local bench, on one engine (one op table), as llama.cpp's
// batched-bench separates them:
//   decode   a real batch (the probe in the middle of filler prompts, every sequence greedy for
//            max_tokens tokens, EOS ignored so the batch stays full) is prefilled in one step, then
//            the generated tokens of the following steps are timed:
//            decode tokens/s = batch * (max_tokens - 1) / decode time.
//   prefill  one sequence's prompt in one forward step: prompt tokens/s = length / time of that step.
#pragma once
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"

namespace repro::bench {

// One batch: the probe at row batch/2 among batch-1 fillers (the audit's filler pool), all
// max_tokens long, no log-softmax over the vocabulary (as a production engine decodes).
std::vector<GenRequest> make_batch(const Model& model, const std::string& probe, int batch, int max_tokens);

// A prompt of exactly `length` tokens: BOS, then the filler texts' tokens, cycled.
std::vector<int> long_prompt(const Model& model, int length);

// One decode run: the batch joins, its prefill step is not timed, the remaining steps are.
struct DecodeRun {
  double tok_s = 0;
  std::vector<int> probe_tokens;  // the probe's (row batch/2) generated tokens
  std::string probe_sha;          // and the SHA-256 of its logits
};
DecodeRun decode_once(Engine& engine, const std::vector<GenRequest>& reqs);

// One prefill run: a single sequence's prompt in one forward step (its first token included);
// returns prompt tokens/s.
double prefill_once(Engine& engine, const GenRequest& req);

}  // namespace repro::bench
