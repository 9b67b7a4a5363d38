// Structured output in `repro-audit run` (layer 2): --json-schema applied to every case on the real
// engine (stories260K), the per-case and per-mode metrics (schema-valid rate, TARr on raw text, TARa on
// the parsed JSON in canonical form, per-field agreement of --answer-json-path fields), validation with
// retry (--retry-invalid) reported separately, a vocabulary that cannot spell the schema, and the same
// audit against `serve` on loopback through response_format.
// ctest-labels: model remote
#include <doctest/doctest.h>

#include <fmt/core.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "repro/audit/analysis.hpp"
#include "repro/engine/engine.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/remote/request.hpp"
#include "repro/serve/server.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

const char* kSmall = R"({"type":"object","properties":{"mood":{"enum":["happy","sad"]},
  "name":{"type":"string","maxLength":8},"ok":{"type":"boolean"}},
  "required":["mood","name","ok"],"additionalProperties":false})";

std::string put(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
  return p.string();
}

Completion done(const std::string& prompt, const std::string& text, int repeat) {
  Completion c;
  c.prompt_id = prompt;
  c.decoding_id = "greedy";
  c.mode = "default";
  c.tokens_known = false;  // compared by text
  c.text = text;
  c.repeat = repeat;
  c.completion_tokens = 5;
  return c;
}

}  // namespace

