// The engine flags, declared once and shared by generate, run, bench and serve:
//   --model --tokenizer --device --mode --threads --precision --chat-template --stop-token
//   --parse-special
// Each subcommand says which variant it takes (EngineFlagSpec); the names, help texts and parsing
// live in src/cli/flags.cpp only.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/remote/endpoint.hpp"

namespace repro::cli {

struct EngineFlags {
  std::vector<std::string> models;  // --model (repeatable only where the spec says so)
  std::string tokenizer;
  std::string device = "cpu";
  std::string mode = "batch-invariant";
  std::string precision = "f32";
  std::string threads = "1";
  std::string chat_template;  // --chat-template NAME|FILE (where the spec offers it)
  std::vector<std::string> stop_tokens;  // --stop-token ID|TEXT (repeatable, where the spec offers it)
  bool parse_special = false;  // --parse-special: completion prompts match control-token text (encode_special)
  int tp = 1;                       // --tp: simulated tensor-parallel size (where the spec offers it)
  std::string allreduce = "ring";   // --allreduce ring|tree
  std::string speculative = "off";  // --speculative off|ngram:K|draft:FILE:K (where the spec offers it)

  std::string model() const { return models.empty() ? std::string() : models.front(); }
  // device, mode, one thread count, precision, tp and all-reduce, parsed; UsageError names the flag.
  EngineOptions engine_options() const;
  Device device_value() const;
  Precision precision_value() const;
  AllReduce allreduce_value() const;
  int thread_count() const;                // --threads as one number >= 1
  std::vector<int> thread_counts() const;  // --threads as a comma-separated list (bench)
  // The model at `path` (llama2.c: with --tokenizer; synth:NAME: the named synthesized model, see
  // repro/model/synth.hpp), its chat template replaced by --chat-template when given, each
  // --stop-token added to its end-of-generation set (Tokenizer::add_eog; UsageError naming the flag
  // for an id outside the vocabulary or a text no token has).
  std::unique_ptr<Model> load(const std::string& path) const;
  // --speculative draft:FILE:K: loads FILE into o.speculative.draft (its errors name the flag); the
  // engine checks its vocabulary against the target's. Nothing for off and ngram:K.
  void load_draft(EngineOptions& o) const;
};

struct EngineFlagSpec {
  bool model_must_exist = false;  // serve: a given model file is checked while parsing
  bool model_repeatable = false;  // bench: several models side by side
  bool mode = true;               // false: the subcommand takes its modes elsewhere (run --modes, bench: both)
  bool threads_list = false;      // bench: --threads is a comma-separated list
  bool chat_template = false;     // run, serve: --chat-template for `messages` prompts
  bool stop_token = false;        // generate, run, serve: --stop-token adds to the end-of-generation set
  bool parse_special = false;     // generate, serve: --parse-special (run: the plan option of that name)
  bool tp = false;                // generate, serve, bench: --tp N and --allreduce (run: the plan options)
  bool speculative = false;       // generate, serve: --speculative off|ngram:K|draft:FILE:K
  const char* model_help =
      "GGUF or llama2.c .bin model, or a synthesized model synth:100m | synth:100m-long | synth:long (default: the "
      "embedded stories260K)";
};

void add_engine_flags(CLI::App& sub, EngineFlags& f, const EngineFlagSpec& spec = {});

// --extra-body: a JSON object merged into every request ("" = an empty object); UsageError otherwise.
nlohmann::json parse_extra_body(const std::string& text);

// The endpoint flags, declared once and shared by run and bench:
//   --endpoint --api-model --api --provider --api-key-env --api-key-file --ca-cert --extra-body
//   --stream --max-retries --timeout --verbose
struct EndpointFlags {
  std::vector<std::string> endpoints;  // [LABEL=]URL
  std::vector<std::string> parse_special;  // --endpoint-parse-special [LABEL=]yes|no (bare: every endpoint)
  std::string api_model, api = "chat", provider = "openai", api_key_env = "OPENAI_API_KEY", api_key_file, ca_cert,
              extra_body;
  bool stream = false, verbose = false;
  int max_retries = 3;
  double timeout = 120;

  // One spec per --endpoint, checked (validate_endpoint) with the key loaded from --api-key-file or
  // --api-key-env; UsageError names the flag (a label given twice included).
  std::vector<EndpointSpec> build() const;
};

void add_endpoint_flags(CLI::App& sub, EndpointFlags& f);

}  // namespace repro::cli
