// ctest-labels: unit remote
// Fault handling of the remote client against the fault-injecting loopback server: retries with
// backoff (Retry-After honoured), errors recorded with their cause and never as completions,
// the stop flag, and the API key kept out of everything the client produces.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "repro/common/error.hpp"
#include "repro/audit/remote_probe.hpp"
#include "fault_server.hpp"
#include "test_util.hpp"

using namespace repro;
using test::Fault;
using test::FaultServer;

namespace {

EndpointSpec spec_for(const FaultServer& s, const std::string& api = "chat", bool stream = false, int retries = 0) {
  EndpointSpec e = parse_endpoint_arg("faulty=" + s.url());
  e.api_model = "fault-model";
  e.api = api;
  e.stream = stream;
  e.max_retries = retries;
  e.backoff_base_s = 0.01;
  e.backoff_max_s = 0.05;
  e.read_timeout_s = 5;
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

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A failed completion carries its cause and nothing that could be counted as output.
void check_failed(const Completion& c, const std::string& cause) {
  CAPTURE(c.error);
  CHECK(c.error.rfind(cause + ":", 0) == 0);
  CHECK(c.text.empty());
  CHECK(c.tokens.empty());
  CHECK_FALSE(c.tokens_known);
  CHECK(c.logprobs.empty());
  CHECK(c.finish_reason.empty());
}

std::string dump(const Completion& c) {
  nlohmann::json j = {{"prompt_id", c.prompt_id}, {"decoding_id", c.decoding_id}, {"mode", c.mode},
                      {"text", c.text}, {"tokens", c.tokens}, {"logprobs", c.logprobs},
                      {"finish_reason", c.finish_reason}, {"system_fingerprint", c.system_fingerprint},
                      {"response_model", c.response_model}, {"response_id", c.response_id},
                      {"error", c.error}, {"cache_state", c.cache_state}, {"filler_set", c.filler_set},
                      {"filler_ids", c.filler_ids}, {"logits_sha256", c.logits_sha256}};
  return j.dump();
}

}  // namespace

TEST_CASE("429 with Retry-After: the retry waits at least that long, then succeeds") {
  test::FaultServerOptions o;
  o.retry_after_s = 1;
  FaultServer srv(o);
  srv.push_faults({Fault::http429});
  RemoteStats st;
  const double t0 = now_s();
  auto out = run_remote_probe(spec_for(srv, "chat", false, 2), probe_of("hello"), 1, 1, nullptr, nullptr, &st);
  const double took = now_s() - t0;
  REQUIRE(out.size() == 1);
  CHECK(out[0].error.empty());
  CHECK(out[0].attempts == 2);
  auto arr = srv.arrivals();
  REQUIRE(arr.size() == 2);
  CHECK(arr[1] - arr[0] >= 1.0);   // honoured, although backoff_base_s is 10 ms
  CHECK(took < 4.0);               // and not much longer (jitter <= 10% of Retry-After)
  CHECK(st.retries == 1);
  CHECK(st.attempt_errors["http_429"] == 1);
  CHECK(st.final_errors.empty());
}

TEST_CASE("500 then success is retried with backoff") {
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    FaultServer srv;
    srv.push_faults({Fault::http500, Fault::http500});
    RemoteStats st;
    auto out = run_remote_probe(spec_for(srv, "completions", stream, 3), probe_of("x"), 1, 1, nullptr, nullptr, &st);
    REQUIRE(out.size() == 1);
    CHECK(out[0].error.empty());
    CHECK(out[0].attempts == 3);
    CHECK(out[0].text == FaultServer::reply_text(FaultServer::reply_ids("x", 0, false, 6)));
    CHECK(st.attempt_errors["http_5xx"] == 2);
    CHECK(st.succeeded == 1);
    CHECK(srv.requests.load() == 3);
  }
}

TEST_CASE("exhausted retries are recorded as an error with the cause") {
  FaultServer srv;
  srv.set_default(Fault::http500);
  RemoteStats st;
  auto out = run_remote_probe(spec_for(srv, "chat", false, 2), probe_of("x"), 1, 2, nullptr, nullptr, &st);
  REQUIRE(out.size() == 2);
  for (auto& c : out) {
    check_failed(c, "http_5xx");
    CHECK(c.error.find("HTTP 500: The server had an error") != std::string::npos);
    CHECK(c.error.find("(after 3 attempts)") != std::string::npos);
    CHECK(c.attempts == 3);
  }
  CHECK(srv.requests.load() == 6);
  CHECK(st.failed == 2);
  CHECK(st.probe_failed == 2);
  CHECK(st.final_errors["http_5xx"] == 2);
  CHECK(st.succeeded == 0);
}

