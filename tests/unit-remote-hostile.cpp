// ctest-labels: unit remote
// The remote client against hostile servers on loopback (tests/fault_server.hpp): endless streams,
// servers that drip bytes, keys echoed near the cut of an error message, keys that would inject
// headers, keys echoed JSON-escaped in response fields, credentials in endpoint URLs and URLs with a
// query string.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fault_server.hpp"
#include "repro/audit/remote_probe.hpp"
#include "repro/common/error.hpp"
#include "repro/remote/client.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
using test::Fault;
using test::FaultServer;
namespace fs = std::filesystem;

namespace {

EndpointSpec spec_for(const FaultServer& s, bool stream) {
  EndpointSpec e = parse_endpoint_arg("hostile=" + s.url());
  e.api_model = "fault-model";
  e.api = "completions";
  e.stream = stream;
  e.max_retries = 0;
  e.backoff_base_s = 0.01;
  return e;
}

RemoteProbe probe_of(const std::string& prompt) {
  RemoteProbe p;
  p.prompt_id = "q";
  p.prompt = prompt;
  p.decoding.id = "greedy";
  p.decoding.max_tokens = 6;
  return p;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }


}  // namespace

TEST_CASE("an endless SSE stream ends at the response size cap, not in memory exhaustion") {
  FaultServer srv;
  srv.set_default(Fault::endless);
  auto spec = spec_for(srv, true);
  spec.max_response_bytes = 1 << 20;
  spec.total_timeout_s = 8;
  const double t0 = now_s();
  auto out = run_remote_probe(spec, probe_of("x"), 1, 1, nullptr, nullptr);
  REQUIRE(out.size() == 1);
  CAPTURE(out[0].error);
  CHECK(out[0].error.find("response larger than 1048576 bytes") != std::string::npos);
  CHECK(now_s() - t0 < 5);
}

TEST_CASE("a server dripping one byte every 0.5 s is bounded by the total per-attempt deadline") {
  FaultServer srv;
  srv.set_default(Fault::drip);
  auto spec = spec_for(srv, false);
  spec.total_timeout_s = 1.5;
  spec.read_timeout_s = 1.5;
  double t0 = now_s();
  auto out = run_remote_probe(spec, probe_of("x"), 1, 1, nullptr, nullptr);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error.rfind("timeout:", 0) == 0);
  CHECK(now_s() - t0 < 3.5);

  // The CLI: --timeout is that total deadline (it used to bound only silence).
  auto dir = test::scratch_dir("remote-drip");
  t0 = now_s();
  auto r = test::run_cli("run --endpoint drip=" + srv.url() +
                         " --api-model m --api completions --timeout 1.5 --max-retries 0 --concurrency 1 -n 1 "
                         "--no-cache-probe --prompt hello --max-tokens 4 -q --out '" +
                         dir.string() + "'");
  CAPTURE(r.output);
  CHECK(now_s() - t0 < 15);
  // The preflight's 1-token request meets the drip first: exit 3 with the timeout as the cause.
  CHECK(r.code == 3);
  CHECK(r.output.find("timeout: curl: Operation timed out") != std::string::npos);
}

TEST_CASE("an error body echoing the key across the 200-character cut leaks no part of it") {
  const std::string key = "sk-LEAKTEST-0123456789abcdef";
  test::FaultServerOptions o;
  o.echo_auth_in_errors = true;
  // The message is pad + "Invalid parameter" + " (received authorization 'Bearer " + key: the key
  // starts at character 195 of it, so a cut at 200 before redaction would keep "sk-LE".
  o.error_pad = 145;
  FaultServer srv(o);
  srv.set_default(Fault::http400);
  auto spec = spec_for(srv, false);
  spec.api_key = key;
  auto out = run_remote_probe(spec, probe_of("x"), 1, 1, nullptr, nullptr);
  REQUIRE(out.size() == 1);
  CAPTURE(out[0].error);
  CHECK(out[0].error.find("HTTP 400") != std::string::npos);
  CHECK(out[0].error.find("sk-LE") == std::string::npos);
  CHECK(out[0].error.find("[REDA") != std::string::npos);
}

TEST_CASE("API keys with control characters are refused (they would inject HTTP headers)") {
  auto dir = test::scratch_dir("remote-keyfile");
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return (dir / name).string();
  };
  CHECK(load_api_key("", write("ok", "sk-good-key\n")) == "sk-good-key");  // a trailing newline is trimmed
  for (const std::string bad : {"sk-abc\r\nX-Evil: 1\n", "sk-abc\nX-Evil: 1", "sk-a\x01" "bc", "sk-a\x7f"}) {
    std::string path = write("bad", bad);
    try {
      load_api_key("", path);
      FAIL("accepted a key with a control character");
    } catch (const UsageError& e) {
      std::string m = e.what();
      CHECK(m.find("control character") != std::string::npos);
      CHECK(m.find(path) != std::string::npos);
      CHECK(m.find("sk-a") == std::string::npos);
    }
  }
  ::setenv("REPRO_TEST_BAD_KEY", "sk-abc\r\nX-Evil: 1 x", 1);
  CHECK_THROWS_WITH_AS(load_api_key("REPRO_TEST_BAD_KEY", ""),
                       doctest::Contains("REPRO_TEST_BAD_KEY (--api-key-env) contains a control character"),
                       UsageError);
  ::unsetenv("REPRO_TEST_BAD_KEY");
  // Through the CLI: exit 2.
  auto r = test::run_cli("run --endpoint http://127.0.0.1:9/v1 --api-model m --api-key-file '" + write("bad2", "k\r\nX: y") +
                         "' -q --out '" + (dir / "out").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("control character") != std::string::npos);
}

