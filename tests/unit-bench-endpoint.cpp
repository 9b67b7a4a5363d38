// ctest-labels: model remote
// `repro-audit bench --endpoint` (the real binary, libcurl) against two `repro-audit serve` instances
// (the real engine on stories260K, cpp-httplib) on loopback: every concurrency level and endpoint gets
// its warm-up and measured runs, the counts in the JSON add up, a reused connection answers without
// a delayed-ACK stall, a dead endpoint exits 3 naming the failure, and flags of the other bench
// mode are refused with exit 2.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "repro/model/model.hpp"
#include "repro/remote/load.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

TEST_CASE("quantile interpolates between closest ranks") {
  CHECK(quantile({}, 0.5) == 0.0);
  CHECK(quantile({3.0}, 0.95) == 3.0);
  CHECK(quantile({4.0, 1.0, 3.0, 2.0}, 0.0) == 1.0);
  CHECK(quantile({4.0, 1.0, 3.0, 2.0}, 1.0) == 4.0);
  CHECK(quantile({4.0, 1.0, 3.0, 2.0}, 0.5) == doctest::Approx(2.5));
  CHECK(quantile({1.0, 2.0, 3.0, 4.0, 5.0}, 0.95) == doctest::Approx(4.8));
}

TEST_CASE("bench --endpoint: two servers side by side at two concurrency levels; the JSON adds up") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.max_batch = 8;
  Server inv(*model, {Mode::BatchInvariant, 1}, so), def(*model, {Mode::Default, 1}, so);
  inv.start();
  def.start();
  auto out = test::scratch_dir("bench-endpoint");
  const fs::path json = out / "bench.json";
  auto r = test::run_cli("bench --endpoint inv=" + inv.url() + " --endpoint def=" + def.url() + " --api-model " +
                         inv.model_name() +
                         " --api completions --concurrency 1,4 --requests 3 --repeats 2 --warmup 1 --max-tokens 8"
                         " --extra-body '{\"ignore_eos\":true}' --json '" + json.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("concurrency 1:") != std::string::npos);
  CHECK(r.output.find("concurrency 4:") != std::string::npos);
  CHECK(r.output.find("completion tokens/s") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(test::slurp(json));
  CHECK(j["mode"] == "endpoint");
  CHECK(j["failed"] == 0);
  REQUIRE(j["rows"].size() == 4);
  for (const auto& row : j["rows"]) {
    CAPTURE(row.dump());
    const int c = row["concurrency"];
    CHECK(row["requests"] == c * 3 * 2);  // streams x --requests x --repeats
    CHECK(row["failed"] == 0);
    CHECK(row["completion_tokens"] == c * 3 * 2 * 8);  // ignore_eos: every request makes --max-tokens tokens
    CHECK(row["completion_tokens_per_request"].get<double>() == doctest::Approx(8.0));
    CHECK(row["requests_per_s"]["runs"].size() == 2);
    const double rq = row["requests_per_s"]["mean"], tk = row["completion_tokens_per_s"]["mean"];
    CHECK(rq > 0);
    CHECK(tk == doctest::Approx(rq * 8).epsilon(0.01));
    CHECK(row["latency_s"]["p50"].get<double>() > 0);
    CHECK(row["latency_s"]["p95"].get<double>() >= row["latency_s"]["p50"].get<double>());
  }
  CHECK(j["rows"][0]["endpoint"] == "inv");
  CHECK(j["rows"][0]["tokens_per_s_vs_first"].get<double>() == doctest::Approx(1.0));
  // 4 streams really were in flight together on each server.
  CHECK(inv.stats().max_batch_seen > 1);
  CHECK(def.stats().max_batch_seen > 1);
  inv.stop();
  def.stop();
}

TEST_CASE("serve answers a reused connection without a delayed-ACK stall (TCP_NODELAY)") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  EndpointSpec spec = parse_endpoint_arg("s=" + server.url());
  spec.api = "completions";
  spec.api_model = server.model_name();
  RequestParams p;
  p.prompt = "Once upon a time";
  p.decoding = RequestDecoding{"greedy", 0.0, 1.0, 0, 1};
  // One stream, 12 requests back to back on one keep-alive connection. Each takes about a
  // millisecond here; with Nagle on the server socket every one after the first waited for the
  // client's delayed ACK (40 ms or more on Linux).
  LoadRun run = run_load(spec, p, 1, 12);
  CHECK(run.succeeded == 12);
  CHECK(run.failed == 0);
  CHECK(quantile(run.latency_s, 0.5) < 0.030);
  server.stop();
}

TEST_CASE("bench --endpoint: a dead endpoint exits 3 naming the failure; mixed-up flags exit 2") {
  auto out = test::scratch_dir("bench-endpoint-errors");
  // Nothing listens on port 1 of loopback: connection refused.
  auto r = test::run_cli("bench --endpoint dead=http://127.0.0.1:1 --api-model m --api completions --concurrency 2 "
                         "--requests 1 --repeats 2 --warmup 0 --max-retries 0 --timeout 5 --json '" +
                         (out / "dead.json").string() + "'");
  INFO(r.output);
  CHECK(r.code == 3);
  CHECK(r.output.find("error: 4 requests failed (first: dead: connect") != std::string::npos);
  // The figures that were measured are still written.
  nlohmann::json j = nlohmann::json::parse(test::slurp(out / "dead.json"));
  CHECK(j["failed"] == 4);
  CHECK(j["rows"][0]["errors"]["connect"] == 4);

  struct Bad {
    const char* args;
    const char* says;
  };
  for (const Bad& b : {Bad{"bench --endpoint http://127.0.0.1:1 --api-model m --model x.gguf", "--model sets up the local engine"},
                       Bad{"bench --endpoint http://127.0.0.1:1 --api-model m --batch-sizes 8", "--batch-sizes sets up"},
                       Bad{"bench --concurrency 8", "--concurrency is for a server under load: give --endpoint"},
                       Bad{"bench --extra-body '{}'", "--extra-body is for a server under load"},
                       Bad{"bench --endpoint http://127.0.0.1:1 --api-model m --concurrency 0", "--concurrency '0'"},
                       Bad{"bench --endpoint http://127.0.0.1:1 --api-model m --requests 0", "--requests must be"},
                       Bad{"bench --endpoint http://127.0.0.1:1", "--api-model"},
                       Bad{"bench --endpoint a=http://127.0.0.1:1 --endpoint a=http://127.0.0.1:2 --api-model m",
                           "label 'a' is used twice"}}) {
    CAPTURE(b.args);
    auto e = test::run_cli(b.args);
    CHECK(e.code == 2);
    CHECK(e.output.find(b.says) != std::string::npos);
  }
}