TEST_CASE("4xx other than 429 is not retried") {
  FaultServer srv;
  srv.set_default(Fault::http400);
  auto out = run_remote_probe(spec_for(srv, "chat", false, 5), probe_of("x"), 1, 1, nullptr, nullptr);
  REQUIRE(out.size() == 1);
  check_failed(out[0], "http_4xx");
  CHECK(out[0].error.find("HTTP 400: Invalid parameter") != std::string::npos);
  CHECK(out[0].attempts == 1);
  CHECK(srv.requests.load() == 1);
}

TEST_CASE("each fault gives its cause; with retries left the request recovers") {
  struct Case {
    Fault f;
    bool stream;
    const char* cause;
  };
  const Case cases[] = {
      {Fault::cut_stream, true, "stream_cut"},   {Fault::no_done, true, "stream_cut"},
      {Fault::garbage_json, false, "invalid_json"}, {Fault::garbage_json, true, "invalid_json"},
      {Fault::empty_choices, false, "empty_choices"}, {Fault::empty_choices, true, "empty_choices"},
      {Fault::reset, false, "reset"},            {Fault::reset, true, "reset"},
      {Fault::cut_stream, false, "reset"},       {Fault::stream_error, true, "server_error"},
  };
  for (const Case& k : cases) {
    CAPTURE(static_cast<int>(k.f));
    CAPTURE(k.stream);
    for (const char* api : {"chat", "completions"}) {
      CAPTURE(api);
      FaultServer srv;
      srv.push_faults({k.f});
      RemoteStats st;
      auto failed = run_remote_probe(spec_for(srv, api, k.stream, 0), probe_of("p"), 1, 1, nullptr, nullptr, &st);
      REQUIRE(failed.size() == 1);
      check_failed(failed[0], k.cause);
      CHECK(st.final_errors[k.cause] == 1);

      srv.push_faults({k.f});
      auto ok = run_remote_probe(spec_for(srv, api, k.stream, 1), probe_of("p"), 1, 1, nullptr, nullptr);
      REQUIRE(ok.size() == 1);
      CHECK(ok[0].error.empty());
      CHECK(ok[0].attempts == 2);
      CHECK(ok[0].text == FaultServer::reply_text(FaultServer::reply_ids("p", 0, false, 6)));
    }
  }
}

TEST_CASE("read timeout on a hanging server, connect failure on a closed port") {
  test::FaultServerOptions o;
  o.hang_s = 3;
  FaultServer srv(o);
  srv.set_default(Fault::hang);
  auto spec = spec_for(srv, "chat", true, 1);
  spec.read_timeout_s = 0.3;
  const double t0 = now_s();
  auto out = run_remote_probe(spec, probe_of("x"), 1, 1, nullptr, nullptr);
  const double took = now_s() - t0;
  REQUIRE(out.size() == 1);
  check_failed(out[0], "timeout");
  CHECK(out[0].attempts == 2);
  CHECK(took >= 0.6);
  CHECK(took < 2.5);

  int port = srv.port();
  srv.stop();
  EndpointSpec closed = parse_endpoint_arg("closed=http://127.0.0.1:" + std::to_string(port));
  closed.api_model = "m";
  closed.max_retries = 1;
  closed.backoff_base_s = 0.01;
  auto c = run_remote_probe(closed, probe_of("x"), 1, 1, nullptr, nullptr);
  REQUIRE(c.size() == 1);
  check_failed(c[0], "connect");
}

TEST_CASE("under load with failing fillers, probes still complete and filler errors are counted") {
  test::FaultServerOptions o;
  o.threads = 32;
  FaultServer srv(o);
  srv.add_rule("FILLER-500", Fault::http500);
  srv.add_rule("FILLER-CUT", Fault::cut_stream);
  auto probe = probe_of("the probe");
  probe.fillers = {"FILLER-500 a", "FILLER-CUT b", "fine filler"};
  RemoteStats st;
  auto out = run_remote_probe(spec_for(srv, "chat", true, 1), probe, 8, 20, nullptr, nullptr, &st);
  REQUIRE(out.size() == 20);
  for (auto& c : out) {
    CHECK(c.error.empty());
    CHECK(c.batch_size == 8);
    CHECK(c.mode == "faulty");
  }
  CHECK(st.probe_failed == 0);
  CHECK(st.filler_failed > 0);
  CHECK(st.final_errors["http_5xx"] > 0);
  CHECK(st.final_errors["stream_cut"] > 0);
  CHECK(st.max_in_flight == 8);
  CHECK(st.attempts > 20);
}

