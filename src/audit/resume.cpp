// --resume: the same run, or none (see include/repro/audit/resume.hpp).
#include "repro/audit/resume.hpp"

#include <filesystem>

#include "repro/audit/compare.hpp"
#include "repro/audit/plan_options.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/chat/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/device.hpp"

namespace repro {

namespace {

std::string short_hex(const std::string& h) {
  return h.size() > 12 ? h.substr(0, 12) + ".." : h;
}

// The prompts a --prompt/--prompts pair gives (without the profile), as build_plan
// (src/audit/plan_request.cpp) reads them.
std::vector<Prompt> prompts_from_flags(const PlanRequest& q) {
  std::vector<Prompt> ps;
  if (q.given("--prompts")) ps = prompts_from_file(q.prompts_file);
  if (q.given("--prompt"))
    for (const auto& t : q.prompts) ps.push_back(prompt_from_text(t));
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
void check_resume_flags(const PlanRequest& q, const PlanOptions& plan, const AuditReport& report) {
  const std::string where = "--resume " + q.resume + ": ";
  const std::string fix = "; drop it (a resumed run keeps the plan it started with) or start a new run";
  if (q.given("--out"))
    throw UsageError(where + "--out: a resumed run writes into the directory it resumes; drop --out");
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || !q.given(opt.flag_name())) continue;
    nlohmann::json v = opt.type == OptionType::Bool ? nlohmann::json(opt.flag_sets)
                                                    : parse_flag_value(opt, q.plan_text.at(opt.name));
    PlanOptions as_given = plan;  // the value as the plan stores it (a schema file's wrapper unwrapped)
    opt.set(as_given, check_plan_value(opt, v, opt.flag_name()));
    v = opt.get(as_given);
    nlohmann::json had = opt.get(plan);
    if (v != had)
      throw UsageError(where + opt.flag_name() + " gives " + v.dump() + " but the run used " + had.dump() +
                       " (" + opt.report_key + ")" + fix);
  }
  if (q.given("--threads") && q.threads() != plan.threads)
    throw UsageError(where + "--threads gives " + std::to_string(q.threads()) +
                     " but the run used " + std::to_string(plan.threads) + fix);
  if (q.given("--profile")) {
    ProfileSource src = find_profile(q.profile);
    std::string d = sha256_hex(src.text);
    if (d != plan.profile_digest)
      throw UsageError(where + "the profile '" + q.profile + "' has sha256 " + short_hex(d) +
                       " but the run used '" + plan.profile + "' with sha256 " +
                       short_hex(plan.profile_digest) + fix);
  }
  // The prompts restored from the checkpoint are the ones the run recorded (a hand-edited file is not).
  // Reports written before the digest covered messages recorded the older form, "id\ttext\n" per
  // prompt in plan order: such a run still resumes when its restored prompts give that digest (the
  // report it then writes records the canonical form).
  const std::string recorded_prompts = recorded_text(report.environment, "digests", "prompts_sha256");
  const std::string restored = prompts_digest(plan.prompts);
  if (!recorded_prompts.empty() && restored != recorded_prompts &&
      sha256_hex(older_prompts_form(plan.prompts)) != recorded_prompts)
    throw UsageError(where + "its prompts have sha256 " + short_hex(restored) + " but the run recorded " +
                     short_hex(recorded_prompts) + " (the file was edited); start a new run");
  // Prompts given again must be the run's: compared in the canonical form, with the restored ones.
  if (q.given("--prompts") || q.given("--prompt")) {
    const std::vector<Prompt> given = prompts_from_flags(q);
    const std::string d = prompts_digest(given);
    if (d != restored)
      throw UsageError(where + "the prompts given (" + std::to_string(given.size()) + ", sha256 " + short_hex(d) +
                       ") are not the run's (" + std::to_string(plan.prompts.size()) + ", sha256 " +
                       short_hex(restored) + ")" + fix);
  }
  // The chat template renders `messages` prompts: another one would make the segments differ.
  if (q.given("--chat-template") && report.environment.is_object() && report.environment.contains("model")) {
    const std::string had = recorded_text(report.environment, "model", "chat_template");
    const std::string now = chat_template_from_option(q.chat_template).name;
    if (now != had)
      throw UsageError(where + "--chat-template gives " + now + " but the run used " +
                       (had.empty() ? std::string("(none)") : had) + " (environment.model.chat_template)" + fix);
  }
  // Local run or remote run: the same kind, on the same target.
  const bool was_remote = report.environment.is_object() && report.environment.contains("endpoints");
  const bool was_local = report.environment.is_object() && report.environment.contains("model");
  if (was_remote && !q.remote) {
    std::string eps;
    for (const auto& e : report.environment["endpoints"])
      eps += (eps.empty() ? "" : " ") + std::string("--endpoint ") + endpoint_text(e);
    throw UsageError(where + "the run audited endpoints; resume it with the same " + eps +
                     " (and the same API key), or start a new run");
  }
  if (was_local && q.remote)
    throw UsageError(where + "the run audited the local model " +
                     recorded_text(report.environment, "model", "path") +
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
    for (const char* key : {"label", "url", "api_model", "api", "provider", "stream", "extra_body_sha256", "parse_special"}) {
      nlohmann::json a = had[i].contains(key) ? had[i][key] : nlohmann::json(),
                     b = now[i].contains(key) ? now[i][key] : nlohmann::json();
      if (a == b) continue;
      const bool rule = std::string(key) == "parse_special";
      if (rule && a.is_null()) continue;  // reports before the rule was recorded
      std::string what = std::string(key) == "extra_body_sha256" ? "--extra-body"
                         : rule                                  ? "--endpoint-parse-special"
                                                                 : key;
      throw UsageError(where + "endpoint " + std::to_string(i + 1) + " (" + endpoint_text(now[i]) + ") has " +
                       what + " " + (b.is_null() ? std::string("(none)") : b.dump()) + " but the run used " +
                       (a.is_null() ? std::string("(none)") : a.dump()) +
                       "; resume with the same endpoints and settings, or start a new run");
    }
}

}  // namespace

void resume_run(const PlanRequest& q, PreparedRun& run) {
  namespace fs = std::filesystem;
  AuditReport& report = run.report;
  // Continue an interrupted run: its plan, model and finished completions come from its directory.
  run.out_dir = q.resume;
  fs::path cp = fs::path(q.resume) / "checkpoint.json", rj = fs::path(q.resume) / "report.json";
  fs::path src = fs::exists(cp) ? cp : rj;
  if (!fs::exists(src))
    throw UsageError("--resume '" + q.resume + "': no checkpoint.json or report.json there; give the --out directory of the run");
  report = q.load_report(src.string());
  // A report.json without a checkpoint beside it, from a run that was not interrupted: finished.
  run.finished = src == rj && !report.summary.interrupted && report.summary.verdict != "interrupted";
  run.finished_verdict = report.summary.verdict;
  run.finished_code = exit_code_for(report);
  run.plan = plan_from_report(report);
  const PlanOptions& plan = run.plan;
  check_resume_flags(q, plan, report);
  // Prompts given again are the run's (checked above in the canonical form, keys sorted); they carry
  // the file's key order, which the report does not keep and the chat template prints.
  if (q.given("--prompts") || q.given("--prompt")) {
    const std::vector<Prompt> given = prompts_from_flags(q);
    for (auto& p : run.plan.prompts)
      for (const auto& g : given)
        if (g.id == p.id) {
          p.messages = g.messages;
          p.tools = g.tools;
          p.chat_template_kwargs = g.chat_template_kwargs;
        }
  }
  if (report.environment.contains("model") && !q.given("--model"))
    run.model_path = report.environment["model"].value("path", "");
  Device& device = run.engine.device;
  if (report.environment.contains("engine")) {  // the engine the run started with
    const nlohmann::json& e = report.environment["engine"];
    Device d = parse_device(e.value("device", "cpu"), "--resume: engine.device");
    if (q.given("--device") && device != d)
      throw UsageError("--resume " + q.resume + ": --device gives " + device_name(device) +
                       " but the run used " + device_name(d) +
                       "; drop it (a resumed run keeps its engine) or start a new run");
    device = d;
  }
  if (q.given("--precision") && plan.precisions != std::vector<std::string>{precision_name(q.precision)})
    throw UsageError("--resume " + q.resume + ": --precision gives " + precision_name(q.precision) +
                     " but the run used " +
                     [&] {
                       std::string l;
                       for (const auto& x : plan.precisions) l += (l.empty() ? "" : ",") + x;
                       return l;
                     }() +
                     " (precisions); drop it (a resumed run keeps the plan it started with) or start a new run");
  report.cases.clear();
  report.summary = Summary{};
}

std::vector<EndpointSpec> resume_endpoints(const PlanRequest& q, const AuditReport& report) {
  // --api-model, --api, --provider and --stream default to the run's; given, they must match it.
  EndpointSettings same = q.endpoint;
  static const nlohmann::json none;
  const nlohmann::json& had =
      report.environment.is_object() && report.environment.contains("endpoints") ? report.environment["endpoints"] : none;
  if (had.is_array() && !had.empty() && had[0].is_object()) {
    const nlohmann::json& e0 = had[0];
    if (!q.given("--api-model")) same.api_model = e0.value("api_model", same.api_model);
    if (!q.given("--api")) same.api = e0.value("api", same.api);
    if (!q.given("--provider")) same.provider = e0.value("provider", same.provider);
    if (!q.given("--stream")) same.stream = e0.value("stream", same.stream);
  }
  std::vector<EndpointSpec> endpoints = q.build_endpoints(same);
  // Each endpoint's special-token rule defaults to the one the run recorded for it.
  if (!q.given("--endpoint-parse-special") && had.is_array())
    for (auto& e : endpoints)
      for (const auto& h : had)
        if (h.is_object() && h.value("label", std::string()) == e.label && h.contains("parse_special") &&
            h["parse_special"].is_string()) {
          e.parse_special = h["parse_special"].get<std::string>();
          e.parse_special_source = h.value("parse_special_source", e.parse_special_source);
        }
  check_resume_endpoints(q.resume, had, endpoints_record(endpoints));
  return endpoints;
}

void check_resume_model(const PlanRequest& q, const AuditReport& report, const Model& model,
                        const std::string& model_path) {
  std::string had = recorded_text(report.environment, "model", "sha256");
  if (had.empty()) had = recorded_text(report.environment, "digests", "model_sha256");
  if (had.empty())
    throw UsageError("--resume " + q.resume +
                     ": the run recorded no model digest (written by another version?); start a new run");
  if (had != model.file_sha256)
    throw UsageError("--resume " + q.resume + ": the model file " + model_path + " has sha256 " +
                     short_hex(model.file_sha256) + " but the run used " + short_hex(had) +
                     "; resume with the same model (--model FILE) or start a new run");
}

void use_recorded_chat_template(Model& model, const nlohmann::json& environment) {
  if (!environment.is_object() || !environment.contains("model") || !environment["model"].is_object()) return;
  const std::string name = environment["model"].value("chat_template", "");
  // A Jinja template is not recorded by name (the resumed run renders with the template it is given).
  if (name.empty() || name == "unknown" || name == "jinja" || name == model.chat_template.name) return;
  ChatTemplate t = chat_template_from_option(name);
  t.eos_token = model.chat_template.eos_token;
  t.bos_token = model.chat_template.bos_token;
  t.tokenizer_adds_bos = model.chat_template.tokenizer_adds_bos;
  t.origin = "--chat-template " + name + " (recorded in the report)";
  model.chat_template = t;
}

namespace {
nlohmann::json recorded_eog_tokens(const nlohmann::json& environment) {
  if (!environment.is_object() || !environment.contains("model") || !environment["model"].is_object()) return nullptr;
  return environment["model"].value("eog_tokens", nlohmann::json());
}
}  // namespace

void check_resume_chat_template(const AuditReport& report, const Model& model) {
  const std::string had = recorded_text(report.environment, "model", "chat_template_sha256");
  if (had.empty() || model.chat_template.name != "jinja" || model.chat_template.sha256 == had) return;
  throw UsageError("--resume: the chat template (" + model.chat_template.origin + ") has sha256 " +
                   short_hex(model.chat_template.sha256) + " but the run rendered its chat prompts with sha256 " +
                   short_hex(had) + " (environment.model.chat_template_sha256); resume with that template " +
                   "(--chat-template FILE) or start a new run");
}

void use_recorded_eog_tokens(Model& model, const nlohmann::json& environment) {
  const nlohmann::json had = recorded_eog_tokens(environment);
  if (!had.is_array()) return;
  Tokenizer& tok = *model.tokenizer;
  for (const auto& id : had)
    if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < tok.vocab_size())
      tok.add_eog(id.get<int>());
}

void check_resume_eog_tokens(const PlanRequest& q, const AuditReport& report, const Model& model) {
  const nlohmann::json had = recorded_eog_tokens(report.environment);
  const nlohmann::json now = eog_record(*model.tokenizer);
  if (now == had) return;
  auto text = [](const nlohmann::json& v) { return v.is_array() ? v.dump() : std::string("the EOS alone"); };
  throw UsageError("--resume " + q.resume + ": the run stopped generation at tokens " + text(had) +
                   ", this one would stop at " + text(now) +
                   "; give the --stop-token flags the run was started with, or none");
}

}  // namespace repro
