// The local inference engine: batched decoding with continuous batching over one op table
// (repro/kernels/ops.hpp), chosen once from EngineOptions {device, mode}.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "repro/engine/device.hpp"
#include "repro/kernels/ops.hpp"
#include "repro/model/model.hpp"

namespace repro {

struct JsonConstraint;  // repro/structured/json_schema.hpp

// Decoding parameters of one request. The sampling draw at step t depends only on
// (seed, t, logits): never on batch size, batch mates or position.
struct DecodeParams {
  int max_tokens = 32;
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings (text); the match is cut from the output
  bool stop_at_eos = true;        // stop at an end-of-generation token (Tokenizer::eog()) or a BOS
  int top_logprobs = 0;           // > 0: also record the this-many most likely tokens at each step
  // false: skip the vocabulary-wide log-softmax of each step (the chosen token's logprob, the step
  // stats and top logprobs), as production engines do unless a client asks for logprobs: GenResult's
  // logprobs and steps stay empty. Tokens, text and logits_sha256 are the same either way (the
  // token is chosen from the logits, never from the logprobs). top_logprobs > 0 records them anyway.
  bool logprobs = true;
  // Structured output: only tokens that keep the output a prefix of a document conforming to this
  // schema are allowed; end of sequence only once it is complete. The chosen token's logprob,
  // step stats and top logprobs are those of the constrained distribution; logits_sha256 stays the
  // model's own logits. A sequence that no token can continue ends with finish_reason "schema".
  std::shared_ptr<const JsonConstraint> json_schema;
};

// One alternative token at a step: id and log-softmax (before temperature).
struct TokenLogprob {
  int id;
  float logprob;
};

struct GenRequest {
  std::vector<int> prompt;  // token ids (with BOS when the tokenizer adds one)
  DecodeParams params;
};

// What the engine records at each step besides the chosen token, from the logits it already has
// (one pass for the top tokens, one for the log-sum-exp): the top-2 logit margin, where a
// reordered sum can flip the greedy choice, and the kTopRecorded most likely tokens, from which a
// drift analysis computes a top-k KL divergence without re-running.
inline constexpr int kTopRecorded = 5;
struct StepStats {
  float margin = 0;        // top-1 logit - top-2 logit (>= 0; 0 on a tie)
  float margin_rel = 0;    // margin / max(|top-1 logit|, |top-2 logit|); 0 when both are 0
  int top_ids[kTopRecorded] = {};          // most likely first; ties by lower id
  float top_logprobs[kTopRecorded] = {};   // log-softmax of top_ids (before temperature)
};
// StepStats of one step's logits (n >= 1; ids past n are -1 with logprob -inf).
StepStats step_stats(const float* logits, int n);
// The same, and *chosen_logprob = token_logprob(logits, n, chosen) bit for bit from the same
// log-sum-exp (one pass over the vocabulary instead of two).
StepStats step_stats(const float* logits, int n, int chosen, float* chosen_logprob);

struct GenResult {
  std::vector<int> tokens;       // generated ids (without the prompt)
  std::vector<float> logprobs;   // log-softmax of each chosen token (before temperature)
  std::vector<StepStats> steps;  // per generated token (beam search: empty)
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per step, when params.top_logprobs > 0
  std::string text;              // decoded generated text
  std::string finish_reason;     // "stop" (end-of-generation token / stop string) or "length"
  std::string logits_sha256;     // SHA-256 of the final step's logits bits (vocab float32, LE)
  double latency_s = 0;          // from join to finish
  int prompt_tokens = 0;
};

struct EngineOptions {
  Mode mode = Mode::BatchInvariant;
  int threads = 1;
  Device device = Device::Cpu;
  Precision precision = Precision::F32;  // where activations are stored between ops
  // Tensor parallelism simulated on one device (docs/ENGINE.md "Tensor parallelism"): the
  // row-parallel matmuls (wo, w_down) split K into `tp` contiguous shards, one partial per rank from
  // the table's own kernel, added by the all-reduce order `allreduce`. 1: no split (the same bits
  // as ever). check_tensor_parallel says which sizes a model allows.
  int tp = 1;
  AllReduce allreduce = AllReduce::Ring;
};

// Refuses (UsageError, exit 2) a tensor-parallel size the model does not divide into: tp must be
// 1, 2, 4 or 8, and divide the attention heads, the KV heads and the FFN hidden size, with each
// rank's K shard of wo and w_down a whole number of blocks of their weight type. The message names
// `flag`, the dimension and the sizes that would work.
void check_tensor_parallel(const Model& model, int tp, const char* flag = "--tp");
// The tensor-parallel sizes of {1, 2, 4, 8} the model allows.
std::vector<int> valid_tp_sizes(const Model& model);

// Continuous batching: submit() adds a sequence (it is prefilled at the next step()), step() runs one
// forward pass over every active sequence, and a sequence leaves the batch when it finishes, so later
// steps see a smaller batch. The position of a sequence in the batch is its submission order among
// the active ones. In Mode::Deterministic a sequence joins only when the batch is empty: every
// request is decoded alone, in submission order (the others wait; their latency includes the wait).
class Engine {
 public:
  Engine(const Model& model, EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Returns a handle. Throws UsageError when the prompt is empty or prompt + max_tokens exceeds
  // the model's context length.
  int submit(GenRequest req);
  // One forward step over all active sequences. Returns the handles that finished in this step.
  std::vector<int> step();
  bool busy() const;                  // any active sequence
  int active() const;                 // sequences in the batch now or waiting to join it
  const GenResult& result(int handle) const;  // valid once the handle finished
  GenResult take_result(int handle);  // moves it out and frees the slot's bookkeeping
  // Drops a queued or decoding sequence (its client went away): it leaves the batch before the next
  // step and produces no result. Returns false when the handle is unknown or already finished.
  bool cancel(int handle);
  // Called after each step for each sequence that produced a token: (handle, token, logprob,
  // top alternatives; empty unless the request asked for top_logprobs).
  std::function<void(int, int, float, const std::vector<TokenLogprob>&)> on_token;

  // Convenience: all requests join at once (position = index), run to completion.
  std::vector<GenResult> generate(const std::vector<GenRequest>& reqs);

  // Beam search of the given width for one prompt, on this engine's op table (the beams decode as
  // one real batch). Runs beside any active sequences' KV slots but not inside step().
  GenResult beam_search(const std::vector<int>& prompt, int width, int max_tokens);

  const Model& model() const;
  const EngineOptions& options() const;
  kernels::OpsInfo describe() const;  // the op table: name, ISA or GPU, library
  int64_t generated_tokens() const;   // total over the engine's life

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Beam search on a fresh engine with these options (Engine::beam_search).
GenResult beam_search(const Model& model, EngineOptions opts, const std::vector<int>& prompt, int width,
                      int max_tokens);

// Sampling primitives (exposed for tests).
// Index of the chosen token from logits under params at step t (greedy when temperature == 0).
int sample_token(const float* logits, int n, const DecodeParams& p, int step);
// log-softmax of logits[id].
float token_logprob(const float* logits, int n, int id);
// The k most likely tokens (log-softmax, descending; ties by index).
std::vector<TokenLogprob> top_logprobs(const float* logits, int n, int k);

}  // namespace repro
