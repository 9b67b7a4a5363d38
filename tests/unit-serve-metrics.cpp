// ctest-labels: model
// `serve`'s evidence of co-batching, end to end on loopback: the real engine on the real tiny model
// behind the real HTTP server. Concurrent requests (chat and completions, streamed and not) released
// into one batch carry "repro_audit": {"max_batch": N} as the client's parser reads it; GET /metrics
// parses with the project's Prometheus reader and its step-batch histogram saw the batch; GET /info
// names the posture; the server-metrics sampler reads serve's own running gauge while requests decode.
// With --max-batch 1 every request says 1 and every step was a batch of one.
#include <doctest/doctest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "repro/common/json.hpp"
#include "repro/model/model.hpp"
#include "repro/openai/protocol.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/remote/prometheus.hpp"
#include "repro/remote/server_metrics.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
using json = nlohmann::json;

namespace {

struct Served {
  std::unique_ptr<Model> model;
  std::unique_ptr<Server> server;
  Served(const std::filesystem::path& dir, ServerOptions so) {
    model = load_model((dir / "stories260K.gguf").string());
    so.host = "127.0.0.1";
    so.port = 0;
    EngineOptions eo;
    eo.mode = Mode::BatchInvariant;
    server = std::make_unique<Server>(*model, eo, so);
    server->start();
  }
};

// One request's outcome as the client's readers see it.
struct Outcome {
  int status = 0;
  ParsedResponse parsed;
  std::string body;
};

// Request i of the mix: chat or completions (i % 2), streamed or not (i / 2 % 2), various lengths.
json request_of(int i) {
  json r = {{"max_tokens", 6 + 5 * i}, {"temperature", 0}, {"ignore_eos", true}};
  if (i % 2) r["messages"] = json::array({json{{"role", "user"}, {"content", "Tell me about Lily"}}});
  else r["prompt"] = "Once upon a time";
  if ((i / 2) % 2) {
    r["stream"] = true;
    if (i % 4 == 3) r["stream_options"] = {{"include_usage", true}};
  }
  return r;
}

Outcome send(int port, int i) {
  const json req = request_of(i);
  const bool chat = i % 2, stream = (i / 2) % 2;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  Outcome o;
  auto res = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", req.dump(), "application/json");
  if (!res) return o;
  o.status = res->status;
  o.body = res->body;
  if (!stream) {
    o.parsed = parse_response_json(res->body, chat);
    return o;
  }
  SseParser sse;
  std::vector<std::string> events;
  sse.feed(res->body, events);
  StreamAccumulator acc(chat);
  for (const auto& e : events) acc.add_event(e);
  acc.finish();
  o.parsed = acc.result();
  return o;
}

// n requests queued while the engine admits nothing, then released together.
std::vector<Outcome> released_together(Served& s, int n) {
  s.server->pause();
  std::vector<Outcome> out(static_cast<size_t>(n));
  std::vector<std::thread> th;
  const int port = s.server->port();
  for (int i = 0; i < n; ++i) th.emplace_back([&out, port, i] { out[static_cast<size_t>(i)] = send(port, i); });
  for (int k = 0; k < 2000 && s.server->stats().queued < n; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(s.server->stats().queued == n);
  s.server->resume();
  for (auto& t : th) t.join();
  return out;
}

prom::Exposition scrape(const Served& s) {
  httplib::Client c("127.0.0.1", s.server->port());
  auto res = c.Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type").find("text/plain") == 0);
  prom::Exposition e;
  std::string err;
  const bool ok = prom::parse_prometheus_text(res->body, e, &err);
  CAPTURE(err);
  CAPTURE(res->body);
  REQUIRE(ok);
  return e;
}

// The cumulative count of the step-batch histogram's bucket `le` ("+Inf" or a number).
double bucket(const prom::Exposition& e, const char* le) {
  const prom::Family* f = e.find("repro_audit:step_batch_size");
  REQUIRE(f);
  CHECK(f->type == prom::MetricType::histogram);
  const double want = std::strtod(le, nullptr);
  for (const auto& s : f->samples)
    if (s.name == "repro_audit:step_batch_size_bucket" && std::strtod(s.label("le")->c_str(), nullptr) == want)
      return s.value;
  FAIL("no bucket le=" << le);
  return -1;
}

double status_count(const prom::Exposition& e, const char* status) {
  const prom::Family* f = e.find("repro_audit:requests_total");
  REQUIRE(f);
  for (const auto& s : f->samples)
    if (*s.label("status") == status) return s.value;
  return 0;
}

json get_json(const Served& s, const char* path) {
  httplib::Client c("127.0.0.1", s.server->port());
  auto res = c.Get(path);
  REQUIRE(res);
  CHECK(res->status == 200);
  json j;
  REQUIRE(parse_json(res->body, j));
  return j;
}

}  // namespace

TEST_CASE("serve --max-batch 8: co-batched requests say so, /metrics and /info show it") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_batch = 8;
  Served s(dir, so);

