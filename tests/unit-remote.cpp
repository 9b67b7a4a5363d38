// ctest-labels: unit remote
// The OpenAI-compatible client: parsers, provider presets, and the real HTTP path (libcurl multi)
// against tests/fault_server.hpp on 127.0.0.1.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "repro/common/error.hpp"
#include "repro/audit/remote_probe.hpp"
#include "repro/common/util.hpp"
#include "fault_server.hpp"
#include "test_util.hpp"

#define REPRO_FUZZ_NO_MAIN
#include "../fuzz/fuzz_sse.cpp"

using namespace repro;
using test::Fault;
using test::FaultServer;

namespace {

EndpointSpec local_spec(const FaultServer& s, const std::string& api = "chat", bool stream = false) {
  EndpointSpec e = parse_endpoint_arg("fault=" + s.url() + "/v1");
  e.api_model = "fault-model";
  e.api = api;
  e.stream = stream;
  e.max_retries = 0;
  e.backoff_base_s = 0.01;
  e.read_timeout_s = 10;
  return e;
}

RemoteProbe probe_of(const std::string& prompt, int max_tokens = 8) {
  RemoteProbe p;
  p.prompt_id = "p1";
  p.prompt = prompt;
  p.decoding.id = "greedy";
  p.decoding.max_tokens = max_tokens;
  p.seed = 7;
  return p;
}

std::vector<std::string> sse_events(std::string_view text, size_t chunk) {
  SseParser p;
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); i += chunk) p.feed(text.substr(i, chunk), out);
  return out;
}

}  // namespace

// ---------------------------------------------------------------- parsers

TEST_CASE("SSE parser: any chunking, CRLF/CR/LF, comments, multi-line data") {
  const std::string text =
      ": comment\r\n\r\ndata: {\"a\":1}\r\n\r\ndata:two\ndata: lines\n\nevent: x\nid: 3\ndata: [DONE]\r\r"
      "data: no-blank-line-yet";
  const std::vector<std::string> want = {"{\"a\":1}", "two\nlines", "[DONE]"};
  for (size_t chunk : {1, 2, 3, 5, 7, 13, 1000}) {
    CAPTURE(chunk);
    CHECK(sse_events(text, chunk) == want);
  }
  SseParser small(16);
  std::vector<std::string> out;
  small.feed("data: " + std::string(100, 'x') + "\n\n", out);
  CHECK(small.error().find("longer than 16") != std::string::npos);
}

TEST_CASE("non-streamed responses: chat and completions, logprobs, token ids, metadata") {
  auto r = parse_response_json(
      R"({"id":"c1","model":"m1","created":17,"system_fingerprint":"fp1","choices":[{"index":0,
        "message":{"role":"assistant","content":"hi there"},"finish_reason":"stop","token_ids":[4,5],
        "logprobs":{"content":[{"token":"hi","logprob":-0.25},{"token":" there","logprob":-1.5}]}}],
        "usage":{"prompt_tokens":3,"completion_tokens":2}})",
      true);
  CHECK(r.cause == FailCause::none);
  CHECK(r.text == "hi there");
  CHECK(r.tokens == std::vector<int>{4, 5});
  CHECK(r.tokens_known);
  CHECK(r.logprobs == std::vector<float>{-0.25f, -1.5f});
  CHECK(r.finish_reason == "stop");
  CHECK(r.id == "c1");
  CHECK(r.model == "m1");
  CHECK(r.created == 17);
  CHECK(r.system_fingerprint == "fp1");
  CHECK(r.prompt_tokens == 3);
  CHECK(r.completion_tokens == 2);

  auto c = parse_response_json(
      R"({"choices":[{"index":0,"text":" once","logprobs":{"tokens":["a","b"],"token_logprobs":[-0.5,-2]},"finish_reason":"length"}]})",
      false);
  CHECK(c.text == " once");
  CHECK(c.logprobs == std::vector<float>{-0.5f, -2.f});
  CHECK_FALSE(c.tokens_known);

  CHECK(parse_response_json(R"({"choices":[]})", true).cause == FailCause::empty_choices);
  CHECK(parse_response_json(R"({"id":"x"})", true).cause == FailCause::empty_choices);
  CHECK(parse_response_json(R"({"choices": [ {oops)", true).cause == FailCause::invalid_json);
  CHECK(parse_response_json("[1,2]", true).cause == FailCause::invalid_json);
  auto e = parse_response_json(R"({"error":{"message":"overloaded"}})", true);
  CHECK(e.cause == FailCause::server_error);
  CHECK(e.error == "server error: overloaded");
  // wrong types are ignored, never thrown
  auto w = parse_response_json(R"({"id":5,"created":"x","choices":[{"message":{"content":7},"logprobs":{"content":[1,{"logprob":"a"}]}}]})", true);
  CHECK(w.cause == FailCause::none);
  CHECK(w.text.empty());
}

