// `repro-audit generate`: one completion from the local engine, optionally inside a real batch.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "repro/audit/batch_context.hpp"
#include "repro/engine/engine.hpp"
#include "repro/common/error.hpp"
#include "repro/model/model.hpp"
#include "repro/model/default_model.hpp"
#include "repro/cli/commands.hpp"

namespace repro::cli {

namespace {
struct GenerateOptions {
  std::string model, tokenizer, prompt = "Once upon a time", mode = "batch-invariant";
  int max_tokens = 32, batch_size = 1, position = 0, threads = 1, beam_width = 0;
  uint64_t seed = 0, filler_seed = 1;
  float temperature = 0, top_p = 1;
  int top_k = 0;
  std::vector<std::string> stop;
  bool json = false;
};

int run_generate(const GenerateOptions& o) {
  Mode mode = parse_mode(o.mode);
  if (o.threads < 1) throw UsageError("--threads must be at least 1");
  std::string path = o.model.empty() ? default_model_path() : o.model;
  auto model = load_model(path, o.tokenizer);
  EngineOptions eo{mode, o.threads};
  GenRequest req;
  req.prompt = model->tokenizer->encode(o.prompt, true);
  req.params.max_tokens = o.max_tokens;
  req.params.temperature = o.temperature;
  req.params.top_k = o.top_k;
  req.params.top_p = o.top_p;
  req.params.seed = o.seed;
  req.params.stop = o.stop;
  if (o.temperature < 0) throw UsageError("--temperature must be >= 0");
  if (o.top_p <= 0 || o.top_p > 1) throw UsageError("--top-p must be in (0, 1]");
  if (o.top_k < 0) throw UsageError("--top-k must be >= 0");

  BatchRun run;
  if (o.beam_width > 0) {
    if (o.batch_size != 1) throw UsageError("--beam-width decodes its beams as the batch; drop --batch-size");
    run.probe = beam_search(*model, eo, req.prompt, o.beam_width, o.max_tokens);
  } else {
    Engine engine(*model, eo);
    run = run_in_batch(engine, req, BatchContext{o.batch_size, o.position, o.filler_seed});
  }
  const GenResult& r = run.probe;
  if (o.json) {
    nlohmann::json j = {{"model", path},
                        {"mode", mode_name(mode)},
                        {"prompt", o.prompt},
                        {"prompt_ids", req.prompt},
                        {"text", r.text},
                        {"tokens", r.tokens},
                        {"logprobs", r.logprobs},
                        {"logits_sha256", r.logits_sha256},
                        {"finish_reason", r.finish_reason},
                        {"batch_size", o.batch_size},
                        {"position", o.position},
                        {"fillers", run.fillers.ids},
                        {"seed", o.seed},
                        {"latency_s", r.latency_s}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}{}\n", o.prompt, r.text);
  }
  return kExitOk;
}
}  // namespace

void setup_generate(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = parent.add_subcommand("generate", "Generate one completion with the local engine");
  sub->add_option("--model", o->model, "GGUF or llama2.c .bin model (default: the embedded stories260K)");
  sub->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer .bin (default: beside the model)");
  sub->add_option("--prompt", o->prompt, "Prompt text")->capture_default_str();
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--mode", o->mode, "Kernel mode: default | batch-invariant")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Decode inside a real batch of this many sequences")->capture_default_str();
  sub->add_option("--position", o->position, "The prompt's row in the batch (0-based)")->capture_default_str();
  sub->add_option("--filler-seed", o->filler_seed, "Seed that draws the filler sequences")->capture_default_str();
  sub->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", o->top_p, "Top-p (1 = off)")->capture_default_str();
  sub->add_option("--stop", o->stop, "Stop string (repeatable)");
  sub->add_option("--beam-width", o->beam_width, "Beam search with this width (0 = off)")->capture_default_str();
  sub->add_option("--threads", o->threads, "Engine threads")->capture_default_str();
  sub->add_flag("--json", o->json, "JSON output: token ids, chosen-token logprobs, SHA-256 of the final logits");
  sub->callback([o, &runner] { runner = [o] { return run_generate(*o); }; });
}

}  // namespace repro::cli
