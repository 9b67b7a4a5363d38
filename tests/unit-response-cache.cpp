// ctest-labels: unit remote
// Response-cache awareness: `repro-audit run --endpoint` (the real binary, libcurl) against the loopback
// fault server acting as a caching gateway (the first answer replayed with its id, X-Cache / Age headers,
// at once) reports the replays in every format; without a cache it reports none.
#include <doctest/doctest.h>

#include "repro/audit/analysis.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/remote/client.hpp"
#include "repro/report/report.hpp"
#include "fault_server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

TEST_CASE("cache_hit_header: hits of the usual cache headers, nothing else") {
  CHECK(cache_hit_header("X-Cache: HIT from edge-3\r\n") == "x-cache: HIT from edge-3");
  CHECK(cache_hit_header("x-cache: MISS") == "");
  CHECK(cache_hit_header("CF-Cache-Status: HIT") == "cf-cache-status: HIT");
  CHECK(cache_hit_header("cf-cache-status: DYNAMIC") == "");
  CHECK(cache_hit_header("X-Cache-Status: stale") == "x-cache-status: stale");
  CHECK(cache_hit_header("Helicone-Cache: HIT") == "helicone-cache: HIT");
  CHECK(cache_hit_header("Age: 31") == "age: 31");
  CHECK(cache_hit_header("age: 0") == "");
  CHECK(cache_hit_header("age: soon") == "");
  CHECK(cache_hit_header("Content-Type: application/json") == "");
  CHECK(cache_hit_header("HTTP/1.1 200 OK") == "");
}

namespace {

struct Run {
  int code;
  std::string stdout_text;
  AuditReport report;
  fs::path out;
};

Run run_against(const test::FaultServer& s, const std::string& name) {
  auto out = test::scratch_dir(name);
  auto res = test::run_cli("run --endpoint cached=" + s.url() +
                           " --api-model fault-model --api completions --concurrency 1 --repeats 4 --max-tokens 8"
                           " --prompt 'Once upon a time' --format json,md,html --out '" + out.string() + "'");
  Run r{res.code, res.output, {}, out};
  if (fs::exists(out / "report.json")) r.report = load_report((out / "report.json").string());
  return r;
}

const ResponseCacheSigns& signs(const Run& r) {
  REQUIRE(r.report.summary.modes.size() == 1);
  REQUIRE(r.report.summary.modes[0].response_cache.has_value());
  return *r.report.summary.modes[0].response_cache;
}

}  // namespace

TEST_CASE("run --endpoint behind a caching gateway: replays found by header, id and latency, in every format") {
  test::FaultServerOptions o;
  o.response_cache = true;
  o.cache_miss_s = 3.0;  // hits skip this: far beyond the 5% / 100 ms near-zero latency threshold (loopback hits
                         // can take ~40 ms: delayed ACKs)
  test::FaultServer s(o);
  Run r = run_against(s, "response-cache-hit");
  CAPTURE(r.stdout_text);
  REQUIRE(r.code == 4);  // concurrency 1 only: UNVERIFIED (nothing co-batched), every report written
  const ResponseCacheSigns& c = signs(r);
  const int n = r.report.summary.completions;
  REQUIRE(n >= 5);  // 4 probes + the cold/warm cache probe
  // Every request after the first was answered from the cache: the first is a miss.
  CHECK(c.completions == n);
  CHECK(c.header_hits == n - 1);
  CHECK(c.repeated_ids == n - 1);
  CHECK(c.fast_replays == n - 1);
  CHECK(c.replayed.k == n - 1);
  CHECK(c.replayed.n == n);
  REQUIRE(!c.headers.empty());
  CHECK(c.headers[0].find("x-cache: HIT") != std::string::npos);
  CHECK(c.headers[0].find("age: 1") != std::string::npos);
  CHECK(c.finding.find("'cached': " + std::to_string(n - 1) + " of " + std::to_string(n) +
                       " completions look replayed from a response cache") != std::string::npos);
  CHECK(c.finding.find("hides nondeterminism") != std::string::npos);
  int with_header = 0;
  for (const auto& x : r.report.completions) with_header += x.cache_header.empty() ? 0 : 1;
  CHECK(with_header == n - 1);
  // Every format says so: JSON (above, read back through the schema), Markdown, HTML, terminal.
  const std::string md = test::slurp(r.out / "report.md"), html = test::slurp(r.out / "report.html");
  CHECK(md.find("## Response cache") != std::string::npos);
  CHECK(md.find("- **Finding:** 'cached': ") != std::string::npos);
  CHECK(html.find("<table id=\"response-cache\">") != std::string::npos);
  CHECK(html.find("look replayed from a response cache") != std::string::npos);
  CHECK(r.stdout_text.find("response cache:") != std::string::npos);
  CHECK(r.stdout_text.find("finding: 'cached': ") != std::string::npos);
}

