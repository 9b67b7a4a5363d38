// Report provenance (see include/repro/audit/provenance.hpp).
#include "repro/audit/provenance.hpp"

#include <ctime>
#include <filesystem>

#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/remote/redact.hpp"

namespace repro {

nlohmann::json model_identity(const Model& model, const std::string& model_path) {
  nlohmann::json m = {{"path", std::filesystem::absolute(model_path).string()},
                      {"sha256", model.file_sha256},
                      {"format", model.format},
                      {"arch", model.config.arch},
                      {"parameters", model.n_params},
                      {"tokenizer", model.tokenizer->kind()},
                      {"chat_template", model.chat_template.name},
                      {"chat_template_source", model.chat_template.origin}};
  // The template's own text is what renders chat prompts: its digest shows a changed template even
  // where the model file (the weights' digest) is the same (--chat-template FILE).
  if (!model.chat_template.sha256.empty()) m["chat_template_sha256"] = model.chat_template.sha256;
  if (nlohmann::json eog = eog_record(*model.tokenizer); !eog.is_null()) m["eog_tokens"] = std::move(eog);
  return m;
}

nlohmann::json eog_record(const Tokenizer& tok) {
  // The tokens generation stops at, when they are more than the EOS alone (end-of-turn tokens of
  // the vocabulary, --stop-token).
  if (tok.eog().empty() || (tok.eog().size() == 1 && tok.eog()[0] == tok.eos())) return nullptr;
  return tok.eog();
}

nlohmann::json endpoints_record(const std::vector<EndpointSpec>& endpoints) {
  nlohmann::json eps = nlohmann::json::array();
  for (const auto& e : endpoints) {
    nlohmann::json r = {{"label", e.label},
                        {"url", redact_url(e.url)},
                        {"api_model", e.api_model},
                        {"api", e.api},
                        {"provider", provider_name(e.provider)},
                        {"stream", e.stream},
                        // completion prompts' special-token text: matched by the endpoint or not
                        {"parse_special", e.parse_special}};
    if (!e.parse_special_source.empty()) r["parse_special_source"] = e.parse_special_source;
    // The extra body changes every request; its digest (not its text, which may hold secrets) is kept.
    if (e.extra_body.is_object() && !e.extra_body.empty())
      r["extra_body_sha256"] = sha256_hex(e.extra_body.dump());
    eps.push_back(std::move(r));
  }
  return eps;
}


nlohmann::json input_digests(const PlanOptions& plan, const Model* model) {
  nlohmann::json d = {{"prompts_sha256", prompts_digest(plan.prompts)}, {"profile_sha256", plan.profile_digest}};
  if (model) d["model_sha256"] = model->file_sha256;
  return d;
}

nlohmann::json model_switch_record(const ModelSwitch& s) {
  return {{"path", std::filesystem::absolute(s.requested_path).string()},
          {"context_length", s.requested_context},
          {"needed_context", s.needed_context},
          {"to", s.used},
          {"to_context_length", s.used_context}};
}

std::string model_switch_note(const nlohmann::json& env) {
  if (!env.is_object() || !env.contains("model") || !env["model"].is_object()) return "";
  const nlohmann::json& m = env["model"];
  auto it = m.find("switched_from");
  if (it == m.end() || !it->is_object()) return "";
  const nlohmann::json& w = *it;
  auto num = [&](const char* k) { return w.contains(k) && w[k].is_number_integer() ? w[k].get<int64_t>() : 0; };
  auto str = [&](const char* k) { return w.contains(k) && w[k].is_string() ? w[k].get<std::string>() : std::string(); };
  const bool synth = str("to").rfind("synth:", 0) == 0;
  return std::string("switched to a ") + (synth ? "synthesized " : "") + "long-context model: " + str("path") +
         " has a context of " + std::to_string(num("context_length")) + " tokens, this plan needs " +
         std::to_string(num("needed_context")) + ", so it ran on " + str("to") + " (context " +
         std::to_string(num("to_context_length")) + " tokens" +
         (synth ? "; seeded random weights: its text is not meaningful, its arithmetic is that of a real model)" : ")");
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void record_provenance(AuditReport& report, const PlanOptions& plan, const Model* model, const std::string& model_path,
                       const EngineSetup& engine, const std::vector<EndpointSpec>& endpoints) {
  report.created = utc_now();
  report.profile = plan.profile;
  report.plan = plan_to_json(plan, !endpoints.empty());
  report.thresholds = plan.thresholds;
  report.answer_regex = plan.answer_regex;
  report.answer_json_path = plan.answer_json_path;
  for (const auto& p : plan.prompts) report.prompts[p.id] = p.text;
  report.prompt_variants.clear();
  for (const auto& p : plan.prompts)
    if (!p.task.empty()) report.prompt_variants.push_back({p.id, p.task, p.variant});
  // A resumed remote run keeps the request statistics of its earlier segments (run_remote adds to them).
  nlohmann::json earlier_stats;
  if (report.environment.is_object() && report.environment.contains("remote_stats"))
    earlier_stats = report.environment["remote_stats"];
  report.environment = environment_record(plan.threads);
  if (!endpoints.empty() && earlier_stats.is_object()) report.environment["remote_stats"] = earlier_stats;
  if (model) {
    report.environment["model"] = model_identity(*model, model_path);
    std::vector<Mode> modes;
    for (const auto& m : plan.modes) modes.push_back(parse_mode(m, "--modes"));
    report.environment["engine"] = engine_record(engine.device, engine.precision, modes, plan.threads);
    report.environment["engine"]["precisions"] = plan.precisions;  // every precision of the plan, in order
  } else {
    report.environment["endpoints"] = endpoints_record(endpoints);
  }
  report.environment["digests"] = input_digests(plan, model);
}

}  // namespace repro