TEST_CASE("structured analysis: canonical JSON agreement, per-field agreement, retries before and after") {
  AuditReport r;
  r.plan = {{"json_schema", nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"number"},
             "b":{"type":"object","properties":{"c":{"type":"string"}}}},"required":["a"]})")},
            {"retry_invalid", 1}};
  r.answer_json_path = "a, $.b.c";
  // p1: three formattings of one value (1.0 = 1, key order, whitespace): raw differs, the JSON agrees
  r.completions.push_back(done("p1", R"({"a":1.0,"b":{"c":"x"}})", 0));
  r.completions.push_back(done("p1", R"({ "b": {"c": "x"}, "a": 1 })", 1));
  r.completions.push_back(done("p1", R"({"a":1,"b":{"c":"x"}})", 2));
  // p2: one answer not JSON, one without b.c; the third was retried once
  r.completions.push_back(done("p2", R"({"a":2,"b":{"c":"y"}})", 0));
  r.completions.push_back(done("p2", R"({"a":2)", 1));
  Completion retried = done("p2", R"({"a":2})", 2);
  retried.retries = 1;
  retried.retry_tokens = 7;
  retried.first_text = R"({"a":)";
  r.completions.push_back(retried);
  analyze(r);
  REQUIRE(r.cases.size() == 2);
  const CaseResult& c1 = r.cases[0];
  REQUIRE(c1.structured);
  CHECK_FALSE(c1.tarr);
  CHECK(c1.unique == 3);
  CHECK(c1.structured->tara_json);
  CHECK(c1.structured->json_unique == 1);
  CHECK(c1.structured->valid.k == 3);
  CHECK(c1.structured->valid.n == 3);
  REQUIRE(c1.fields.size() == 2);
  CHECK(c1.fields[0].path == "a");
  CHECK(c1.fields[0].agree);
  CHECK(c1.fields[1].path == "$.b.c");
  CHECK(c1.fields[1].agree);
  REQUIRE(c1.tara);
  CHECK(*c1.tara);  // the answer is [1,"x"] for all three

  const CaseResult& c2 = r.cases[1];
  REQUIRE(c2.structured);
  CHECK(c2.structured->valid.k == 2);        // the cut one fails
  CHECK(c2.structured->valid_first.k == 1);  // the retried one failed first
  CHECK(c2.structured->json_invalid == 1);
  CHECK_FALSE(c2.structured->tara_json);
  CHECK(c2.structured->retries == 1);
  CHECK(c2.structured->retry_tokens == 7);
  CHECK(c2.fields[0].agree == false);  // missing in the cut answer
  CHECK(c2.fields[0].unique == 1);
  CHECK(c2.fields[0].missing == 1);
  CHECK(c2.fields[0].majority.k == 2);
  CHECK(c2.fields[1].missing == 2);
  // the completions carry the check; the mode summary has both sides of the retry
  CHECK(r.completions[4].schema_valid == std::optional<bool>(false));
  REQUIRE(r.summary.modes.size() == 1);
  REQUIRE(r.summary.modes[0].structured);
  const StructuredSummary& s = *r.summary.modes[0].structured;
  CHECK(s.valid.k == 5);
  CHECK(s.valid_first.k == 4);
  CHECK(s.valid.n == 6);
  CHECK(s.retries == 1);
  CHECK(s.retry_tokens == 7);
  CHECK(s.requests == 6);
  CHECK(s.tara_json.k == 1);
  CHECK(s.tara_json.n == 2);
  REQUIRE(s.fields.size() == 2);
  CHECK(s.fields[0].agree.k == 1);
  // through the report writer and reader, and every format says it
  AuditReport back = from_json(to_json(r), "mem.json");
  REQUIRE(back.cases[1].structured);
  CHECK(back.cases[1].structured->retry_tokens == 7);
  CHECK(back.completions[5].first_text == R"({"a":)");
  CHECK(to_json(back) == to_json(r));
  CHECK(to_markdown(r).find("## Structured output") != std::string::npos);
  CHECK(to_markdown(r).find("Validation with retry") != std::string::npos);
  CHECK(to_html(r).find("id=\"retry\"") != std::string::npos);
  CHECK(to_terminal(r).find("before retry: schema-valid 4 of 6") != std::string::npos);
  const std::string junit = to_junit(r);
  CAPTURE(junit);
  CHECK(junit.find("<property name=\"structured.schema_valid\" value=\"5 of 6 -&gt; 44% to 97%\"/>") != std::string::npos);
  CHECK(junit.find("<property name=\"structured.schema_valid_before_retry\" value=\"4 of 6") != std::string::npos);
  CHECK(junit.find("<property name=\"structured.retries\" value=\"1 extra requests, 7 extra tokens\"/>") !=
        std::string::npos);
  CHECK(junit.find("<property name=\"structured.field." + s.fields[0].path + "\"") != std::string::npos);
  // properties come before the suite's testcases (the JUnit schema's order)
  CHECK(junit.find("<properties>") < junit.find("<testcase"));
  // `diff`: a run where p1's third answer is cut says so per case (schema-valid and JSON agreement)
  AuditReport later;
  later.plan = r.plan;
  later.answer_json_path = r.answer_json_path;
  later.completions = r.completions;
  for (auto& c : later.completions) c.schema_valid.reset();
  later.completions[2].text = R"({"a":1,"b":{"c")";
  analyze(later);
  const Drift d = compute_drift(r, later);
  const std::string dt = drift_text(d, "a.json", "b.json");
  CAPTURE(dt);
  CHECK(dt.find("schema-valid 3 of 3 -> 2 of 3") != std::string::npos);
  CHECK(dt.find("TARa@N (parsed JSON) yes -> no") != std::string::npos);
  CHECK(compute_drift(r, r).cases.empty());
  // bad paths name the flag
  auto extractor = [](const char* paths) { AnswerExtractor e("", paths); };
  CHECK_THROWS_WITH_AS(extractor("a,,b"), doctest::Contains("--answer-json-path 'a,,b': empty path"), UsageError);
  CHECK_THROWS_WITH_AS(extractor("a[x]"), doctest::Contains("index 'x' is not a non-negative integer"), UsageError);
  CHECK(split_json_paths("$['a,b'],c") == std::vector<std::string>{"$['a,b']", "c"});
}

