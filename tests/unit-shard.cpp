// ctest-labels: unit model remote
// Shards: `run --shard K/N` (and --shard auto from the Slurm, Kubernetes, GitLab and AWS Batch
// variables), assignment by case through a stable hash, shard reports that resume like any run, and
// `report merge`: its coverage checks and refusals, the union analysed as one run (equal to the
// unsharded run case by case), --allow-partial, --sign-key, and --replicate-shards with the host as a
// factor. End to end with the real binary on the embedded default model.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "repro/audit/plan.hpp"
#include "repro/audit/runner.hpp"
#include "repro/audit/shards.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/model/default_model.hpp"
#include "repro/serve/server.hpp"
#include "repro/report/report.hpp"
#include "shard_util.hpp"
#include "test_util.hpp"

#define REPRO_FUZZ_NO_MAIN
#include "../fuzz/fuzz_shard.cpp"

using namespace repro;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// The shard variables of every scheduler removed, so the test behaves the same inside a CI job.
const char* kNoShardEnv =
    "env -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT -u SLURM_ARRAY_TASK_MIN -u SLURM_ARRAY_TASK_MAX "
    "-u SLURM_ARRAY_JOB_ID -u SLURM_JOB_ID -u JOB_COMPLETION_INDEX -u CI_NODE_INDEX -u CI_NODE_TOTAL "
    "-u AWS_BATCH_JOB_ARRAY_INDEX -u AWS_BATCH_JOB_ARRAY_SIZE -u GITHUB_ACTIONS ";

test::CmdResult cli(const std::string& args, const std::string& env = "") {
  return test::run_shell(std::string(kNoShardEnv) + env + " '" + test::binary() + "' " + args);
}

// A small plan: 6 prompts x greedy x 2 modes = 12 cases, each in 3 batch contexts.
const std::string kPlan =
    "--prompt 'Once upon a time' --prompt 'The dog' --prompt 'Lily saw a bird' --prompt 'Tom had a red ball' "
    "--prompt 'The sun was hot' --prompt 'One day, a cat' --max-tokens 6 --repeats 1 --batch-sizes 1,3 "
    "--positions first,last --filler-sets 1 --modes default,batch-invariant --precisions f32";