TEST_CASE("stream accumulator: deltas, usage chunk, cut streams, errors") {
  StreamAccumulator a(true);
  CHECK(a.add_event(R"({"id":"s","model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"He"},"logprobs":{"content":[{"logprob":-1}]}}]})"));
  CHECK(a.add_event(R"({"choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop","logprobs":{"content":[{"logprob":-2}]}}]})"));
  CHECK_FALSE(a.add_event(R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}})"));
  CHECK_FALSE(a.add_event("[DONE]"));
  a.finish();
  CHECK(a.result().cause == FailCause::none);
  CHECK(a.result().text == "Hello");
  CHECK(a.result().logprobs == std::vector<float>{-1.f, -2.f});
  CHECK(a.result().completion_tokens == 2);
  CHECK(a.result().system_fingerprint == "fp");

  StreamAccumulator cut(false);
  cut.add_event(R"({"choices":[{"index":0,"text":"a"}]})");
  cut.finish();
  CHECK(cut.result().cause == FailCause::stream_cut);

  StreamAccumulator none(false);
  none.finish();
  CHECK(none.result().cause == FailCause::stream_cut);

  StreamAccumulator bad(true);
  bad.add_event("{garbage");
  bad.add_event("[DONE]");
  bad.finish();
  CHECK(bad.result().cause == FailCause::invalid_json);

  StreamAccumulator err(true);
  err.add_event(R"({"error":{"message":"boom"}})");
  err.finish();
  CHECK(err.result().cause == FailCause::server_error);
}

TEST_CASE("Retry-After, URL redaction, endpoint and provider parsing") {
  CHECK(parse_retry_after("2", 0) == 2.0);
  CHECK(parse_retry_after(" 0.5 ", 0) == 0.5);
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470) == 10.0);
  CHECK(parse_retry_after("soon", 0) == -1);
  CHECK(parse_retry_after("", 0) == -1);
  CHECK(redact_url("https://user:pw@host:1/v1?a=b@c") == "https://[REDACTED]@host:1/v1?a=b@c");
  CHECK(redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1");
  CHECK(scrub_secret("a KEY b KEY", "KEY") == "a [REDACTED] b [REDACTED]");

  auto e = parse_endpoint_arg("invariant=http://127.0.0.1:8000/v1/");
  CHECK(e.label == "invariant");
  CHECK(e.url == "http://127.0.0.1:8000/v1");
  CHECK(parse_endpoint_arg("http://h:1").label == "http://h:1");
  CHECK(parse_endpoint_arg("http://h:1/x?q=a=b").label == "http://h:1/x?q=a=b");
  CHECK_THROWS_WITH_AS(parse_endpoint_arg("x=ftp://h"), doctest::Contains("must start with http://"), UsageError);
  CHECK_THROWS_WITH_AS(parse_provider("vlm"), doctest::Contains("use one of openai, azure"), UsageError);
  CHECK(parse_provider("llama.cpp") == Provider::llamacpp);
  CHECK(std::string(provider_name(Provider::tgi)) == "tgi");
}

