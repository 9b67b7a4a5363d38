// Report provenance built in the audit layer: input digests, endpoints without secrets, and the
// report's digests block filled from what the runner records.
#include <doctest/doctest.h>

#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

using namespace repro;

TEST_CASE("provenance: input digests, endpoints without secrets, the report's digests block") {
  PlanOptions plan;
  apply_profile(find_profile("ci"), plan);
  plan.prompts = {prompt_from_text("alpha"), prompt_from_text("beta")};
  nlohmann::json d = input_digests(plan, nullptr);
  CHECK(d["prompts_sha256"] ==
        sha256_hex(plan.prompts[0].id + "\talpha\n" + plan.prompts[1].id + "\tbeta\n"));
  CHECK(d["profile_sha256"] == plan.profile_digest);
  CHECK(d["profile_sha256"].get<std::string>().size() == 64);
  CHECK_FALSE(d.contains("model_sha256"));  // no local model

  EndpointSpec e;
  e.label = "vllm";
  e.url = "http://user:hunter2@127.0.0.1:8000/v1";
  e.api_model = "m";
  e.api_key = "sk-very-secret";
  AuditReport r;
  record_provenance(r, plan, nullptr, "", EngineSetup{}, {e});
  std::string text = to_json(r);
  CHECK(text.find("sk-very-secret") == std::string::npos);
  CHECK(text.find("hunter2") == std::string::npos);
  CHECK(r.environment["endpoints"][0]["label"] == "vllm");
  CHECK_FALSE(r.environment.contains("model"));
  CHECK(r.profile == "ci");
  CHECK(r.plan == plan_to_json(plan));
  CHECK(r.thresholds.modes == plan.thresholds.modes);
  CHECK(r.created.size() == 20);
  CHECK(r.created.back() == 'Z');
  auto doc = nlohmann::json::parse(text);
  CHECK(doc["digests"]["profile_sha256"] == plan.profile_digest);  // copied from environment.digests
  CHECK(doc["environment"]["digests"]["prompts_sha256"] == d["prompts_sha256"]);
  CHECK(plan_from_report(from_json(text, "mem.json")).profile_digest == plan.profile_digest);
}