TEST_CASE("run --json-schema on stories260K: every output conforms in both modes, batch-invariant keeps its bits") {
  REPRO_REQUIRE_MODELS(models);
  auto dir = test::scratch_dir("structured-run");
  const std::string schema = put(dir / "small.json", kSmall);
  auto r = test::run_cli("run --quiet --model '" + (models / "stories260K.gguf").string() + "' --json-schema '" +
                         schema + "' --max-tokens 64 --modes default,batch-invariant --precisions f32 --batch-sizes 1,8"
                         " --positions first,last --temperatures 0,0.8 --repeats 1 --answer-json-path mood,name"
                         " --format json,md,html --out '" + (dir / "out").string() + "'");
  INFO(r.output);
  CHECK((r.code == 0 || r.code == 1));  // default mode may diverge; the gate is not what this test checks
  AuditReport rep = load_report((dir / "out" / "report.json").string());
  CHECK(rep.plan["json_schema"] == nlohmann::json::parse(kSmall));
  REQUIRE(rep.summary.modes.size() == 2);
  for (const auto& m : rep.summary.modes) {
    CAPTURE(m.mode);
    REQUIRE(m.structured);
    CHECK(m.structured->valid.n == 30);  // 3 prompts x 2 decodings x (1 + 2 positions x 2 filler sets)
    CHECK(m.structured->valid.k == m.structured->valid.n);
    CHECK(m.structured->retries == 0);
    REQUIRE(m.structured->fields.size() == 2);
  }
  for (const auto& c : rep.completions) {
    CAPTURE(c.text);
    CHECK(c.schema_valid == std::optional<bool>(true));
    CHECK(c.finish_reason == "stop");
    auto j = nlohmann::json::parse(c.text);
    CHECK((j["mood"] == "happy" || j["mood"] == "sad"));
  }
  // batch-invariant: zero bitwise differences from the reference context, one output per case
  const ModeSummary& inv = rep.summary.modes[1];
  CHECK(inv.mode == "batch-invariant");
  CHECK(inv.drift_size.bit_differ.k == 0);
  CHECK(inv.drift_size.bit_differ.n > 0);
  for (const auto& c : rep.cases)
    if (c.mode == "batch-invariant") {
      CHECK(c.tarr);
      CHECK(c.bit_unique == 1);
      REQUIRE(c.structured);
      CHECK(c.structured->tara_json);
    }
  std::string md = test::slurp(dir / "out" / "report.md");
  CHECK(md.find("## Structured output") != std::string::npos);
  CHECK(md.find("### Per-field agreement") != std::string::npos);
  CHECK(md.find("Validation with retry") == std::string::npos);  // not asked for, not shown
  CHECK(test::slurp(dir / "out" / "report.html").find("id=\"structured\"") != std::string::npos);
}

TEST_CASE("run --retry-invalid: cut answers are re-requested with the next seeds, and the report keeps both sides") {
  REPRO_REQUIRE_MODELS(models);
  auto dir = test::scratch_dir("structured-retry");
  const std::string schema = put(dir / "long.json", R"({"type":"object","properties":{"mood":{"enum":["happy","sad"]},
    "name":{"type":"string","maxLength":24}},"required":["mood","name"],"additionalProperties":false})");
  // 40 tokens cut many answers of this schema short; sampled, so a retry with the next seed can finish
  auto r = test::run_cli("run --model '" + (models / "stories260K.gguf").string() + "' --json-schema '" + schema +
                         "' --max-tokens 40 --modes batch-invariant --precisions f32 --batch-sizes 1,4 --positions first"
                         " --temperatures 0.9 --seeds 1,2 --repeats 2 --retry-invalid 3 --format json,md --out '" +
                         (dir / "out").string() + "'");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("before retry: schema-valid") != std::string::npos);
  AuditReport rep = load_report((dir / "out" / "report.json").string());
  REQUIRE(rep.summary.modes.size() == 1);
  REQUIRE(rep.summary.modes[0].structured);
  const StructuredSummary& s = *rep.summary.modes[0].structured;
  int64_t retries = 0, retry_tokens = 0;
  int first_valid = 0, valid = 0;
  for (const auto& c : rep.completions) {
    CAPTURE(c.text);
    CHECK(c.retries <= 3);
    retries += c.retries;
    retry_tokens += c.retry_tokens;
    valid += c.schema_valid.value_or(false);
    first_valid += c.retries == 0 && c.schema_valid.value_or(false);
    if (c.retries < 3) CHECK(c.schema_valid == std::optional<bool>(true));  // retries stop at a valid answer
    if (c.retries > 0) {
      CHECK(!c.first_text.empty());
      CHECK(c.first_text != c.text);
      CHECK(c.retry_tokens >= 40);  // every discarded answer ran to --max-tokens
    }
  }
  CHECK(retries > 0);  // the run exercised the retry
  CHECK(s.retries == retries);
  CHECK(s.retry_tokens == retry_tokens);
  CHECK(s.valid.k == valid);
  CHECK(s.valid_first.k == first_valid);
  CHECK(s.valid_first.k < s.valid.k);
  CHECK(s.requests == static_cast<int64_t>(rep.completions.size()));
  std::string md = test::slurp(dir / "out" / "report.md");
  CHECK(md.find("### Validation with retry (--retry-invalid), reported separately") != std::string::npos);
  CHECK(md.find(fmt::format("| {} (+", retries)) != std::string::npos);  // extra requests with their share
}