TEST_CASE("provider presets: paths, auth headers, body quirks, extra_body merge") {
  EndpointSpec s = parse_endpoint_arg("a=http://h:1");
  s.api_model = "m";
  s.api_key = "K";
  RequestParams p;
  p.prompt = "hello";
  p.decoding.max_tokens = 5;
  p.decoding.top_k = 3;
  p.logprobs = true;
  p.seed = 11;
  p.stop = {"\n"};

  auto r = build_request(s, p);
  CHECK(r.url == "http://h:1/v1/chat/completions");
  CHECK(std::find(r.headers.begin(), r.headers.end(), "Authorization: Bearer K") != r.headers.end());
  auto b = nlohmann::json::parse(r.body);
  CHECK(b["model"] == "m");
  CHECK(b["messages"][0]["content"] == "hello");
  CHECK(b["logprobs"] == true);
  CHECK(b["seed"] == 11);
  CHECK(b["top_k"] == 3);
  CHECK(b["stop"][0] == "\n");
  CHECK_FALSE(b.contains("stream"));
  // Chat data is sent with its keys in the order it was written (the endpoint's template prints
  // tools and tool-call arguments in that order); the rest of the body is sorted as before.
  {
    RequestParams c = p;
    c.messages = nlohmann::ordered_json::parse(
        R"([{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", )"
        R"("arguments": {"z": 1, "a": 2}}}]}, {"role": "user", "content": "hi"}])");
    c.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": )"
                                             R"({"type": "object", "properties": {"z": {}, "a": {}}}}}])");
    c.chat_template_kwargs = nlohmann::ordered_json::parse(R"({"enable_thinking": false, "a": 1})");
    const std::string body = build_request(s, c).body;
    CHECK(body.find(R"({"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f",)"
                    R"("arguments":{"z":1,"a":2}}}]})") != std::string::npos);
    CHECK(body.find(R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                    R"("properties":{"z":{},"a":{}}}}}])") != std::string::npos);
    CHECK(body.find(R"("chat_template_kwargs":{"enable_thinking":false,"a":1})") != std::string::npos);
    CHECK(nlohmann::json::parse(body)["model"] == "m");
  }

  s.url = "http://h:1/v1";
  s.api = "completions";
  s.stream = true;
  r = build_request(s, p);
  CHECK(r.url == "http://h:1/v1/completions");
  b = nlohmann::json::parse(r.body);
  CHECK(b["prompt"] == "hello");
  CHECK(b["logprobs"] == 1);
  CHECK(b["stream"] == true);
  CHECK(b["stream_options"]["include_usage"] == true);

  s.extra_body = {{"top_k", 1}, {"seed", nullptr}, {"ignore_eos", true}};
  b = build_request_body(s, p);
  CHECK(b["top_k"] == 1);
  CHECK_FALSE(b.contains("seed"));
  CHECK(b["ignore_eos"] == true);
  s.extra_body = nlohmann::json::object();

  EndpointSpec az = parse_endpoint_arg("az=https://res.openai.azure.com/");
  az.provider = Provider::azure;
  az.api_model = "dep1";
  az.api_key = "K";
  az.azure_api_version = "2024-10-21";
  p.decoding.top_k = 0;
  r = build_request(az, p);
  CHECK(r.url == "https://res.openai.azure.com/openai/deployments/dep1/chat/completions?api-version=2024-10-21");
  CHECK(std::find(r.headers.begin(), r.headers.end(), "api-key: K") != r.headers.end());
  for (auto& h : r.headers) CHECK(h.rfind("Authorization", 0) != 0);
  CHECK_FALSE(nlohmann::json::parse(r.body).contains("model"));
  p.decoding.top_k = 2;
  CHECK_THROWS_WITH_AS(build_request(az, p), doctest::Contains("Azure OpenAI does not accept"), UsageError);
  p.decoding.top_k = 0;

  EndpointSpec tgi = s;
  tgi.provider = Provider::tgi;
  b = build_request_body(tgi, p);
  CHECK_FALSE(b.contains("top_p"));
  CHECK_FALSE(b.contains("temperature"));
  CHECK_FALSE(b.contains("stream_options"));

  EndpointSpec ol = s;
  ol.provider = Provider::ollama;
  CHECK_FALSE(build_request_body(ol, p).contains("logprobs"));
  EndpointSpec lc = s;
  lc.provider = Provider::llamacpp;
  CHECK(build_request_body(lc, p)["cache_prompt"] == true);
  EndpointSpec vl = s;
  vl.provider = Provider::vllm;
  CHECK(build_request_body(vl, p)["return_token_ids"] == true);
}

