// Plan expansion, profiles and prompt sources.
#include <doctest/doctest.h>

#include <fstream>

#include "repro/common/error.hpp"
#include "repro/audit/plan.hpp"
#include "test_util.hpp"

using namespace repro;

static std::string write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p) << s;
  return p.string();
}

TEST_CASE("every built-in profile is valid and quick is the default") {
  auto names = builtin_profile_names();
  for (const char* n : {"quick", "ci", "batch-sweep", "sampling", "compliance"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  for (const auto& n : names) {
    PlanOptions o;
    CHECK_NOTHROW(apply_profile(find_profile(n), o));
    o.prompts = builtin_prompts();
    CHECK_NOTHROW(validate_plan(o, 512));
  }
  PlanOptions def;
  CHECK(def.profile == "quick");
}

TEST_CASE("profiles: unknown keys and bad values name the file, the key and the allowed values") {
  auto dir = test::scratch_dir("plan-profiles");
  PlanOptions o;
  auto bad_key = write(dir / "a.json", R"({"repeat": 3})");
  CHECK_THROWS_WITH_AS(apply_profile(find_profile(bad_key), o),
                       doctest::Contains(("profile '" + bad_key + "': unknown key \"repeat\"; allowed keys are").c_str()), UsageError);
  auto bad_mode = write(dir / "b.json", R"({"modes": ["fast"]})");
  CHECK_THROWS_WITH_AS(apply_profile(find_profile(bad_mode), o),
                       doctest::Contains("key \"modes\" allows default, batch-invariant"), UsageError);
  auto bad_n = write(dir / "c.json", R"({"repeats": 0})");
  CHECK_THROWS_WITH_AS(apply_profile(find_profile(bad_n), o), doctest::Contains("\"repeats\" must be an integer from 1"),
                       UsageError);
  auto bad_json = write(dir / "d.json", "{");
  CHECK_THROWS_WITH_AS(apply_profile(find_profile(bad_json), o), doctest::Contains("invalid JSON"), UsageError);
  auto bad_thr = write(dir / "e.json", R"({"thresholds": {"max_div": 1}})");
  CHECK_THROWS_WITH_AS(apply_profile(find_profile(bad_thr), o), doctest::Contains("\"thresholds.max_div\""), UsageError);
  CHECK_THROWS_WITH_AS(find_profile("nosuch"), doctest::Contains("built-in profiles are"), UsageError);
  CHECK_THROWS_AS(find_profile((dir / "missing.json").string()), UsageError);
}

TEST_CASE("plan expansion: decoding configs and batch contexts") {
  PlanOptions o;
  o.temperatures = {0, 0.8};
  o.top_ps = {0.95};
  o.top_ks = {0, 40};
  o.seeds = {1, 2};
  auto d = decoding_cells(o);
  REQUIRE(d.size() == 1 + 2 * 2);
  CHECK(d[0].cfg.id == "greedy");
  CHECK(d[1].cfg.id == "t0.8-p0.95-s1");
  CHECK(d[2].cfg.id == "t0.8-p0.95-s2");
  CHECK(d[3].cfg.id == "t0.8-p0.95-k40-s1");
  CHECK(d[4].seed == 2);

  o.batch_sizes = {8, 1, 3, 8};
  o.positions = {"first", "last", "middle", "5"};
  o.filler_sets = 2;
  auto c = context_cells(o);
  // batch 1: one context; batch 3: positions {0,1,2} x 2 sets; batch 8: {0,4,5,7} x 2 sets
  CHECK(c.size() == 1 + 3 * 2 + 4 * 2);
  CHECK(c[0].batch_size == 1);
  CHECK(c[0].position == 0);
  CHECK(c.back().batch_size == 8);
  CHECK(c.back().position == 7);
  CHECK(c.back().filler_set == 1);
}

TEST_CASE("validate_plan: the errors name the flag and the fix") {
  PlanOptions o;
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("no prompts"), UsageError);
  o.prompts = builtin_prompts();
  o.repeats = 0;
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--repeats must be at least 1"), UsageError);
  o.repeats = 1;
  o.modes = {"turbo"};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--modes: unknown mode 'turbo'"), UsageError);
  o.modes = {"default"};
  o.batch_sizes = {2048};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--batch-sizes"), UsageError);
  o.batch_sizes = {1};
  o.max_tokens = 600;
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("context length 512"), UsageError);
}

TEST_CASE("prompt sources: text, JSONL, chat messages, Batch API; stable ids; errors name the line") {
  auto dir = test::scratch_dir("plan-prompts");
  auto txt = prompts_from_file(write(dir / "p.txt", "alpha\n\nbeta\r\n"));
  REQUIRE(txt.size() == 2);
  CHECK(txt[0].text == "alpha");
  CHECK(txt[1].text == "beta");
  CHECK(txt[0].id == prompt_id_for("alpha"));
  CHECK(prompt_id_for("alpha") == prompt_from_text("alpha").id);  // stable
  auto jl = prompts_from_file(write(dir / "p.jsonl",
                                    "{\"id\": \"q1\", \"prompt\": \"Hi\"}\n"
                                    "{\"id\": 7, \"messages\": [{\"role\": \"system\", \"content\": \"S\"}, "
                                    "{\"role\": \"user\", \"content\": \"U\"}]}\n"
                                    "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
                                    "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"Only\"}]}}\n"));
  REQUIRE(jl.size() == 3);
  CHECK(jl[0].id == "q1");
  CHECK(jl[1].id == "7");
  CHECK(jl[1].text == "system: S\nuser: U\nassistant:");
  CHECK(jl[2].id == "r1");
  CHECK(jl[2].text == "Only");
  auto bad = write(dir / "bad.jsonl", "{\"prompt\": \"ok\"}\n{nope\n");
  CHECK_THROWS_WITH_AS(prompts_from_file(bad), doctest::Contains("line 2: invalid JSON"), UsageError);
  auto nofield = write(dir / "nofield.jsonl", "{\"text\": \"x\"}\n");
  CHECK_THROWS_WITH_AS(prompts_from_file(nofield), doctest::Contains("needs a \"prompt\" string or a \"messages\" array"),
                       UsageError);
  auto dup = write(dir / "dup.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}\n");
  CHECK_THROWS_WITH_AS(prompts_from_file(dup), doctest::Contains("duplicate prompt id 'a'"), UsageError);
  auto empty = write(dir / "empty.txt", "\n\n");
  CHECK_THROWS_WITH_AS(prompts_from_file(empty), doctest::Contains("holds no prompts"), UsageError);
  CHECK_THROWS_AS(prompts_from_file((dir / "none.txt").string()), UsageError);
}
