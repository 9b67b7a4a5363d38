// Report writers compared with expected output (tests/data/report-small.*), JSON round trip and
// digest, write_reports, and the `report` / `diff` subcommands through the real binary.
// Regenerate the expected files after an intended change: REPRO_UPDATE_GOLDEN=1 ctest -R unit-report
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <filesystem>
#include <map>
#include <set>

#include "repro/audit/advice.hpp"
#include "repro/audit/analysis.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/error.hpp"
#include "repro/remote/redact.hpp"
#include "repro/report/report.hpp"
#include "repro/report/schema.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(REPRO_SOURCE_DIR) / "tests" / "data";

Completion mk(const std::string& prompt, const std::string& mode, std::vector<int> tokens, const std::string& text,
              int bs, int repeat, double latency) {
  Completion c;
  c.prompt_id = prompt;
  c.decoding_id = "greedy";
  c.mode = mode;
  c.batch_size = bs;
  c.position = bs > 1 ? 1 : 0;
  c.filler_set = bs > 1 ? "f" + std::to_string(repeat % 2) : "";
  c.seed = 1234;
  c.repeat = repeat;
  c.tokens = std::move(tokens);
  c.text = text;
  c.logprobs.assign(c.tokens.size(), -0.25f);
  c.logits_sha256 = "00ff";
  c.finish_reason = "length";
  c.latency_s = latency;
  c.completion_tokens = static_cast<int>(c.tokens.size());
  c.prompt_tokens = 5;
  c.tokens_per_s = c.completion_tokens / latency;
  c.batch_tokens = static_cast<int64_t>(c.completion_tokens) * bs;  // the cell's work: probe and batch mates
  c.batch_seconds = latency;
  return c;
}

// A small fixed report: two prompts, two modes, batch sizes 1 and 8, one divergent case, one
// bit-divergent case, one failed request, an answer regex. No timestamps beyond the fixed one.
AuditReport small_report() {
  AuditReport r;
  r.created = "2026-01-01T00:00:00Z";
  r.profile = "test";
  r.plan = {{"repeats", 2}, {"batch_sizes", {1, 8}}, {"modes", {"default", "batch-invariant"}}};
  r.environment = {{"tool", "repro-audit"}, {"version", "0.1.0"}, {"model_sha256", "abc123"}, {"threads", 2}};
  r.prompts = {{"p1", "Once upon a time"}, {"p2", "The <b>cat</b> & \"dog\" | pipe"}};
  r.answer_regex = "(\\w+)\\.";
  r.thresholds.modes = {"batch-invariant"};
  std::vector<int> a{10, 11, 12, 13, 14, 15}, b{10, 11, 12, 20, 21, 22};
  const std::string ta = "Lily saw a cat. It was big.", tb = "Lily saw a dog <b>& ran.";
  std::vector<int> c{30, 31, 32};
  const std::string tc = "The cat sat.";
  int rep = 0;
  for (int bs : {1, 8}) {
    for (int i = 0; i < 2; ++i, ++rep) {
      auto da = mk("p1", "default", bs == 1 ? a : b, bs == 1 ? ta : tb, bs, rep, bs == 1 ? 0.06 : 0.03);
      if (bs == 8) da.logprobs[3] = -1.75f;
      r.completions.push_back(da);
      auto dc = mk("p2", "default", c, tc, bs, rep, bs == 1 ? 0.03 : 0.015);
      if (bs == 8) dc.logits_sha256 = "11ee";  // same tokens, other logits bits
      r.completions.push_back(dc);
      r.completions.push_back(mk("p1", "batch-invariant", a, ta, bs, rep, bs == 1 ? 0.08 : 0.05));
      r.completions.push_back(mk("p2", "batch-invariant", c, tc, bs, rep, bs == 1 ? 0.04 : 0.025));
    }
  }
  Completion failed = mk("p2", "default", {}, "", 8, 9, 1.0);
  failed.error = "engine: out of memory";
  r.completions.push_back(failed);
  analyze(r);
  // the texts a tokenizer gives for the fixture's token ids (the run records them from the model's)
  record_token_text(r, [](int id) { return id == 13 ? std::string(" cat") : id == 20 ? std::string(" dog\x04") : "?"; });
  return r;
}

void check_golden(const std::string& name, const std::string& got) {
  fs::path p = kData / name;
  if (std::getenv("REPRO_UPDATE_GOLDEN")) {
    write_file_atomic(p.string(), got);
    MESSAGE("updated " << p.string());
  }
  REQUIRE_MESSAGE(fs::exists(p), "missing expected file " << p.string() << " (REPRO_UPDATE_GOLDEN=1 writes it)");
  std::string want = read_file(p.string());
  if (got != want) {
    auto out = test::scratch_dir("report-golden") / name;
    write_file_atomic(out.string(), got);
    FAIL_CHECK(name << " differs from the expected output; actual written to " << out.string());
  }
}

struct Proc {
  int rc;
  std::string out;
};
Proc sh(const std::string& cmd) {
  Proc p{-1, {}};
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.out.append(buf, n);
  int st = pclose(f);
  p.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return p;
}
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

}  // namespace

TEST_CASE("the fixture analyses as designed") {
  AuditReport r = small_report();
  REQUIRE(r.cases.size() == 4);
  CHECK(r.summary.divergent_cases == 1);
  CHECK(r.summary.verdict == "reproducible");  // only batch-invariant is gated
  CHECK(r.summary.errors == 1);
  CHECK(r.cases[0].unique == 2);
  CHECK(r.cases[1].bit_divergent);
  CHECK(r.cases[0].clusters[1].first_divergence_token == 3);
}

TEST_CASE("rewrite_strings reaches every string the report stores, in every format") {
  // Every string of the schema (read from the analysed fixture's JSON, so a field added to the
  // schema is covered without touching this test) and every key of the free-form blocks holds the
  // secret; after one rewrite no writer shows it.
  const std::string secret = "SECRET-7f3a";
  nlohmann::json j = to_json_value(small_report());
  std::function<void(nlohmann::json&)> plant = [&](nlohmann::json& v) {
    if (v.is_string()) v = v.get<std::string>() + secret;
    else if (v.is_array() || v.is_object())
      for (auto& e : v) plant(e);
  };
  for (auto& [k, v] : j.items())
    if (k != "schema" && k != "digests") plant(v);
  j["environment"]["nested-" + secret] = {{"key-" + secret, {secret}}};
  j["plan"]["x-" + secret] = secret;
  j["baseline"] = {{"file", "golden-" + secret + ".json"}, {"changes", {secret}}, {"config_changes", {secret}}};
  AuditReport r = from_json(j.dump(), "planted.json");
  r.prompts["id-" + secret] = "text " + secret;
  REQUIRE(to_json(r).find(secret) != std::string::npos);
  rewrite_strings(r, [&](const std::string& s) { return scrub_secret(s, secret); });
  for (const std::string& out : {to_json(r), to_markdown(r), to_html(r), to_junit(r), to_terminal(r)}) {
    CHECK(out.find(secret) == std::string::npos);
    CHECK(out.find("[REDACTED]") != std::string::npos);
  }
}

TEST_CASE("JSON writer: expected output, schema, digest, round trip") {
  AuditReport r = small_report();
  std::string j = to_json(r);
  check_golden("report-small.json", j);
  auto v = nlohmann::json::parse(j);
  CHECK(v["schema"] == "repro-audit/report/v1");
  CHECK(v["summary"]["verdict"] == "reproducible");
  CHECK(v["summary"]["max_unique"] == 2);
  CHECK(v["cases"][0]["clusters"][1]["first_divergence_token"] == 3);
  CHECK(v["cases"][0]["tara"] == false);
  CHECK(v["throughput"][0]["ratio"] == 1.0);
  CHECK(v["digests"]["model_sha256"] == "abc123");
  CHECK(v["digests"]["prompts_sha256"].get<std::string>().size() == 64);

  std::string stored, actual;
  CHECK(verify_report_digest(j, &stored, &actual));
  CHECK(stored == actual);
  std::string tampered = j;
  auto pos = tampered.find("Once upon a time");
  REQUIRE(pos != std::string::npos);
  tampered[pos] = 'X';
  CHECK_FALSE(verify_report_digest(tampered));

  AuditReport back = from_json(j, "mem.json");
  CHECK(to_json(back) == j);
  CHECK(to_json(from_json(to_json(back), "again.json")) == j);
  CHECK(back.cases[0].prompt_text == "Once upon a time");
  // the analysis of the reloaded completions gives the same report
  AuditReport re = back;
  analyze(re);
  CHECK(to_json(re) == j);
}

