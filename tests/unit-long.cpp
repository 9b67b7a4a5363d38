// The `long` profile: generated long prompts, a batch mate whose prefill joins the decode of the
// others and whose prompt length changes by one token, and the switch to a synthesized
// long-context model when the chosen model's context is too short.
// ctest-labels: unit model
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "repro/audit/analysis.hpp"
#include "repro/audit/batch_context.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/model/synth.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
// synth:long written into a scratch cache once per test binary.
const Model& long_model() {
  static std::unique_ptr<Model> m = [] {
    auto dir = test::scratch_dir("long-model");
    const SynthSpec& sp = find_synth_spec("synth:long");
    const std::string path = (dir / sp.file).string();
    write_synth_model(sp.options, path);
    return load_model(path);
  }();
  return *m;
}
}  // namespace

TEST_CASE("long profile: the built-in profile crosses split-KV, mixes prefill with decode, names a long model") {
  PlanOptions plan;
  apply_profile(find_profile("long"), plan);
  // the default mode's attention splits the KV axis at 256+ positions (kernels/attention/default.cpp)
  CHECK(plan.prompt_tokens >= 2000);
  CHECK(std::count(plan.mate_join_steps.begin(), plan.mate_join_steps.end(), 0) == 1);
  CHECK(plan.mate_join_steps.size() >= 2);  // a batch mate joining later: its prefill beside the decode
  CHECK(plan.mate_prompt_deltas == std::vector<int>{0, 1});
  CHECK(is_synth_spec(plan.long_context_model));
  CHECK(find_synth_spec(plan.long_context_model).options.context_length >= plan.prompt_tokens + plan.max_tokens + 16);
  CHECK(plan.prompts.empty());  // generated with the model's tokenizer
  // with two heads and four threads, a decode row alone is fewer (row, head) items than threads,
  // the condition under which default attention splits the KV axis
  CHECK(find_synth_spec(plan.long_context_model).options.n_heads < plan.threads);
}

TEST_CASE("long prompts: generated from a seed, at least the asked tokens, the same every time") {
  const Model& m = long_model();
  auto a = generated_prompts(2, 700, *m.tokenizer);
  auto b = generated_prompts(2, 700, *m.tokenizer);
  REQUIRE(a.size() == 2);
  CHECK(a[0].text == b[0].text);
  CHECK(a[1].text == b[1].text);
  CHECK(a[0].text != a[1].text);
  CHECK(a[0].text.rfind("Once upon a time", 0) == 0);
  for (const auto& p : a) {
    const size_t n = m.tokenizer->encode(p.text, true).size();
    CHECK(n >= 700);
    CHECK(n < 760);  // the shortest whole-sentence prefix that reaches the length
  }
  CHECK(story_text(5, 3) == story_text(5, 3));
  CHECK(story_text(5, 10).rfind(story_text(5, 3), 0) == 0);  // more sentences extend the same story
  auto ids = story_tokens(9, 300, *m.tokenizer);
  CHECK(ids.size() == 300);
  CHECK(ids[0] == m.tokenizer->bos());
}