TEST_CASE("endpoint validation and API key loading name the flag") {
  EndpointSpec s = parse_endpoint_arg("a=http://h:1");
  CHECK_THROWS_WITH_AS(validate_endpoint(s), doctest::Contains("--api-model"), UsageError);
  s.api_model = "m";
  s.api = "embeddings";
  CHECK_THROWS_WITH_AS(validate_endpoint(s), doctest::Contains("use chat or completions"), UsageError);
  s.api = "chat";
  s.ca_cert = "/nonexistent/ca.pem";
  CHECK_THROWS_WITH_AS(validate_endpoint(s), doctest::Contains("--ca-cert"), UsageError);

  auto dir = test::scratch_dir("remote-key");
  write_file_atomic((dir / "key").string(), "sk-from-file\n");
  CHECK(load_api_key("NOPE_UNSET_VAR", (dir / "key").string()) == "sk-from-file");
  write_file_atomic((dir / "empty").string(), "\n");
  CHECK_THROWS_WITH_AS(load_api_key("X", (dir / "empty").string()), doctest::Contains("--api-key-file"), UsageError);
  CHECK_THROWS_WITH_AS(load_api_key("X", (dir / "missing").string()), doctest::Contains("--api-key-file"), UsageError);
  ::setenv("REPRO_TEST_KEY_VAR", "sk-env", 1);
  CHECK(load_api_key("REPRO_TEST_KEY_VAR", "") == "sk-env");
  CHECK(load_api_key("REPRO_TEST_UNSET_VAR_X", "").empty());
}

TEST_CASE("fuzz corpus fuzz/corpus/sse replays cleanly (regression)") {
  const auto files = test::corpus_files("sse");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(repro::fuzz::sse_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  MESSAGE("replayed " << files.size() << " corpus files");
  CHECK(files.size() >= 5);
}

// ---------------------------------------------------------------- real HTTP on loopback

TEST_CASE("chat and completions, streamed and not, against the loopback server") {
  FaultServer srv;
  const std::string prompt = "Once upon a time";
  const auto ids = FaultServer::reply_ids(prompt, 0, false, 8);
  for (std::string api : {"chat", "completions"})
    for (bool stream : {false, true}) {
      CAPTURE(api);
      CAPTURE(stream);
      auto spec = local_spec(srv, api, stream);
      auto probe = probe_of(prompt);
      probe.logprobs = true;
      RemoteStats st;
      auto out = run_remote_probe(spec, probe, 1, 2, nullptr, nullptr, &st);
      REQUIRE(out.size() == 2);
      for (int r = 0; r < 2; ++r) {
        const Completion& c = out[r];
        CHECK_MESSAGE(c.error.empty(), c.error);
        CHECK(c.text == FaultServer::reply_text(ids));
        CHECK(c.tokens_known);
        CHECK(c.tokens == ids);
        REQUIRE(c.logprobs.size() == ids.size());
        for (size_t i = 0; i < ids.size(); ++i) CHECK(c.logprobs[i] == FaultServer::logprob_of(ids[i], i));
        CHECK(c.finish_reason == "length");
        CHECK(c.system_fingerprint == "fp_fault_0");
        CHECK(c.response_model == "fault-model");
        CHECK(c.response_id.rfind("cmpl-", 0) == 0);
        CHECK(c.created == 1700000000);
        CHECK(c.completion_tokens == 8);
        CHECK(c.mode == "fault");
        CHECK(c.prompt_id == "p1");
        CHECK(c.decoding_id == "greedy");
        CHECK(c.seed == 7);
        CHECK(c.repeat == r);
        CHECK(c.batch_size == 1);
        CHECK(c.attempts == 1);
        CHECK(c.latency_s > 0);
        if (stream) {
          CHECK(c.ttft_s > 0);
          CHECK(c.ttft_s <= c.latency_s);
        }
      }
      CHECK(st.succeeded == 2);
      CHECK(st.failed == 0);
      auto seen = srv.last();
      CHECK(seen.path == (api == "chat" ? "/v1/chat/completions" : "/v1/completions"));
      CHECK(seen.body["seed"] == 7);
      CHECK(seen.body["max_tokens"] == 8);
    }
}

TEST_CASE("CRLF streams and chat messages") {
  test::FaultServerOptions o;
  o.crlf = true;
  o.token_ids = false;
  FaultServer srv(o);
  auto spec = local_spec(srv, "chat", true);
  auto probe = probe_of("");
  probe.messages = nlohmann::json::array({{{"role", "system"}, {"content", "be brief. "}}, {{"role", "user"}, {"content", "hi"}}});
  auto out = run_remote_probe(spec, probe, 1, 1, nullptr, nullptr);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error.empty());
  CHECK(out[0].text == FaultServer::reply_text(FaultServer::reply_ids("be brief. hi", 0, false, 8)));
  CHECK_FALSE(out[0].tokens_known);
  CHECK(srv.last().body["messages"].size() == 2);
}