TEST_CASE("from_json rejects bad input with the file name") {
  CHECK_THROWS_WITH_AS(from_json("{not json", "bad.json"), doctest::Contains("report 'bad.json': invalid JSON"),
                       UsageError);
  CHECK_THROWS_WITH_AS(from_json(R"({"schema":"other/v9"})", "old.json"),
                       doctest::Contains("report 'old.json': schema 'other/v9' is not repro-audit/report/v1"),
                       UsageError);
  CHECK_THROWS_WITH_AS(from_json(R"({"schema":"repro-audit/report/v1","cases":[{"n":"three"}]})", "t.json"),
                       doctest::Contains("report 't.json': cases[0].n: expected an integer"), UsageError);
  CHECK_THROWS_WITH_AS(from_json("[]", "arr.json"), doctest::Contains("arr.json"), UsageError);
}

TEST_CASE("the stored fixture reads and writes back byte for byte") {
  // The checked-in file, not a freshly built report: a reader that drops or changes any field
  // (or a writer that formats a number differently) breaks this.
  std::string text = read_file((kData / "report-small.json").string());
  AuditReport r = load_report((kData / "report-small.json").string());
  CHECK(to_json(r) == text);
  CHECK(to_json(from_json(to_json(r), "again.json")) == text);
  CHECK(verify_report_digest(text));
  // the type mapping gives the same document as the writer (less the report's own digest)
  nlohmann::json doc = nlohmann::json::parse(text);
  nlohmann::json mapped = r;
  CHECK(report_digest_view(doc) == mapped);
  CHECK(report_digest(mapped) == doc["digests"]["report_sha256"]);
}

TEST_CASE("schema: every structure maps to JSON and back through nlohmann/json") {
  Completion c;
  c.prompt_id = "p";
  c.decoding_id = "t0.7-s3";
  c.mode = "vllm";
  c.batch_size = 64;
  c.position = 3;
  c.filler_set = "f2";
  c.filler_ids = {"a", "b"};
  c.seed = 18446744073709551615ull;
  c.repeat = 4;
  c.cache_state = "warm";
  c.tokens_known = false;
  c.tokens = {1, 2};
  c.text = "hi";
  c.logprobs = {-0.5f, -std::numeric_limits<float>::infinity()};
  c.logits_sha256 = "ab";
  c.finish_reason = "stop";
  c.latency_s = 0.25;
  c.ttft_s = 0.125;
  c.tokens_per_s = 8;
  c.prompt_tokens = 7;
  c.completion_tokens = 2;
  c.system_fingerprint = "fp";
  c.response_model = "m";
  c.response_id = "id";
  c.created = 1700000000;
  c.error = "";
  c.attempts = 3;
  nlohmann::json j = c;
  CHECK(j.size() == 35);  // with precision, the per-step records (margins, margins_rel, top_k, top_ids, top_logprobs) and batch_tokens, batch_seconds
  CHECK(j["decoding"] == "t0.7-s3");
  CHECK(j["logprobs"][1].is_null());  // -inf has no JSON form
  Completion back = j.get<Completion>();
  CHECK(nlohmann::json(back) == j);
  CHECK(back.seed == c.seed);
  CHECK(std::isinf(back.logprobs[1]));

  AuditReport r = small_report();
  for (const auto& cs : r.cases) CHECK(nlohmann::json(nlohmann::json(cs).get<CaseResult>()) == nlohmann::json(cs));
  CHECK(nlohmann::json(nlohmann::json(r.summary).get<Summary>()) == nlohmann::json(r.summary));
  CHECK(nlohmann::json(nlohmann::json(r.thresholds).get<Thresholds>()) == nlohmann::json(r.thresholds));
  DecodingConfig d{"t1-p0.9-k5", 1.0, 0.9, 5, 17};
  auto dj = nlohmann::json(d).get<DecodingConfig>();
  CHECK(dj.id == d.id);
  CHECK(dj.top_p == 0.9);
  CHECK(dj.top_k == 5);
  CHECK(dj.max_tokens == 17);

  // the answer fields exist only with an extractor
  CaseResult plain;
  CHECK_FALSE(nlohmann::json(plain).contains("tara"));
  CHECK_FALSE(nlohmann::json(plain).contains("answer_unique"));
  plain.tara = true;
  CHECK(nlohmann::json(plain)["answer_unique"] == 0);
  // missing fields keep the structure's defaults
  Cluster k = nlohmann::json::object().get<Cluster>();
  CHECK(k.first_divergence_token == -1);
  CHECK(k.bit_variants == 1);
  CHECK_FALSE(k.answer.has_value());
}