TEST_CASE("long contexts: context cells, the late batch mate, and the factor tables") {
  PlanOptions plan;
  plan.batch_sizes = {1, 3};
  plan.positions = {"first"};
  plan.filler_sets = 1;
  plan.mate_join_steps = {0, 3};
  plan.mate_prompt_deltas = {0, 1};
  auto cells = context_cells(plan);
  REQUIRE(cells.size() == 1 + 4);  // batch 1 has no batch mates
  CHECK(cells[0].mate_join_step == 0);
  CHECK(cells[0].mate_prompt_delta == 0);

  // a reduced long run on the synthesized long-context model: 600-token prompts (past the 256
  // positions where default attention splits KV), a batch mate joining after 3 steps, +0/+1 tokens
  const Model& m = long_model();
  plan.prompts = generated_prompts(1, 600, *m.tokenizer);
  plan.prompt_tokens = 600;
  plan.max_tokens = 8;
  plan.repeats = 1;
  plan.precisions = {"bf16"};
  plan.threads = 2;
  AuditReport r;
  RunControl ctl;
  run_local(plan, m, r, ctl);
  analyze(r);
  REQUIRE(r.completions.size() == 2 * 5);
  int late = 0, longer = 0;
  for (const auto& c : r.completions) {
    late += c.mate_join_step == 3;
    longer += c.mate_prompt_delta == 1;
    CHECK(c.prompt_tokens >= 600);
  }
  CHECK(late == 2 * 2);
  CHECK(longer == 2 * 2);
  REQUIRE(r.summary.modes.size() == 2);
  for (const auto& ms : r.summary.modes) {
    CAPTURE(ms.mode);
    std::vector<std::string> names;
    for (const auto& f : ms.drift_size.factors) names.push_back(f.factor);
    // the batch mate's prompt length and join step are factors, like batch size
    CHECK(std::find(names.begin(), names.end(), "batch_size") != names.end());
    CHECK(std::find(names.begin(), names.end(), "mate_join_step") != names.end());
    CHECK(std::find(names.begin(), names.end(), "mate_prompt_delta") != names.end());
    if (ms.mode == "batch-invariant") {
      CHECK(ms.drift_size.bit_differ.n == 4);
      CHECK(ms.drift_size.bit_differ.k == 0);  // bitwise invariant with long and mixed contexts too
      CHECK(ms.drift_size.token_differ.k == 0);
    }
    MESSAGE("reduced long run: " << ms.drift_size.finding);
  }
  for (const auto& cr : r.cases) {
    std::vector<std::string> names;
    for (const auto& f : cr.factors) names.push_back(f.factor);
    CHECK(std::find(names.begin(), names.end(), "mate_prompt_delta") != names.end());
  }
  const std::string md = to_markdown(r);
  CHECK(md.find("by mate\\_prompt\\_delta") != std::string::npos);
  // the repro command carries the batch mate's settings
  auto back = from_json(to_json(r), "mem.json");
  int j3 = 0;
  for (const auto& c : back.completions) j3 += c.mate_join_step == 3;
  CHECK(j3 == late);
}

TEST_CASE("long profile on the command line: a model with a short context switches to synth:long and says so") {
  REPRO_REQUIRE_MODELS(models);
  auto dir = test::scratch_dir("long-cli");
  const std::string env = "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' ";
  // stories260K.bin declares its training context, 512 tokens: too short for 600-token prompts
  auto res = test::run_shell(env + "'" + test::binary() + "' run --profile long --model '" +
                             (models / "stories260K.bin").string() +
                             "' --prompt-tokens 600 --generated-prompts 1 --batch-sizes 1,2 --max-tokens 6 "
                             "--precisions bf16 --threads 2 --format json,md --out '" + (dir / "out").string() + "'");
  INFO(res.output);
  CHECK(res.code == 0);
  CHECK(res.output.find("note: switched to a synthesized long-context model: ") != std::string::npos);
  CHECK(res.output.find("has a context of 512 tokens, this plan needs") != std::string::npos);
  CHECK(res.output.find("so it ran on synth:long (context 4096 tokens") != std::string::npos);
  auto j = nlohmann::json::parse(test::slurp(dir / "out" / "report.json"));
  const auto& model = j["environment"]["model"];
  CHECK(model["switched_from"]["to"] == "synth:long");
  CHECK(model["switched_from"]["context_length"] == 512);
  CHECK(model["path"].get<std::string>().find("synth-long") != std::string::npos);
  CHECK(test::slurp(dir / "out" / "report.md").find("Note: switched to a synthesized long-context model") !=
        std::string::npos);
  // a model with room for the plan runs as chosen, without a note
  auto res2 = test::run_shell(env + "'" + test::binary() + "' run --profile long --model '" +
                              (models / "stories260K.gguf").string() +
                              "' --prompt-tokens 300 --generated-prompts 1 --batch-sizes 1 --max-tokens 4 "
                              "--precisions f32 --threads 1 --modes batch-invariant --format json --out '" +
                              (dir / "out2").string() + "'");
  INFO(res2.output);
  CHECK(res2.code == 0);
  CHECK(res2.output.find("switched") == std::string::npos);
  // an unknown synthesized model name lists the known ones
  auto bad = test::run_shell(env + "'" + test::binary() + "' generate --model synth:nope --max-tokens 2");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("unknown synthesized model; the names are synth:100m, synth:100m-long, synth:long") !=
        std::string::npos);
}