ShardSpec resolve(const std::map<std::string, std::string>& env, int count = 0) {
  return resolve_shard_auto(count, [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
std::string refusal(const std::map<std::string, std::string>& env, int count = 0) {
  try {
    resolve(env, count);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

json read_json(const fs::path& p) { return json::parse(test::slurp(p)); }

using test::analysis_of;

// One unsharded run and its three shards, made once for the file.
struct Runs {
  fs::path root, whole, merged;
  std::vector<fs::path> shards;
};
const Runs& runs() {
  static Runs r = [] {
    Runs x;
    x.root = test::scratch_dir("shard");
    x.whole = x.root / "whole";
    auto w = cli("run -q " + kPlan + " --out " + q(x.whole));
    INFO(w.output);
    REQUIRE((w.code == 0 || w.code == 1));
    for (int k = 1; k <= 3; ++k) {
      x.shards.push_back(x.root / ("s" + std::to_string(k)));
      auto s = cli("run -q " + kPlan + " --shard " + std::to_string(k) + "/3 --out " + q(x.shards.back()));
      INFO(s.output);
      REQUIRE((s.code == 0 || s.code == 1));
    }
    x.merged = x.root / "merged";
    auto m = cli("report merge -q " + q(x.shards[2]) + " " + q(x.shards[0]) + " " + q(x.shards[1] / "report.json") +
                 " --out " + q(x.merged));
    INFO(m.output);
    REQUIRE(m.code == w.code);
    return x;
  }();
  return r;
}

}  // namespace

TEST_CASE("--shard K/N: 1-based, 1 <= K <= N; 0/4, 5/4 and x/y are exit 2") {
  CHECK(parse_shard("2/4").index == 2);
  CHECK(parse_shard("2/4").count == 4);
  CHECK(parse_shard("1/1").count == 1);
  for (const char* bad : {"0/4", "5/4", "x/y", "2", "/4", "2/", "-1/4", "2/4/", " 2/4", "1/0", "+1/2", "1/100001"})
    CHECK_MESSAGE(parse_shard(bad).count == 0, bad);
  auto dir = test::scratch_dir("shard-bad");
  for (const char* bad : {"0/4", "5/4", "x/y"}) {
    auto r = cli(std::string("run -q --prompt hi --max-tokens 2 --shard ") + bad + " --out " + q(dir / "o"));
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(std::string("error: --shard must be K/N with 1 <= K <= N (e.g. 2/4), or auto (got '") + bad +
                        "')") != std::string::npos);
  }
  CHECK(!fs::exists(dir / "o"));
  // --shard-count belongs to --shard auto; --replicate-shards needs a shard
  auto c = cli("run -q --prompt hi --shard 1/2 --shard-count 2 --out " + q(dir / "o"));
  CHECK(c.code == 2);
  CHECK(c.output.find("--shard-count 2 goes with --shard auto") != std::string::npos);
  auto rep = cli("run -q --prompt hi --replicate-shards --out " + q(dir / "o"));
  CHECK(rep.code == 2);
  CHECK(rep.output.find("--replicate-shards runs the whole plan on every shard") != std::string::npos);
}

TEST_CASE("--shard auto: Slurm, Kubernetes, GitLab and AWS Batch variables; half-set, inconsistent or absent ones "
          "are refused by name") {
  // Slurm: 0-based task id, the array 0..N-1
  ShardSpec s = resolve({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                         {"SLURM_ARRAY_TASK_MAX", "3"}, {"SLURM_ARRAY_JOB_ID", "77"}});
  CHECK(shard_text(s) == "3/4");
  CHECK(s.scheduler == "slurm");
  CHECK(s.source == "SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=4 (job 77)");
  CHECK(refusal({{"SLURM_ARRAY_TASK_ID", "2"}}).find("SLURM_ARRAY_TASK_ID is set (2) but SLURM_ARRAY_TASK_COUNT is "
                                                     "not") != std::string::npos);
  CHECK(refusal({{"SLURM_ARRAY_TASK_COUNT", "4"}}).find("SLURM_ARRAY_TASK_ID is not") != std::string::npos);
  // --array=1,5,9: three tasks whose ids are not 0..2
  const std::string gaps = refusal({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "3"},
                                    {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_MAX", "9"}});
  CHECK(gaps.find("the Slurm array is not 0..N-1 (SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_MAX=9, "
                  "SLURM_ARRAY_TASK_COUNT=3)") != std::string::npos);
  CHECK(gaps.find("sbatch --array=0-2") != std::string::npos);
  CHECK(refusal({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "4"}})
            .find("SLURM_ARRAY_TASK_ID='x' is not a non-negative integer") != std::string::npos);
  CHECK(refusal({{"SLURM_JOB_ID", "12"}}).find("the Slurm job is not an array") != std::string::npos);
  // Kubernetes: the index, and the count from --shard-count
  CHECK(shard_text(resolve({{"JOB_COMPLETION_INDEX", "0"}}, 3)) == "1/3");
  CHECK(resolve({{"JOB_COMPLETION_INDEX", "0"}}, 3).scheduler == "kubernetes");
  CHECK(refusal({{"JOB_COMPLETION_INDEX", "1"}}).find("JOB_COMPLETION_INDEX is set (1) but --shard-count is not") !=
        std::string::npos);
  CHECK(refusal({{"JOB_COMPLETION_INDEX", "3"}}, 3).find("JOB_COMPLETION_INDEX is outside 0..2") != std::string::npos);
  CHECK(refusal({}, 3).find("--shard-count 3 is given but no shard index variable is set") != std::string::npos);
  // GitLab: 1-based; CI_NODE_TOTAL alone is a job that is not parallel
  CHECK(shard_text(resolve({{"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "2"}})) == "1/2");
  CHECK(refusal({{"CI_NODE_TOTAL", "1"}}).find("CI_NODE_TOTAL is set (1) but CI_NODE_INDEX is not: the GitLab job is "
                                              "not parallel") != std::string::npos);
  CHECK(refusal({{"CI_NODE_INDEX", "0"}, {"CI_NODE_TOTAL", "2"}}).find("GitLab counts from 1") != std::string::npos);
  // AWS Batch
  CHECK(shard_text(resolve({{"AWS_BATCH_JOB_ARRAY_INDEX", "4"}, {"AWS_BATCH_JOB_ARRAY_SIZE", "5"}})) == "5/5");
  CHECK(shard_text(resolve({{"AWS_BATCH_JOB_ARRAY_INDEX", "4"}}, 6)) == "5/6");
  CHECK(refusal({{"AWS_BATCH_JOB_ARRAY_INDEX", "4"}}).find("AWS_BATCH_JOB_ARRAY_SIZE is not") != std::string::npos);
  // inconsistent: two schedulers that disagree, or a count that disagrees with --shard-count
  CHECK(refusal({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "2"}, {"CI_NODE_INDEX", "2"},
                 {"CI_NODE_TOTAL", "2"}})
            .find("the variables disagree") != std::string::npos);
  CHECK(refusal({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "2"}}, 3)
            .find("gives 2 shards but --shard-count 3 is given") != std::string::npos);
  // GitHub Actions and nothing at all: never "shard 1 of 1"
  CHECK(refusal({{"GITHUB_ACTIONS", "true"}}).find("--shard ${{ matrix.shard }}/${{ strategy.job-total }}") !=
        std::string::npos);
  const std::string none = refusal({});
  CHECK(none.find("no shard variables are set") != std::string::npos);
  for (const char* v : {"SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "CI_NODE_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX"})
    CHECK(none.find(v) != std::string::npos);
  // the same through the binary: exit 2 naming the variables, nothing written
  auto dir = test::scratch_dir("shard-auto");
  auto r = cli("run -q --prompt hi --max-tokens 2 --shard auto --out " + q(dir / "o"));
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --shard auto: no shard variables are set") != std::string::npos);
  auto half = cli("run -q --prompt hi --max-tokens 2 --shard auto --out " + q(dir / "o"), "SLURM_ARRAY_TASK_ID=1");
  CHECK(half.code == 2);
  CHECK(half.output.find("SLURM_ARRAY_TASK_COUNT is not") != std::string::npos);
  CHECK(!fs::exists(dir / "o"));
}

TEST_CASE("assignment by case: a stable hash of the case identity, unmoved when the plan grows") {
  PlanOptions p;
  p.prompts = {prompt_from_text("a"), prompt_from_text("b"), prompt_from_text("c")};
  p.shard = "2/3";
  const auto all = plan_case_ids(p, {});
  CHECK(all.size() == 3 * 2);  // 3 prompts x greedy x 2 modes x f32
  CHECK(all[0] == p.prompts[0].id + "|greedy|default|f32");
  std::map<std::string, int> before;
  for (const auto& id : all) before[id] = case_shard(id, 3);
  p.prompts.push_back(prompt_from_text("d"));
  p.prompts.insert(p.prompts.begin(), prompt_from_text("zero"));
  for (const auto& id : plan_case_ids(p, {}))
    if (before.count(id)) CHECK(case_shard(id, 3) == before[id]);
  // the hash is the documented one: 1 + (first 8 bytes of SHA-256, big-endian) mod N
  const std::string id = "p|greedy|default|f32";
  CHECK(case_shard(id, 7) == static_cast<int>(std::stoull(sha256_hex(id).substr(0, 16), nullptr, 16) % 7) + 1);
  // the shards partition the plan; replicated, every shard has every case
  std::set<std::string> seen;
  for (int k = 1; k <= 3; ++k) {
    p.shard = std::to_string(k) + "/3";
    for (const auto& c : shard_case_ids(p, {})) CHECK(seen.insert(c).second);
  }
  CHECK(seen.size() == plan_case_ids(p, {}).size());
  p.replicate_shards = true;
  CHECK(shard_case_ids(p, {}).size() == seen.size());
  // endpoints: the labels take the modes' place, without a precision
  p.replicate_shards = false;
  CHECK(plan_case_ids(p, {"vllm"})[0] == p.prompts[0].id + "|greedy|vllm|");
}

TEST_CASE("run --shard K/N --dry-run prints the assignment; shard reports hold their cases whole, with the shard "
          "block") {
  const Runs& r = runs();
  std::set<std::string> all;
  for (int k = 1; k <= 3; ++k) {
    auto d = cli("run " + kPlan + " --shard " + std::to_string(k) + "/3 --dry-run --out " + q(r.root / "dry"));
    CAPTURE(d.output);
    REQUIRE(d.code == 0);
    CHECK(d.output.find("12 cases over 3 shards") != std::string::npos);
    const json rep = read_json(r.shards[k - 1] / "report.json");
    const json& sh = rep["shard"];
    CHECK(sh["index"] == k);
    CHECK(sh["count"] == 3);
    CHECK(sh["scheduler"] == "flag");
    CHECK(sh["source"] == "--shard " + std::to_string(k) + "/3");
    CHECK(sh["host"]["hostname"].get<std::string>().size() > 0);
    CHECK(sh["host"]["fingerprint"].get<std::string>().size() == 64);
    CHECK(d.output.find("plan sha256 " + sh["plan_sha256"].get<std::string>()) != std::string::npos);
    CHECK(d.output.find("shard " + std::to_string(k) + "/3 runs " + std::to_string(sh["cases"].size()) + " cases") !=
          std::string::npos);
    std::set<std::string> mine;
    for (const auto& c : sh["cases"]) {
      CHECK(d.output.find("  " + c.get<std::string>() + "\n") != std::string::npos);
      CHECK(all.insert(c.get<std::string>()).second);  // disjoint
      mine.insert(c.get<std::string>());
    }
    // every context of an assigned case ran here (2 batch contexts + batch 1 = 3 completions per case)
    std::map<std::string, int> per_case;
    for (const auto& c : rep["completions"])
      per_case[c["prompt_id"].get<std::string>() + "|" + c["decoding"].get<std::string>() + "|" +
               c["mode"].get<std::string>() + "|" + c["precision"].get<std::string>()]++;
    CHECK(per_case.size() == mine.size());
    for (const auto& [id, n] : per_case) {
      CHECK(mine.count(id));
      CHECK(n == 3);
    }
    // the plan block records the shard; the plan digest leaves it out
    CHECK(rep["plan"]["shard"] == std::to_string(k) + "/3");
  }
  CHECK(all.size() == 12);
  const json s1 = read_json(r.shards[0] / "report.json"), s2 = read_json(r.shards[1] / "report.json");
  CHECK(s1["shard"]["plan_sha256"] == s2["shard"]["plan_sha256"]);
  CHECK(s1["shard"]["host"] == s2["shard"]["host"]);
}

TEST_CASE("report merge: the union analysed as one run equals the unsharded run: same cases, clusters, verdict, "
          "hashes") {
  const Runs& r = runs();
  const json whole = read_json(r.whole / "report.json");
  const json merged = read_json(r.merged / "report.json");
  CHECK(analysis_of(merged) == analysis_of(whole));
  CHECK(merged["summary"]["cases"] == 12);
  CHECK(!merged.contains("shard"));
  const json& m = merged["merge"];
  CHECK(m["complete"] == true);
  CHECK(m["count"] == 3);
  CHECK(m["missing_shards"].empty());
  CHECK(m["missing_cases"].empty());
  REQUIRE(m["shards"].size() == 3);
  for (int k = 1; k <= 3; ++k) {
    const json s = read_json(r.shards[k - 1] / "report.json");
    CHECK(m["shards"][k - 1]["index"] == k);
    CHECK(m["shards"][k - 1]["report_sha256"] == s["digests"]["report_sha256"]);
    CHECK(m["shards"][k - 1]["host"] == s["shard"]["host"]);
  }
  // every format, and the digest of the merged report itself
  for (const char* f : {"report.json", "report.md", "report.html", "report.junit.xml"})
    CHECK(fs::exists(r.merged / f));
  const std::string md = test::slurp(r.merged / "report.md"), html = test::slurp(r.merged / "report.html");
  CHECK(md.find("Merged from 3 of 3 shard reports of plan") != std::string::npos);
  for (const auto& s : m["shards"]) {
    CHECK(md.find(s["report_sha256"].get<std::string>().substr(0, 12)) != std::string::npos);
    CHECK(html.find(s["report_sha256"].get<std::string>().substr(0, 12)) != std::string::npos);
  }
  CHECK(test::slurp(r.merged / "report.junit.xml").find("name=\"coverage\"") != std::string::npos);
  CHECK(test::run_cli("report --verify " + q(r.merged / "report.json")).code == 0);
}

TEST_CASE("report merge refuses: a missing shard, another plan (naming the field), a truncated or non-JSON report, "
          "a report merged with itself; nothing is written") {
  const Runs& r = runs();
  const fs::path out = r.root / "refused";
  auto refused = [&](const std::string& args, const std::string& says) {
    auto m = cli("report merge -q " + args + " --out " + q(out));
    CAPTURE(m.output);
    CHECK(m.code == 2);
    CHECK(m.output.find("error: report merge: ") != std::string::npos);
    CHECK(m.output.find(says) != std::string::npos);
    CHECK(!fs::exists(out));
  };
  refused(q(r.shards[0]) + " " + q(r.shards[2]),
          "shard 2 of 3 is missing (given: 1, 3); add its report, or pass --allow-partial");
  refused(q(r.shards[0]) + " " + q(r.shards[0]) + " " + q(r.shards[1]) + " " + q(r.shards[2]),
          "are the same report");
  refused(q(r.shards[0]) + " " + q(r.shards[0] / "report.json"), "merging a report with itself is refused");
  // a shard of another plan: --max-tokens 5
  const fs::path other = r.root / "other2";
  std::string plan5 = kPlan;
  plan5.replace(plan5.find("--max-tokens 6"), 14, "--max-tokens 5");
  REQUIRE(cli("run -q " + plan5 + " --shard 2/3 --out " + q(other)).code <= 1);
  refused(q(r.shards[0]) + " " + q(other) + " " + q(r.shards[2]), "plan field \"max_tokens\" is 5 in one and 6 in");
  // truncated, not JSON, edited
  const fs::path bad = r.root / "bad";
  fs::remove_all(bad);
  fs::create_directories(bad);
  const std::string text = test::slurp(r.shards[1] / "report.json");
  std::ofstream(bad / "truncated.json") << text.substr(0, text.size() / 2);
  std::ofstream(bad / "notjson.json") << "this is not a report\n";
  refused(q(r.shards[0]) + " " + q(bad / "truncated.json") + " " + q(r.shards[2]),
          "report '" + (bad / "truncated.json").string() + "': invalid JSON");
  refused(q(r.shards[0]) + " " + q(bad / "notjson.json") + " " + q(r.shards[2]),
          "report '" + (bad / "notjson.json").string() + "': invalid JSON");
  json edited = json::parse(text);
  edited["shard"]["cases"].push_back("x|greedy|default|f32");
  std::ofstream(bad / "edited.json") << edited.dump(2);
  refused(q(r.shards[0]) + " " + q(bad / "edited.json") + " " + q(r.shards[2]), "the file was edited after it was written");
  // an unsharded report, and a directory without a report
  refused(q(r.shards[0]) + " " + q(r.whole), "is not a shard report (it has no \"shard\" block)");
  refused(q(r.shards[0]) + " " + q(bad), "has no report.json");
  // Reports altered and written again with a valid digest (as a tool that rewrites reports would):
  // each difference is still named.
  auto altered = [&](const std::string& name, const std::function<void(AuditReport&)>& change) {
    AuditReport a = load_report((r.shards[1] / "report.json").string());
    change(a);
    fs::create_directories(bad / name);
    std::ofstream(bad / name / "report.json") << to_json(a);
    return q(r.shards[0]) + " " + q(bad / name) + " " + q(r.shards[2]);
  };
  refused(altered("interrupted", [](AuditReport& a) { a.summary.interrupted = true; }),
          "(shard 2/3) was interrupted before it finished; finish it with run --resume");
  refused(altered("tool", [](AuditReport& a) { a.environment["tool"]["version"] = "0.0.1"; }),
          "was written by repro-audit 0.0.1 (commit");
  refused(altered("model", [](AuditReport& a) { a.environment["model"]["sha256"] = std::string(64, 'a'); }),
          "ran the model with sha256 aaaaaaaaaaaa.. but");
  refused(altered("plan", [](AuditReport& a) { a.plan["repeats"] = 3; }),
          "its shard block's plan_sha256 ");
  refused(altered("cases", [](AuditReport& a) { a.shard->cases.pop_back(); }),
          "its assigned cases are not the ones the plan gives shard 2/3; lacking: ");
  refused(altered("index", [](AuditReport& a) { a.shard->index = 1; }), "shard 1/3 is given twice");
  refused(altered("count", [](AuditReport& a) { a.shard->count = 4; }), "the shard count differs");
  refused(altered("foreign", [](AuditReport& a) {
            a.completions.push_back(a.completions.front());
            a.completions.back().prompt_id = "p-0000000000";
          }),
          "holds completions of case 'p-0000000000|greedy|");
}

TEST_CASE("report merge --allow-partial: marked incomplete with the missing cases, never a pass; --sign-key signs "
          "the merged report as run does") {
  const Runs& r = runs();
  const fs::path out = r.root / "partial";
  auto m = cli("report merge -q " + q(r.shards[0]) + " " + q(r.shards[2]) + " --allow-partial --out " + q(out));
  CAPTURE(m.output);
  CHECK(m.code == 1);
  CHECK(m.output.find("warning: incomplete merge: 1 missing shard(s): 2") != std::string::npos);
  const json p = read_json(out / "report.json");
  CHECK(p["merge"]["complete"] == false);
  CHECK(p["merge"]["missing_shards"] == json::array({2}));
  const json s2 = read_json(r.shards[1] / "report.json");
  CHECK(p["merge"]["missing_cases"] == s2["shard"]["cases"]);
  CHECK(p["summary"]["verdict"] != "reproducible");
  CHECK((p["summary"]["verdict"] == "incomplete" || p["summary"]["verdict"] == "divergent"));
  CHECK(test::slurp(out / "report.junit.xml").find("type=\"incomplete\"") != std::string::npos);
  CHECK(test::slurp(out / "report.md").find("INCOMPLETE: 1 shard missing (2)") != std::string::npos);

  const fs::path key = r.root / "merge-key";
  fs::remove(key);
  fs::remove(r.root / "merge-key.pub");
  REQUIRE(test::run_cli("keygen --out " + q(key)).code == 0);
  const fs::path signed_dir = r.root / "signed";
  auto s = cli("report merge -q " + q(r.shards[0]) + " " + q(r.shards[1]) + " " + q(r.shards[2]) + " --sign-key " +
               q(key) + " --out " + q(signed_dir));
  CAPTURE(s.output);
  CHECK(s.code <= 1);
  CHECK(fs::exists(signed_dir / "report.intoto.jsonl"));
  auto v = test::run_cli("verify " + q(signed_dir) + " --pubkey " + q(r.root / "merge-key.pub"));
  CAPTURE(v.output);
  CHECK(v.code == 0);
}

TEST_CASE("a shard report resumes like any run: the interrupted shard continues with its own cases") {
  const Runs& r = runs();
  const fs::path dir = r.root / "resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // shard 3/3 as an interrupted run leaves it: a checkpoint with its first completions only
  AuditReport full = load_report((r.shards[2] / "report.json").string());
  REQUIRE(full.completions.size() > 2);
  AuditReport part = full;
  part.completions.resize(2);
  part.cases.clear();
  part.summary = Summary{};
  part.summary.interrupted = true;
  { std::ofstream(dir / "checkpoint.json") << to_json(part); }
  auto bad = cli("run -q --resume " + q(dir) + " --shard 1/3");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--shard gives \"1/3\" but the run used \"3/3\"") != std::string::npos);
  auto res = cli("run -q --resume " + q(dir));
  CAPTURE(res.output);
  REQUIRE(res.code <= 1);
  const json a = read_json(dir / "report.json"), b = read_json(r.shards[2] / "report.json");
  CHECK(a["shard"]["cases"] == b["shard"]["cases"]);
  CHECK(a["shard"]["index"] == 3);
  CHECK(analysis_of(a)["completions"] == analysis_of(b)["completions"]);
  // it merges like the shard it replaces
  auto m = cli("report merge -q " + q(r.shards[0]) + " " + q(r.shards[1]) + " " + q(dir) + " --out " +
               q(r.root / "merged-resumed"));
  CHECK(m.code <= 1);
  CHECK(analysis_of(read_json(r.root / "merged-resumed" / "report.json")) ==
        analysis_of(read_json(r.merged / "report.json")));
}

TEST_CASE("--shard auto from Slurm variables, and --replicate-shards: every case on every shard, the host a factor "
          "of the merged report") {
  const Runs& r = runs();
  std::vector<fs::path> dirs;
  for (int i = 0; i < 2; ++i) {
    dirs.push_back(r.root / ("rep" + std::to_string(i)));
    auto s = cli("run -q --prompt 'Once upon a time' --prompt 'The dog' --max-tokens 6 --repeats 1 --batch-sizes 1,3 "
                 "--positions first --filler-sets 1 --precisions f32 --shard auto --replicate-shards --out " + q(dirs.back()),
                 "SLURM_ARRAY_TASK_ID=" + std::to_string(i) + " SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_MIN=0 "
                 "SLURM_ARRAY_TASK_MAX=1 SLURM_ARRAY_JOB_ID=41");
    CAPTURE(s.output);
    REQUIRE(s.code <= 1);
    const json rep = read_json(dirs.back() / "report.json");
    CHECK(rep["shard"]["scheduler"] == "slurm");
    CHECK(rep["shard"]["index"] == i + 1);
    CHECK(rep["shard"]["replicate"] == true);
    CHECK(rep["shard"]["cases"].size() == 4);  // 2 prompts x greedy x 2 modes, all of them
    CHECK(rep["shard"]["source"] == "SLURM_ARRAY_TASK_ID=" + std::to_string(i) +
                                        " SLURM_ARRAY_TASK_COUNT=2 (job 41)");
  }
  const fs::path out = r.root / "rep-merged";
  auto m = cli("report merge " + q(dirs[1]) + " " + q(dirs[0]) + " --out " + q(out));
  CAPTURE(m.output);
  REQUIRE(m.code <= 1);
  const json merged = read_json(out / "report.json");
  CHECK(merged["merge"]["replicate"] == true);
  CHECK(merged["summary"]["cases"] == 4);
  const std::string host = merged["merge"]["shards"][0]["host"]["hostname"];
  CHECK(merged["merge"]["shards"][0]["host_label"] == host + "#1");
  REQUIRE(merged["merge"]["hosts"].size() == 1);
  const json& h = merged["merge"]["hosts"][0];
  CHECK(h["host"] == host + "#2");
  CHECK(h["cases"] == 4);
  // one machine, one binary, one thread: the two "hosts" agree bit for bit
  CHECK(h["identical"] == 4);
  CHECK(h["first_difference"] == "");
  CHECK(m.output.find("host " + host + "#2 against " + host + "#1: 4 of 4 cases bitwise identical") !=
        std::string::npos);
  // every completion carries its host; each case holds both hosts' completions and tabulates the host
  std::set<std::string> hosts;
  for (const auto& c : merged["completions"]) hosts.insert(c["host"].get<std::string>());
  CHECK(hosts == std::set<std::string>{host + "#1", host + "#2"});
  for (const auto& c : merged["cases"]) {
    CHECK(c["n"] == 4);  // 2 contexts (batch 1, batch 3 first) x 2 hosts
    bool has_host = false;
    for (const auto& f : c["factors"]) has_host = has_host || f["factor"] == "host";
    CHECK(has_host);
  }
}

TEST_CASE("every file of fuzz/corpus/shard replays through the fuzz entry without a crash") {
  const auto files = test::corpus_files("shard");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(fuzz::shard_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  CHECK(files.size() >= 8);
}

namespace {

std::string sh_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// A recipe file's YAML documents as JSON (python3's yaml), or null without python3-yaml.
json yaml_docs(const fs::path& p) {
  auto r = test::run_shell("python3 -c 'import sys, json, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))' " +
                           q(p) + " 2>/dev/null");
  if (r.code != 0) return nullptr;
  return json::parse(r.output);
}

// The merged report of a recipe: complete, every shard 1..n once, each from `source(k)`.
void check_merged(const fs::path& report, int n, const std::function<std::string(int)>& source) {
  REQUIRE(fs::exists(report));
  const json m = read_json(report);
  CHECK(m["merge"]["complete"] == true);
  CHECK(m["merge"]["count"] == n);
  REQUIRE(m["merge"]["shards"].size() == static_cast<size_t>(n));
  for (int k = 1; k <= n; ++k) {
    CHECK(m["merge"]["shards"][k - 1]["index"] == k);
    CHECK(m["merge"]["shards"][k - 1]["source"] == source(k));
  }
}

}  // namespace

TEST_CASE("the Kubernetes, GitHub Actions and GitLab recipes run as their schedulers would run them") {
  if (yaml_docs(fs::path(REPRO_SOURCE_DIR) / "docs" / "recipes" / "gitlab-ci.yml").is_null()) {
    MESSAGE("SKIPPED: python3 with the yaml module (Debian python3-yaml, scripts/deps.sh --test) reads the recipes");
    return;
  }
  const fs::path recipes = fs::path(REPRO_SOURCE_DIR) / "docs" / "recipes";
  const fs::path root = test::scratch_dir("shard-recipes");
  // `repro-audit` on the PATH, as in the recipes' images and runners
  fs::create_directories(root / "bin");
  fs::create_symlink(test::binary(), root / "bin" / "repro-audit");
  const std::string path = "PATH=" + sh_quote((root / "bin").string()) + ":\"$PATH\" ";
  // errexit: GitHub Actions (bash -e) and GitLab run their scripts so; a Kubernetes container's
  // `/bin/sh -c` does not.
  auto run_in = [&](const fs::path& dir, const std::string& env, const std::string& script, bool errexit = true) {
    fs::create_directories(dir);
    return test::run_shell("cd " + q(dir) + " && " + kNoShardEnv + env + " " + path + "sh " +
                           (errexit ? "-e " : "") + "-c " + sh_quote(script));
  };

  SUBCASE("Kubernetes Indexed Job and merge Job") {
    const json docs = yaml_docs(recipes / "kubernetes-indexed-job.yaml");
    const json merge_docs = yaml_docs(recipes / "kubernetes-merge-job.yaml");
    json job;
    for (const auto& d : docs)
      if (d["kind"] == "Job") job = d;
    REQUIRE(job.is_object());
    CHECK(job["spec"]["completionMode"] == "Indexed");
    const int n = job["spec"]["completions"];
    const auto& c = job["spec"]["template"]["spec"]["containers"][0];
    CHECK(c["command"] == json::array({"/bin/sh", "-c"}));
    const std::string script = replace_all(c["args"][0], "/audit", (root / "k8s").string());
    CHECK(script.find("--shard-count " + std::to_string(n)) != std::string::npos);  // the count the Job does not export
    for (int i = 0; i < n; ++i) {
      auto r = run_in(root / "k8s", "JOB_COMPLETION_INDEX=" + std::to_string(i), script, false);
      CAPTURE(r.output);
      CHECK(r.code == 0);
    }
    // a replaced pod with the same index resumes its shard (finished: left as it is)
    const std::string before = test::slurp(root / "k8s" / "shard-0" / "report.json");
    auto again = run_in(root / "k8s", "JOB_COMPLETION_INDEX=0", script, false);
    CHECK(again.code == 0);
    CHECK(again.output.find("nothing to resume") != std::string::npos);
    CHECK(test::slurp(root / "k8s" / "shard-0" / "report.json") == before);
    const auto& mc = merge_docs[0]["spec"]["template"]["spec"]["containers"][0];
    auto m = run_in(root / "k8s", "", replace_all(mc["args"][0], "/audit", (root / "k8s").string()), false);
    CAPTURE(m.output);
    CHECK(m.code == 0);
    check_merged(root / "k8s" / "merged" / "report.json", n, [n](int k) {
      return "JOB_COMPLETION_INDEX=" + std::to_string(k - 1) + " --shard-count " + std::to_string(n);
    });
  }
  SUBCASE("GitHub Actions matrix and merge job") {
    const json wf = yaml_docs(recipes / "github-actions.yml")[0];
    const json& audit = wf["jobs"]["audit"];
    const json shards = audit["strategy"]["matrix"]["shard"];
    const int n = static_cast<int>(shards.size());
    std::string step;
    for (const auto& s : audit["steps"])
      if (s.value("name", "") == "Audit one shard") step = s["run"];
    REQUIRE(!step.empty());
    CHECK(wf["jobs"]["merge"]["needs"] == "audit");
    for (const auto& k : shards) {
      std::string script = replace_all(step, "${{ matrix.shard }}", std::to_string(k.get<int>()));
      script = replace_all(script, "${{ strategy.job-total }}", std::to_string(n));
      script = replace_all(script, "build/repro-audit", "repro-audit");
      auto r = run_in(root / "gh" / "job", "", script);
      CAPTURE(r.output);
      CHECK(r.code == 0);
      // actions/download-artifact with a pattern: each artifact in shards/<its name>/
      fs::create_directories(root / "gh" / "merge" / "shards");
      fs::copy(root / "gh" / "job" / ("shard-" + std::to_string(k.get<int>())),
               root / "gh" / "merge" / "shards" / ("shard-" + std::to_string(k.get<int>())), fs::copy_options::recursive);
    }
    std::string merge_step;
    for (const auto& s : wf["jobs"]["merge"]["steps"])
      if (s.contains("run") && s["run"].get<std::string>().find("report merge") != std::string::npos) merge_step = s["run"];
    auto m = run_in(root / "gh" / "merge", "", replace_all(merge_step, "build/repro-audit", "repro-audit"));
    CAPTURE(m.output);
    CHECK(m.code == 0);
    check_merged(root / "gh" / "merge" / "merged" / "report.json", n,
                 [n](int k) { return "--shard " + std::to_string(k) + "/" + std::to_string(n); });
  }
  SUBCASE("GitLab parallel: job and merge job") {
    const json ci = yaml_docs(recipes / "gitlab-ci.yml")[0];
    const int n = ci["audit"]["parallel"];
    CHECK(ci["merge"]["needs"] == json::array({"audit"}));
    std::string script, merge;
    for (const auto& l : ci["audit"]["script"]) script += l.get<std::string>() + "\n";
    for (const auto& l : ci["merge"]["script"]) merge += l.get<std::string>() + "\n";
    for (int k = 1; k <= n; ++k) {
      auto r = run_in(root / "gl", "CI_NODE_INDEX=" + std::to_string(k) + " CI_NODE_TOTAL=" + std::to_string(n), script);
      CAPTURE(r.output);
      CHECK(r.code == 0);
    }
    // the same job without `parallel:` fails (repro-audit exit 2) instead of running the whole plan
    auto lone = run_in(root / "gl-lone", "CI_NODE_TOTAL=1", script);
    CHECK(lone.code != 0);
    CHECK(!fs::exists(root / "gl-lone" / "shards"));
    CHECK(lone.output.find("the GitLab job is not parallel") != std::string::npos);
    auto m = run_in(root / "gl", "", merge);
    CAPTURE(m.output);
    CHECK(m.code == 0);
    check_merged(root / "gl" / "merged" / "report.json", n, [n](int k) {
      return "CI_NODE_INDEX=" + std::to_string(k) + " CI_NODE_TOTAL=" + std::to_string(n);
    });
  }
}

TEST_CASE("endpoints: shards of a remote plan (cases by endpoint label) merge into the unsharded run's cases, "
          "request statistics summed") {
  auto model = load_model(default_model_path());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 16;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  const fs::path root = test::scratch_dir("shard-remote");
  const std::string plan = "--endpoint a=" + server.url() + " --endpoint b=" + server.url() + " --api-model " +
                           server.model_name() +
                           " --prompt 'Once upon a time' --prompt 'The dog' --prompt 'Lily saw a bird' --max-tokens 6 "
                           "--repeats 2 --concurrency 1,2";
  auto whole = cli("run -q " + plan + " --out " + q(root / "whole"));
  INFO(whole.output);
  REQUIRE(whole.code == 0);
  std::string dirs;
  std::set<std::string> ids;
  for (int k = 1; k <= 3; ++k) {
    const fs::path d = root / ("s" + std::to_string(k));
    auto s = cli("run -q " + plan + " --shard " + std::to_string(k) + "/3 --out " + q(d));
    INFO(s.output);
    REQUIRE(s.code == 0);
    dirs += " " + q(d);
    const json rep = read_json(d / "report.json");
    for (const auto& c : rep["shard"]["cases"]) {
      const std::string id = c;
      CHECK(id.substr(id.size() - 3).find("|") != std::string::npos);  // "...|a|": an endpoint, no precision
      CHECK(ids.insert(id).second);
    }
  }
  CHECK(ids.size() == 6);  // 3 prompts x greedy x 2 endpoints
  auto m = cli("report merge -q" + dirs + " --out " + q(root / "merged"));
  INFO(m.output);
  CHECK(m.code == 0);
  server.stop();
  const json w = read_json(root / "whole" / "report.json"), mg = read_json(root / "merged" / "report.json");
  auto cases = [](const json& r) {
    json out = json::array();
    for (const auto& c : r["cases"]) {
      json hashes = json::array();
      for (const auto& k : c["clusters"]) hashes.push_back({k["hash"], k["count"]});
      out.push_back({c["prompt_id"], c["decoding"], c["mode"], c["n"], c["divergent"], hashes});
    }
    return out;
  };
  CHECK(cases(mg) == cases(w));
  CHECK(mg["summary"]["verdict"] == w["summary"]["verdict"]);
  for (const char* label : {"a", "b"}) {
    int64_t sum = 0;
    for (int k = 1; k <= 3; ++k) {
      const json s = read_json(root / ("s" + std::to_string(k)) / "report.json");
      if (s["environment"]["remote_stats"].contains(label)) sum += s["environment"]["remote_stats"][label]["requests"].get<int64_t>();
    }
    CHECK(mg["environment"]["remote_stats"][label]["requests"] == sum);
  }
}
