// `repro-audit run`: the main job. Expands the plan (profile + flags), replays it on the local engine
// or remote endpoints, analyses, writes the reports, and exits with the CI gate's verdict.
#include <fmt/core.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <optional>

#include "repro/audit/analysis.hpp"
#include "repro/audit/preflight.hpp"
#include "repro/model/default_model.hpp"
#include "repro/common/error.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/plan_options.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/remote/client.hpp"
#include "repro/report/report.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/cli/flags.hpp"
#include "repro/cli/replay.hpp"

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
  // remote
  std::vector<std::string> endpoints;
  std::string api_model, api = "chat", provider = "openai", api_key_env = "OPENAI_API_KEY", api_key_file, ca_cert,
              extra_body;
  bool stream = false, verbose = false;
  int max_retries = 3;
  double timeout = 120;
  CLI::App* app = nullptr;
  bool given(const std::string& flag) const { return app->count(flag) > 0; }
};

// Profile first, then every flag the user gave overrides it. Plan options go through their row of
// the plan option table (parse, check the range, store).
PlanOptions build_plan(const RunOptions& o) {
  PlanOptions p;
  apply_profile(find_profile(o.profile), p);
  if (o.given("--prompts")) p.prompts = prompts_from_file(o.prompts_file);
  if (o.given("--prompt")) {
    if (!o.given("--prompts")) p.prompts.clear();
    for (const auto& t : o.prompts) {
      if (trim(t).empty()) throw UsageError("--prompt: empty prompt; give the text to replay, e.g. --prompt 'Once upon a time'");
      p.prompts.push_back(prompt_from_text(t));
    }
  }
  if (p.prompts.empty()) p.prompts = builtin_prompts();
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || !o.given(opt.flag_name())) continue;
    nlohmann::json v = opt.type == OptionType::Bool ? nlohmann::json(opt.flag_sets)
                                                    : parse_flag_value(opt, o.plan_text.at(opt.name));
    opt.set(p, check_plan_value(opt, v, opt.flag_name()));
  }
  // --threads is one of the engine flags (src/cli/flags.cpp), shared with generate, bench and serve.
  if (o.given("--threads")) p.threads = o.engine.thread_count();
  return p;
}

std::vector<EndpointSpec> build_endpoints(const RunOptions& o) {
  std::vector<EndpointSpec> eps;
  std::string key = load_api_key(o.api_key_env, o.api_key_file);
  nlohmann::json extra = nlohmann::json::object();
  if (!o.extra_body.empty()) {
    try {
      extra = nlohmann::json::parse(o.extra_body);
    } catch (const nlohmann::json::parse_error&) {
      throw UsageError("--extra-body: not valid JSON; give an object such as '{\"top_k\": 1}'");
    }
    if (!extra.is_object()) throw UsageError("--extra-body: must be a JSON object");
  }
  for (const auto& arg : o.endpoints) {
    EndpointSpec e = parse_endpoint_arg(arg);
    e.api_model = o.api_model;
    e.api = o.api;
    e.provider = parse_provider(o.provider);
    e.stream = o.stream;
    e.extra_body = extra;
    e.api_key = key;
    e.ca_cert = o.ca_cert;
    e.max_retries = o.max_retries;
    e.read_timeout_s = o.timeout;   // silence and
    e.total_timeout_s = o.timeout;  // the whole attempt, however slowly the bytes trickle
    e.verbose = o.verbose;
    validate_endpoint(e);
    for (const auto& other : eps)
      if (other.label == e.label) throw UsageError("--endpoint: label '" + e.label + "' is used twice; label each one (NAME=URL)");
    eps.push_back(std::move(e));
  }
  return eps;
}

