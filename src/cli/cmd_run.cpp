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

namespace repro::cli {

namespace {

std::atomic<bool> g_stop{false};
volatile std::sig_atomic_t g_signal = 0;
// SIGINT and SIGTERM: stop after what is in flight, write what finished, exit 130 / 143.
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  g_stop = true;
  std::signal(sig, SIG_DFL);  // a second signal ends at once
}

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
  // ---- remote preflight: an endpoint that cannot answer ends the run before any replay
  for (const auto& e : endpoints) preflight_endpoint(e);
  std::optional<AuditReport> golden;
  std::string golden_digest;
  bool golden_digest_ok = false;
  if (!o.baseline.empty()) {  // read before the replay: a bad golden file is a usage error, not lost work
    std::string text = read_file(o.baseline, "--baseline report");
    golden = from_json(text, o.baseline);
    golden_digest_ok = verify_report_digest(text, &golden_digest);
  }
  if (out_dir != "-") {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir))
      throw UsageError("--out '" + out_dir + "': cannot create the directory (" + ec.message() + "); choose a writable path");
  }

  record_provenance(report, plan, model.get(), model_path, EngineSetup{device, precision}, endpoints);

  // ---- replay ----
  g_stop = false;
  g_signal = 0;
  auto old = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  RunControl ctl;
  ctl.device = device;
  ctl.precision = precision;
  ctl.stop = &g_stop;
  ctl.progress = !o.quiet;
  std::string checkpoint = out_dir == "-" ? "" : (fs::path(out_dir) / "checkpoint.json").string();
  if (!checkpoint.empty()) ctl.checkpoint = [&](const AuditReport& r) { write_file_atomic(checkpoint, to_json(r)); };
  try {
    if (remote)
      run_remote(plan, endpoints, report, ctl);
    else
      run_local(plan, *model, report, ctl);
  } catch (...) {
    std::signal(SIGINT, old);
    std::signal(SIGTERM, old_term);
    if (!report.completions.empty() && !checkpoint.empty()) {  // never lose finished work
      write_file_atomic(checkpoint, to_json(report));
      std::fprintf(stderr, "note: %zu finished completions kept in %s (continue with --resume %s)\n",
                   report.completions.size(), checkpoint.c_str(), out_dir.c_str());
    }
    throw;
  }
  std::signal(SIGINT, old);
  std::signal(SIGTERM, old_term);
  report.summary.interrupted = g_stop.load();

  // ---- analyse, compare with the baseline, write, gate ----
  analyze(report);
  if (golden) {
    Drift d = compute_drift(*golden, report);
    report.baseline = baseline_result(d, o.baseline, golden_digest, golden_digest_ok);
    analyze(report);  // the drift is part of the verdict
  }
  auto written = write_reports(report, out_dir, plan.formats);
  if (!checkpoint.empty()) fs::remove(checkpoint);
  if (!o.sign_key.empty()) {
    std::string json_path;
    for (const auto& w : written)
      if (w != "-" && w.size() > 5 && w.compare(w.size() - 5, 5, ".json") == 0) json_path = w;
    auto files = compliance::locate_report(json_path);
    compliance::sign_report(files, o.sign_key);
    written.push_back(files.path(files.envelope));
  }
  bool stdout_taken = out_dir == "-";
  for (const auto& w : written) stdout_taken = stdout_taken || w == "-";
  std::FILE* term = stdout_taken ? stderr : stdout;
  if (golden && !golden_digest_ok)
    std::fprintf(stderr, "warning: --baseline '%s': its content does not match its recorded digest; it was edited "
                 "after it was written\n", o.baseline.c_str());
  if (!o.quiet) {
    std::fputs(to_terminal(report).c_str(), term);
    for (const auto& w : written)
      if (w != "-") std::fprintf(term, "wrote %s\n", w.c_str());
  }
  int code = exit_code_for(report);
  if (report.summary.verdict == "errors") std::fprintf(stderr, "error: %s\n", verdict_cause(report).c_str());
  if (report.summary.interrupted) {
    const bool term = g_signal == SIGTERM;
    std::fprintf(stderr, "interrupted%s: %zu completions analysed and written; continue with --resume %s\n",
                 term ? " (SIGTERM)" : "", report.completions.size(), out_dir.c_str());
    code = term ? kExitTerminated : kExitInterrupted;
  }
  return code;
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
