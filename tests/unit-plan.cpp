// Plan expansion, profiles and prompt sources.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/plan_options.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;

static std::string write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p) << s;
  return p.string();
}

TEST_CASE("every built-in profile is valid and quick is the default") {
  auto names = builtin_profile_names();
  for (const char* n : {"quick", "demo", "ci", "batch-sweep", "sampling", "long", "compliance", "tradeoff"})
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
                       doctest::Contains("key \"modes\" must be default, batch-invariant, deterministic or tp-invariant (got 'fast')"), UsageError);
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
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--repeats must be an integer from 1 to 1000000 (got 0)"), UsageError);
  o.repeats = 1;
  o.modes = {"turbo"};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--modes must be default, batch-invariant, deterministic or tp-invariant (got 'turbo')"), UsageError);
  o.modes = {"default"};
  o.batch_sizes = {2048};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--batch-sizes"), UsageError);
  o.batch_sizes = {1};
  o.max_tokens = 600;
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("context length 512"), UsageError);
}

TEST_CASE("validate_plan: a position no batch can hold is refused, never replaced by position 0") {
  PlanOptions o;
  o.prompts = builtin_prompts();
  o.batch_sizes = {4};
  o.positions = {"7"};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512),
                       "--positions 7: no batch of --batch-sizes 4 has position 7 (the largest, 4, has positions 0 to "
                       "3); give a position below 4, or first, middle or last, or a batch size above 7",
                       UsageError);
  o.positions = {"first", "7"};  // first fits, 7 fits no batch at all
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--positions 7: no batch of --batch-sizes 4"), UsageError);
  // 7 fits batch 16, but batch 4 would hold none of the positions
  o.batch_sizes = {1, 4, 16};
  o.positions = {"7"};
  CHECK_THROWS_WITH_AS(validate_plan(o, 512),
                       "--positions 7: batch size 4 of --batch-sizes 1,4,16 has none of these positions (it has 0 to "
                       "3); add first, middle or last to --positions, or drop 4 from --batch-sizes",
                       UsageError);
  // A sweep where 7 fits some batch sizes: the others run at their other positions, and say so.
  o.positions = {"first", "7"};
  CHECK_NOTHROW(validate_plan(o, 512));
  auto skipped = skipped_positions(o);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].batch_size == 4);
  CHECK(skipped[0].positions == std::vector<int>{7});
  for (const auto& c : context_cells(o)) CHECK(c.position < c.batch_size);
  // Batch size 1 runs the prompt alone whatever the positions (it is not a skipped position).
  o.batch_sizes = {1, 8};
  CHECK_NOTHROW(validate_plan(o, 512));
  CHECK(skipped_positions(o).empty());
  CHECK(context_cells(o).front().position == 0);

  // The CLI refuses it with exit 2 before loading anything; a sweep that skips says so and records it.
  auto dir = test::scratch_dir("plan-positions");
  const std::string cli = "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' '" + test::binary() + "' ";
  auto r = test::run_shell(cli + "run -q --positions 7 --batch-sizes 4 --max-tokens 2 --out '" + (dir / "o").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --positions 7: no batch of --batch-sizes 4 has position 7") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "o" / "report.json"));
  r = test::run_shell(cli + "run -q -n 1 --prompt hi --positions first,3 --batch-sizes 2,4 --max-tokens 2 --format json --out '" +
                    (dir / "s").string() + "'");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("note: --positions 3: batch size 2 has positions 0 to 1 only; it runs at the others") !=
        std::string::npos);
  auto doc = nlohmann::json::parse(test::slurp(dir / "s" / "report.json"));
  CHECK(doc["plan"]["positions_skipped"] == nlohmann::json::parse(R"([{"batch_size": 2, "positions": [3]}])"));
  for (const auto& c : doc["completions"]) CHECK(c["position"].get<int>() < c["batch_size"].get<int>());
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

