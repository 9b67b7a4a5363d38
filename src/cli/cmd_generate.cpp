// `repro-audit generate`: one completion from the local engine, optionally inside a real batch.
#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "repro/audit/batch_context.hpp"
#include "repro/engine/engine.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/common/error.hpp"
#include "repro/model/model.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"
#include "repro/model/synth.hpp"

namespace repro::cli {

namespace {
struct GenerateOptions {
  EngineFlags engine;
  std::string prompt = "Once upon a time";
  int max_tokens = 32, batch_size = 1, position = 0, beam_width = 0;
  int mate_join_step = 0, mate_prompt_delta = 0, mate_prompt_tokens = 0;
  // Seeds are checked as text: CLI11 reads "-1" into an unsigned as 2^64 - 1, "0x10" as 16.
  std::string seed = "0", filler_seed = "1";
  float temperature = 0, top_p = 1;
  int top_k = 0;
  std::vector<std::string> stop;
  std::string json_schema;
  bool json = false;
};

// The decimal integer `text` in 0..2^64-1, else UsageError naming `flag` and the range.
uint64_t parse_u64(const std::string& text, const char* flag) {
  const bool digits = !text.empty() && text.size() <= 20 && text.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = digits ? std::strtoull(text.c_str(), &end, 10) : 0;
  if (!digits || errno != 0)
    throw UsageError(fmt::format("{} must be an integer from 0 to {} (got '{}')", flag,
                                 std::numeric_limits<uint64_t>::max(), text));
  return static_cast<uint64_t>(v);
}

// Every numeric flag, before the model loads: one line naming the flag and its range. The ranges
// are the ones `run` applies to the same settings (src/audit/plan_options.cpp); the beam width is
// bounded because every beam is a batch row with its own KV cache.
void check_ranges(const GenerateOptions& o) {
  auto number = [](const char* flag, double v, bool ok, const char* range) {
    if (!ok) throw UsageError(fmt::format("{} must be {} (got {})", flag, range, v));
  };
  auto integer = [](const char* flag, int v, int lo, int hi) {
    if (v < lo || v > hi) throw UsageError(fmt::format("{} must be an integer from {} to {} (got {})", flag, lo, hi, v));
  };
  number("--temperature", o.temperature, o.temperature >= 0 && o.temperature <= 10, "a number from 0 to 10");
  number("--top-p", o.top_p, o.top_p > 0 && o.top_p <= 1, "a number in (0, 1]");  // NaN fails both
  integer("--top-k", o.top_k, 0, 1 << 20);
  integer("--max-tokens", o.max_tokens, 1, 1 << 20);
  integer("--batch-size", o.batch_size, 1, 4096);
  integer("--beam-width", o.beam_width, 0, 256);
  (void)parse_u64(o.seed, "--seed");
  (void)parse_u64(o.filler_seed, "--filler-seed");
}

int run_generate(const GenerateOptions& o) {
  check_ranges(o);
  EngineOptions eo = o.engine.engine_options();
  std::string path = o.engine.model().empty() ? default_model_path() : o.engine.model();
  auto model = o.engine.load(path);
  o.engine.load_draft(eo);
  GenRequest req;
  req.prompt = o.engine.parse_special ? model->tokenizer->encode_special(o.prompt, true)
                                      : model->tokenizer->encode(o.prompt, true);
  req.params.max_tokens = o.max_tokens;
  req.params.temperature = o.temperature;
  req.params.top_k = o.top_k;
  req.params.top_p = o.top_p;
  req.params.seed = parse_u64(o.seed, "--seed");
  req.params.stop = o.stop;
  std::shared_ptr<JsonConstraint> schema;
  if (!o.json_schema.empty()) {
    if (o.beam_width > 0) throw UsageError("--json-schema constrains sampling; drop --beam-width");
    schema = std::make_shared<JsonConstraint>(read_json_schema_file(o.json_schema, "--json-schema"),
                                              "--json-schema '" + o.json_schema + "'", *model->tokenizer);
    req.params.json_schema = schema;
  }

  BatchRun run;
  if (o.beam_width > 0 && eo.speculative.on())
    throw UsageError("--speculative drafts for sampled and greedy decoding, not for beam search; drop --beam-width or "
                     "use --speculative off");
  if (o.beam_width > 0 && o.batch_size != 1)
    throw UsageError("--beam-width decodes its beams as the batch; drop --batch-size");
  Engine engine(*model, eo);
  if (o.beam_width > 0)
    run.probe = engine.beam_search(req.prompt, o.beam_width, o.max_tokens);
  else
    run = run_in_batch(engine, req,
                       BatchContext{o.batch_size, o.position, parse_u64(o.filler_seed, "--filler-seed"),
                                    o.mate_join_step, o.mate_prompt_delta, o.mate_prompt_tokens});
  const GenResult& r = run.probe;
  if (o.json) {
    nlohmann::json j = {{"model", path},
                        {"mode", mode_name(eo.mode)},
                        {"device", device_name(eo.device)},
                        {"precision", precision_name(eo.precision)},
                        {"tp", eo.tp},
                        {"allreduce", allreduce_name(eo.allreduce)},
                        {"speculative", speculative_name(eo.speculative)},
                        {"spec_drafted", r.spec.drafted},
                        {"spec_accepted", r.spec.accepted},
                        {"spec_verify_steps", r.spec.verify_steps},
                        {"op_table", engine.describe().name},
                        {"prompt", o.prompt},
                        {"prompt_ids", req.prompt},
                        {"text", r.text},
                        {"tokens", r.tokens},
                        {"logprobs", r.logprobs},
                        {"logits_sha256", r.logits_sha256},
                        {"finish_reason", r.finish_reason},
                        {"schema_valid", schema ? nlohmann::json(schema->schema.validate(r.text)) : nlohmann::json()},
                        {"batch_size", o.batch_size},
                        {"position", o.position},
                        {"fillers", run.fillers.ids},
                        {"seed", req.params.seed},
                        {"latency_s", r.latency_s}};
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));  // invalid UTF-8 -> U+FFFD
  } else {
    fmt::print("{}{}\n", sanitize_utf8(o.prompt), sanitize_utf8(r.text));  // token ids stay exact in --json
  }
  return kExitOk;
}
}  // namespace

