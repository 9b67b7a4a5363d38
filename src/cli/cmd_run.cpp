// `repro-audit run`: the main job. Expands the plan (profile + flags), replays it on the local engine
// or remote endpoints, analyses, writes the reports, and exits with the CI gate's verdict.
#include <fmt/core.h>

#include <algorithm>
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
#include "repro/structured/json_schema.hpp"
#include "repro/remote/client.hpp"
#include "repro/report/report.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/cli/flags.hpp"
#include "repro/cli/replay.hpp"
#include "repro/common/chat.hpp"
#include "repro/model/synth.hpp"

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
  EndpointFlags remote;  // --endpoint --api-model --api --provider ... --timeout --verbose
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
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || !o.given(opt.flag_name())) continue;
    nlohmann::json v = opt.type == OptionType::Bool ? nlohmann::json(opt.flag_sets)
                                                    : parse_flag_value(opt, o.plan_text.at(opt.name));
    opt.set(p, check_plan_value(opt, v, opt.flag_name()));
  }
  if (o.given("--json-schema")) p.json_schema_file = o.plan_text.at("json_schema");
  // --threads is one of the engine flags (src/cli/flags.cpp), shared with generate, bench and serve.
  if (o.given("--threads")) p.threads = o.engine.thread_count();
  // --precision (an engine flag) is the one-value form of --precisions.
  if (o.given("--precision") && o.given("--precisions"))
    throw UsageError("--precision and --precisions exclude each other; give the list with --precisions, e.g. "
                     "--precisions f32,bf16");
  if (o.given("--precision")) p.precisions = {precision_name(o.engine.precision_value())};
  // No prompts given: the built-in ones, or (prompt_tokens > 0) long ones generated once the model's
  // tokenizer is known (see prepare_long_context).
  if (p.prompts.empty() && p.prompt_tokens == 0) p.prompts = builtin_prompts();
  return p;
}

// The context the plan needs on this model: its longest prompt plus max_tokens, and the longest
// batch mate (prompt_tokens plus the largest prompt delta, one token generated at least).
int context_needed(const PlanOptions& plan, const Model& model) {
  int need = 0;
  for (const auto& p : plan.prompts)
    need = std::max(need, static_cast<int>(model.tokenizer->encode(p.text, true).size()) + plan.max_tokens);
  const int max_batch = plan.batch_sizes.empty() ? 1 : *std::max_element(plan.batch_sizes.begin(), plan.batch_sizes.end());
  if (max_batch > 1 && plan.prompt_tokens > 0) {
    const int delta = *std::max_element(plan.mate_prompt_deltas.begin(), plan.mate_prompt_deltas.end());
    need = std::max(need, plan.prompt_tokens + delta + 1);
  }
  return need;
}

// Long prompts (prompt_tokens) are generated with the model's tokenizer; when the model's context is
// too short for the plan and the plan names a long_context_model, that model replaces it (said on
// stderr here and in the report). Returns the switch record, or null.
nlohmann::json prepare_long_context(PlanOptions& plan, std::unique_ptr<Model>& model, std::string& model_path,
                                    const EngineFlags& engine) {
  const bool generate = plan.prompts.empty() && plan.prompt_tokens > 0;
  if (generate) plan.prompts = generated_prompts(plan.generated_prompts, plan.prompt_tokens, *model->tokenizer);
  const int need = context_needed(plan, *model);
  if (need <= model->config.context_length || plan.long_context_model.empty()) return nullptr;
  ModelSwitch sw;
  sw.requested_path = model_path;
  sw.requested_context = model->config.context_length;
  sw.needed_context = need;
  sw.used = plan.long_context_model;
  model_path = resolve_model_spec(plan.long_context_model);
  model = engine.load(model_path);
  sw.used_context = model->config.context_length;
  if (generate) plan.prompts = generated_prompts(plan.generated_prompts, plan.prompt_tokens, *model->tokenizer);
  const int now = context_needed(plan, *model);
  if (now > model->config.context_length)
    throw UsageError("--long-context-model " + plan.long_context_model + ": its context of " +
                     std::to_string(model->config.context_length) + " tokens is too short too (the plan needs " +
                     std::to_string(now) + "); lower --prompt-tokens or --max-tokens");
  nlohmann::json rec = model_switch_record(sw);
  nlohmann::json env = {{"model", {{"switched_from", rec}}}};
  std::fprintf(stderr, "note: %s\n", model_switch_note(env).c_str());
  return rec;
}

// ---------------------------------------------------------------- --resume: the same run, or none
// A resumed run must be the run it continues: same model bytes, same prompts, same endpoints, same
// plan. Everything is checked against what the checkpoint (or report) recorded, before anything
// runs; a difference is a UsageError that names it and the fix.