TEST_CASE("run --json-schema: a vocabulary that cannot spell the schema, bad schemas and --retry-invalid alone exit 2") {
  REPRO_REQUIRE_MODELS(models);
  auto dir = test::scratch_dir("structured-errors");
  // tok512.bin with the byte token for '{' renamed: no token of this vocabulary spells '{'
  std::string tok = read_file((models / "tok512.bin").string());
  size_t at = tok.find("<0x7B>");
  REQUIRE(at != std::string::npos);
  tok.replace(at, 6, "#0x7B#");
  const std::string tokfile = put(dir / "tok-no-brace.bin", tok);
  const std::string schema = put(dir / "small.json", kSmall);
  const std::string out = (dir / "out").string();
  auto r = test::run_cli("run --quiet --model '" + (models / "stories260K.bin").string() + "' --tokenizer '" + tokfile +
                         "' --json-schema '" + schema + "' --out '" + out + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --json-schema '" + schema +
                      "': the model's vocabulary cannot spell a document of this schema (no token for {") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out));  // refused before anything ran
  // the same model with its own vocabulary runs
  auto ok = test::run_cli("run --quiet --model '" + (models / "stories260K.bin").string() + "' --tokenizer '" +
                          (models / "tok512.bin").string() + "' --json-schema '" + schema +
                          "' --max-tokens 64 --modes batch-invariant --precisions f32 --batch-sizes 1 --format json --out '" +
                          out + "'");
  CHECK(ok.code == 0);
  // unsupported keyword, not JSON, missing file, retries without a schema
  const std::string pattern = put(dir / "pattern.json", R"({"type":"string","pattern":"^a"})");
  auto p = test::run_cli("run --quiet --json-schema '" + pattern + "'");
  CHECK(p.code == 2);
  CHECK(p.output.find("--json-schema '" + pattern + "': keyword 'pattern' is not supported at /pattern") !=
        std::string::npos);
  const std::string notjson = put(dir / "x.json", "{");
  auto nj = test::run_cli("run --quiet --json-schema '" + notjson + "'");
  CHECK(nj.code == 2);
  CHECK(nj.output.find("--json-schema '" + notjson + "': not valid JSON") != std::string::npos);
  auto mf = test::run_cli("run --quiet --json-schema '" + (dir / "none.json").string() + "'");
  CHECK(mf.code == 2);
  CHECK(mf.output.find("--json-schema file") != std::string::npos);
  auto ri = test::run_cli("run --quiet --retry-invalid 2");
  CHECK(ri.code == 2);
  CHECK(ri.output.find("--retry-invalid 2 re-requests answers that do not conform to a schema; give --json-schema FILE too") !=
        std::string::npos);
}