void setup_generate(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = parent.add_subcommand("generate", "Generate one completion with the local engine");
  EngineFlagSpec spec;
  spec.stop_token = true;
  spec.parse_special = true;
  spec.tp = true;
  spec.speculative = true;
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--prompt", o->prompt, "Prompt text")->capture_default_str();
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate (1 to 1048576)")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Decode inside a real batch of this many sequences (1 to 4096)")->capture_default_str();
  sub->add_option("--position", o->position, "The prompt's row in the batch (0-based)")->capture_default_str();
  sub->add_option("--filler-seed", o->filler_seed, "Seed that draws the filler sequences (0 to 2^64-1)")
      ->type_name("UINT")
      ->capture_default_str();
  sub->add_option("--mate-join-step", o->mate_join_step,
                  "The last batch mate joins after this many steps (0 = with the others; its prefill then shares a "
                  "forward pass with the decode of the others)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--mate-prompt-delta", o->mate_prompt_delta, "Tokens added to the last batch mate's prompt")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--mate-prompt-tokens", o->mate_prompt_tokens,
                  "The last batch mate's prompt: this many tokens of generated story text (0 = its filler prompt)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", o->seed, "Sampling seed (0 to 2^64-1)")->type_name("UINT")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "Sampling temperature, 0 to 10 (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Top-k, 0 to 1048576 (0 = off)")->capture_default_str();
  sub->add_option("--top-p", o->top_p, "Top-p, in (0, 1] (1 = off)")->capture_default_str();
  sub->add_option("--stop", o->stop, "Stop string (repeatable)");
  sub->add_option("--json-schema", o->json_schema,
                  "Constrain the output to JSON conforming to this JSON Schema file (structured output)");
  sub->add_option("--beam-width", o->beam_width, "Beam search with this width, 0 to 256 (0 = off)")->capture_default_str();
  sub->add_flag("--json", o->json, "JSON output: token ids, chosen-token logprobs, SHA-256 of the final logits");
  sub->callback([o, &runner] { runner = [o] { return run_generate(*o); }; });
}

}  // namespace repro::cli
