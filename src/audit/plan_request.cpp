// Plan assembly for `run`: from the request its flags make to a run ready to replay (see
// include/repro/audit/plan_request.hpp).
#include "repro/audit/plan_request.hpp"

#include <algorithm>
#include <cstdio>

#include "repro/audit/plan_options.hpp"
#include "repro/audit/resume.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/device.hpp"
#include "repro/engine/engine.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/synth.hpp"

namespace repro {

namespace {

// Profile first, then every flag the user gave overrides it. Plan options go through their row of
// the plan option table (parse, check the range, store).
PlanOptions build_plan(const PlanRequest& q) {
  PlanOptions p;
  apply_profile(find_profile(q.profile), p);
  if (q.given("--prompts")) p.prompts = prompts_from_file(q.prompts_file);
  if (q.given("--prompt")) {
    if (!q.given("--prompts")) p.prompts.clear();
    for (const auto& t : q.prompts) {
      if (trim(t).empty()) throw UsageError("--prompt: empty prompt; give the text to replay, e.g. --prompt 'Once upon a time'");
      p.prompts.push_back(prompt_from_text(t));
    }
  }
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || !q.given(opt.flag_name())) continue;
    nlohmann::json v = opt.type == OptionType::Bool ? nlohmann::json(opt.flag_sets)
                                                    : parse_flag_value(opt, q.plan_text.at(opt.name));
    opt.set(p, check_plan_value(opt, v, opt.flag_name()));
  }
  if (q.given("--json-schema")) p.json_schema_file = q.plan_text.at("json_schema");
  // --threads is one of the engine flags (src/cli/flags.cpp), shared with generate, bench and serve.
  if (q.given("--threads")) p.threads = q.threads();
  // --precision (an engine flag) is the one-value form of --precisions.
  if (q.given("--precision") && q.given("--precisions"))
    throw UsageError("--precision and --precisions exclude each other; give the list with --precisions, e.g. "
                     "--precisions f32,bf16");
  if (q.given("--precision")) p.precisions = {precision_name(q.precision)};
  // No prompts given: the built-in ones, or (prompt_tokens > 0) long ones generated once the model's
  // tokenizer is known (see prepare_long_context).
  if (p.prompts.empty() && p.prompt_tokens == 0) p.prompts = builtin_prompts();
  return p;
}

