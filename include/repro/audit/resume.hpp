// --resume: the same run, or none. A resumed run must be the run it continues: same model bytes, same
// prompts, same endpoints, same plan, same engine. Everything is checked against what the checkpoint
// (or report) recorded, before anything runs; a difference is a UsageError that names it and the fix.
// prepare_run (src/audit/plan_request.cpp) calls these in order: resume_run first, then, once the
// target is known, resume_endpoints or check_resume_model.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/plan_request.hpp"

namespace repro {

// Continues the run in request.resume (its checkpoint.json, else its report.json): fills run.report
// (completions and provenance; cases and summary cleared), run.plan (plan_from_report), run.out_dir,
// run.finished (a report.json without a checkpoint, of a run that was not interrupted) with its
// verdict and exit status, run.model_path (unless --model) and run.engine.device. Refuses flags that
// would change the run's plan, prompts, profile, chat template, kind (local or endpoints) or engine.
void resume_run(const PlanRequest& request, PreparedRun& run);

// The endpoints of a resumed remote run: --api-model, --api, --provider and --stream default to the
// run's; given, and the --endpoint flags themselves, they must match what it recorded.
std::vector<EndpointSpec> resume_endpoints(const PlanRequest& request, const AuditReport& report);

// The model file of a resumed local run has the bytes the run used, wherever the file is now.
void check_resume_model(const PlanRequest& request, const AuditReport& report, const Model& model,
                        const std::string& model_path);

// A report's environment records the chat template its messages were rendered with
// (environment.model.chat_template): applied to a freshly loaded model, so that a resumed run or a
// canary renders the prompts as the original run did. No-op when nothing (or "unknown") was
// recorded or the model already has that template.
void use_recorded_chat_template(Model& model, const nlohmann::json& environment);

// The end-of-generation set a run stopped at (environment.model.eog_tokens; absent: the EOS alone):
// its ids are added to a freshly loaded model's set, so that a resumed run or a canary stops where
// the original run did. No-op when nothing was recorded.
void use_recorded_eog_tokens(Model& model, const nlohmann::json& environment);
// A resumed local run stops at the tokens the run stopped at: after use_recorded_eog_tokens
// (without --stop-token), or with --stop-token giving the same set; UsageError otherwise.
void check_resume_eog_tokens(const PlanRequest& request, const AuditReport& report, const Model& model);
// The chat template a resumed run renders with must be the one the run recorded
// (environment.model.chat_template_sha256, where recorded): throws UsageError naming both digests.
void check_resume_chat_template(const AuditReport& report, const Model& model);

}  // namespace repro