  // Before any request: the gauges exist and are zero, the posture is there.
  prom::Exposition e0 = scrape(s);
  CHECK(e0.sum("repro_audit:num_requests_running") == 0.0);
  CHECK(e0.sum("repro_audit:num_requests_waiting") == 0.0);
  CHECK(e0.sum("repro_audit:max_batch") == 8.0);
  const prom::Family* info = e0.find("repro_audit:server_info");
  REQUIRE(info);
  CHECK(*info->samples[0].label("mode") == "batch-invariant");
  CHECK(*info->samples[0].label("model_sha256") == s.model->file_sha256);
  CHECK(bucket(e0, "+Inf") == 0.0);

  const json i = get_json(s, "/info");
  CHECK(i["engine"] == "repro-audit");
  CHECK(i["version"] == REPRO_VERSION);
  CHECK(i["mode"] == "batch-invariant");
  CHECK(i["max_batch"] == 8);
  CHECK(i["model"] == "stories260K");
  CHECK(i["model_sha256"] == s.model->file_sha256);
  CHECK(i["system_fingerprint"] == s.server->fingerprint());
  CHECK(i["metrics"] == "/metrics");

  constexpr int kRequests = 6;
  const std::vector<Outcome> out = released_together(s, kRequests);
  int64_t generated = 0;
  for (int k = 0; k < kRequests; ++k) {
    const Outcome& o = out[static_cast<size_t>(k)];
    CAPTURE(k);
    CAPTURE(o.body.substr(0, 300));
    REQUIRE(o.status == 200);
    CHECK(o.parsed.cause == FailCause::none);
    // All six were admitted into the first step together.
    CHECK(o.parsed.max_batch == kRequests);
    CHECK(static_cast<int>(o.parsed.tokens.size()) == 6 + 5 * k);
    generated += static_cast<int64_t>(o.parsed.tokens.size());
  }

  const prom::Exposition e = scrape(s);
  const double steps = bucket(e, "+Inf");
  CHECK(steps == e.sum("repro_audit:engine_steps_total"));
  CHECK(steps >= 6 + 5 * (kRequests - 1));  // the longest request needs that many steps
  CHECK(bucket(e, "1") < steps);            // some steps decoded more than one sequence
  CHECK(bucket(e, "5") < bucket(e, "6"));   // one of them (at least) had all six
  CHECK(bucket(e, "6") == steps);           // and none had more
  CHECK(e.sum("repro_audit:generation_tokens_total") == static_cast<double>(generated));
  CHECK(e.sum("repro_audit:prompt_tokens_total") >= kRequests * 2);
  CHECK(status_count(e, "ok") == kRequests);
  CHECK(status_count(e, "cancelled") == 0);
  CHECK(e.sum("repro_audit:num_requests_running") == 0.0);
  CHECK(e.sum("repro_audit:num_requests_waiting") == 0.0);

  // A refused request is counted by its HTTP status.
  {
    httplib::Client c("127.0.0.1", s.server->port());
    auto res = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": -3})", "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
  }
  CHECK(status_count(scrape(s), "400") == 1);

  // The sampler reads serve's own gauge while requests decode (steps slowed so they overlap it).
  {
    const RunningScrape idle = scrape_running(parse_endpoint_arg(s.server->url() + "/v1"));
    CAPTURE(idle.error);
    REQUIRE(idle.ok);
    CHECK(idle.source == "repro_audit:num_requests_running");
    CHECK(idle.running == 0);
  }
  s.server->stop();
}

TEST_CASE("serve: the sampler sees serve's running gauge above 1 while requests share steps") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_batch = 8;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  Served s(dir, so);
  ServerMetricsOptions mo;
  mo.interval_s = 0.02;
  ServerMetricsSampler sampler(parse_endpoint_arg(s.server->url() + "/v1"), mo);
  sampler.start();
  std::vector<std::thread> th;
  std::vector<Outcome> out(4);
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&out, &s, i] { out[static_cast<size_t>(i)] = send(s.server->port(), 4 * i); });  // 6 to 66 tokens
  for (auto& t : th) t.join();
  const ServerMetricsSummary sum = sampler.stop();
  CAPTURE(sum.status);
  REQUIRE(sum.known());
  CHECK(sum.source == "repro_audit:num_requests_running");
  CHECK(sum.max_running >= 2);
  CHECK(sum.samples >= 5);
  int co_batched = 0;
  for (const auto& o : out) {
    REQUIRE(o.status == 200);
    if (o.parsed.max_batch > 1) ++co_batched;
  }
  CHECK(co_batched >= 2);  // the requests that overlapped say so themselves
  s.server->stop();
}

TEST_CASE("serve --max-batch 1: every request says max_batch 1 and every step was a batch of one") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_batch = 1;
  Served s(dir, so);
  constexpr int kRequests = 4;
  const std::vector<Outcome> out = released_together(s, kRequests);
  for (const Outcome& o : out) {
    CAPTURE(o.body.substr(0, 300));
    REQUIRE(o.status == 200);
    CHECK(o.parsed.max_batch == 1);
  }
  const prom::Exposition e = scrape(s);
  CHECK(bucket(e, "1") == bucket(e, "+Inf"));
  CHECK(bucket(e, "1") > 0);
  CHECK(e.sum("repro_audit:max_batch") == 1.0);
  CHECK(get_json(s, "/info")["max_batch"] == 1);
  CHECK(status_count(e, "ok") == kRequests);
  s.server->stop();
}
