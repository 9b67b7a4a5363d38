// `repro-audit run`: the main job. Turns the flags into a plan request (the plan, model or endpoints
// are assembled and checked in src/audit/plan_request.cpp), replays it on the local engine or remote
// endpoints, analyses, writes the reports, and exits with the CI gate's verdict.
#include <cstdio>
#include <map>
#include <memory>

#include "repro/audit/plan_options.hpp"
#include "repro/audit/plan_request.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/shards.hpp"
#include "repro/common/error.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"
#include "repro/cli/replay.hpp"
#include "repro/report/report.hpp"

namespace repro::cli {

namespace {

struct RunOptions {
  EngineFlags engine;  // --model --tokenizer --device --threads --precision (modes: --modes)
  std::string profile = "quick", prompts_file, out = "repro-audit-report";
  std::vector<std::string> prompts;
  std::map<std::string, std::string> plan_text;  // plan option name -> flag text (one per table row)
  std::map<std::string, bool> plan_flag;         // plan option name -> boolean flag given
  std::string resume, baseline, sign_key;
  bool quiet = false;
  int shard_count = 0;   // --shard-count (with --shard auto)
  bool dry_run = false;  // --dry-run: print the cases (and the shard's) and exit
  EndpointFlags remote;  // --endpoint --api-model --api --provider ... --timeout --verbose
  CLI::App* app = nullptr;
  bool given(const std::string& flag) const { return app->count(flag) > 0; }
};

// The request the flags make; the plan is assembled from it in src/audit/plan_request.cpp.
PlanRequest plan_request(const RunOptions& o) {
  PlanRequest q;
  q.device = o.engine.device_value();
  q.precision = o.engine.precision_value();  // checks --precision even where it is not used
  q.given = [&o](const std::string& flag) { return o.given(flag); };
  q.profile = o.profile;
  q.prompts_file = o.prompts_file;
  q.prompts = o.prompts;
  q.plan_text = o.plan_text;
  q.out = o.out;
  q.resume = o.resume;
  q.sign_key = o.sign_key;
  q.model = o.engine.model();
  q.chat_template = o.engine.chat_template;
  q.threads = [&o] { return o.engine.thread_count(); };
  q.remote = !o.remote.endpoints.empty();
  q.endpoint = {o.remote.api_model, o.remote.api, o.remote.provider, o.remote.stream};
  q.build_endpoints = [&o](const EndpointSettings& s) {
    EndpointFlags f = o.remote;
    f.api_model = s.api_model;
    f.api = s.api;
    f.provider = s.provider;
    f.stream = s.stream;
    return f.build();
  };
  q.load_model = [&o](const std::string& path) { return o.engine.load(path); };
  q.load_report = [](const std::string& path) { return load_report(path); };
  q.shard_count = o.shard_count;
  return q;
}

int run_run(const RunOptions& o) {
  PreparedRun run = prepare_run(plan_request(o));
  if (o.dry_run) {  // the assignment of cases to shards; nothing runs, nothing is written
    std::vector<std::string> labels;
    for (const auto& e : run.endpoints) labels.push_back(e.label);
    const std::string digest = plan_digest(plan_to_json(run.plan, !run.endpoints.empty()), prompts_digest(run.plan.prompts));
    std::string text = assignment_text(run.plan, labels, digest);
    if (run.shard.count > 0) text = "shard " + shard_text(run.shard) + " from " + run.shard.source + "\n" + text;
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  // A finished run has nothing left to run; writing it again would change its files (and break the
  // signature of a signed one). Checked last, so a resumed run's flags are still checked.
  if (run.finished) {
    std::fprintf(stderr, "nothing to resume: the run in %s finished (report.json, verdict %s); nothing was written\n",
                 o.resume.c_str(), run.finished_verdict.c_str());
    return run.finished_code;
  }
  ReplayJob job;
  job.report = &run.report;
  job.plan = &run.plan;
  job.model = run.model.get();
  job.model_path = run.model_path;
  job.model_switch = run.model_switch;
  job.engine = run.engine;
  job.endpoints = &run.endpoints;
  job.out_dir = run.out_dir;
  job.shard = run.shard;
  job.baseline = o.baseline;
  job.sign_key = o.sign_key;
  job.quiet = o.quiet;
  return replay_and_report(job);
}

}  // namespace

void setup_run(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<RunOptions>();
  auto* s = parent.add_subcommand("run", "Replay prompts across batch contexts, modes and seeds; report divergence (default)");
  o->app = s;
  EngineFlagSpec engine_spec;
  engine_spec.mode = false;  // --modes, a list in the plan
  engine_spec.chat_template = true;
  engine_spec.stop_token = true;
  add_engine_flags(*s, o->engine, engine_spec);
  s->add_option("--profile", o->profile, "Profile name (quick, demo, ci, batch-sweep, sampling, long, compliance, tradeoff) or JSON path")
      ->capture_default_str();
  s->add_option("--prompt", o->prompts, "Prompt text (repeatable)");
  s->add_option("--prompts", o->prompts_file, "Prompts file: .txt (one per line), .jsonl ({id, prompt} or {id, messages}; variants of a task: {task, variant, prompt|messages}, compared in the report) or OpenAI Batch API input");
  for (const auto& opt : plan_options()) {  // one flag per plan option with a flag
    if (!*opt.flag) continue;
    if (opt.type == OptionType::Bool) {
      s->add_flag(opt.flag, o->plan_flag[opt.name], opt.help);
      continue;
    }
    const char* type = opt.type == OptionType::Int ? "INT" : opt.type == OptionType::UInt ? "UINT"
                       : opt.type == OptionType::Number ? "NUMBER" : opt.type == OptionType::Text ? "TEXT"
                       : opt.type == OptionType::Json ? "FILE" : "LIST";
    const bool numeric = opt.type != OptionType::Text && opt.type != OptionType::TextList && opt.type != OptionType::Json;
    s->add_option(opt.flag, o->plan_text[opt.name], numeric ? std::string(opt.help) + " (" + opt.valid + ")" : opt.help)
        ->type_name(type);
  }
  s->add_option("--out", o->out, "Report directory ('-' = stdout)")->capture_default_str();
  s->add_option(
      "--resume", o->resume,
      "Continue the interrupted run whose --out directory this is (same model, prompts, endpoints, chat "
      "template and plan; flags that would change them are refused; a finished run is left as it is)");
  s->add_option("--baseline", o->baseline, "Golden report.json: verdict DRIFT (exit 1) when this run drifts from it");
  s->add_option("--sign-key", o->sign_key, "Sign the report with this private key (from `keygen`): writes report.intoto.jsonl");
  s->add_option("--shard-count", o->shard_count,
                 "With --shard auto in a Kubernetes Indexed Job (JOB_COMPLETION_INDEX): the Job's completions, N")
      ->check(CLI::Range(1, kMaxShards));
  s->add_flag("--dry-run", o->dry_run,
              "Print the plan's cases and the ones this shard runs (with --shard), then exit without running");
  s->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  // remote endpoints
  add_endpoint_flags(*s, o->remote);
  s->add_option("--endpoint-parse-special", o->remote.parse_special,
               "[LABEL=]yes|no (repeatable): whether the endpoint matches special-token text in completion prompts "
               "(as --parse-special does locally); recorded per endpoint in the report. Default: the preset's rule "
               "(yes for vllm, sglang, tgi, llamacpp; unknown otherwise)");
  s->callback([o, &runner] { runner = [o] { return run_run(*o); }; });
}

}  // namespace repro::cli
