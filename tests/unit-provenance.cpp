// Report provenance built in the audit layer: input digests, endpoints without secrets, and the
// report's digests block filled from what the runner records. The prompts digest is canonical JSON:
// prompt sets that differ (ids or texts with tabs and newlines, chat messages, order) never collide.
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
  CHECK(d["prompts_sha256"] == sha256_hex("[{\"id\":\"" + plan.prompts[0].id + "\",\"text\":\"alpha\"},{\"id\":\"" +
                                          plan.prompts[1].id + "\",\"text\":\"beta\"}]"));
  CHECK(d["prompts_sha256"] == prompts_digest(plan.prompts));
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
  CHECK(r.plan == plan_to_json(plan, true));  // an endpoint run: no local-only settings in its plan
  CHECK_FALSE(r.plan.contains("modes"));
  CHECK_FALSE(r.plan.contains("batch_sizes"));
  CHECK(r.thresholds.modes == plan.thresholds.modes);
  CHECK(r.created.size() == 20);
  CHECK(r.created.back() == 'Z');
  auto doc = nlohmann::json::parse(text);
  CHECK(doc["digests"]["profile_sha256"] == plan.profile_digest);  // copied from environment.digests
  CHECK(doc["environment"]["digests"]["prompts_sha256"] == d["prompts_sha256"]);
  CHECK(doc["digests"]["prompts_sha256"] == d["prompts_sha256"]);  // one prompts digest, recorded twice
  CHECK(plan_from_report(from_json(text, "mem.json")).profile_digest == plan.profile_digest);
}

TEST_CASE("provenance: the prompts digest tells apart sets that \"id\\ttext\\n\" lines confuse, and covers messages") {
  auto digest = [](std::vector<Prompt> ps) { return prompts_digest(ps); };
  const Prompt tab_in_id{"a\tb", "c", nullptr, "", ""}, tab_in_text{"a", "b\tc", nullptr, "", ""};
  CHECK(digest({tab_in_id}) != digest({tab_in_text}));
  const Prompt one{"a", "b\nc\td", nullptr, "", ""}, two_a{"a", "b", nullptr, "", ""}, two_b{"c", "d", nullptr, "", ""};
  CHECK(digest({one}) != digest({two_a, two_b}));
  CHECK(digest({two_a, two_b}) != digest({two_b, two_a}));  // plan order is part of the set
  Prompt chat{"c1", "Hi", nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])"), "", ""};
  Prompt other_chat = chat;
  other_chat.messages[0]["role"] = "system";
  CHECK(digest({chat}) != digest({other_chat}));
  CHECK(digest({chat}) != digest({Prompt{"c1", "Hi", nullptr, "", "", nullptr, nullptr}}));
  Prompt variant{"t/v", "x", nullptr, "t", "v"};
  CHECK(digest({variant}) != digest({Prompt{"t/v", "x", nullptr, "", "", nullptr, nullptr}}));
  // The report's own copy is the same digest, messages included.
  PlanOptions plan;
  plan.prompts = {chat, two_a};
  AuditReport r;
  record_provenance(r, plan, nullptr, "", EngineSetup{}, {});
  auto doc = nlohmann::json::parse(to_json(r));
  CHECK(doc["digests"]["prompts_sha256"] == prompts_digest(plan.prompts));
  CHECK(doc["environment"]["digests"]["prompts_sha256"] == prompts_digest(plan.prompts));
}

TEST_CASE("provenance: diff compares prompts in one form, whatever form each report recorded") {
  PlanOptions plan;
  plan.prompts = {prompt_from_text("alpha"), prompt_from_text("beta")};
  AuditReport a, b;
  record_provenance(a, plan, nullptr, "", EngineSetup{}, {});
  b = a;
  // `a` as an earlier version recorded it: "id\ttext\n" per prompt.
  a.environment["digests"]["prompts_sha256"] =
      sha256_hex(plan.prompts[0].id + "\talpha\n" + plan.prompts[1].id + "\tbeta\n");
  for (const auto& line : config_drift(a, b)) CHECK(line.rfind("prompts digest", 0) != 0);
  b.prompts[plan.prompts[1].id] = "gamma";
  bool named = false;
  for (const auto& line : config_drift(a, b)) named = named || line.rfind("prompts digest ", 0) == 0;
  CHECK(named);
}
