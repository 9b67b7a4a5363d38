// `repro-audit canary --baseline DIR|report.json`: re-run a baseline's plan (same prompts, plan,
// model or endpoints) and classify the result GREEN / YELLOW / RED for a scheduled job. Exit 0 GREEN,
// 1 YELLOW, 2 RED (2 also for a usage error, with an `error:` line), 3 when the rerun cannot start,
// 130 / 143 interrupted. See include/repro/audit/canary.hpp for the rules. The baseline is untrusted
// input: it is checked (digest, --pubkey envelope, finished) before anything is sent, and the API key
// goes only to URLs given on the command line.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "repro/audit/canary.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/plan_options.hpp"
#include "repro/audit/resume.hpp"  // use_recorded_chat_template, use_recorded_eog_tokens
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"
#include "repro/cli/replay.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/compliance/verify.hpp"
#include "repro/engine/device.hpp"
#include "repro/model/default_model.hpp"
#include "repro/remote/client.hpp"
#include "repro/report/report.hpp"

namespace repro::cli {

namespace {

struct CanaryOptions {
  std::string baseline, out = "canary-report", pubkey;
  EngineFlags engine;
  std::vector<std::string> endpoints;  // LABEL=URL overrides of the recorded URLs
  std::string api_key_env = "OPENAI_API_KEY", api_key_file, ca_cert, extra_body;
  int max_retries = 3;
  double timeout = 120;
  bool quiet = false;
  CLI::App* app = nullptr;
  bool given(const std::string& flag) const { return app->count(flag) > 0; }
};

std::string baseline_file(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::is_directory(arg)) {
    fs::path p = fs::path(arg) / "report.json";
    if (!fs::exists(p)) {
      if (fs::exists(fs::path(arg) / "checkpoint.json"))
        throw UsageError("--baseline '" + arg + "': baseline incomplete: the run was interrupted before it wrote "
                         "report.json; finish it with `repro-audit run --resume " + arg + "`, then compare against it");
      throw UsageError("--baseline '" + arg + "': no report.json in that directory; give the --out directory of a "
                       "finished run or its report.json");
    }
    return p.string();
  }
  return arg;
}

// A baseline decides where requests go and what counts as GREEN, so it is checked before anything
// runs: its own digest (an edited file is refused), its envelope with --pubkey, and that its run
// finished. Returns the baseline as read.
AuditReport trusted_baseline(const CanaryOptions& o, const std::string& file) {
  namespace fs = std::filesystem;
  const std::string text = read_file(file, "--baseline report");
  AuditReport baseline = from_json(text, file);
  std::string stored;
  if (!verify_report_digest(text, &stored))
    throw UsageError("--baseline '" + file + "': " +
                     (stored.empty() ? std::string("it has no recorded digest (digests.report_sha256)")
                                     : "its content does not match its recorded digest (digests.report_sha256)") +
                     ": it was edited after it was written; use the baseline as it was written, or record a new one "
                     "with `repro-audit run`");
  if (!o.pubkey.empty()) {
    const compliance::PublicKey key = compliance::load_public_key(o.pubkey);
    const compliance::Verification v = compliance::verify_report(compliance::locate_report(file), &key);
    if (!v.valid())
      throw UsageError("--baseline '" + file + "' does not verify with --pubkey " + o.pubkey + ": " + v.problems.front() +
                       (v.problems.size() > 1 ? " (and " + std::to_string(v.problems.size() - 1) + " more; see "
                                                "`repro-audit verify`)" : std::string()));
  }
  if (baseline.summary.interrupted || baseline.summary.verdict == "interrupted") {
    std::string dir = fs::path(file).parent_path().string();
    if (dir.empty()) dir = ".";
    throw UsageError("--baseline '" + file + "': baseline incomplete: that run was interrupted; finish it with "
                     "`repro-audit run --resume " + dir + "`, then compare against it");
  }
  return baseline;
}

// --out must not be the baseline's directory: the rerun writes report.json there.
void check_out_dir(const CanaryOptions& o, const std::string& file) {
  namespace fs = std::filesystem;
  if (o.out == "-") return;
  std::error_code ec1, ec2;
  const fs::path out = fs::weakly_canonical(fs::absolute(o.out), ec1);
  const fs::path golden = fs::weakly_canonical(fs::absolute(file).parent_path(), ec2);
  if (!ec1 && !ec2 && out == golden)
    throw UsageError("--out '" + o.out + "' is the baseline's directory: the rerun would overwrite the golden "
                     "report; choose another --out");
}

// The baseline's endpoints, rebuilt from its environment record; --endpoint LABEL=URL replaces the URL
// of that label (needed when the recorded URL had redacted credentials). The API key goes only to
// URLs given with --endpoint: a URL the baseline records is data from a file, and anyone who can edit
// that file could point it at a server of their choosing.
std::vector<EndpointSpec> recorded_endpoints(const CanaryOptions& o, const nlohmann::json& record) {
  std::map<std::string, std::string> url_of;
  for (const auto& arg : o.endpoints) {
    EndpointSpec e = parse_endpoint_arg(arg);
    url_of[e.label] = e.url;
  }
  const nlohmann::json extra = parse_extra_body(o.extra_body);
  std::string key = load_api_key(o.api_key_env, o.api_key_file);
  std::vector<EndpointSpec> eps;
  for (const auto& r : record) {
    if (!r.is_object() || !r.contains("label") || !r.contains("url"))
      throw UsageError("--baseline: environment.endpoints has an entry without label and url; the report is damaged");
    EndpointSpec e;
    e.label = r.value("label", "");
    e.api_model = r.value("api_model", "");
    e.api = r.value("api", "chat");
    e.provider = parse_provider(r.value("provider", "openai"));
    e.stream = r.value("stream", false);
    // The rule the baseline declared for special-token text in completion prompts.
    e.parse_special = r.value("parse_special", std::string(provider_parse_special(e.provider)));
    e.parse_special_source = r.value("parse_special_source", std::string("preset ") + provider_name(e.provider));
    e.extra_body = extra;
    const bool given = url_of.count(e.label) > 0;
    e.url = given ? url_of[e.label] : r.value("url", "");
    url_of.erase(e.label);
    if (e.url.find("[REDACTED]") != std::string::npos)
      throw UsageError("--baseline: the URL of endpoint '" + e.label + "' was recorded with credentials redacted; give "
                       "it again with --endpoint '" + e.label + "=URL'");
    if (given)
      e.api_key = key;
    else if (!key.empty())
      std::fprintf(stderr, "note: endpoint '%s' uses the URL recorded in the baseline, which never receives the API "
                   "key; give --endpoint '%s=URL' to send it\n", e.label.c_str(), e.label.c_str());
    e.ca_cert = o.ca_cert;
    e.max_retries = o.max_retries;
    e.read_timeout_s = o.timeout;
    e.total_timeout_s = o.timeout;
    validate_endpoint(e);
    eps.push_back(std::move(e));
  }
  if (!url_of.empty())
    throw UsageError("--endpoint '" + url_of.begin()->first + "=...': the baseline has no endpoint with that label");
  return eps;
}

int run_canary(const CanaryOptions& o) {
  namespace fs = std::filesystem;
  const std::string file = baseline_file(o.baseline);
  const AuditReport baseline = trusted_baseline(o, file);
  check_out_dir(o, file);
  PlanOptions plan = plan_from_report(baseline);
  if (o.given("--threads")) {
    if (!o.quiet && plan.threads != o.engine.thread_count())
      std::fprintf(stderr, "note: --threads %d replaces the baseline's %d (a deliberate change under test)\n",
                   o.engine.thread_count(), plan.threads);
    plan.threads = o.engine.thread_count();
  }
  const nlohmann::json& env = baseline.environment;
  const bool remote = env.is_object() && env.contains("endpoints");
  std::vector<EndpointSpec> endpoints;
  std::unique_ptr<Model> model;
  std::string model_path;
  EngineSetup setup;
  if (remote) {
    if (o.given("--model") || o.given("--device") || o.given("--precision") || o.given("--chat-template"))
      throw UsageError("--model, --device, --precision and --chat-template set the local engine; the baseline "
                       "audited endpoints");
    endpoints = recorded_endpoints(o, env["endpoints"]);
    validate_plan(plan, -1);
  } else {
    if (!o.endpoints.empty()) throw UsageError("--endpoint: the baseline audited the local engine, not endpoints");
    model_path = o.engine.model();
    if (model_path.empty() && env.contains("model") && env["model"].is_object()) model_path = env["model"].value("path", "");
    if (model_path.empty()) model_path = default_model_path();
    if (env.contains("engine") && env["engine"].is_object()) {
      setup.device = parse_device(env["engine"].value("device", "cpu"), "--baseline: engine.device");
      setup.precision = parse_precision(env["engine"].value("precision", "f32"), "--baseline: engine.precision");
    }
    if (o.given("--device")) setup.device = o.engine.device_value();
    // The precisions come with the plan (a deliberate change under test: --precision X runs X only).
    if (o.given("--precision")) plan.precisions = {precision_name(o.engine.precision_value())};
    setup.precision = parse_precision(plan.precisions.front(), "--baseline: plan.precisions");
    // The baseline's chat template unless --chat-template changes it (a deliberate change under test).
    model = o.engine.load(model_path);
    if (!o.given("--chat-template")) use_recorded_chat_template(*model, env);
    // ... and stops at the tokens it stopped at, on the baseline's model (another --model has its own).
    if (!o.given("--model")) use_recorded_eog_tokens(*model, env);
    validate_plan(plan, model->config.context_length);
  }

  // --precision X on a baseline that ran X among other precisions reruns X alone: the other
  // precisions' cases were left out on purpose, not lost. (A baseline without X has its cases mapped
  // onto X's by the case matching: a deliberate change under test.)
  AuditReport compared = baseline;
  if (!remote && o.given("--precision")) {
    const std::string x = plan.precisions.front();
    const bool has = std::any_of(baseline.cases.begin(), baseline.cases.end(),
                                 [&](const CaseResult& c) { return c.precision == x; });
    if (has) {
      const size_t before = compared.cases.size();
      std::erase_if(compared.cases, [&](const CaseResult& c) { return !c.precision.empty() && c.precision != x; });
      if (!o.quiet && compared.cases.size() < before)
        std::fprintf(stderr, "note: --precision %s reruns the baseline's %s cases only (%zu of %zu)\n", x.c_str(),
                     x.c_str(), compared.cases.size(), before);
    }
  }

  AuditReport report;
  CanaryResult result;
  ReplayJob job;
  job.report = &report;
  job.plan = &plan;
  job.model = model.get();
  job.model_path = model_path;
  job.engine = setup;
  job.endpoints = &endpoints;
  job.out_dir = o.out;
  job.baseline = file;
  job.quiet = o.quiet;
  job.after_analysis = [&](AuditReport& r) {
    result = classify_canary(compared, r);
    return canary_exit_code(result.level);
  };
  int code = replay_and_report(job);
  if (o.out != "-") {
    nlohmann::json j = {{"level", canary_level_name(result.level)},
                        {"baseline", file},
                        {"cases_compared", result.cases_compared},
                        {"token_drift", result.token_drift},
                        {"answer_drift", result.answer_drift},
                        {"answer_preserving", result.answer_preserving},
                        {"bit_drift", result.bit_drift},
                        {"alarms", result.alarms},
                        {"mapped", result.mapped}};
    std::string path = (fs::path(o.out) / "canary.json").string();
    write_file_atomic(path, j.dump(2) + "\n");
  }
  std::fputs(canary_text(result).c_str(), o.out == "-" ? stderr : stdout);
  return code;
}

}  // namespace