TEST_CASE("a cache without headers is still found by its repeated ids and near-zero latency") {
  test::FaultServerOptions o;
  o.response_cache = true;
  o.cache_miss_s = 3.0;
  o.cache_headers = false;
  test::FaultServer s(o);
  Run r = run_against(s, "response-cache-silent");
  CAPTURE(r.stdout_text);
  REQUIRE(r.code == 4);  // concurrency 1 only: UNVERIFIED (nothing co-batched), every report written
  const ResponseCacheSigns& c = signs(r);
  const int n = r.report.summary.completions;
  CHECK(c.header_hits == 0);
  CHECK(c.headers.empty());
  CHECK(c.repeated_ids == n - 1);
  CHECK(c.fast_replays == n - 1);
  CHECK(c.replayed.k == n - 1);
  CHECK(c.finding.find("repeated response id on " + std::to_string(n - 1)) != std::string::npos);
}

TEST_CASE("no cache: no replay is reported") {
  test::FaultServer s;
  Run r = run_against(s, "response-cache-none");
  CAPTURE(r.stdout_text);
  REQUIRE(r.code == 4);  // concurrency 1 only: UNVERIFIED (nothing co-batched), every report written
  const ResponseCacheSigns& c = signs(r);
  CHECK(c.completions == r.report.summary.completions);
  CHECK(c.replayed.k == 0);
  CHECK(c.finding.empty());
  CHECK(r.stdout_text.find("response cache") == std::string::npos);  // the terminal shows the table only with a sign
  CHECK(test::slurp(r.out / "report.md").find("## Response cache") != std::string::npos);
  CHECK(test::slurp(r.out / "report.md").find("completions look replayed") == std::string::npos);
}

TEST_CASE("latencies compare within a concurrency level: requests alone are not replays next to loaded ones") {
  // One case, one output: 4 requests alone at 20 ms, 4 among 32 at 1.5 s; distinct ids, no cache headers.
  AuditReport r;
  for (int level : {1, 32})
    for (int k = 0; k < 4; ++k) {
      Completion c;
      c.prompt_id = "p";
      c.decoding_id = "greedy";
      c.mode = "serve";
      c.batch_size = level;
      c.repeat = k;
      c.text = "the same answer";
      c.tokens_known = false;
      c.response_id = "cmpl-" + std::to_string(level) + "-" + std::to_string(k);
      c.latency_s = level == 1 ? 0.02 : 1.5;
      c.completion_tokens = 3;
      r.completions.push_back(c);
    }
  analyze(r);
  REQUIRE(r.summary.modes.size() == 1);
  REQUIRE(r.summary.modes[0].response_cache.has_value());
  CHECK(r.summary.modes[0].response_cache->fast_replays == 0);
  CHECK(r.summary.modes[0].response_cache->finding.empty());
  // Within one level, two near-instant answers next to slow ones of the same output are still a sign.
  r.completions[4].latency_s = r.completions[5].latency_s = 0.01;
  analyze(r);
  CHECK(r.summary.modes[0].response_cache->fast_replays == 2);
}

TEST_CASE("a confirmed replay changes the verdict: reproducible outputs from a cache are UNVERIFIED, exit 4") {
  // Four identical answers of one endpoint; the analysis alone (no co-batching record, so only the cache
  // can make it unverified).
  auto report = [](bool header, bool same_id) {
    AuditReport r;
    r.environment = {{"endpoints", {{{"label", "gw"}, {"url", "http://127.0.0.1:9"}, {"api", "completions"},
                                     {"api_model", "m"}, {"provider", "openai"}}}}};
    r.prompts = {{"p", "Once upon a time"}};
    for (int i = 0; i < 4; ++i) {
      Completion c;
      c.prompt_id = "p";
      c.decoding_id = "greedy";
      c.mode = "gw";
      c.batch_size = 1;
      c.repeat = i;
      c.tokens_known = false;
      c.text = "the same answer";
      c.response_id = same_id && i > 0 ? "id-0" : "id-" + std::to_string(i);
      c.latency_s = 0.5;
      if (header && i > 0) c.cache_header = "x-cache: HIT";
      r.completions.push_back(c);
    }
    analyze(r);
    return r;
  };
  AuditReport plain = report(false, false);
  REQUIRE(plain.summary.modes.size() == 1);
  CHECK(plain.summary.modes[0].verdict == "reproducible");
  CHECK(exit_code_for(plain) == 0);

  for (auto [header, same_id] : {std::pair{true, false}, std::pair{false, true}}) {
    CAPTURE(header);
    AuditReport r = report(header, same_id);
    CHECK(r.summary.modes[0].verdict == "unverified");
    CHECK(r.summary.verdict == "unverified");
    CHECK(exit_code_for(r) == 4);
    CHECK(verdict_cause(r).find("look replayed from a response cache") != std::string::npos);
    CHECK(to_junit(r).find("name=\"response cache\"") != std::string::npos);
    bool advice = false;
    for (const auto& a : r.advice) advice = advice || a.action.find("Turn off the response cache") != std::string::npos;
    CHECK(advice);
  }
}