namespace {
// A valid value different from the default, for every option of the table. A row added to the
// table without an entry here fails the round-trip test below.
const std::map<std::string, nlohmann::json>& non_defaults() {
  static const std::map<std::string, nlohmann::json> v = {
      {"max_tokens", 17},
      {"repeats", 5},
      {"modes", {"batch-invariant"}},
      {"precisions", {"bf16", "f16"}},
      {"batch_sizes", {2, 3, 64}},
      {"tp_sizes", {1, 4}},
      {"allreduces", {"tree", "ring"}},
      {"devices", {"cpu", "cuda"}},
      {"speculative", {"off"}},  // a setting that speculates is refused with cuda in "devices"
      {"positions", {"middle", "2"}},
      {"filler_sets", 4},
      {"filler_seed", 99},
      {"prompt_tokens", 2048},
      {"generated_prompts", 2},
      {"mate_join_steps", {0, 4}},
      {"mate_prompt_deltas", {0, 1}},
      {"long_context_model", "synth:long"},
      {"temperatures", {0.0, 0.7}},
      {"top_ps", {0.9, 0.5}},
      {"top_ks", {0, 40}},
      {"seeds", {7, 18446744073709551615ull}},
      {"threads", 3},
      {"thresholds.max_divergent", 2},
      {"thresholds.min_tarr", 0.75},
      {"thresholds.modes", {"default", "vllm"}},
      {"thresholds.max_error_rate", 0.125},
      {"answer_regex", "(\\d+)"},
      {"answer_json_path", "$.answer"},
      {"formats", {"json", "md=report.md"}},
      {"concurrency", {1, 16}},
      {"cache_probe", false},
      {"seed_probe", true},
      {"routed_experts", true},
      {"isolation", true},
      {"allow_control_tokens", true},
      {"parse_special", true},
      {"json_schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}}},
      {"retry_invalid", 2},
      {"shard", "2/4"},
      {"replicate_shards", true},
  };
  return v;
}
std::string flag_text(const nlohmann::json& v) {
  if (!v.is_array()) return v.is_string() ? v.get<std::string>() : v.dump();
  std::string s;
  for (const auto& e : v) s += (s.empty() ? "" : ",") + (e.is_string() ? e.get<std::string>() : e.dump());
  return s;
}
}  // namespace

TEST_CASE("plan option table: every option survives profile -> report -> resume") {
  const auto& want = non_defaults();
  PlanOptions defaults;
  nlohmann::json profile = nlohmann::json::object();
  for (const auto& opt : plan_options()) {
    CAPTURE(opt.name);
    REQUIRE_MESSAGE(want.count(opt.name), "no test value for plan option " << opt.name);
    CHECK(opt.get(defaults) != want.at(opt.name));  // the test value is not the default
    nlohmann::json* cur = &profile;
    for (const auto& part : split(opt.profile_key, '.')) cur = &(*cur)[part];
    *cur = want.at(opt.name);
  }
  CHECK(want.size() == plan_options().size());
  profile["prompts"] = {"alpha", {{"id", "b"}, {"prompt", "beta"}}};
  auto dir = test::scratch_dir("plan-roundtrip");
  auto file = write(dir / "all.json", profile.dump(2));

  PlanOptions p;
  apply_profile(find_profile(file), p);
  for (const auto& opt : plan_options()) {
    CAPTURE(opt.name);
    CHECK(opt.get(p) == want.at(opt.name));
  }
  CHECK_NOTHROW(validate_plan(p, 512));

  // through the real report writer and reader
  AuditReport r;
  r.plan = plan_to_json(p);
  for (const auto& pr : p.prompts) r.prompts[pr.id] = pr.text;
  r.environment = {{"digests", {{"profile_sha256", p.profile_digest}}}};
  AuditReport back = from_json(to_json(r), "mem.json");
  PlanOptions q = plan_from_report(back);
  for (const auto& opt : plan_options()) {
    CAPTURE(opt.name);
    CHECK(opt.get(q) == want.at(opt.name));
    CHECK(back.plan.contains(nlohmann::json::json_pointer("/" + [&] {
      std::string k = opt.report_key;
      std::replace(k.begin(), k.end(), '.', '/');
      return k;
    }())));
  }
  CHECK(q.profile == file);
  CHECK(q.profile_digest == p.profile_digest);
  REQUIRE(q.prompts.size() == 2);
  CHECK(q.prompts[1].id == "b");
  CHECK(q.prompts[1].text == "beta");

  // the same values as flags
  for (const auto& opt : plan_options()) {
    if (!*opt.flag || opt.type == OptionType::Bool) continue;
    CAPTURE(opt.name);
    // a Json option's flag names a file holding the value
    const std::string text = opt.type == OptionType::Json ? write(dir / "value.json", want.at(opt.name).dump())
                                                          : flag_text(want.at(opt.name));
    CHECK(check_plan_value(opt, parse_flag_value(opt, text), opt.flag_name()) == want.at(opt.name));
  }
  // a report written before structured output: no schema, no retries
  AuditReport before = back;
  before.plan.erase("json_schema");
  before.plan.erase("retry_invalid");
  CHECK(plan_from_report(before).json_schema.is_null());
  CHECK(plan_from_report(before).retry_invalid == 0);
  // a response_format wrapper in a schema file is unwrapped; json_object stays json_object
  const PlanOption* js = find_plan_option_by_key("json_schema");
  REQUIRE(js != nullptr);
  PlanOptions w;
  js->set(w, parse_flag_value(*js, write(dir / "rf.json", R"({"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"integer"}}})")));
  CHECK(w.json_schema == nlohmann::json::parse(R"({"type":"integer"})"));
  js->set(w, parse_flag_value(*js, write(dir / "jo.json", R"({"type":"json_object"})")));
  CHECK(w.json_schema == nlohmann::json::parse(R"({"type":"json_object"})"));
  w.prompts = builtin_prompts();
  CHECK_NOTHROW(validate_plan(w, 512));