TEST_CASE("response_format in each provider's dialect") {
  const nlohmann::json schema = nlohmann::json::parse(
      R"({"title":"person","type":"object","properties":{"a":{"type":"object","properties":{"b":{"enum":["x"]}}}},"required":["a"]})");
  nlohmann::json oa = response_format_fields(Provider::openai, schema);
  CHECK(oa["response_format"]["type"] == "json_schema");
  CHECK(oa["response_format"]["json_schema"]["name"] == "person");
  CHECK(oa["response_format"]["json_schema"]["strict"] == true);
  // objects are closed, as this tool reads them, at every level
  CHECK(oa["response_format"]["json_schema"]["schema"]["additionalProperties"] == false);
  CHECK(oa["response_format"]["json_schema"]["schema"]["properties"]["a"]["additionalProperties"] == false);
  CHECK(oa["response_format"]["json_schema"]["schema"]["properties"]["a"]["properties"]["b"] ==
        nlohmann::json::parse(R"({"enum":["x"]})"));
  for (Provider p : {Provider::azure, Provider::vllm, Provider::sglang, Provider::ollama})
    CHECK(response_format_fields(p, schema) == oa);
  const nlohmann::json any = {{"type", "json_object"}};
  CHECK(response_format_fields(Provider::openai, any) == nlohmann::json::parse(R"({"response_format":{"type":"json_object"}})"));
  CHECK(response_format_fields(Provider::llamacpp, schema) == nlohmann::json{{"json_schema", schema}});
  CHECK(response_format_fields(Provider::llamacpp, any) == nlohmann::json::parse(R"({"json_schema":{"type":"object"}})"));
  CHECK(response_format_fields(Provider::tgi, schema) ==
        nlohmann::json{{"response_format", {{"type", "json"}, {"value", schema}}}});
  CHECK(response_format_fields(Provider::openai, nlohmann::json()).empty());
  // in a request body; --extra-body still overrides
  EndpointSpec spec;
  spec.api_model = "m";
  RequestParams rp;
  rp.prompt = "p";
  rp.json_schema = schema;
  CHECK(build_request_body(spec, rp)["response_format"] == oa["response_format"]);
  spec.extra_body = {{"response_format", nullptr}};
  CHECK_FALSE(build_request_body(spec, rp).contains("response_format"));
  // a title that is not a valid name falls back
  CHECK(response_format_fields(Provider::openai, {{"title", "a b"}, {"type", "integer"}})["response_format"]["json_schema"]["name"] == "output");
}