TEST_CASE("credentials in endpoint URLs are redacted in every output") {
  CHECK(redact_url("https://api.x.com/v1?api_key=SECRET1&model=m") == "https://api.x.com/v1?api_key=[REDACTED]&model=m");
  CHECK(redact_url("https://u:p@h/v1?x=1&token=T&Sig=S#access_token=A") ==
        "https://[REDACTED]@h/v1?x=1&token=[REDACTED]&Sig=[REDACTED]#access_token=[REDACTED]");
  CHECK(redact_url("http://h/v1?my_api_key=K&keyboard=1") == "http://h/v1?my_api_key=[REDACTED]&keyboard=1");
  CHECK(redact_url("http://h:8000/v1") == "http://h:8000/v1");

  FaultServer srv;
  srv.set_default(Fault::http500);
  auto dir = test::scratch_dir("remote-url-secret");
  const std::string secret = "QSECRET77", secret2 = "PWSECRET88";
  auto r = test::run_cli("run --endpoint '" + srv.url() + "/v1?api_key=" + secret + "&x=1' --endpoint 'b=http://u:" +
                         secret2 + "@127.0.0.1:" + std::to_string(srv.port()) +
                         "/v1' --api-model m --max-retries 0 --concurrency 1 -n 1 --no-cache-probe --prompt hi "
                         "--max-tokens 2 --verbose --out '" + dir.string() + "'");
  CAPTURE(r.output);
  CHECK(r.output.find("api_key=[REDACTED]") != std::string::npos);
  CHECK(r.output.find(secret) == std::string::npos);
  CHECK(r.output.find(secret2) == std::string::npos);
  std::string files = test::slurp_dir(dir);
  CHECK(files.find(secret) == std::string::npos);
  CHECK(files.find(secret2) == std::string::npos);
}

TEST_CASE(
    "a server echoing the key JSON-escaped in id, model and system_fingerprint gets it into no output") {
  const std::string key = "sk-echo-NEVER-IN-REPORT-4d2c1b";
  test::FaultServerOptions fo;
  fo.expected_key = key;
  fo.echo_key_escaped = true;
  FaultServer srv(fo);
  for (const char* mode : {"", " --stream"}) {
    CAPTURE(mode);
    auto dir = test::scratch_dir(std::string("remote-echo-key") + (*mode ? "-stream" : ""));
    auto r = test::run_shell(
        "REPRO_TEST_ECHO_KEY='" + key + "' '" + test::binary() + "' run --endpoint e=" + srv.url() +
        "/v1 --api-model m --api-key-env REPRO_TEST_ECHO_KEY --max-retries 0 --concurrency 1 -n 2"
        " --prompt hi --max-tokens 3 --verbose" +
        mode + " --out '" + dir.string() + "'");
    CAPTURE(r.output);
    CHECK(r.code == 4);  // concurrency 1 only: UNVERIFIED, reports written
    CHECK(r.output.find(key) == std::string::npos);
    // Every format (json, md, html, junit) and nothing else holds the key; the fields were redacted.
    std::string files = test::slurp_dir(dir);
    CHECK(files.find(key) == std::string::npos);
    AuditReport rep = load_report((dir / "report.json").string());
    REQUIRE(!rep.completions.empty());
    for (const auto& c : rep.completions) {
      CHECK(c.error.empty());
      CHECK(c.response_id == "cmpl-[REDACTED]");
      CHECK(c.response_model == "[REDACTED]");
      CHECK(c.system_fingerprint == "fp_[REDACTED]");
    }
  }
}