// The context the plan needs on this model: its longest prompt plus max_tokens, and the longest
// batch mate (prompt_tokens plus the largest prompt delta, one token generated at least).
int context_needed(const PlanOptions& plan, const Model& model) {
  int need = 0;
  const Tokenizer& tok = *model.tokenizer;
  for (const auto& p : plan.prompts) {
    const auto ids = plan.parse_special ? tok.encode_special(p.text, true) : tok.encode(p.text, true);
    need = std::max(need, static_cast<int>(ids.size()) + plan.max_tokens);
  }
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
nlohmann::json prepare_long_context(const PlanRequest& q, PlanOptions& plan, std::unique_ptr<Model>& model,
                                    std::string& model_path) {
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
  model = q.load_model(model_path);
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

// --shard auto: K/N from the scheduler's variables, before the plan is built or a resumed one checked,
// so both see the resolved value. --shard-count goes with auto only.
ShardSpec resolve_shard_flag(PlanRequest& q) {
  const bool flag = q.given("--shard");
  const std::string text = flag ? trim(q.plan_text.at("shard")) : std::string();
  if (q.shard_count > 0 && text != "auto")
    throw UsageError("--shard-count " + std::to_string(q.shard_count) +
                     " goes with --shard auto (a Kubernetes Indexed Job exports its index, not its count); with "
                     "--shard K/N drop it");
  if (text != "auto") return {};
  ShardSpec s = resolve_shard_auto(q.shard_count, q.getenv);
  q.plan_text["shard"] = shard_text(s);
  return s;
}

}  // namespace

PreparedRun prepare_run(const PlanRequest& request) {
  PlanRequest q = request;
  PreparedRun run;
  run.shard = resolve_shard_flag(q);
  run.out_dir = q.out;
  run.model_path = q.model;
  run.engine.device = q.device;
  PlanOptions& plan = run.plan;
  AuditReport& report = run.report;
  const bool resumed = !q.resume.empty();
  if (resumed)
    resume_run(q, run);  // its plan, model and finished completions (src/audit/resume.cpp)
  else
    plan = build_plan(q);
  if (!q.sign_key.empty()) {  // fail before the audit, not after it
    bool json_file = false;
    for (const auto& f : plan.formats)
      json_file = json_file || (f == "json" && run.out_dir != "-") || (f.rfind("json=", 0) == 0 && f != "json=-");
    if (!json_file)
      throw UsageError("--sign-key: the signature covers report.json; write it to a file (--format with json, --out DIR)");
    read_file(q.sign_key, "private key (--sign-key)");
  }
  if (q.remote) {
    // Long prompts are generated to a token count with the local model's tokenizer, which an endpoint
    // does not share: a profile's long prompts (profile long) become the shipped long text instead.
    if (plan.prompts.empty() && q.given("--prompt-tokens"))
      throw UsageError("--prompt-tokens generates prompts with the local model's tokenizer; with --endpoint give "
                       "the long prompts as --prompts FILE, or drop --prompt-tokens: --profile long then sends the "
                       "shipped long text (docs/examples/long-prompt.txt)");
    if (plan.prompts.empty()) plan.prompts = endpoint_long_prompts(std::max(1, plan.generated_prompts));
    if (q.given("--model")) throw UsageError("--model and --endpoint exclude each other; audit a local model or endpoints");
    if (q.given("--device") || q.given("--precision") || q.given("--precisions"))
      throw UsageError("--device and --precision(s) set the local engine; drop them with --endpoint");
    if (q.given("--tp") || q.given("--allreduce"))
      throw UsageError("--tp and --allreduce simulate tensor parallelism in the local engine; an endpoint's TP is "
                       "its server's: drop them with --endpoint");
    if (q.given("--devices"))
      throw UsageError("--devices runs the local engine on each device; an endpoint's device is its server's: "
                       "drop --devices with --endpoint (compare two servers with --endpoint A=URL --endpoint B=URL)");
    if (q.given("--speculative"))
      throw UsageError("--speculative sets speculative decoding in the local engine; an endpoint's is its server's: "
                       "drop --speculative with --endpoint, and compare a server with speculation and one without "
                       "as --endpoint spec=URL --endpoint plain=URL (docs/REMOTE.md)");
    if (q.given("--chat-template"))
      throw UsageError("--chat-template renders messages for the local engine; endpoints apply their own "
                       "templates: drop it with --endpoint");
    if (q.given("--parse-special"))
      throw UsageError("--parse-special sets how the local engine encodes completion prompts; an endpoint encodes "
                       "them itself: declare its rule with --endpoint-parse-special [LABEL=]yes|no");
    run.endpoints = resumed ? resume_endpoints(q, report) : q.build_endpoints(q.endpoint);
    validate_plan(plan, -1);
  } else {
    if (q.given("--endpoint-parse-special"))
      throw UsageError("--endpoint-parse-special declares an endpoint's rule and needs --endpoint; the local "
                       "engine's rule is --parse-special");
    if (plan.routed_experts)
      throw UsageError("--routed-experts asks endpoints for their routing and needs --endpoint; local runs on a "
                       "mixture of experts always record routing: drop --routed-experts");
    std::string& model_path = run.model_path;
    if (model_path.empty()) model_path = default_model_path();
    model_path = resolve_model_spec(model_path);
    run.model = q.load_model(model_path);
    if (!resumed) {
      run.model_switch = prepare_long_context(q, plan, run.model, model_path);
    } else if (report.environment.contains("model") && report.environment["model"].is_object() &&
               report.environment["model"].contains("switched_from")) {
      run.model_switch = report.environment["model"]["switched_from"];  // the resumed run's switch, still true
    }
    if (resumed) check_resume_model(q, report, *run.model, model_path);  // the same bytes, wherever the file is now
    // --resume renders messages with the template the run started with (a --chat-template name).
    if (resumed && !q.given("--chat-template")) use_recorded_chat_template(*run.model, report.environment);
    // ... and stops at the tokens it stopped at (environment.model.eog_tokens).
    if (resumed && !q.given("--stop-token")) use_recorded_eog_tokens(*run.model, report.environment);
    if (resumed) check_resume_eog_tokens(q, report, *run.model);
    if (resumed) check_resume_chat_template(report, *run.model);
    if (!plan.devices.empty() && q.given("--device"))
      throw UsageError("--device and --devices exclude each other: --devices runs every batch context on each "
                       "device it names; drop --device");
    if (std::any_of(plan.speculative.begin(), plan.speculative.end(), [](const std::string& s) { return s != "off"; }) &&
        run.engine.device != Device::Cpu)
      throw UsageError("--speculative is not implemented on --device " + std::string(device_name(run.engine.device)) +
                       "; use --device cpu, or drop --speculative");
    validate_plan(plan, run.model->config.context_length);
    // Every --tp size must divide the model (heads, KV heads, FFN hidden size, weight blocks).
    for (int tp : plan.tp_sizes) check_tensor_parallel(*run.model, tp, "--tp");
    // A schema the model's vocabulary cannot spell is refused before anything runs.
    if (!plan.json_schema.is_null()) JsonConstraint(json_schema_of(plan), json_schema_where(plan), *run.model->tokenizer);
  }
  // ---- the gate: which modes (endpoints) it applies to, checked before anything runs
  if (q.remote && !resumed && !q.given("--gate-modes")) plan.thresholds.modes.clear();  // every endpoint
  {
    std::vector<std::string> run_modes;
    if (q.remote)
      for (const auto& e : run.endpoints) run_modes.push_back(e.label);
    else
      run_modes = plan.modes;
    check_gate_modes(plan.thresholds.modes, run_modes,
                     q.given("--gate-modes") ? std::string("--gate-modes")
                                             : "the gate of profile '" + plan.profile +
                                                   "' (thresholds.modes; override with --gate-modes)");
  }
  run.engine.precision = parse_precision(plan.precisions.front(), "--precisions");
  // ---- the shard: from the flag, a profile's "shard", or the run being resumed
  if (plan.shard == "auto") {
    run.shard = resolve_shard_auto(q.shard_count, q.getenv);
    plan.shard = shard_text(run.shard);
  }
  if (run.shard.count == 0 && !plan.shard.empty()) {
    run.shard = parse_shard(plan.shard);
    if (resumed && report.shard && shard_text(run.shard) ==
                                       std::to_string(report.shard->index) + "/" + std::to_string(report.shard->count)) {
      run.shard.scheduler = report.shard->scheduler;  // where the run being resumed took it from
      run.shard.source = report.shard->source;
    } else if (!q.given("--shard")) {
      run.shard.scheduler = "profile";
      run.shard.source = "profile '" + plan.profile + "' shard " + plan.shard;
    }
  }
  return run;
}

}  // namespace repro