std::string short_hex(const std::string& h) {
  return h.size() > 12 ? h.substr(0, 12) + ".." : h;
}

std::string recorded_string(const nlohmann::json& env, const char* a, const char* b) {
  if (!env.is_object()) return {};
  auto it = env.find(a);
  if (it == env.end() || !it->is_object()) return {};
  auto s = it->find(b);
  return s != it->end() && s->is_string() ? s->get<std::string>() : std::string();
}

// The prompts a --prompt/--prompts pair gives (without the profile), as build_plan reads them.
std::vector<Prompt> prompts_from_flags(const RunOptions& o) {
  std::vector<Prompt> ps;
  if (o.given("--prompts")) ps = prompts_from_file(o.prompts_file);
  if (o.given("--prompt"))
    for (const auto& t : o.prompts) ps.push_back(prompt_from_text(t));
  return ps;
}

std::string endpoint_text(const nlohmann::json& e) {
  return e.value("label", std::string()) + "=" + e.value("url", std::string());
}

// The prompts digest of reports written before it covered messages: "id\ttext\n" per prompt.
std::string older_prompts_form(const std::vector<Prompt>& prompts) {
  std::string s;
  for (const auto& p : prompts) s += p.id + "\t" + p.text + "\n";
  return s;
}

// Flags that would change the plan of the run being resumed: refused unless they repeat its values.
void check_resume_flags(const RunOptions& o, const PlanOptions& plan, const AuditReport& report) {
  const std::string where = "--resume " + o.resume + ": ";
  const std::string fix = "; drop it (a resumed run keeps the plan it started with) or start a new run";
  if (o.given("--out"))
    throw UsageError(where + "--out: a resumed run writes into the directory it resumes; drop --out");
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || !o.given(opt.flag_name())) continue;
    nlohmann::json v = opt.type == OptionType::Bool ? nlohmann::json(opt.flag_sets)
                                                    : parse_flag_value(opt, o.plan_text.at(opt.name));
    PlanOptions as_given = plan;  // the value as the plan stores it (a schema file's wrapper unwrapped)
    opt.set(as_given, check_plan_value(opt, v, opt.flag_name()));
    v = opt.get(as_given);
    nlohmann::json had = opt.get(plan);
    if (v != had)
      throw UsageError(where + opt.flag_name() + " gives " + v.dump() + " but the run used " + had.dump() +
                       " (" + opt.report_key + ")" + fix);
  }
  if (o.given("--threads") && o.engine.thread_count() != plan.threads)
    throw UsageError(where + "--threads gives " + std::to_string(o.engine.thread_count()) +
                     " but the run used " + std::to_string(plan.threads) + fix);
  if (o.given("--profile")) {
    ProfileSource src = find_profile(o.profile);
    std::string d = sha256_hex(src.text);
    if (d != plan.profile_digest)
      throw UsageError(where + "the profile '" + o.profile + "' has sha256 " + short_hex(d) +
                       " but the run used '" + plan.profile + "' with sha256 " +
                       short_hex(plan.profile_digest) + fix);
  }
  // The prompts restored from the checkpoint are the ones the run recorded (a hand-edited file is not).
  // Reports written before the digest covered messages recorded the older form, "id\ttext\n" per
  // prompt in plan order: such a run still resumes when its restored prompts give that digest (the
  // report it then writes records the canonical form).
  const std::string recorded_prompts = recorded_string(report.environment, "digests", "prompts_sha256");
  const std::string restored = prompts_digest(plan.prompts);
  if (!recorded_prompts.empty() && restored != recorded_prompts &&
      sha256_hex(older_prompts_form(plan.prompts)) != recorded_prompts)
    throw UsageError(where + "its prompts have sha256 " + short_hex(restored) + " but the run recorded " +
                     short_hex(recorded_prompts) + " (the file was edited); start a new run");
  // Prompts given again must be the run's: compared in the canonical form, with the restored ones.
  if (o.given("--prompts") || o.given("--prompt")) {
    const std::vector<Prompt> given = prompts_from_flags(o);
    const std::string d = prompts_digest(given);
    if (d != restored)
      throw UsageError(where + "the prompts given (" + std::to_string(given.size()) + ", sha256 " + short_hex(d) +
                       ") are not the run's (" + std::to_string(plan.prompts.size()) + ", sha256 " +
                       short_hex(restored) + ")" + fix);
  }
  // The chat template renders `messages` prompts: another one would make the segments differ.
  if (o.given("--chat-template") && report.environment.is_object() && report.environment.contains("model")) {
    const std::string had = recorded_string(report.environment, "model", "chat_template");
    const std::string now = chat_template_from_option(o.engine.chat_template).name;
    if (now != had)
      throw UsageError(where + "--chat-template gives " + now + " but the run used " +
                       (had.empty() ? std::string("(none)") : had) + " (environment.model.chat_template)" + fix);
  }
  // Local run or remote run: the same kind, on the same target.
  const bool was_remote = report.environment.is_object() && report.environment.contains("endpoints");
  const bool was_local = report.environment.is_object() && report.environment.contains("model");
  if (was_remote && o.remote.endpoints.empty()) {
    std::string eps;
    for (const auto& e : report.environment["endpoints"])
      eps += (eps.empty() ? "" : " ") + std::string("--endpoint ") + endpoint_text(e);
    throw UsageError(where + "the run audited endpoints; resume it with the same " + eps +
                     " (and the same API key), or start a new run");
  }
  if (was_local && !o.remote.endpoints.empty())
    throw UsageError(where + "the run audited the local model " +
                     recorded_string(report.environment, "model", "path") +
                     "; drop --endpoint, or start a new run");
}