TEST_CASE("extra_body is merged into every request; sampled seeds reach the server") {
  FaultServer srv;
  auto spec = local_spec(srv, "completions");
  spec.extra_body = {{"ignore_eos", true}, {"top_k", 1}, {"nested", {{"a", 1}}}};
  auto probe = probe_of("x");
  probe.decoding.temperature = 0.8;
  probe.seed = 1234;
  probe.fillers = {"filler one", "filler two"};
  auto out = run_remote_probe(spec, probe, 3, 3, nullptr, nullptr);
  REQUIRE(out.size() == 3);
  for (auto& c : out) CHECK(c.text == FaultServer::reply_text(FaultServer::reply_ids("x", 1234, true, 8)));
  auto seen = srv.seen();
  CHECK(seen.size() >= 3);
  int fillers = 0;
  for (auto& s : seen) {
    CHECK(s.body["ignore_eos"] == true);
    CHECK(s.body["top_k"] == 1);
    CHECK(s.body["nested"]["a"] == 1);
    CHECK(s.body["temperature"] == 0.8);
    if (s.body["prompt"] != "x") ++fillers;
  }
  CHECK(fillers >= 2);
}

TEST_CASE("Azure preset: deployment path, api-version query, api-key header") {
  test::FaultServerOptions o;
  o.expected_key = "azure-secret-key";
  FaultServer srv(o);
  EndpointSpec spec = parse_endpoint_arg("az=" + srv.url());
  spec.provider = Provider::azure;
  spec.api_model = "my-deployment";
  spec.api_key = "azure-secret-key";
  spec.azure_api_version = "2024-10-21";
  spec.max_retries = 0;
  for (std::string api : {"chat", "completions"}) {
    spec.api = api;
    auto out = run_remote_probe(spec, probe_of("hello"), 1, 1, nullptr, nullptr);
    REQUIRE(out.size() == 1);
    CHECK(out[0].error.empty());
    auto s = srv.last();
    CHECK(s.path == "/openai/deployments/my-deployment/" + std::string(api == "chat" ? "chat/completions" : "completions"));
    CHECK(s.api_version == "2024-10-21");
    CHECK(s.api_key == "azure-secret-key");
    CHECK(s.authorization.empty());
    CHECK_FALSE(s.body.contains("model"));
  }
  spec.api_key = "wrong";
  auto bad = run_remote_probe(spec, probe_of("hello"), 1, 1, nullptr, nullptr);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].error.rfind("http_4xx: HTTP 401", 0) == 0);
}