  // a plan block from before precisions were a plan axis: the engine's one precision
  AuditReport older = back;
  older.plan.erase("precisions");
  older.environment["engine"] = {{"precision", "bf16"}};
  CHECK(plan_from_report(older).precisions == std::vector<std::string>{"bf16"});
  older.environment.erase("engine");
  CHECK(plan_from_report(older).precisions == std::vector<std::string>{"f32"});
  // the range check names the flag and the values
  const PlanOption* prec = find_plan_option_by_key("precisions");
  REQUIRE(prec != nullptr);
  CHECK_THROWS_WITH_AS(check_plan_value(*prec, parse_flag_value(*prec, "f32,fp8"), "--precisions"),
                       doctest::Contains("--precisions must be f32, bf16 or f16 (got 'fp8')"), UsageError);

  // a plan block without an option cannot be resumed silently with its default
  AuditReport old = back;
  old.plan.erase("cache_probe");
  CHECK_THROWS_WITH_AS(plan_from_report(old), doctest::Contains("the report's \"plan\" lacks \"cache_probe\""),
                       UsageError);
  old = back;
  old.plan["thresholds"]["min_tarr"] = 3;
  CHECK_THROWS_WITH_AS(plan_from_report(old),
                       doctest::Contains("plan key \"thresholds.min_tarr\" must be a number from 0 to 1 (got 3)"),
                       UsageError);
}

