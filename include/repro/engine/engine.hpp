// The local inference engine: batched decoding with continuous batching over one op table
// (repro/kernels/ops.hpp), chosen once from EngineOptions {device, mode}.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "repro/engine/device.hpp"
#include "repro/engine/moe.hpp"
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
  // A mixture of experts: record GenResult::routing, each generated token's routes in every layer.
  // Off by default: a dense model has no routes, and the batch mates of an audit do not need theirs.
  bool routing_trace = false;
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

// Speculative decoding of one sequence (EngineOptions::speculative): drafted tokens, the drafted
// tokens the target accepted, and the decode steps that verified at least one drafted token.
struct SpecStats {
  int drafted = 0;
  int accepted = 0;
  int verify_steps = 0;
};

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
  SpecStats spec;                // all 0 without speculative decoding
  // DecodeParams::routing_trace on a mixture of experts: per generated token (tokens[t]), the route
  // of each layer, [step][layer], taken from the row whose logits chose that token (the last prompt
  // row for the first, then the row of the token before it; a verified draft token's own verify
  // row). Empty otherwise (and in beam search).
  std::vector<std::vector<Route>> routing;
  // ... and the routes of the prompt's rows before its last (positions 0 .. prompt_tokens-2), in
  // order: with `routing`, one route per position fed to the model (what SGLang returns).
  std::vector<std::vector<Route>> prompt_routing;
};

// Speculative decoding (docs/ENGINE.md "Speculative decoding"): each decoding sequence drafts up to
// `width` tokens, and the step verifies them as rows of that sequence beside the other sequences'
// rows; the draft tokens the target itself would have chosen are kept, the KV positions of the others
// are written over by the next step.
//   ngram:K        prompt lookup: the K tokens that followed the latest earlier occurrence of the
//                  sequence's last kNgramMaxMatch..kNgramMinMatch tokens (the longest match wins),
//                  past the end of the sequence repeating with the match's period
//   draft:FILE:K   a draft model with the target's vocabulary drafts K tokens, one batched step each
enum class DraftKind { Off, Ngram, Model };
inline constexpr int kMaxDraftWidth = 32;
inline constexpr int kNgramMinMatch = 2, kNgramMaxMatch = 4;
struct Speculative {
  DraftKind kind = DraftKind::Off;
  int width = 0;           // K: tokens drafted per step, 1..kMaxDraftWidth
  std::string draft_file{};  // DraftKind::Model: FILE as given
  std::shared_ptr<const Model> draft{};  // DraftKind::Model: the loaded draft model
  bool on() const { return kind != DraftKind::Off; }
};
// "off", "ngram:K" or "draft:FILE:K" (FILE may hold colons: synth:100m); UsageError naming `flag`
// for anything else, a width of 0 or over kMaxDraftWidth. The draft model is not loaded here.
Speculative parse_speculative(const std::string& text, const char* flag = "--speculative");
// The text form parse_speculative reads.
std::string speculative_name(const Speculative& s);
// Refuses (UsageError naming `flag` and both files) a draft whose vocabulary is not the target's:
// another size, or a token whose text differs.
void check_draft_vocabulary(const Model& target, const Model& draft, const std::string& draft_file,
                            const char* flag = "--speculative");
// The n-gram (prompt lookup) draft for a sequence whose tokens so far are `ctx`: `width` tokens, or
// none when no suffix of kNgramMinMatch tokens or more occurred before.
std::vector<int> ngram_draft(const std::vector<int>& ctx, int width);

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
  // Speculative decoding (off by default). CPU only: the engine refuses it on --device cuda.
  Speculative speculative{};
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
// One candidate of a sampling distribution.
struct TokenProb {
  int id;
  double prob;
};
// The distribution sample_token draws from at temperature > 0: the candidates by logit, descending
// (ties by index), after top-k and top-p, normalised.
std::vector<TokenProb> sampling_distribution(const float* logits, int n, const DecodeParams& p);
// A draft model's token at step t, drawn from its distribution q on the request's seed (a stream of
// its own, not sample_token's).
int sample_draft_token(const std::vector<TokenProb>& q, const DecodeParams& p, int step);
// The target's token at step t when the draft proposed `drafted` (from distribution q; empty: a
// deterministic draft, q(drafted) = 1). Greedy: the target's argmax, *accepted when it is the
// drafted token. Temperature > 0: rejection sampling: `drafted` is kept with probability
// min(1, p/q), else a token is drawn from max(0, p - q) normalised; the draws come from the
// request's seed on streams of their own, so a fixed seed gives the same tokens.
int speculative_token(const float* logits, int n, const DecodeParams& p, int step, int drafted,
                      const std::vector<TokenProb>& q, bool* accepted);
// Index of the chosen token from logits under params at step t (greedy when temperature == 0).
int sample_token(const float* logits, int n, const DecodeParams& p, int step);
// log-softmax of logits[id].
float token_logprob(const float* logits, int n, int id);
// The k most likely tokens (log-softmax, descending; ties by index).
std::vector<TokenLogprob> top_logprobs(const float* logits, int n, int k);

}  // namespace repro
