// ctest-labels: model
// Prompt variants: the prompts file's {"task", "variant"} records (errors name the file and line), and a
// run of the shipped contract-extraction example (three variants) on the embedded default model
// (stories260K) whose report compares the variants in every format.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include "repro/audit/plan.hpp"
#include "repro/common/error.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

const fs::path kExample = fs::path(REPRO_SOURCE_DIR) / "docs" / "examples" / "contract-extraction.jsonl";

fs::path write_prompts(const std::string& name, const std::string& text) {
  auto dir = test::scratch_dir("variants-" + name);
  fs::path p = dir / "prompts.jsonl";
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const fs::path& p) {
  try {
    prompts_from_file(p.string());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the example prompts file holds one task in three variants") {
  auto prompts = prompts_from_file(kExample.string());
  REQUIRE(prompts.size() == 3);
  CHECK(prompts[0].task == "contract-extraction");
  CHECK(prompts[0].variant == "free-form");
  CHECK(prompts[1].variant == "structured");
  CHECK(prompts[2].variant == "structured-few-shot");
  CHECK(prompts[0].id == "contract-extraction/free-form");  // no id given: task/variant
  // the structured variants carry the deterministic structure; the last adds examples and negative instructions
  for (int i : {1, 2}) {
    CHECK(prompts[i].text.find("Output format:") != std::string::npos);
    CHECK(prompts[i].text.find("N/A") != std::string::npos);
    CHECK(prompts[i].text.find("no commentary") != std::string::npos);
  }
  CHECK(prompts[2].text.find("Example answer:") != std::string::npos);
  CHECK(prompts[2].text.find("Do not") != std::string::npos);
  CHECK(prompts[0].text.find("Output format:") == std::string::npos);
}

TEST_CASE("variant records: plain prompts mix with variants; ids may be given") {
  auto p = write_prompts("mixed", "{\"prompt\": \"Once upon a time\"}\n"
                                  "{\"id\": \"a1\", \"task\": \"t\", \"variant\": \"v1\", \"prompt\": \"Lily wanted to\"}\n"
                                  "{\"task\": \"t\", \"variant\": \"v2\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n");
  auto prompts = prompts_from_file(p.string());
  REQUIRE(prompts.size() == 3);
  CHECK(prompts[0].task.empty());
  CHECK(prompts[1].id == "a1");
  CHECK(prompts[1].task == "t");
  CHECK(prompts[2].id == "t/v2");
  CHECK(prompts[2].variant == "v2");
}

TEST_CASE("bad variant records are errors naming the file and line") {
  auto p = write_prompts("no-task", "{\"prompt\": \"a\"}\n{\"variant\": \"v\", \"prompt\": \"b\"}\n");
  CHECK(error_of(p) == "prompts file '" + p.string() +
                           "' line 2: \"variant\" without \"task\"; name the task this prompt is a variant of, e.g. "
                           "{\"task\": \"contract-extraction\", \"variant\": \"free-form\", \"prompt\": ...}");
  p = write_prompts("dup", "{\"task\": \"t\", \"variant\": \"v\", \"prompt\": \"a\"}\n\n"
                           "{\"task\": \"t\", \"variant\": \"v\", \"prompt\": \"b\"}\n");
  CHECK(error_of(p) == "prompts file '" + p.string() +
                           "' line 3: task 't' variant 'v' already appears on line 1; give each variant of a task its "
                           "own name");
  p = write_prompts("no-variant", "{\"task\": \"t\", \"prompt\": \"a\"}\n");
  CHECK(error_of(p) == "prompts file '" + p.string() +
                           "' line 1: \"task\" without \"variant\"; name this variant of the task, e.g. \"variant\": "
                           "\"structured\"");
  p = write_prompts("empty", "{\"task\": \"t\", \"variant\": \"\", \"prompt\": \"a\"}\n");
  CHECK(error_of(p) == "prompts file '" + p.string() + "' line 1: \"variant\" must be a non-empty string");
  p = write_prompts("type", "{\"task\": 3, \"variant\": \"v\", \"prompt\": \"a\"}\n");
  CHECK(error_of(p) == "prompts file '" + p.string() + "' line 1: \"task\" must be a non-empty string");
  // the CLI: exit 2 and the same message
  p = write_prompts("cli", "{\"variant\": \"v\", \"prompt\": \"b\"}\n");
  auto dir = p.parent_path();
  auto res = test::run_cli("run --prompts '" + p.string() + "' --out '" + (dir / "out").string() + "'");
  CHECK(res.code == 2);
  CHECK(res.output.find("error: prompts file '" + p.string() + "' line 1: \"variant\" without \"task\"") !=
        std::string::npos);
}

TEST_CASE("run with the contract-extraction example: per-variant and per-task table in every format") {
  auto dir = test::scratch_dir("variants-run");
  const std::string cmd = "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' '" + test::binary() +
                          "' run --prompts '" + kExample.string() +
                          "' --modes default,batch-invariant --precisions f32 --batch-sizes 1,4 --repeats 2"
                          " --max-tokens 12 --answer-regex 'governing_law: *([^\\n]*)' --format json,md,html,junit"
                          " --out '" + (dir / "out").string() + "'";
  auto res = test::run_shell(cmd);
  CAPTURE(res.output);
  REQUIRE((res.code == 0 || res.code == 1));
  AuditReport r = load_report((dir / "out" / "report.json").string());
  REQUIRE(r.prompt_variants.size() == 3);
  REQUIRE(r.variants.size() == 1);
  const TaskVariants& t = r.variants[0];
  CHECK(t.task == "contract-extraction");
  REQUIRE(t.variants.size() == 3);
  CHECK(t.variants[0].variant == "free-form");
  CHECK(t.variants[2].variant == "structured-few-shot");
  // Each variant's figures are its cases' (two modes x greedy), recounted here from the cases.
  int total_cases = 0, total_tarr = 0, total_compared = 0;
  std::vector<int> ranks;
  for (const auto& v : t.variants) {
    CAPTURE(v.variant);
    int cases = 0, tarr = 0, tara = 0, compared = 0, token = 0;
    for (const auto& c : r.cases)
      if (c.prompt_id == v.prompt_id) {
        ++cases;
        tarr += c.tarr ? 1 : 0;
        tara += c.tara && *c.tara ? 1 : 0;
        compared += c.drift_size.compared;
        token += c.drift_size.token_differ;
      }
    CHECK(cases == 2);
    CHECK(v.cases == cases);
    CHECK(v.tarr.k == tarr);
    CHECK(v.tarr.n == cases);
    CHECK(v.tarr.lo <= v.tarr.hi);
    REQUIRE(v.tara.has_value());
    CHECK(v.tara->k == tara);
    CHECK(v.token_differ.k == token);
    CHECK(v.token_differ.n == compared);
    CHECK(compared > 0);
    ranks.push_back(v.rank);
    total_cases += cases;
    total_tarr += tarr;
    total_compared += compared;
  }
  std::sort(ranks.begin(), ranks.end());
  CHECK(ranks == std::vector<int>{1, 2, 3});
  CHECK(t.overall.cases == total_cases);
  CHECK(t.overall.tarr.k == total_tarr);
  CHECK(t.overall.token_differ.n == total_compared);
  CHECK(t.finding.rfind("task 'contract-extraction': ", 0) == 0);
  if (!t.best.empty()) {
    CHECK(t.finding.find("most reproducible variant '" + t.best + "'") != std::string::npos);
    CHECK(t.finding.find(t.significant ? "significant: its 95% interval is disjoint" : "not significant") !=
          std::string::npos);
  } else {
    CHECK(t.finding.find("equally reproducible") != std::string::npos);
  }

  // Markdown, HTML and the terminal summary carry the table and the finding; JSON round-trips.
  const std::string md = test::slurp(dir / "out" / "report.md"), html = test::slurp(dir / "out" / "report.html");
  CHECK(md.find("## Prompt variants") != std::string::npos);
  CHECK(html.find("<table id=\"variants\">") != std::string::npos);
  CHECK(res.output.find("prompt variants:") != std::string::npos);
  for (const std::string v : {"free-form", "structured", "structured-few-shot", "(all variants)"}) {
    CHECK(md.find("| contract-extraction | " + v + " |") != std::string::npos);
    CHECK(html.find("<td>contract-extraction</td><td class=\"n\">" + v + "</td>") != std::string::npos);
    CHECK(res.output.find(v) != std::string::npos);
  }
  CHECK(md.find("- **Finding:** task 'contract-extraction': ") != std::string::npos);
  CHECK(res.output.find("finding: task 'contract-extraction': ") != std::string::npos);
  auto j = nlohmann::json::parse(test::slurp(dir / "out" / "report.json"));
  CHECK(j["variants"][0]["variants"].size() == 3);
  CHECK(j["variants"][0]["overall"]["cases"] == total_cases);
  CHECK(j["prompt_variants"][1]["variant"] == "structured");
}