TEST_CASE("plan option table: NaN, negative and out-of-range values name the flag or key and the range") {
  auto dir = test::scratch_dir("plan-ranges");
  for (const auto& opt : plan_options()) {
    if (opt.type == OptionType::Bool || opt.type == OptionType::Text || opt.type == OptionType::TextList ||
        opt.type == OptionType::Json)
      continue;
    CAPTURE(opt.name);
    for (const char* text : {"nan", "-1", "inf", "1e300", "99999999999999999999999", "3x"}) {
      CAPTURE(text);
      if (*opt.flag) {
        std::string flag = opt.flag_name();
        CHECK_THROWS_WITH_AS(check_plan_value(opt, parse_flag_value(opt, text), flag),
                             doctest::Contains((flag + " must be " + opt.valid).c_str()), UsageError);
      }
    }
    // profiles hold JSON: a negative and a huge number
    for (const char* value : {"-1", "1e300"}) {
      nlohmann::json prof = nlohmann::json::object();
      nlohmann::json* cur = &prof;
      for (const auto& part : split(opt.profile_key, '.')) cur = &(*cur)[part];
      *cur = nlohmann::json::parse(value);
      auto file = write(dir / "p.json", prof.dump());
      PlanOptions o;
      CHECK_THROWS_WITH_AS(apply_profile(find_profile(file), o),
                           doctest::Contains(("key \"" + std::string(opt.profile_key) + "\" must be " + opt.valid).c_str()),
                           UsageError);
    }
  }
  PlanOptions o;
  o.prompts = builtin_prompts();
  o.thresholds.min_tarr = std::nan("");
  CHECK_THROWS_WITH_AS(validate_plan(o, 512), doctest::Contains("--min-tarr must be a number from 0 to 1 (got nan)"),
                       UsageError);
}

TEST_CASE("a remote run's plan block leaves out the local engine's settings, and reads back with their defaults") {
  PlanOptions p;
  apply_profile(find_profile("long"), p);
  const nlohmann::json local = plan_to_json(p);
  const nlohmann::json remote = plan_to_json(p, true);
  int left_out = 0;
  for (const auto& opt : plan_options()) {
    CAPTURE(opt.name);
    const std::string key = split(opt.report_key, '.')[0];
    CHECK(local.contains(key));
    CHECK(remote.contains(key) == !opt.local_only());
    left_out += opt.local_only();
  }
  CHECK(left_out >= 10);
  for (const char* k : {"modes", "precisions", "batch_sizes", "threads", "mate_join_steps"}) CHECK_FALSE(remote.contains(k));
  for (const char* k : {"max_tokens", "repeats", "concurrency", "temperatures", "thresholds"}) CHECK(remote.contains(k));
  // read back: a report of endpoints restores the defaults; a local report missing them is refused
  AuditReport r;
  r.plan = remote;
  r.prompts["x"] = "hello";
  r.plan["prompt_ids"] = {"x"};
  r.environment = {{"endpoints", nlohmann::json::array({{{"label", "a"}, {"url", "http://127.0.0.1:1"}}})}};
  PlanOptions back;
  REQUIRE_NOTHROW(back = plan_from_report(r));
  CHECK(back.batch_sizes == PlanOptions{}.batch_sizes);
  CHECK(back.max_tokens == p.max_tokens);
  r.environment = nlohmann::json::object();
  CHECK_THROWS_AS(plan_from_report(r), UsageError);
}

TEST_CASE("the long prompt for endpoints: shipped text of 1,000 to 2,000 words, one question per prompt") {
  const auto prompts = endpoint_long_prompts(2);
  REQUIRE(prompts.size() == 2);
  CHECK(prompts[0].id != prompts[1].id);
  for (const auto& p : prompts) {
    const auto words = std::count(p.text.begin(), p.text.end(), ' ') + std::count(p.text.begin(), p.text.end(), '\n');
    CHECK(words > 1000);
    CHECK(words < 2200);
    CHECK(p.text.find("Question: ") != std::string::npos);
  }
  CHECK(test::slurp(std::filesystem::path(REPRO_SOURCE_DIR) / "docs/examples/long-prompt.txt") + "\n" ==
        prompts[0].text.substr(0, prompts[0].text.find("Question: ")));
}
