// Report provenance: what was run, on what, with which inputs. Built here, in the audit layer, so
// every front end (the `run` subcommand, a service, a test) records the same fields the same way.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/plan.hpp"
#include "repro/audit/result.hpp"
#include "repro/engine/device.hpp"
#include "repro/model/model.hpp"
#include "repro/remote/endpoint.hpp"

namespace repro {

// Model identity: absolute path, file SHA-256, format, architecture, parameter count, tokenizer kind.
nlohmann::json model_identity(const Model& model, const std::string& model_path);
// The end-of-generation ids (Tokenizer::eog) as environment.model.eog_tokens records them: an array,
// or null when the set is the EOS alone (the record then leaves the key out).
nlohmann::json eog_record(const Tokenizer& tok);
// The endpoints as configured: label, URL (credentials redacted), API model, API, provider, stream,
// and the SHA-256 of the extra body when there is one (extra_body_sha256). Never the API key.
nlohmann::json endpoints_record(const std::vector<EndpointSpec>& endpoints);
// The prompts digest: SHA-256 of the compact canonical JSON (sorted keys, no whitespace) of the
// prompts in plan order, each {"id", "text"} with "messages" for a chat prompt and "task" and
// "variant" for a variant of a task. environment.digests.prompts_sha256 and the report's own
// digests.prompts_sha256 are both this value.
std::string prompts_digest(const std::vector<Prompt>& prompts);
// Digests of the inputs: prompts_sha256 (prompts_digest), profile_sha256 (of the profile file's
// bytes) and, for a local model, model_sha256.
nlohmann::json input_digests(const PlanOptions& plan, const Model* model);

// What the local engine ran on (the resolved engine configuration).
struct EngineSetup {
  Device device = Device::Cpu;
  Precision precision = Precision::F32;  // the plan's first precision (engine.precisions lists them all)
};

// Starts a report for `plan`: created (now, UTC), profile, plan block, thresholds, extractors, the
// prompts' texts, and the
// environment record (tool, OS, CPU, ...) with the model identity and engine (local: `model` given)
// or the endpoints (remote), the profile and the input digests. Completions are left as they are
// (a resumed report keeps its finished ones), and so are a resumed remote report's request
// statistics (environment.remote_stats), to which the resumed segment adds its own.
void record_provenance(AuditReport& report, const PlanOptions& plan, const Model* model, const std::string& model_path,
                       const EngineSetup& engine, const std::vector<EndpointSpec>& endpoints);

// A run that switched models: the chosen model's context was too short for the plan (long prompts),
// so it ran on the plan's long_context_model instead. Kept in the report as
// environment.model.switched_from {path, context_length, needed_context, to, reason}.
struct ModelSwitch {
  std::string requested_path;  // the model asked for
  int requested_context = 0;   // its context length
  int needed_context = 0;      // longest prompt + max tokens (and the longest batch mate)
  std::string used;            // the model run instead, as named in the plan ("synth:long")
  int used_context = 0;
};
nlohmann::json model_switch_record(const ModelSwitch& s);
// One sentence saying so, from a report's environment; "" when the run did not switch.
std::string model_switch_note(const nlohmann::json& environment);

// The current time as ISO-8601 UTC ("2026-01-01T00:00:00Z").
std::string utc_now();

}  // namespace repro