// The endpoints given on the command line (with --api-model, --api, --provider, --stream taken from
// the run when not given) against the ones it recorded.
void check_resume_endpoints(const std::string& dir, const nlohmann::json& had, const nlohmann::json& now) {
  const std::string where = "--resume " + dir + ": ";
  if (!had.is_array() || had.size() != now.size())
    throw UsageError(where + std::to_string(now.size()) + " --endpoint given but the run audited " +
                     std::to_string(had.is_array() ? had.size() : 0) +
                     "; give the same endpoints or start a new run");
  for (size_t i = 0; i < now.size(); ++i)
    for (const char* key : {"label", "url", "api_model", "api", "provider", "stream", "extra_body_sha256"}) {
      nlohmann::json a = had[i].contains(key) ? had[i][key] : nlohmann::json(),
                     b = now[i].contains(key) ? now[i][key] : nlohmann::json();
      if (a == b) continue;
      std::string what = std::string(key) == "extra_body_sha256" ? "--extra-body" : key;
      throw UsageError(where + "endpoint " + std::to_string(i + 1) + " (" + endpoint_text(now[i]) + ") has " +
                       what + " " + (b.is_null() ? std::string("(none)") : b.dump()) + " but the run used " +
                       (a.is_null() ? std::string("(none)") : a.dump()) +
                       "; resume with the same endpoints and settings, or start a new run");
    }
}