TEST_CASE("schema: a wrong field names its path") {
  auto bad = [](const std::string& doc) {
    try {
      from_json(doc, "x.json");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = R"({"schema":"repro-audit/report/v1",)";
  CHECK(bad(head + R"("cases":[{},{"clusters":[{"members":[1,"2"]}]}]})")
            .find("report 'x.json': cases[1].clusters[0].members[1]: expected an integer") == 0);
  CHECK(bad(head + R"("prompts":{"p1":3}})").find("report 'x.json': prompts.p1: expected a string") == 0);
  CHECK(bad(head + R"("completions":[{"seed":-1}]})").find("completions[0].seed: expected a non-negative integer") !=
        std::string::npos);
  CHECK(bad(head + R"("summary":{"modes":[{"gated":1}]}})").find("summary.modes[0].gated: expected true or false") !=
        std::string::npos);
  CHECK(bad(head + R"("throughput":[{"batch_size":4294967296}]})").find("throughput[0].batch_size: integer out of range") !=
        std::string::npos);
  CHECK(bad(head + R"("cases":{}})").find("cases: expected an array") != std::string::npos);
  CHECK(bad(head + R"("summary":[]})").find("; give a report.json written by repro-audit") != std::string::npos);
  CHECK_THROWS_WITH_AS(nlohmann::json({{"n", "three"}}).get<CaseResult>(), "n: expected an integer", UsageError);
}

TEST_CASE("canonical form and the report digest") {
  nlohmann::json j = {{"b", 1}, {"a", {{"z", 0.1}, {"y", std::nan("")}}}, {"c", "\xff\xfe ok"}};
  CHECK(canonical_json_compact(j) == "{\"a\":{\"y\":null,\"z\":0.1},\"b\":1,\"c\":\"\xEF\xBF\xBD\xEF\xBF\xBD ok\"}");
  CHECK(canonical_json(nlohmann::json{{"k", 1.0}}) == "{\n  \"k\": 1.0\n}\n");
  CHECK(report_digest_excluded() == std::vector<std::string>{"/digests/report_sha256"});
  nlohmann::json doc = {{"x", 1}, {"digests", {{"report_sha256", "old"}, {"prompts_sha256", "p"}}}};
  nlohmann::json without = {{"x", 1}, {"digests", {{"prompts_sha256", "p"}}}};
  CHECK(report_digest_view(doc) == without);
  CHECK(report_digest(doc) == sha256_hex(canonical_json_compact(without)));
  doc["digests"]["report_sha256"] = "other";  // the excluded field does not change the digest
  CHECK(report_digest(doc) == report_digest(without));
  doc["x"] = 2;
  CHECK(report_digest(doc) != report_digest(without));
  CHECK(report_digest(nlohmann::json::array({1})) == sha256_hex("[1]"));
}

TEST_CASE("Markdown, HTML, JUnit and terminal writers: expected output") {
  AuditReport r = small_report();
  check_golden("report-small.md", to_markdown(r));
  check_golden("report-small.html", to_html(r));
  check_golden("report-small.junit.xml", to_junit(r));
  check_golden("report-small.txt", to_terminal(r));
}

TEST_CASE("terminal: a divergent case is named by its prompt's text and diverges at token text with ids") {
  AuditReport r = small_report();
  r.prompts["p1"] = "Once upon a time there was a cat";
  const std::string t = to_terminal(r);
  CAPTURE(t);
  CHECK(t.find("  \"Once upon a time there was a cat\" [greedy] default: ") != std::string::npos);
  CHECK(t.find("diverges at token 3: \" cat\" (id 13), logprob -0.2500 vs \" dog\\x04\" (id 20), logprob -1.7500") !=
        std::string::npos);
  CHECK(t.find("(13 -> 20)") == std::string::npos);
}

TEST_CASE("writers escape text and mark divergence") {
  AuditReport r = small_report();
  std::string h = to_html(r);
  CHECK(h.find("<b>cat</b>") == std::string::npos);
  CHECK(h.find("The &lt;b&gt;cat&lt;/b&gt; &amp; &quot;dog&quot;") != std::string::npos);
  CHECK(h.find("Lily saw a <mark>dog &lt;b&gt;&amp; ran.</mark>") != std::string::npos);
  CHECK(h.find("http://") == h.find("http://www.w3.org/2000/svg"));  // no external resources
  CHECK(h.find("<script") == std::string::npos);
  CHECK(h.find("<svg") != std::string::npos);
  std::string md = to_markdown(r);
  CHECK(md.find("Lily saw a ⟦dog \\<b>& ran.⟧") != std::string::npos);  // a tag cannot open, the text reads as written
  CHECK(md.find("\\| pipe") != std::string::npos);

  // gate all modes: the divergent default case fails in JUnit with the cluster summary
  AuditReport all = r;
  all.thresholds.modes.clear();
  all.thresholds.max_error_rate = 0.5;  // the fixture's one failed request is tolerated
  analyze(all);
  std::string jx = to_junit(all);
  CHECK(jx.find("failures=\"1\"") != std::string::npos);
  CHECK(jx.find("<failure message=\"explained by batch_size") != std::string::npos);
  CHECK(jx.find("(each value maps to one cluster); 2 unique of 4") != std::string::npos);
  CHECK(jx.find("&lt;b&gt;") != std::string::npos);
  CHECK(to_terminal(all).rfind("verdict: DIVERGENT (exit 1)", 0) == 0);
}

TEST_CASE("write_reports writes every format atomically, '-' and FORMAT=PATH") {
  AuditReport r = small_report();
  auto dir = test::scratch_dir("report-write") / "nested" / "out";
  auto written = write_reports(r, dir.string(), {"json", "md", "html", "junit"});
  CHECK(written.size() == 4);
  CHECK(read_file((dir / "report.json").string()) == to_json(r));
  CHECK(read_file((dir / "report.md").string()) == to_markdown(r));
  CHECK(read_file((dir / "report.html").string()) == to_html(r));
  CHECK(read_file((dir / "report.junit.xml").string()) == to_junit(r));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 4);  // no temp files left
  auto custom = dir / "ci.xml";
  write_reports(r, "-", {"junit=" + custom.string()});
  CHECK(read_file(custom.string()) == to_junit(r));
  CHECK_THROWS_WITH_AS(write_reports(r, dir.string(), {"pdf"}),
                       doctest::Contains("--format: unknown format 'pdf'; allowed: json, md, html, junit"), UsageError);
  CHECK_THROWS_WITH_AS(parse_formats("json,xml"), doctest::Contains("unknown format 'xml'"), UsageError);
  CHECK(parse_formats(" json , md ") == std::vector<std::string>{"json", "md"});
  auto file = dir / "report.json";
  CHECK_THROWS_WITH_AS(write_reports(r, file.string(), {"md"}), doctest::Contains("--out"), UsageError);
}

TEST_CASE("drift between two reports") {
  AuditReport a = small_report();
  Drift none = compute_drift(a, a);
  CHECK_FALSE(none.drifted());
  CHECK(none.unchanged == 4);
  CHECK(drift_text(none) == "no drift: 4 cases unchanged, verdict reproducible in both\n");

  AuditReport b = a;
  b.completions[2].tokens = {10, 11, 99};  // p1 batch-invariant, first repeat
  b.completions[2].text = "Lily saw";
  b.completions.push_back(b.completions[0]);
  b.completions.back().prompt_id = "p3";
  analyze(b);
  Drift d = compute_drift(a, b);
  CHECK(d.drifted());
  CHECK(d.verdict_b == "divergent");  // p1/batch-invariant now 2 unique of 4, and that mode is gated
  REQUIRE(d.cases.size() == 2);
  CHECK(d.cases[0].prompt_id == "p1");
  CHECK(d.cases[0].mode == "batch-invariant");
  CHECK(d.cases[0].change == "changed");
  CHECK(d.cases[0].what == std::vector<std::string>{"unique 1 -> 2", "verdict reproducible -> divergent"});
  CHECK(d.cases[1].change == "added");
  CHECK(d.cases[1].prompt_id == "p3");
  std::string t = drift_text(d, "a.json", "b.json");
  CHECK(t.find("drift between a.json and b.json: 1 changed, 1 added, 0 removed, 3 unchanged") == 0);
  auto j = drift_json(d);
  CHECK(j["drift"] == true);
  CHECK(j["cases"].size() == 2);
  Drift back = compute_drift(b, a);
  CHECK(back.cases[1].change == "removed");
}

TEST_CASE("report and diff subcommands through the real binary") {
  auto dir = test::scratch_dir("report-cli");
  AuditReport a = small_report();
  write_file_atomic((dir / "a.json").string(), to_json(a));
  AuditReport b = a;
  b.completions[0].tokens = {1};
  b.completions[0].text = "x";
  analyze(b);
  write_file_atomic((dir / "b.json").string(), to_json(b));
  write_file_atomic((dir / "bad.json").string(), "{\"schema\": ");
  const std::string bin = q(test::binary());

  auto p = sh(bin + " report " + q(dir / "a.json") + " --format md,html,junit,json --out " + q(dir / "out"));
  CHECK(p.rc == 0);
  CHECK(read_file((dir / "out" / "report.md").string()) == to_markdown(a));
  CHECK(read_file((dir / "out" / "report.json").string()) == to_json(a));
  CHECK(read_file((dir / "out" / "report.html").string()) == to_html(a));

  p = sh(bin + " report " + q(dir / "a.json"));
  CHECK(p.rc == 0);
  CHECK(p.out == to_terminal(a));
  p = sh(bin + " report " + q(dir / "a.json") + " --format junit --out -");
  CHECK(p.rc == 0);
  CHECK(p.out == to_junit(a));

  p = sh(bin + " report " + q(dir / "bad.json"));
  CHECK(p.rc == 2);
  CHECK(p.out.find("error: report '" + (dir / "bad.json").string() + "': invalid JSON") == 0);
  p = sh(bin + " report " + q(dir / "missing.json"));
  CHECK(p.rc == 2);
  CHECK(p.out.find("missing.json") != std::string::npos);
  p = sh(bin + " report " + q(dir / "a.json") + " --format pdf");
  CHECK(p.rc == 2);
  CHECK(p.out.find("--format: unknown format 'pdf'") != std::string::npos);

  // an edited report: warning, or exit 2 with --verify
  std::string edited = to_json(a);
  edited.replace(edited.find("Once upon"), 4, "ONCE");
  write_file_atomic((dir / "edited.json").string(), edited);
  p = sh(bin + " report " + q(dir / "edited.json"));
  CHECK(p.rc == 0);
  CHECK(p.out.find("warning: report") == 0);
  p = sh(bin + " report " + q(dir / "edited.json") + " --verify");
  CHECK(p.rc == 2);
  CHECK(p.out.find("its content does not match its recorded digest (digests.report_sha256)") != std::string::npos);

  p = sh(bin + " diff " + q(dir / "a.json") + " " + q(dir / "a.json"));
  CHECK(p.rc == 0);
  CHECK(p.out == "no drift: 4 cases unchanged, verdict reproducible in both\n");
  p = sh(bin + " diff " + q(dir / "a.json") + " " + q(dir / "b.json"));
  CHECK(p.rc == 1);
  CHECK(p.out.find("changed p1 [greedy] default: majority output") != std::string::npos);
  p = sh(bin + " diff " + q(dir / "a.json") + " " + q(dir / "b.json") + " --json");
  CHECK(p.rc == 1);
  CHECK(nlohmann::json::parse(p.out)["drift"] == true);
  p = sh(bin + " diff " + q(dir / "a.json") + " " + q(dir / "bad.json"));
  CHECK(p.rc == 2);
  CHECK(p.out.find("bad.json") != std::string::npos);
}

// ---------------------------------------------------------------------------- reports that explain

namespace {
// The y-axis tick labels of each chart (<figure id=...>) in an HTML report, in order.
std::map<std::string, std::vector<std::string>> chart_ticks(const std::string& h) {
  std::map<std::string, std::vector<std::string>> out;
  size_t at = 0;
  while ((at = h.find("<figure class=\"chart\" id=\"", at)) != std::string::npos) {
    at += 26;
    std::string id = h.substr(at, h.find('"', at) - at);
    size_t end = h.find("</figure>", at);
    for (size_t p = at; (p = h.find("class=\"yl\">", p)) != std::string::npos && p < end;) {
      p += 11;
      out[id].push_back(h.substr(p, h.find('<', p) - p));
    }
  }
  return out;
}
// fill colour of every bar, by the series name in its tooltip ("<title>NAME @ ...")
std::map<std::string, std::set<std::string>> bar_colours(const std::string& h) {
  std::map<std::string, std::set<std::string>> out;
  for (size_t p = 0; (p = h.find("<rect x=", p)) != std::string::npos; ++p) {
    size_t close = h.find("</rect>", p), tag_end = h.find('>', p);
    if (close == std::string::npos || h.find("<title>", p) > close || h.find("/>", p) < tag_end) continue;
    size_t f = h.find("fill=\"", p) + 6;
    std::string colour = h.substr(f, 7);
    size_t t = h.find("<title>", p) + 7;
    std::string name = h.substr(t, h.find(" @ ", t) - t);
    out[name].insert(colour);
  }
  return out;
}
}  // namespace

TEST_CASE("display_text escapes control characters and bytes that are not UTF-8, keeps UTF-8") {
  CHECK(display_text("Once upon") == "Once upon");
  CHECK(display_text("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(display_text(std::string("x\x04\x04y\x7f")) == "x\\x04\\x04y\\x7f");
  CHECK(display_text("back\\slash") == "back\\\\slash");
  CHECK(display_text("caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80");
  CHECK(display_text(std::string("\xe2\x96")) == "\\xe2\\x96");       // a cut UTF-8 sequence (one byte token)
  CHECK(display_text(std::string("\xc0\xaf")) == "\\xc0\\xaf");       // overlong
  CHECK(display_text(std::string("\xed\xa0\x80")) == "\\xed\\xa0\\x80");  // surrogate
  CHECK(display_text(std::string("\xc2\x85")) == "\\u0085");          // C1 control
}

TEST_CASE("first divergence as token text with ids, prompt snippets, control characters escaped") {
  AuditReport r = small_report();
  CHECK(r.token_text.at("13") == " cat");
  CHECK(r.token_text.at("20") == " dog\\x04");
  CHECK(token_label(r, 13) == "\" cat\" (id 13)");
  CHECK(token_label(r, 99) == "id 99");
  CHECK(token_label(r, -1) == "end of text");
  const Cluster& k = r.cases[0].clusters[1];
  CHECK(divergence_label(r, r.cases[0], k) ==
        "token 3: \" cat\" (id 13), logprob -0.2500 vs \" dog\\x04\" (id 20), logprob -1.7500");
  std::string md = to_markdown(r), h = to_html(r);
  CHECK(md.find("token 3: \" cat\" (id 13), logprob -0.2500 vs \" dog\\\\x04\" (id 20)") != std::string::npos);
  CHECK(h.find("token 3: &quot; cat&quot; (id 13), logprob -0.2500 vs &quot; dog\\x04&quot; (id 20)") != std::string::npos);
  CHECK(md.find("first divergence at token 3: \" cat\" (id 13) in the reference") != std::string::npos);

  // prompt snippets, not ids; long prompts cut at 60 characters; control characters shown, never raw
  r.prompts["p1"] = std::string(70, 'x') + "\x01";
  for (auto& c : r.cases)
    if (c.prompt_id == "p1") c.prompt_text = r.prompts["p1"];
  CHECK(prompt_snippet(r, "p1") == "\"" + std::string(60, 'x') + "…\"");
  CHECK(prompt_snippet(r, "unknown") == "unknown");
  md = to_markdown(r);
  h = to_html(r);
  CHECK(md.find("### \"" + std::string(60, 'x') + "…\" · greedy · default: DIVERGENT") != std::string::npos);
  CHECK(md.find("| \"" + std::string(60, 'x') + "…\" | greedy |") != std::string::npos);  // outputs across modes
  CHECK(h.find("<td title=\"p1\">&quot;" + std::string(60, 'x') + "…&quot;</td>") != std::string::npos);
  CHECK(md.find('\x01') == std::string::npos);
  CHECK(h.find('\x01') == std::string::npos);
  CHECK(md.find("\\x01") != std::string::npos);
  CHECK(h.find("\\x01") != std::string::npos);
  CHECK(md.find('\x04') == std::string::npos);

  // endpoints (no token ids): the divergence is shown as the two texts from the first differing character
  Cluster maj, other;
  maj.majority = true;
  maj.text = "The cat sat on the mat.";
  other.text = "The dog\nran away quickly, far.";
  other.first_divergence_char = 4;
  CaseResult c;
  c.clusters = {maj, other};
  CHECK(divergence_label(r, c, c.clusters[1]) == "char 4: \"cat sat on the m…\" vs \"dog\\nran away qu…\"");
}

TEST_CASE("an answer regex that matches nothing is explained, not an empty TARa") {
  AuditReport r = small_report();
  r.answer_regex = "(\\d+)";  // no completion holds a digit
  r.thresholds.modes.clear();
  r.thresholds.max_error_rate = 0.5;
  analyze(r);
  const CaseResult& c = r.cases[2];  // p1, batch-invariant: one cluster, no answer anywhere
  REQUIRE(c.tara);
  CHECK(answer_status(c) == "TARa@N = no: answer missing in 4/4 (the extractor matched none of the completions)");
  std::string md = to_markdown(r), h = to_html(r);
  CHECK(md.find("answer missing in 4/4 (the extractor matched none of the completions)") != std::string::npos);
  CHECK(h.find("answer missing in 4/4 (the extractor matched none of the completions)") != std::string::npos);
  CHECK(md.find("→ answer missing") != std::string::npos);
  CHECK(case_summary(c).find("answer missing in 4/4") != std::string::npos);
  // identical outputs without an answer: "no answer", never divergent
  CHECK(c.no_answer);
  CHECK(!c.divergent);
  CHECK(case_verdict(c) == "no answer");
  CHECK(md.find("batch-invariant: NO ANSWER") != std::string::npos);
  CHECK(verdict_cause(r).find("only because the answer is missing") == std::string::npos);
  // some present, some missing
  CaseResult partial;
  partial.n = 5;
  partial.tara = false;
  partial.answer_missing = 2;
  partial.answer_unique = 2;  // one answer plus "none"
  CHECK(answer_status(partial) == "TARa@N = no (1 distinct answer among 3; answer missing in 2/5)");
}

TEST_CASE("Environment section: model, digests, tool version, BLAS, CPU, GPU, OS from the environment record") {
  AuditReport r = small_report();
  r.environment = {
      {"tool", {{"name", "repro-audit"}, {"version", "0.1.0"}, {"commit", "abc123def456"}, {"build", {{"compiler", "gcc 12.2.0"}}}}},
      {"model", {{"path", "/m/stories260K.gguf"}, {"sha256", "270cba1b"}, {"format", "GGUF v3"}, {"arch", "llama"},
                 {"parameters", 292800}}},
      {"digests", {{"prompts_sha256", "64dd8788"}, {"profile_sha256", "cc22d7d5"}, {"model_sha256", "270cba1b"}}},
      {"blas", {{"config", "OpenBLAS 0.3.21 DYNAMIC_ARCH"}, {"threads", 1}}},
      {"cpu", {{"model", "AMD EPYC"}, {"logical_cores", 2}, {"features", {"avx2", "fma"}}}},
      {"gpu", {{"device", {{"name", "NVIDIA H200"}, {"compute_capability", "9.0"}}}, {"driver_version", 13000},
               {"runtime_version", 13000}, {"cublas_version", "13.1.0"}}},
      {"os", {{"distribution", "Debian GNU/Linux 12"}, {"sysname", "Linux"}, {"release", "6.1"}, {"machine", "x86_64"}}}};
  std::string md = to_markdown(r), h = to_html(r);
  for (const std::string& want :
       {std::string("stories260K.gguf (GGUF v3, llama, 292,800 parameters)"), std::string("270cba1b"),
        std::string("64dd8788"), std::string("cc22d7d5"), std::string("repro-audit 0.1.0, commit abc123def456"),
        std::string("OpenBLAS 0.3.21"), std::string("AMD EPYC, 2 logical cores, features avx2 fma"),
        std::string("NVIDIA H200, compute capability 9.0, driver 13000, CUDA runtime 13000, cuBLAS 13.1.0"),
        std::string("Debian GNU/Linux 12, Linux 6.1")}) {
    CAPTURE(want);
    CHECK(h.find(want) != std::string::npos);
    std::string md_want = want;  // Markdown escapes '_'
    CHECK(md.find(md_want) != std::string::npos);
  }
  CHECK(md.find("## Environment") != std::string::npos);
  CHECK(h.find("<table id=\"environment\">") != std::string::npos);
  // the real record written by a run has the same sections
  r.environment = environment_record(1);
  auto rows = environment_rows(r);
  std::set<std::string> what;
  for (const auto& [w, v] : rows) what.insert(w);
  for (const char* w : {"tool", "BLAS", "CPU", "GPU", "OS"}) CHECK_MESSAGE(what.count(w) == 1, w);
}

TEST_CASE("endpoint responses: TTFT and system_fingerprint when recorded; tokens/s of endpoints is the probe's") {
  AuditReport r = small_report();
  CHECK(endpoint_table(r).rows.empty());  // a local run records neither
  CHECK(to_markdown(r).find("Endpoint responses") == std::string::npos);
  AuditReport e;
  e.environment = {{"endpoints", {{{"label", "vllm"}, {"url", "http://127.0.0.1:1/v1"}}}}};
  for (int i = 0; i < 4; ++i) {
    Completion c = mk("p1", "vllm", {1, 2, 3}, "abc", 1 + i, i, 0.1);
    c.precision = "";
    c.ttft_s = 0.010 + 0.002 * i;
    c.system_fingerprint = i < 3 ? "fp_abc" : "fp_def";
    c.response_model = "m";
    e.completions.push_back(c);
  }
  analyze(e);
  TextTable t = endpoint_table(e);
  REQUIRE(t.rows.size() == 1);
  CHECK(t.rows[0][0] == "vllm");
  CHECK(t.rows[0][2] == "13.0 ms, 10.0-16.0 ms (4 of 4 streamed)");
  CHECK(t.rows[0][3] == "fp_abc x3, fp_def x1 (2 values: the backend changed during the run)");
  std::string md = to_markdown(e), h = to_html(e);
  CHECK(md.find("fp\\_abc x3") != std::string::npos);
  CHECK(h.find("fp_abc x3") != std::string::npos);
  for (const auto& row : throughput_table(e).rows) CHECK(row[2] == "probe only (fillers not counted)");
}

TEST_CASE("throughput cells: measurements with mean, spread and range; noisy cells marked; cost per batch size") {
  ThroughputRow row;
  const std::vector<std::pair<int64_t, double>> runs = {{100, 1.0}, {100, 0.5}, {300, 1.0}, {50, 0.25}};
  for (auto [t, s] : runs) add_throughput_run(row, t, s);
  add_throughput_run(row, 0, 0.0);  // nothing measured: totals only
  CHECK(row.runs == 4);
  CHECK(row.tokens == 550);
  CHECK(row.seconds == doctest::Approx(2.75));
  CHECK(row.tokens_per_s == doctest::Approx(200.0));
  // per run: 100, 200, 300, 200 tokens/s
  CHECK(row.mean_tokens_per_s == doctest::Approx(200.0));
  CHECK(row.stddev_tokens_per_s == doctest::Approx(std::sqrt(20000.0 / 3)));
  CHECK(row.min_tokens_per_s == doctest::Approx(100.0));
  CHECK(row.max_tokens_per_s == doctest::Approx(300.0));
  // continued from a report read back (resume): the same statistics as one pass
  ThroughputRow a, b;
  for (const auto& [t, s] : runs) add_throughput_run(a, t, s);
  for (size_t i = 0; i < 2; ++i) add_throughput_run(b, runs[i].first, runs[i].second);
  nlohmann::json j = b;
  ThroughputRow back = j.get<ThroughputRow>();
  for (size_t i = 2; i < runs.size(); ++i) add_throughput_run(back, runs[i].first, runs[i].second);
  CHECK(back.runs == a.runs);
  CHECK(back.mean_tokens_per_s == doctest::Approx(a.mean_tokens_per_s));
  CHECK(back.stddev_tokens_per_s == doctest::Approx(a.stddev_tokens_per_s));

  AuditReport r = small_report();
  r.throughput[0].runs = 3;
  r.throughput[0].mean_tokens_per_s = 100;
  r.throughput[0].stddev_tokens_per_s = 30;  // cv 0.3: noisy
  r.throughput[0].min_tokens_per_s = 70;
  r.throughput[0].max_tokens_per_s = 130;
  TextTable t = throughput_table(r);
  CHECK(t.rows[0][7] == "100.0 ± 30.0 *");
  CHECK(t.rows[0][8] == "70.0-130.0");
  CHECK(t.rows[1][7] == "200.0 ± 0.0");
  CHECK(t.rows[0][2] == "whole batch");
  auto cost = throughput_cost_lines(r);
  REQUIRE(cost.size() == 1);
  // One ratio per cell (its batch's tokens/s against default's mean in the same context): 4 cells at
  // batch 1 of 75 / 100 tokens/s, 4 at batch 8 of 960 / 1600; mean and sample standard deviation.
  const ModeSummary& bi = r.summary.modes[1];
  REQUIRE(bi.mode == "batch-invariant");
  CHECK(bi.throughput_ratio_n == 8);
  CHECK(*bi.throughput_ratio == doctest::Approx(0.675));
  CHECK(*bi.throughput_ratio_sd == doctest::Approx(0.075 * std::sqrt(8.0 / 7.0)));
  CHECK(mode_speed_text(bi) == "0.67x ±0.08 (n 8)");
  CHECK(cost[0] == "batch-invariant: 0.67x ±0.08 the throughput of default (mean ± sd over 8 cells, each against "
                   "the mean of default in the same context); per batch size: batch 1: 0.75x ±0.00, 8: 0.60x ±0.00");
  // the same definition in the trade-off table and the headline
  REQUIRE(r.tradeoff.size() >= 2);
  CHECK(r.tradeoff[1].speed_n == 8);
  CHECK(*r.tradeoff[1].speed_mean == doctest::Approx(*bi.throughput_ratio));
  CHECK(to_markdown(r).find(cost[0]) != std::string::npos);
  CHECK(to_html(r).find(cost[0]) != std::string::npos);
  // a report written before the statistics existed still renders
  AuditReport old = load_report((kData / "report-small.json").string());
  for (auto& row2 : old.throughput) row2.runs = 0;
  CHECK(throughput_table(old).rows[0][6] == "-");
}

TEST_CASE("charts: distinct tick labels, one colour per mode everywhere, drift share per factor, no empty panels") {
  AuditReport r = small_report();
  std::string h = to_html(r);
  auto ticks = chart_ticks(h);
  for (const char* id : {"chart-unique", "chart-divergence", "chart-drift-batch_size", "chart-drift-position",
                         "chart-throughput"})
    CHECK_MESSAGE(ticks.count(id) == 1, id);
  for (const auto& [id, labels] : ticks) {
    CAPTURE(id);
    REQUIRE(labels.size() == 5);
    for (size_t i = 1; i < labels.size(); ++i) CHECK(labels[i] != labels[i - 1]);
  }
  // the divergence chart counts completions: whole-number ticks only (never 0.5 of a completion)
  CHECK(ticks["chart-divergence"] == std::vector<std::string>{"0", "1", "2", "3", "4"});
  CHECK(ticks["chart-divergent-cases"] == std::vector<std::string>{"0", "1", "2", "3", "4"});
  // a 1e-6 axis keeps its digits
  AuditReport tiny = r;
  for (auto& t : tiny.throughput) t.tokens_per_s *= 1e-8;
  auto tt = chart_ticks(to_html(tiny))["chart-throughput"];
  CHECK(tt == std::vector<std::string>{"0", "5e-07", "1e-06", "1.5e-06", "2e-06"});
  // a 0..1 axis writes 0.25 and 0.75 exactly; shares read as whole percentages
  CHECK(ticks["chart-unique"] == std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1"});
  CHECK(ticks["chart-drift-batch_size"] == std::vector<std::string>{"0%", "25%", "50%", "75%", "100%"});
  AuditReport one = r;
  for (auto& t : one.throughput) t.tokens_per_s = 0.9;
  CHECK(chart_ticks(to_html(one))["chart-throughput"] == std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1"});
  // many series: the legend wraps onto more lines inside the chart, above the plot
  AuditReport many = r;
  for (int i = 0; i < 6; ++i) {
    ThroughputRow t = many.throughput[0];
    t.mode = "endpoint-with-a-long-label-" + std::to_string(i);
    many.throughput.push_back(t);
  }
  std::string hm = to_html(many);
  size_t fig = hm.find("id=\"chart-throughput\"");
  REQUIRE(fig != std::string::npos);
  std::string chart = hm.substr(fig, hm.find("</figure>", fig) - fig);
  std::set<std::string> legend_rows;
  for (size_t p = 0; (p = chart.find("class=\"lg\"", p)) != std::string::npos; ++p) {
    size_t x = chart.rfind("<text x=\"", p) + 9;
    double lx = std::stod(chart.substr(x));
    size_t y = chart.find("y=\"", x) + 3;
    legend_rows.insert(chart.substr(y, chart.find('"', y) - y));
    CHECK(lx + 7.0 * 29 < 620);  // "endpoint-with-a-long-label-N" fits
  }
  CHECK(legend_rows.size() >= 3);
  // one colour per mode in every chart, distinct between modes
  auto colours = bar_colours(h);
  REQUIRE(colours.count("default") == 1);
  REQUIRE(colours.count("batch-invariant") == 1);
  CHECK(colours["default"].size() == 1);
  CHECK(colours["batch-invariant"].size() == 1);
  CHECK(*colours["default"].begin() != *colours["batch-invariant"].begin());
  // share differing from the reference per batch size: default at 8 differs in all 4 completions
  // (bitwise), 2 in tokens; the light and the solid bar carry both
  CHECK(h.find("<title>default @ 8: 100% (solid: 50%)</title>") != std::string::npos);
  // nothing diverged: no empty divergence panel, one line instead
  AuditReport calm = r;
  calm.completions.erase(std::remove_if(calm.completions.begin(), calm.completions.end(),
                                        [](const Completion& c) { return c.prompt_id == "p1" && c.mode == "default"; }),
                         calm.completions.end());
  calm.throughput.clear();
  analyze(calm);
  std::string hc = to_html(calm);
  CHECK(hc.find("id=\"chart-divergence\"") == std::string::npos);
  CHECK(hc.find("no completion differs from its case&#39;s majority in tokens") != std::string::npos);
  CHECK(hc.find("no data") == std::string::npos);
}

TEST_CASE("terminal summary, drift text and progress line show control bytes from prompts files as \\xNN") {
  // A task, variant or prompt id that would set the terminal's title and clear its screen.
  const std::string esc = "\x1b]0;owned\x07\x1b[2J\r";
  const std::string shown = "\\x1b]0;owned\\x07\\x1b[2J\\x0d";
  AuditReport r;
  TaskVariants t;
  t.task = "task" + esc;
  VariantResult v;
  v.task = t.task;
  v.variant = "variant" + esc;
  v.prompt_id = "p" + esc;
  t.variants.push_back(v);
  t.overall.task = t.task;
  t.finding = "finding" + esc;
  r.variants.push_back(t);
  CaseResult c;
  c.prompt_id = "p" + esc;
  c.decoding_id = "greedy" + esc;
  c.mode = "mode" + esc;
  c.divergent = true;
  r.cases.push_back(c);
  const std::string out = to_terminal(r);
  CAPTURE(out);
  for (char ctl : {'\x1b', '\x07', '\r'}) CHECK(out.find(ctl) == std::string::npos);
  CHECK(out.find("task" + shown) != std::string::npos);
  CHECK(out.find("variant" + shown) != std::string::npos);
  CHECK(out.find("finding" + shown) != std::string::npos);
  CHECK(out.find("greedy" + shown) != std::string::npos);
  CHECK(out.find('\n') != std::string::npos);  // lines stay lines

  Drift d;
  d.cases.push_back({"p" + esc, "greedy", "mode", "changed", {"unique 1 -> 3"}});
  const std::string dt = drift_text(d, "a" + esc, "b");
  CHECK(dt.find('\x1b') == std::string::npos);
  CHECK(dt.find("changed p" + shown) != std::string::npos);

  ProgressState p;
  p.total_cells = 2;
  p.done_cells = 1;
  p.current = "p" + esc;
  const std::string line = progress_line(p);
  CHECK(line.find('\x1b') == std::string::npos);
  CHECK(line.find("p" + shown) != std::string::npos);
}

TEST_CASE("a NUL in a prompt id or text is kept through run and shown as \\x00 by diff and report, not cut there") {
  auto dir = test::scratch_dir("report-nul");
  {
    std::ofstream f(dir / "p.jsonl", std::ios::binary);
    f << R"({"id":"a\u0000b","prompt":"Lily\u0000 went to the park"})" << "\n";
  }
  for (int n : {2, 3}) {
    test::CmdResult r = test::run_cli("run -q --prompts '" + (dir / "p.jsonl").string() + "' --max-tokens " +
                                      std::to_string(n) + " --repeats 1 --batch-sizes 1 --modes batch-invariant --out '" +
                                      (dir / ("r" + std::to_string(n))).string() + "'");
    REQUIRE(r.code == 0);
  }
  const nlohmann::json rep = nlohmann::json::parse(test::slurp(dir / "r2" / "report.json"));
  CHECK(rep["prompts"][std::string("a\0b", 3)] == std::string("Lily\0 went to the park", 22));
  test::CmdResult d = test::run_cli("diff '" + (dir / "r2" / "report.json").string() + "' '" +
                                    (dir / "r3" / "report.json").string() + "'");
  CAPTURE(d.output);
  CHECK(d.output.find('\0') == std::string::npos);
  // Both cases (f32 and bf16) are listed in full after the NUL of their id.
  size_t at = 0, listed = 0;
  while ((at = d.output.find("changed a\\x00b [greedy] batch-invariant", at)) != std::string::npos) ++listed, ++at;
  CHECK(listed == 2);
}

TEST_CASE("the banner states each mode's verdict and what the gate covers; what to do, in every format") {
  // The fixture: default diverges in 1 of 2 cases, the gate covers batch-invariant only, which reproduces.
  // (Its one failed request of 9 is tolerated here, so default's own verdict is its divergence.)
  AuditReport r = small_report();
  r.thresholds.max_error_rate = 0.5;
  analyze(r);
  VerdictBanner b = verdict_banner(r);
  CHECK(b.title == "Verdict: REPRODUCIBLE (gate: batch-invariant); not gated: default DIVERGENT");
  CHECK(b.mixed);
  REQUIRE(b.modes.size() == 2);
  CHECK(b.modes[0].label == "default");
  CHECK(b.modes[0].verdict == "DIVERGENT");
  CHECK(b.modes[0].detail == "1 of 2 cases divergent, 1 error, not gated");
  CHECK(b.modes[1].detail == "0 of 2 cases divergent, gated: pass");
  CHECK(b.gate.find("The gate covers batch-invariant only") == 0);
  CHECK(b.gate.find("default is reported but not gated") != std::string::npos);

  // The advice follows from the findings: batch-invariant reproduced where default diverged, at its
  // measured throughput ratio with its spread (the same ratio as the headline's).
  REQUIRE(!r.advice.empty());
  const Advice& a = r.advice[0];
  CHECK(a.about == "default");
  CHECK(a.action.find("Use batch-invariant kernels") == 0);
  CHECK(a.because.find("default diverged in 1 of 2 cases; it follows batch_size (1 of 1)") == 0);
  CHECK(a.because.find("batch-invariant reproduced all 2 of 2 cases on the same prompts") != std::string::npos);
  CHECK(a.cost.find("batch-invariant ran at 0.67x ±0.08 the throughput of default (mean ± sd over 8 cells") == 0);

  r.throughput[0].runs = 3;  // a cell with spread: its error bar
  r.throughput[0].stddev_tokens_per_s = 10;
  const std::string md = to_markdown(r), html = to_html(r), junit = to_junit(r), term = to_terminal(r);
  for (const std::string* text : {&md, &html, &term}) {
    CHECK(text->find("not gated: default DIVERGENT") != std::string::npos);
    CHECK(text->find("Use batch-invariant kernels") != std::string::npos);
  }
  CHECK(md.find("## What to do") < md.find("## Reproducibility and throughput per mode"));
  CHECK(html.find("id=\"advice\"") < html.find("id=\"headline\""));
  CHECK(html.find("id=\"chart-divergent-cases\"") < html.find("Attribution to factors"));
  CHECK(html.find("id=\"charts\"") < html.find("Attribution to factors"));
  CHECK(term.find("The gate covers batch-invariant only") != std::string::npos);
  // a table of contents, and the cases: a CSS-only "only divergent" filter, reproducible cases collapsed
  CHECK(html.find("<nav id=\"toc\">") != std::string::npos);
  CHECK(html.find("<input type=\"checkbox\" id=\"only-divergent\">") != std::string::npos);
  CHECK(html.find("#only-divergent:checked+label+#cases details.case-ok{display:none}") != std::string::npos);
  CHECK(html.find("<details class=\"case case-ok\"><summary>") != std::string::npos);     // collapsed
  CHECK(html.find("<details class=\"case case-flagged\" open><summary>") != std::string::npos);
  // error bars on throughput: the fixture's cells ran twice
  CHECK(html.find("<path class=\"err\"") != std::string::npos);
  CHECK(junit.find("<property name=\"verdict\" value=\"DIVERGENT: 1 of 2 cases divergent, 1 error, not gated\"/>") !=
        std::string::npos);
  CHECK(junit.find("<property name=\"advice.1\" value=\"default: Use batch-invariant kernels") != std::string::npos);
  // nothing printed beside the measurements without a source
  for (const std::string* text : {&md, &html, &junit, &term}) CHECK(text->find("published") == std::string::npos);
  // the chart that shows divergence counts whole cases: integer ticks only
  const size_t chart = html.find("id=\"chart-divergent-cases\"");
  const std::string svg = html.substr(chart, html.find("</svg>", chart) - chart);
  CHECK(svg.find("class=\"yl\">0.5<") == std::string::npos);
  CHECK(svg.find("class=\"yl\">4<") != std::string::npos);
  CHECK(svg.find("fill=\"#c0392b\"") != std::string::npos);  // divergent cases in red
  CHECK(svg.find("fill=\"#1e8449\"") != std::string::npos);  // reproducible ones in green
  // colours by meaning: red and green are no mode's colour in the other charts
  const size_t others = html.find("id=\"charts\"");
  const std::string rest = html.substr(others, html.find("id=\"tradeoff-h\"") - others);
  CHECK(rest.find("<svg") != std::string::npos);
  CHECK(rest.find("#c0392b") == std::string::npos);
  CHECK(rest.find("#1e8449") == std::string::npos);
}

TEST_CASE("JUnit failures name the factor the divergence follows") {
  AuditReport r = small_report();
  r.thresholds.modes.clear();  // gate every mode: default's divergent case fails
  analyze(r);
  const std::string junit = to_junit(r);
  CHECK(junit.find("<failure message=\"explained by batch_size") != std::string::npos);
  CHECK(junit.find("(each value maps to one cluster); 2 unique of 4") != std::string::npos);
}

TEST_CASE("Markdown keeps arrows and ampersands readable: no -&gt;") {
  AuditReport r = small_report();
  r.prompts["p1"] = "a -> b & c &amp; <i>";
  r.cases[0].prompt_text = r.prompts["p1"];
  const std::string md = to_markdown(r);
  CHECK(md.find("a -> b & c \\&amp; \\<i>") != std::string::npos);
  CHECK(md.find("-&gt;") == std::string::npos);
}

TEST_CASE("report.json writes floats with their own shortest digits, and reads the same bits back") {
  AuditReport r = small_report();
  Completion& c = r.completions[0];
  c.logprobs = {-1.2345f, -0.1f, 3.0e-8f, -1e-45f, -123456.78f};
  // many floats: every bit pattern class (small, large, subnormal, negative), read back bitwise equal
  uint32_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &x, sizeof f);
    if (std::isfinite(f)) c.margins.push_back(f);
  }
  const std::string text = to_json(r);
  CHECK(text.find("-1.2345,") != std::string::npos);
  CHECK(text.find("-1.2345000") == std::string::npos);
  CHECK(text.find("-0.1,") != std::string::npos);
  AuditReport back = from_json(text, "test");
  const Completion& b = back.completions[0];
  REQUIRE(b.logprobs.size() == c.logprobs.size());
  CHECK(std::memcmp(b.logprobs.data(), c.logprobs.data(), c.logprobs.size() * sizeof(float)) == 0);
  REQUIRE(b.margins.size() == c.margins.size());
  CHECK(std::memcmp(b.margins.data(), c.margins.data(), c.margins.size() * sizeof(float)) == 0);
  CHECK(verify_report_digest(text));
}

TEST_CASE("endpoints: divergent tokens shown as the text their logprobs named, not bare ids") {
  AuditReport r;
  r.environment = {{"endpoints", {{{"label", "ep"}, {"url", "http://127.0.0.1:9"}, {"api", "chat"},
                                   {"api_model", "m"}, {"provider", "vllm"}}}}};
  r.prompts = {{"p", "Once upon a time"}};
  for (int i = 0; i < 4; ++i) {
    Completion c;
    c.prompt_id = "p";
    c.decoding_id = "greedy";
    c.mode = "ep";
    c.batch_size = i < 2 ? 1 : 8;
    c.repeat = i % 2;
    c.response_id = "id-" + std::to_string(i);
    c.tokens = {5, i < 2 ? 7 : 9};
    c.token_pieces = {" there", i < 2 ? " was" : " lived"};
    c.text = c.token_pieces[0] + c.token_pieces[1];
    c.logprobs = {-0.5f, -0.75f};
    r.completions.push_back(c);
  }
  analyze(r);
  REQUIRE(r.cases.size() == 1);
  REQUIRE(r.cases[0].clusters.size() == 2);
  CHECK(r.token_text["7"] == " was");
  CHECK(r.token_text["9"] == " lived");
  const std::string label = divergence_label(r, r.cases[0], r.cases[0].clusters[1]);
  CAPTURE(label);
  CHECK(label.find("\" was\" (id 7)") != std::string::npos);
  CHECK(label.find("\" lived\" (id 9)") != std::string::npos);
  // the pieces survive report.json
  AuditReport back = from_json(to_json(r), "test");
  CHECK(back.completions[0].token_pieces == r.completions[0].token_pieces);
  // and the divergent case gets a curl reproducer for the vLLM endpoint, with the advice to turn on its switch
  const std::string& cmd = r.cases[0].clusters[0].repro_command;
  CHECK(cmd.rfind("curl -sS 'http://127.0.0.1:9/v1/chat/completions'", 0) == 0);
  CHECK(cmd.find("\"Authorization: Bearer $OPENAI_API_KEY\"") != std::string::npos);
  CHECK(cmd.find("Once upon a time") != std::string::npos);
}

TEST_CASE("advice: keep f32 activations where bf16 diverged and f32 did not, at the measured cost") {
  AuditReport r;
  r.plan = {{"repeats", 2}, {"batch_sizes", {1, 8}}, {"modes", {"default"}}, {"precisions", {"f32", "bf16"}}};
  r.prompts = {{"p1", "Once upon a time"}};
  r.thresholds.modes = {"default"};
  const std::vector<int> a{10, 11, 12, 13}, b{10, 11, 20, 21};
  int rep = 0;
  for (int bs : {1, 8})
    for (int i = 0; i < 2; ++i, ++rep)
      for (const char* prec : {"f32", "bf16"}) {
        const bool bf16 = std::string(prec) == "bf16";
        Completion c = mk("p1", "default", bf16 && bs == 8 ? b : a, "t", bs, rep, bf16 ? 0.05 : 0.1);
        c.precision = prec;
        r.completions.push_back(c);
      }
  analyze(r);
  const Advice* keep = nullptr;
  for (const auto& adv : r.advice)
    if (adv.action.rfind("Keep f32 activations", 0) == 0) keep = &adv;
  REQUIRE(keep != nullptr);
  CHECK(keep->about == "default (bf16)");
  CHECK(keep->because == "default (bf16) diverged in 1 of 1 case; default (f32) diverged in none of its 1 case");
  // f32 took twice as long per completion here: its measured ratio against bf16, with the spread
  CHECK(keep->cost.rfind("default (f32) ran at 0.50x ±0.00 the throughput of default (bf16)", 0) == 0);
  // f32 diverged too: no such advice
  for (auto& c : r.completions)
    if (c.precision == "f32" && c.batch_size == 8) c.tokens = b;
  analyze(r);
  for (const auto& adv : r.advice) CHECK(adv.action.find("Keep f32") == std::string::npos);
}

TEST_CASE("advice: pin OPENBLAS_CORETYPE where replicated hosts disagree in default mode, in every format") {
  AuditReport r = small_report();
  MergeInfo mi;
  mi.replicate = true;
  mi.count = 3;
  mi.hosts.push_back({"node-a", 2, 2, 0, 0, ""});
  mi.hosts.push_back({"node-b", 2, 0, 1, 1, "p1 [greedy] default: token 3 differs"});
  mi.hosts.push_back({"node-c", 2, 2, 0, 0, ""});
  r.merge = mi;
  compute_advice(r);
  std::vector<const Advice*> pin;
  for (const auto& adv : r.advice)
    if (adv.action.find("OPENBLAS_CORETYPE") != std::string::npos) pin.push_back(&adv);
  REQUIRE(pin.size() == 1);  // only the host that differs
  CHECK(pin[0]->about == "node-b");
  CHECK(pin[0]->because ==
        "host node-b differs from the first host in 2 of the 2 cases run on both (tokens in 1, bits only in 1); "
        "p1 [greedy] default: token 3 differs");
  CHECK(pin[0]->cost.rfind("not measured", 0) == 0);
  CHECK(to_markdown(r).find("node-b: Pin OPENBLAS\\_CORETYPE to one value") != std::string::npos);  // Markdown escapes _
  for (const std::string& text : {to_html(r), to_terminal(r)})
    CHECK(text.find("node-b: Pin OPENBLAS_CORETYPE to one value") != std::string::npos);
  // without default mode (batch-invariant reads no OpenBLAS kernels) it is not the advice
  r.completions.erase(std::remove_if(r.completions.begin(), r.completions.end(),
                                     [](const Completion& c) { return c.mode == "default"; }),
                      r.completions.end());
  analyze(r);
  compute_advice(r);
  for (const auto& adv : r.advice) CHECK(adv.action.find("OPENBLAS_CORETYPE") == std::string::npos);
}

TEST_CASE("endpoints: a chat prompt's curl reproducer sends its messages, tools and template arguments again") {
  AuditReport r;
  r.environment = {{"endpoints", {{{"label", "ep"}, {"url", "http://127.0.0.1:9"}, {"api", "chat"},
                                   {"api_model", "m"}, {"provider", "vllm"}}}}};
  r.prompts = {{"p", "<rendered>"}};
  r.plan = {{"max_tokens", 8},
            {"prompt_ids", {"p"}},
            {"prompt_messages",
             {{"p", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Weather?"}}}}}},
            {"prompt_chat_extras",
             {{"p",
               {{"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
                {"chat_template_kwargs", {{"enable_thinking", false}}}}}}}};
  for (int i = 0; i < 4; ++i) {
    Completion c;
    c.prompt_id = "p";
    c.decoding_id = "greedy";
    c.mode = "ep";
    c.batch_size = i < 2 ? 1 : 8;
    c.repeat = i % 2;
    c.response_id = "id-" + std::to_string(i);  // an endpoint's completion
    c.tokens = {5, i < 2 ? 7 : 9};
    r.completions.push_back(c);
  }
  analyze(r);
  REQUIRE(r.cases.size() == 1);
  const std::string& cmd = r.cases[0].clusters[0].repro_command;
  CAPTURE(cmd);
  CHECK(cmd.rfind("# tools are recorded with their keys sorted", 0) == 0);
  const size_t d = cmd.find(" -d '");
  REQUIRE(d != std::string::npos);
  const nlohmann::json body = nlohmann::json::parse(cmd.substr(d + 5, cmd.size() - d - 6));
  CHECK(body["messages"] == nlohmann::json::parse(
                                R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Weather?"}])"));
  CHECK(body["tools"][0]["function"]["name"] == "get_weather");
  CHECK(body["chat_template_kwargs"]["enable_thinking"] == false);
  CHECK(body["max_tokens"] == 8);
  CHECK(cmd.find("<rendered>") == std::string::npos);  // not the rendered text as one user message
}