TEST_CASE(
    "an endpoint URL with a query string: the API path goes before the query, which is kept and redacted") {
  RequestParams p;
  p.prompt = "x";
  p.decoding.id = "g";
  p.decoding.max_tokens = 1;
  EndpointSpec e = parse_endpoint_arg("http://h:1/v1/?api-version=2024-01-01");
  e.api_model = "m";
  CHECK(build_request(e, p).url == "http://h:1/v1/chat/completions?api-version=2024-01-01");
  e.api = "completions";
  CHECK(build_request(e, p).url == "http://h:1/v1/completions?api-version=2024-01-01");
  EndpointSpec bare = parse_endpoint_arg("http://h:1?x=1#frag");
  bare.api_model = "m";
  CHECK(build_request(bare, p).url == "http://h:1/v1/chat/completions?x=1");
  EndpointSpec az = parse_endpoint_arg("https://r.example.com/openai?foo=1");
  az.api_model = "dep";
  az.provider = Provider::azure;
  CHECK(build_request(az, p).url ==
        "https://r.example.com/openai/deployments/dep/chat/completions?api-version=" + az.azure_api_version +
            "&foo=1");
  az.url = "https://r.example.com?api-version=2099-01-01";
  CHECK(build_request(az, p).url ==
        "https://r.example.com/openai/deployments/dep/chat/completions?api-version=2099-01-01");

  // On loopback: the server sees the API path and the query; the secret in the query reaches no output.
  test::FaultServerOptions fo;
  fo.models = {"m"};
  FaultServer srv(fo);
  auto dir = test::scratch_dir("remote-url-query");
  const std::string secret = "QUERYSECRET42";
  auto r = test::run_cli("run --endpoint 'q=" + srv.url() + "/v1?api-version=2024-01-01&api_key=" + secret +
                         "' --api-model m --max-retries 0 --concurrency 1 -n 1 --no-cache-probe --prompt hi"
                         " --max-tokens 2 --verbose --out '" +
                         dir.string() + "'");
  CAPTURE(r.output);
  CHECK(r.code == 4);  // concurrency 1 only: UNVERIFIED, reports written
  auto seen = srv.seen();
  REQUIRE(!seen.empty());
  for (const auto& s : seen) {
    CHECK(s.path == "/v1/chat/completions");
    CHECK(s.api_version == "2024-01-01");
  }
  CHECK(r.output.find(secret) == std::string::npos);
  std::string files = test::slurp_dir(dir);
  CHECK(files.find(secret) == std::string::npos);
  CHECK(files.find("/v1?api-version=2024-01-01&api_key=[REDACTED]") != std::string::npos);
}

namespace {

// A closed loop of `total` requests, `concurrency` in flight, through one client; stopped after
// `limit_s` (what is left is then aborted). Returns the client's stats.
RemoteStats closed_loop(const EndpointSpec& spec, int concurrency, int total, double limit_s, int* failed = nullptr,
                        int* aborted = nullptr) {
  RemoteClient client(spec, concurrency);
  RequestParams q;
  q.prompt = "reset me";
  q.decoding.id = "greedy";
  q.decoding.max_tokens = 4;
  int submitted = 0;
  std::function<void(RemoteResult&&)> done = [&](RemoteResult&& r) {
    if (r.aborted && aborted) ++*aborted;
    else if (!r.error.empty() && failed) ++*failed;
    if (submitted < total) {
      ++submitted;
      client.submit(q, done);
    }
  };
  for (; submitted < concurrency && submitted < total; ++submitted) client.submit(q, done);
  std::atomic<bool> stop{false};
  std::thread timer([&] {
    for (double t0 = now_s(); !stop && now_s() - t0 < limit_s;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
  });
  client.run(&stop);
  stop = true;
  timer.join();
  return client.stats();
}

}  // namespace

TEST_CASE("connection resets on kept-alive connections are counted: the POSTs received equal the attempts") {
  FaultServer srv;
  // Of the first 102 requests to arrive, every third is reset before any response byte; most of
  // them arrive on a connection an earlier response left open.
  std::vector<Fault> faults;
  for (int i = 0; i < 34; ++i) faults.insert(faults.end(), {Fault::none, Fault::none, Fault::reset});
  srv.push_faults(faults);
  auto spec = spec_for(srv, false);
  spec.max_retries = 10;
  spec.backoff_max_s = 0.02;
  int failed = 0, aborted = 0;
  RemoteStats st = closed_loop(spec, 8, 80, 30, &failed, &aborted);
  CHECK(aborted == 0);
  CHECK(failed == 0);
  CHECK(st.succeeded == 80);
  CHECK(st.attempt_errors["reset"] == 34);
  CHECK(st.retries == 34);
  CHECK(st.attempts == 80 + 34);
  CHECK(srv.requests.load() == st.attempts);
}

TEST_CASE("a Retry-After longer than --timeout waits at most --timeout before the retry") {
  test::FaultServerOptions o;
  o.retry_after_s = 999999;
  FaultServer srv(o);
  srv.push_faults({Fault::http429, Fault::http429});
  auto spec = spec_for(srv, false);
  spec.max_retries = 2;
  spec.total_timeout_s = 0.5;
  spec.read_timeout_s = 0.5;
  int failed = 0, aborted = 0;
  const double t0 = now_s();
  RemoteStats st = closed_loop(spec, 1, 1, 10, &failed, &aborted);
  const double took = now_s() - t0;
  CAPTURE(took);
  CHECK(aborted == 0);
  CHECK(st.succeeded == 1);
  CHECK(st.attempts == 3);
  CHECK(took >= 0.95);  // each wait is the whole --timeout (the most of the server's ask it honours)
  CHECK(took < 2.5);
}