int run_run(const RunOptions& o) {
  namespace fs = std::filesystem;
  AuditReport report;
  PlanOptions plan;
  bool finished = false;  // --resume of a run that finished
  std::string finished_verdict;
  int finished_code = kExitOk;  // the finished run's own exit status: a re-run gate gets the same answer
  std::string out_dir = o.out;
  std::string model_path = o.engine.model();
  Device device = o.engine.device_value();
  Precision precision = o.engine.precision_value();  // checks --precision even where it is not used
  if (!o.resume.empty()) {
    // Continue an interrupted run: its plan, model and finished completions come from its directory.
    out_dir = o.resume;
    fs::path cp = fs::path(o.resume) / "checkpoint.json", rj = fs::path(o.resume) / "report.json";
    fs::path src = fs::exists(cp) ? cp : rj;
    if (!fs::exists(src))
      throw UsageError("--resume '" + o.resume + "': no checkpoint.json or report.json there; give the --out directory of the run");
    report = load_report(src.string());
    // A report.json without a checkpoint beside it, from a run that was not interrupted: finished.
    finished = src == rj && !report.summary.interrupted && report.summary.verdict != "interrupted";
    finished_verdict = report.summary.verdict;
    finished_code = exit_code_for(report);
    plan = plan_from_report(report);
    check_resume_flags(o, plan, report);
    if (report.environment.contains("model") && !o.given("--model"))
      model_path = report.environment["model"].value("path", "");
    if (report.environment.contains("engine")) {  // the engine the run started with
      const nlohmann::json& e = report.environment["engine"];
      Device d = parse_device(e.value("device", "cpu"), "--resume: engine.device");
      if (o.given("--device") && device != d)
        throw UsageError("--resume " + o.resume + ": --device gives " + device_name(device) +
                         " but the run used " + device_name(d) +
                         "; drop it (a resumed run keeps its engine) or start a new run");
      device = d;
    }
    if (o.given("--precision") && plan.precisions != std::vector<std::string>{precision_name(precision)})
      throw UsageError("--resume " + o.resume + ": --precision gives " + precision_name(precision) +
                       " but the run used " +
                       [&] {
                         std::string l;
                         for (const auto& x : plan.precisions) l += (l.empty() ? "" : ",") + x;
                         return l;
                       }() +
                       " (precisions); drop it (a resumed run keeps the plan it started with) or start a new run");
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
  const bool remote = !o.remote.endpoints.empty();
  std::vector<EndpointSpec> endpoints;
  std::unique_ptr<Model> model;
  nlohmann::json model_switch;
  if (remote) {
    if (plan.prompts.empty())
      throw UsageError("--prompt-tokens generates prompts with the local model's tokenizer; with --endpoint give "
                       "the long prompts as --prompts FILE");
    if (o.given("--model")) throw UsageError("--model and --endpoint exclude each other; audit a local model or endpoints");
    if (o.given("--device") || o.given("--precision") || o.given("--precisions"))
      throw UsageError("--device and --precision(s) set the local engine; drop them with --endpoint");
    if (o.given("--chat-template"))
      throw UsageError("--chat-template renders messages for the local engine; endpoints apply their own "
                       "templates: drop it with --endpoint");
    if (!o.resume.empty()) {
      // --api-model, --api, --provider and --stream default to the run's; given, they must match it.
      EndpointFlags same = o.remote;
      const nlohmann::json& had = report.environment["endpoints"];
      if (had.is_array() && !had.empty() && had[0].is_object()) {
        const nlohmann::json& e0 = had[0];
        if (!o.given("--api-model")) same.api_model = e0.value("api_model", same.api_model);
        if (!o.given("--api")) same.api = e0.value("api", same.api);
        if (!o.given("--provider")) same.provider = e0.value("provider", same.provider);
        if (!o.given("--stream")) same.stream = e0.value("stream", same.stream);
      }
      endpoints = same.build();
      check_resume_endpoints(o.resume, had, endpoints_record(endpoints));
    } else {
      endpoints = o.remote.build();
    }
    validate_plan(plan, -1);
  } else {
    if (model_path.empty()) model_path = default_model_path();
    model_path = resolve_model_spec(model_path);
    model = o.engine.load(model_path);
    if (o.resume.empty()) {
      model_switch = prepare_long_context(plan, model, model_path, o.engine);
    } else if (report.environment.contains("model") && report.environment["model"].is_object() &&
               report.environment["model"].contains("switched_from")) {
      model_switch = report.environment["model"]["switched_from"];  // the resumed run's switch, still true
    }
    if (!o.resume.empty()) {  // the same bytes, wherever the file is now
      std::string had = recorded_string(report.environment, "model", "sha256");
      if (had.empty()) had = recorded_string(report.environment, "digests", "model_sha256");
      if (had.empty())
        throw UsageError("--resume " + o.resume +
                         ": the run recorded no model digest (written by another version?); start a new run");
      if (had != model->file_sha256)
        throw UsageError("--resume " + o.resume + ": the model file " + model_path + " has sha256 " +
                         short_hex(model->file_sha256) + " but the run used " + short_hex(had) +
                         "; resume with the same model (--model FILE) or start a new run");
    }
    // --resume renders messages with the template the run started with (a --chat-template name).
    if (!o.resume.empty() && !o.given("--chat-template")) use_recorded_chat_template(*model, report.environment);
    validate_plan(plan, model->config.context_length);
    // A schema the model's vocabulary cannot spell is refused before anything runs.
    if (!plan.json_schema.is_null()) JsonConstraint(json_schema_of(plan), json_schema_where(plan), *model->tokenizer);
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
  // A finished run has nothing left to run; writing it again would change its files (and break the
  // signature of a signed one). Checked last, so a resumed run's flags are still checked.
  if (finished) {
    std::fprintf(stderr, "nothing to resume: the run in %s finished (report.json, verdict %s); nothing was written\n",
                 o.resume.c_str(), finished_verdict.c_str());
    return finished_code;
  }
  ReplayJob job;
  job.report = &report;
  job.plan = &plan;
  job.model = model.get();
  job.model_path = model_path;
  job.model_switch = model_switch;
  precision = parse_precision(plan.precisions.front(), "--precisions");
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
  engine_spec.chat_template = true;
  add_engine_flags(*s, o->engine, engine_spec);
  s->add_option("--profile", o->profile, "Profile name (quick, ci, batch-sweep, sampling, long, compliance, tradeoff) or JSON path")
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
  s->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  // remote endpoints
  add_endpoint_flags(*s, o->remote);
  s->callback([o, &runner] { runner = [o] { return run_run(*o); }; });
}

}  // namespace repro::cli