void setup_canary(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<CanaryOptions>();
  auto* s = parent.add_subcommand(
      "canary", "Re-run a baseline's plan and classify it GREEN (identical), YELLOW (bit-level or answer-preserving "
                "drift) or RED (token/answer drift, model changed); exit 0/1/5 (2: usage error)");
  o->app = s;
  s->add_option("--baseline", o->baseline, "The baseline: a run's --out directory or its report.json")->required();
  s->add_option("--out", o->out, "Report directory of the rerun ('-' = stdout), not the baseline's; canary.json is "
                                  "written there too")
      ->capture_default_str();
  s->add_option("--pubkey", o->pubkey,
                "Trusted public key (PREFIX.pub): the baseline must carry a valid envelope signed with it "
                "(report.intoto.jsonl beside its report.json), checked as `verify` does");
  EngineFlagSpec spec;
  spec.mode = false;
  spec.chat_template = true;
  spec.model_help = "Model file instead of the baseline's recorded path (local baselines)";
  add_engine_flags(*s, o->engine, spec);
  s->add_option("--endpoint", o->endpoints,
                "LABEL=URL: the URL of the baseline's endpoint LABEL (repeatable); only these URLs receive the API key");
  s->add_option("--api-key-env", o->api_key_env, "Environment variable holding the API key")->capture_default_str();
  s->add_option("--api-key-file", o->api_key_file, "File holding the API key (instead of the environment)");
  s->add_option("--ca-cert", o->ca_cert, "PEM bundle to verify the endpoints' TLS certificates");
  s->add_option("--extra-body", o->extra_body, "JSON object merged into every request (not recorded in reports)");
  s->add_option("--max-retries", o->max_retries, "Retries after a failed attempt")->capture_default_str();
  s->add_option("--timeout", o->timeout, "Seconds one attempt may take, end to end")->capture_default_str();
  s->add_flag("-q,--quiet", o->quiet, "No progress bar or summary (the canary lines are still printed)");
  s->callback([&runner, o] { runner = [o] { return run_canary(*o); }; });
}

}  // namespace repro::cli