TEST_CASE("the stop flag aborts in-flight requests and returns what finished") {
  test::FaultServerOptions o;
  o.hang_s = 5;
  FaultServer srv(o);
  srv.push_faults({Fault::none});  // the first probe repeat answers
  srv.set_default(Fault::hang);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    stop = true;
  });
  RemoteStats st;
  auto probe = probe_of("x");
  const double t0 = now_s();
  auto out = run_remote_probe(spec_for(srv, "chat", false, 3), probe, 4, 10, &stop, nullptr, &st);
  const double took = now_s() - t0;
  stopper.join();
  CHECK(took < 2.0);
  CHECK(st.aborted >= 1);
  CHECK(st.failed == 0);  // aborted requests are not failures of the endpoint
  CHECK(out.size() <= 1);
  for (auto& c : out) CHECK(c.error.empty());
}

TEST_CASE("the API key is sent but never appears in completions, errors, stats or the verbose log") {
  const std::string key = "sk-test-Zq8v1SECRETp4Tk9";
  test::FaultServerOptions o;
  o.expected_key = key;
  o.echo_auth_in_errors = true;  // the server puts the received key into its error bodies
  FaultServer srv(o);
  srv.add_rule("ALWAYS-500", Fault::http500);
  srv.add_rule("ONCE-429", Fault::http429, 1);
  std::string log;
  auto spec = spec_for(srv, "chat", true, 1);
  spec.api_key = key;
  spec.verbose = true;
  spec.log = [&](const std::string& line) { log += line + "\n"; };
  spec.url = "http://user:" + key + "@127.0.0.1:" + std::to_string(srv.port());  // even in the URL

  RemoteStats st;
  std::string all;
  auto ok = run_remote_probe(spec, probe_of("fine"), 2, 2, nullptr, nullptr, &st);
  auto bad = run_remote_probe(spec, probe_of("ALWAYS-500"), 1, 1, nullptr, nullptr, &st);
  auto once = run_remote_probe(spec, probe_of("ONCE-429"), 1, 1, nullptr, nullptr, &st);
  auto cache = run_cache_probe(spec, probe_of("fine"), 1, nullptr, &st);
  EndpointSpec wrong = spec;
  wrong.api_key = "sk-wrong-" + key.substr(8);
  auto unauth = run_remote_probe(wrong, probe_of("fine"), 1, 1, nullptr, nullptr, &st);
  for (auto* v : {&ok, &bad, &once, &cache, &unauth})
    for (auto& c : *v) all += dump(c) + "\n";
  all += st.to_json().dump() + "\n" + log;

  REQUIRE(ok.size() == 2);
  CHECK(ok[0].error.empty());
  REQUIRE(bad.size() == 1);
  check_failed(bad[0], "http_5xx");
  CHECK(bad[0].error.find("[REDACTED]") != std::string::npos);  // the echoed key was scrubbed
  REQUIRE(once.size() == 1);
  CHECK(once[0].error.empty());
  REQUIRE(unauth.size() == 1);
  check_failed(unauth[0], "http_4xx");
  CHECK(unauth[0].error.find("401") != std::string::npos);
  CHECK(log.find("> POST") != std::string::npos);
  CHECK(log.find("Authorization: REDACTED") != std::string::npos);

  CHECK(all.find(key) == std::string::npos);
  CHECK(all.find(key.substr(8)) == std::string::npos);
  CHECK(all.find(wrong.api_key) == std::string::npos);
  // and the key was really sent
  bool sent = false;
  for (auto& s : srv.seen()) sent = sent || s.authorization == "Bearer " + key;
  CHECK(sent);
}

TEST_CASE("TLS: verification is always on; --ca-cert trusts a private CA") {
  auto dir = test::scratch_dir("remote-tls");
  const std::string cmd = "cd '" + dir.string() +
                          "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                          "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout key.pem -out cert.pem "
                          ">/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    MESSAGE("SKIPPED: the openssl command-line tool is needed to make a test certificate");
    return;
  }
  test::FaultServerOptions o;
  o.cert_file = (dir / "cert.pem").string();
  o.key_file = (dir / "key.pem").string();
  FaultServer srv(o);
  REQUIRE(srv.url().rfind("https://", 0) == 0);
  auto spec = spec_for(srv, "chat", true, 3);
  RemoteStats st;
  auto untrusted = run_remote_probe(spec, probe_of("x"), 1, 1, nullptr, nullptr, &st);
  REQUIRE(untrusted.size() == 1);
  check_failed(untrusted[0], "tls");
  CHECK(untrusted[0].error.find("--ca-cert") != std::string::npos);
  CHECK(untrusted[0].attempts == 1);  // not retried: it cannot get better
  CHECK(srv.requests.load() == 0);

  spec.ca_cert = o.cert_file;
  auto ok = run_remote_probe(spec, probe_of("x"), 2, 2, nullptr, nullptr);
  REQUIRE(ok.size() == 2);
  for (auto& c : ok) {
    CHECK(c.error.empty());
    CHECK(c.text == FaultServer::reply_text(FaultServer::reply_ids("x", 0, false, 6)));
  }
}