TEST_CASE("closed loop holds exactly c requests in flight (c = 1..64)") {
  test::FaultServerOptions o;
  o.threads = 96;
  o.slow_s = 0.25;
  FaultServer srv(o);
  srv.set_default(Fault::slow);
  for (int c : {1, 2, 8, 16, 64}) {
    CAPTURE(c);
    srv.max_concurrent = 0;
    auto spec = local_spec(srv, "completions", c % 2 == 0);
    auto probe = probe_of("probe text", 4);
    probe.fillers = {"a", "b", "c"};
    RemoteStats st;
    int last_done = 0, calls = 0;
    auto out = run_remote_probe(spec, probe, c, 3, nullptr, [&](int done, int total) {
      CHECK(total == 3);
      CHECK(done == last_done + 1);
      last_done = done;
      ++calls;
    }, &st);
    REQUIRE(out.size() == 3);
    for (auto& x : out) {
      CHECK(x.error.empty());
      CHECK(x.batch_size == c);
    }
    CHECK(calls == 3);
    CHECK(st.max_in_flight == c);
    CHECK(srv.max_concurrent.load() == c);
    CHECK(st.failed == 0);
    CHECK(st.requests >= 3);
    // wait until the server saw the aborted fillers go, so the next level starts clean
    for (int i = 0; i < 400 && srv.current.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST_CASE("cache probe: cold first, then warm") {
  FaultServer srv;
  auto spec = local_spec(srv, "chat");
  auto out = run_cache_probe(spec, probe_of("a long shared prefix"), 2, nullptr);
  REQUIRE(out.size() == 3);
  CHECK(out[0].cache_state == "cold");
  CHECK(out[1].cache_state == "warm");
  CHECK(out[2].cache_state == "warm");
  CHECK(out[2].repeat == 2);
  for (auto& c : out) CHECK(c.error.empty());
  CHECK(srv.requests.load() == 3);
}

TEST_CASE("layers: the client returns its own result; the audit layer makes Completions of it") {
  RemoteResult ok;
  ok.decoding_id = "greedy";
  ok.seed = 7;
  ok.attempts = 2;
  ok.latency_s = 0.5;
  ok.ttft_s = 0.125;
  ok.response.text = "hi";
  ok.response.tokens_known = true;
  ok.response.tokens = {1, 2, 3, 4};
  ok.response.logprobs = {-0.5f, -0.25f, 0.0f, -1.0f};
  ok.response.finish_reason = "length";
  ok.response.system_fingerprint = "fp";
  ok.response.model = "m";
  ok.response.id = "r1";
  ok.response.created = 1700000000;
  ok.response.prompt_tokens = 5;  // completion_tokens unknown (-1): counted from the tokens
  Completion c = completion_from(ok);
  CHECK(c.decoding_id == "greedy");
  CHECK(c.seed == 7);
  CHECK(c.attempts == 2);
  CHECK(c.text == "hi");
  CHECK(c.tokens == std::vector<int>{1, 2, 3, 4});
  CHECK(c.completion_tokens == 4);
  CHECK(c.prompt_tokens == 5);
  CHECK(c.tokens_per_s == 8.0);
  CHECK(c.ttft_s == 0.125);
  CHECK(c.system_fingerprint == "fp");
  CHECK(c.response_model == "m");
  CHECK(c.response_id == "r1");
  CHECK(c.created == 1700000000);
  CHECK(c.error.empty());

  RemoteResult bad;
  bad.cause = FailCause::http_5xx;
  bad.error = "http_5xx: 503 (after 4 attempts)";
  bad.attempts = 4;
  Completion f = completion_from(bad);
  CHECK(f.error == bad.error);
  CHECK_FALSE(f.tokens_known);
  CHECK(f.attempts == 4);
  CHECK(f.text.empty());

  // Nothing under remote/ or openai/ includes an audit (or report) header.
  namespace fs = std::filesystem;
  const fs::path root(REPRO_SOURCE_DIR);
  int files = 0;
  for (const char* dir : {"src/remote", "src/openai", "include/repro/remote", "include/repro/openai"})
    for (const auto& e : fs::directory_iterator(root / dir)) {
      std::string text = read_file(e.path().string());
      ++files;
      CAPTURE(e.path().string());
      CHECK(text.find("repro/audit/") == std::string::npos);
      CHECK(text.find("repro/report/") == std::string::npos);
    }
  CHECK(files >= 4);
}
