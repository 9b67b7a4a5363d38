// Plan assembly for `repro-audit run`. The CLI turns its flags into a PlanRequest (src/cli/cmd_run.cpp)
// and calls prepare_run once; everything between the flags and the replay happens here:
//   - a new run: the profile, then every flag given over it (plan options through their row of the
//     plan option table), the built-in prompts when none are given; long prompts generated with the
//     model's tokenizer, and the long_context_model when the model's context is too short;
//   - a resumed run (--resume DIR): the plan, model and finished completions of the run it continues,
//     and the checks that it is the same run (src/audit/resume.cpp);
//   - the model or the endpoints, --sign-key, validate_plan, the JSON Schema against the model's
//     vocabulary and the gate's modes: checked before anything runs (UsageError naming the flag).
// What the audit layer cannot do itself (parse --threads, load a model with the engine flags, build the
// endpoints with their API keys, read a report file) the CLI hands in as functions.
#pragma once
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/result.hpp"
#include "repro/audit/shards.hpp"
#include "repro/model/model.hpp"
#include "repro/openai/protocol.hpp"

namespace repro {

// The request settings every endpoint of a run shares (--api-model, --api, --provider, --stream).
struct EndpointSettings {
  std::string api_model, api, provider;
  bool stream = false;
};

struct PlanRequest {
  std::function<bool(const std::string& flag)> given;  // the flag ("--repeats") was on the command line
  std::string profile = "quick";                        // --profile
  std::string prompts_file;                             // --prompts
  std::vector<std::string> prompts;                     // --prompt (repeatable)
  std::map<std::string, std::string> plan_text;         // plan option name -> its flag's text
  std::string out, resume, sign_key;                    // --out, --resume, --sign-key
  std::string model;                                    // --model ("" = the default, or the resumed run's)
  std::string chat_template;                            // --chat-template
  Device device = Device::Cpu;                          // --device, parsed
  Precision precision = Precision::F32;                 // --precision, parsed
  std::function<int()> threads;                         // --threads as one count (UsageError naming it)
  bool remote = false;                                  // --endpoint given
  EndpointSettings endpoint;                            // as the flags give them
  // The endpoints of the --endpoint flags with these settings (API keys loaded, each checked).
  std::function<std::vector<EndpointSpec>(const EndpointSettings&)> build_endpoints;
  // The model at a path, as the engine flags load it (--tokenizer, --chat-template).
  std::function<std::unique_ptr<Model>(const std::string& path)> load_model;
  // A report.json or checkpoint.json, read and checked (--resume).
  std::function<AuditReport(const std::string& path)> load_report;
  int shard_count = 0;  // --shard-count N (with --shard auto); 0 = not given
  // The process environment, for --shard auto (a test hands in its own).
  std::function<const char*(const char*)> getenv = [](const char* name) -> const char* { return std::getenv(name); };
};

// A run ready to replay (src/cli/replay.hpp takes it from here).
struct PreparedRun {
  AuditReport report;  // empty, or the resumed run's plan, provenance and completions
  PlanOptions plan;
  std::unique_ptr<Model> model;  // local runs
  std::string model_path;
  nlohmann::json model_switch;  // model_switch_record() when the run switched models, else null
  EngineSetup engine;
  std::vector<EndpointSpec> endpoints;  // remote runs
  ShardSpec shard;                      // --shard K/N or auto, resolved (count 0: the whole plan)
  std::string out_dir;
  // --resume of a run that finished: nothing is left to run (its verdict and its own exit status).
  bool finished = false;
  std::string finished_verdict;
  int finished_code = 0;
};

PreparedRun prepare_run(const PlanRequest& request);

}  // namespace repro