int run_run(const RunOptions& o) {
  namespace fs = std::filesystem;
  AuditReport report;
  PlanOptions plan;
  std::string out_dir = o.out;
  std::string model_path = o.engine.model(), tokenizer_path = o.engine.tokenizer;
  Device device = o.engine.device_value();
  Precision precision = o.engine.precision_value();
  if (!o.resume.empty()) {
    // Continue an interrupted run: its plan, model and finished completions come from its directory.
    out_dir = o.resume;
    fs::path cp = fs::path(o.resume) / "checkpoint.json", rj = fs::path(o.resume) / "report.json";
    fs::path src = fs::exists(cp) ? cp : rj;
    if (!fs::exists(src))
      throw UsageError("--resume '" + o.resume + "': no checkpoint.json or report.json there; give the --out directory of the run");
    report = load_report(src.string());
    plan = plan_from_report(report);
    if (report.environment.contains("model") && !o.given("--model"))
      model_path = report.environment["model"].value("path", "");
    if (report.environment.contains("engine")) {  // the engine the run started with
      const nlohmann::json& e = report.environment["engine"];
      if (!o.given("--device")) device = parse_device(e.value("device", "cpu"), "--resume: engine.device");
      if (!o.given("--precision"))
        precision = parse_precision(e.value("precision", "f32"), "--resume: engine.precision");
    }
    report.cases.clear();
    report.summary = Summary{};
  } else {
    plan = build_plan(o);
  }
  if (!o.sign_key.empty()) {  // fail before the audit, not after it
    bool json_file = false;
    for (const auto& f : plan.formats)
      json_file = json_file || (f == "json" && out_dir != "-") || (f.rfind("json=", 0) == 0 && f != "json=-");
    if (!json_file)
      throw UsageError("--sign-key: the signature covers report.json; write it to a file (--format with json, --out DIR)");
    read_file(o.sign_key, "private key (--sign-key)");
  }
  const bool remote = !o.endpoints.empty();
  std::vector<EndpointSpec> endpoints;
  std::unique_ptr<Model> model;
  if (remote) {
    if (o.given("--model")) throw UsageError("--model and --endpoint exclude each other; audit a local model or endpoints");
    if (o.given("--device") || o.given("--precision"))
      throw UsageError("--device and --precision set the local engine; drop them with --endpoint");
    endpoints = build_endpoints(o);
    validate_plan(plan, -1);
  } else {
    if (model_path.empty()) model_path = default_model_path();
    model = load_model(model_path, tokenizer_path);
    validate_plan(plan, model->config.context_length);
  }
  // ---- the gate: which modes (endpoints) it applies to, checked before anything runs
  if (remote && o.resume.empty() && !o.given("--gate-modes")) plan.thresholds.modes.clear();  // every endpoint
  {
    std::vector<std::string> run_modes;
    if (remote)
      for (const auto& e : endpoints) run_modes.push_back(e.label);
    else
      run_modes = plan.modes;
    check_gate_modes(plan.thresholds.modes, run_modes,
                     o.given("--gate-modes") ? std::string("--gate-modes")
                                             : "the gate of profile '" + plan.profile +
                                                   "' (thresholds.modes; override with --gate-modes)");
  }
  ReplayJob job;
  job.report = &report;
  job.plan = &plan;
  job.model = model.get();
  job.model_path = model_path;
  job.engine = EngineSetup{device, precision};
  job.endpoints = &endpoints;
  job.out_dir = out_dir;
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
  add_engine_flags(*s, o->engine, engine_spec);
  s->add_option("--profile", o->profile, "Profile name (quick, ci, batch-sweep, sampling, compliance) or JSON path")
      ->capture_default_str();
  s->add_option("--prompt", o->prompts, "Prompt text (repeatable)");
  s->add_option("--prompts", o->prompts_file, "Prompts file: .txt (one per line), .jsonl ({id, prompt} or {id, messages}) or OpenAI Batch API input");
  for (const auto& opt : plan_options()) {  // one flag per plan option with a flag
    if (!*opt.flag) continue;
    if (opt.type == OptionType::Bool) {
      s->add_flag(opt.flag, o->plan_flag[opt.name], opt.help);
      continue;
    }
    const char* type = opt.type == OptionType::Int ? "INT" : opt.type == OptionType::UInt ? "UINT"
                       : opt.type == OptionType::Number ? "NUMBER" : opt.type == OptionType::Text ? "TEXT" : "LIST";
    const bool numeric = opt.type != OptionType::Text && opt.type != OptionType::TextList;
    s->add_option(opt.flag, o->plan_text[opt.name], numeric ? std::string(opt.help) + " (" + opt.valid + ")" : opt.help)
        ->type_name(type);
  }
  s->add_option("--out", o->out, "Report directory ('-' = stdout)")->capture_default_str();
  s->add_option("--resume", o->resume, "Continue the interrupted run whose --out directory this is");
  s->add_option("--baseline", o->baseline, "Golden report.json: verdict DRIFT (exit 1) when this run drifts from it");
  s->add_option("--sign-key", o->sign_key, "Sign the report with this private key (from `keygen`): writes report.intoto.jsonl");
  s->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  // remote endpoints
  s->add_option("--endpoint", o->endpoints, "OpenAI-compatible endpoint, [LABEL=]URL (repeatable)");
  s->add_option("--api-model", o->api_model, "Model name sent to the endpoints (Azure: deployment)");
  s->add_option("--api", o->api, "chat | completions")->capture_default_str();
  s->add_option("--provider", o->provider, "openai | azure | vllm | sglang | llamacpp | ollama | tgi")->capture_default_str();
  s->add_option("--api-key-env", o->api_key_env, "Environment variable holding the API key")->capture_default_str();
  s->add_option("--api-key-file", o->api_key_file, "File holding the API key");
  s->add_option("--ca-cert", o->ca_cert, "PEM CA bundle for TLS verification");
  s->add_option("--extra-body", o->extra_body, "JSON object merged into every request");
  s->add_flag("--stream", o->stream, "Use streaming (SSE) responses");
  s->add_option("--max-retries", o->max_retries, "Retries per failed request")->capture_default_str();
  s->add_option("--timeout", o->timeout,
                "Seconds one attempt may take in total (connect, request, every byte of the answer); then it is "
                "retried or recorded as a timeout")
      ->capture_default_str();
  s->add_flag("--verbose", o->verbose, "Log requests and responses (API keys redacted) to stderr");
  s->callback([o, &runner] { runner = [o] { return run_run(*o); }; });
}

}  // namespace repro::cli