TEST_CASE("run --json-schema against serve on loopback: response_format honoured, answers and retries equal the local run") {
  REPRO_REQUIRE_MODELS(models);
  auto model = load_model((models / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 16;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto dir = test::scratch_dir("structured-serve");
  const std::string schema = put(dir / "long.json", R"({"type":"object","properties":{"mood":{"enum":["happy","sad"]},
    "name":{"type":"string","maxLength":24}},"required":["mood","name"],"additionalProperties":false})");
  const std::string common = " --json-schema '" + schema + "' --max-tokens 40 --temperatures 0,0.9 --seeds 3 --repeats 2"
                             " --retry-invalid 2 --format json,md --quiet";
  auto remote = test::run_cli("run --endpoint s=" + server.url() + " --api-model " + server.model_name() +
                              " --api completions --concurrency 1,4 --no-cache-probe" + common + " --out '" +
                              (dir / "remote").string() + "'");
  INFO(remote.output);
  CHECK(remote.code == 0);
  auto local = test::run_cli("run --model '" + (models / "stories260K.gguf").string() +
                             "' --modes batch-invariant --precisions f32 --batch-sizes 1,4 --positions first" + common +
                             " --out '" + (dir / "local").string() + "'");
  INFO(local.output);
  CHECK(local.code == 0);
  AuditReport rr = load_report((dir / "remote" / "report.json").string());
  AuditReport lr = load_report((dir / "local" / "report.json").string());
  CHECK(rr.summary.errors == 0);
  REQUIRE(rr.summary.modes.size() == 1);
  REQUIRE(rr.summary.modes[0].structured);
  REQUIRE(lr.summary.modes[0].structured);
  const StructuredSummary& rs = *rr.summary.modes[0].structured;
  const StructuredSummary& ls = *lr.summary.modes[0].structured;
  CHECK(rs.retries > 0);
  // the server decoded under the schema: every answer it finished conforms, and it answered exactly what
  // the local engine answers under the same schema, retries included
  std::map<std::string, std::string> by_local;
  for (const auto& c : lr.completions) by_local[c.prompt_id + "|" + c.decoding_id] = c.text;
  int compared = 0;
  for (const auto& c : rr.completions) {
    CAPTURE(c.text);
    REQUIRE(c.schema_valid.has_value());
    if (c.finish_reason == "stop") CHECK(*c.schema_valid);
    if (c.retries < 2) CHECK(*c.schema_valid);
    CHECK(c.text == by_local.at(c.prompt_id + "|" + c.decoding_id));
    ++compared;
  }
  CHECK(compared == static_cast<int>(rr.completions.size()));
  CHECK(rs.valid.k * ls.valid.n == ls.valid.k * rs.valid.n);  // the same share valid
  CHECK(rs.valid_first.k * ls.valid.n == ls.valid_first.k * rs.valid.n);
  CHECK(rs.tarr.k == rs.tarr.n);
  std::string md = test::slurp(dir / "remote" / "report.md");
  CHECK(md.find("### Validation with retry (--retry-invalid), reported separately") != std::string::npos);

  // the server's own answers to response_format
  httplib::Client http("127.0.0.1", server.port());
  auto post = [&](const nlohmann::json& body) {
    auto res = http.Post("/v1/completions", body.dump(), "application/json");
    REQUIRE(res);
    return std::make_pair(res->status, nlohmann::json::parse(res->body));
  };
  nlohmann::json req = {{"model", server.model_name()}, {"prompt", "Once upon a time"}, {"max_tokens", 200}};
  req["response_format"] = {{"type", "json_schema"},
                            {"json_schema", {{"name", "p"}, {"schema", nlohmann::json::parse(kSmall)}, {"strict", true}}}};
  auto [st, body] = post(req);
  CHECK(st == 200);
  JsonSchema small(nlohmann::json::parse(kSmall), "test");
  CHECK(small.validate(body["choices"][0]["text"].get<std::string>()));
  req["response_format"] = {{"type", "json_object"}};
  std::tie(st, body) = post(req);
  CHECK(st == 200);
  const std::string text = body["choices"][0]["text"].get<std::string>();
  JsonSchema obj(schema_of(nlohmann::json{{"type", "json_object"}}), "test");
  JsonState state = obj.start();
  CHECK(obj.feed(state, text));  // a JSON object, or a prefix of one when cut at max_tokens
  if (body["choices"][0]["finish_reason"] == "stop") CHECK(nlohmann::json::parse(text).is_object());
  req["response_format"] = {{"type", "json_schema"},
                            {"json_schema", {{"name", "p"}, {"schema", {{"type", "string"}, {"pattern", "a"}}}}}};
  std::tie(st, body) = post(req);
  CHECK(st == 400);
  CHECK(body["error"]["param"] == "response_format");
  CHECK(body["error"]["message"].get<std::string>().find("'response_format': keyword 'pattern' is not supported") == 0);
  req["response_format"] = {{"type", "yaml"}};
  std::tie(st, body) = post(req);
  CHECK(st == 400);
  CHECK(body["error"]["message"].get<std::string>().find("type must be text, json_object or json_schema (got 'yaml')") !=
        std::string::npos);
  req["response_format"] = {{"type", "text"}};
  std::tie(st, body) = post(req);
  CHECK(st == 200);
  server.stop();
}
