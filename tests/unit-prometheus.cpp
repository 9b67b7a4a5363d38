// ctest-labels: unit remote
// The Prometheus text reader (src/remote/prometheus.cpp) on the /metrics bodies of vLLM, SGLang and
// llama.cpp (tests/data/metrics-*.txt, provenance in tests/data/README.md) and on hostile text; the
// fuzz corpus replay; and the server-metrics sampler (src/remote/server_metrics.cpp) against
// tests/fault_server.hpp on 127.0.0.1: known sources, garbage, a huge body, a slow body, no route.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "fault_server.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/remote/prometheus.hpp"
#include "repro/remote/server_metrics.hpp"
#include "test_util.hpp"

using namespace repro;
using namespace repro::prom;
using test::FaultServer;
using test::FaultServerOptions;

namespace {

std::string fixture(const char* name) {
  return test::slurp(std::filesystem::path(REPRO_SOURCE_DIR) / "tests" / "data" / name);
}

Exposition parse_ok(const std::string& text) {
  Exposition e;
  std::string err;
  const bool ok = parse_prometheus_text(text, e, &err);
  CAPTURE(err);
  REQUIRE(ok);
  CHECK(err.empty());
  return e;
}

std::string parse_err(const std::string& text, const ParseLimits& lim = {}) {
  Exposition e;
  std::string err;
  CHECK_FALSE(parse_prometheus_text(text, e, &err, lim));
  CHECK(e.families.empty());
  CHECK(err.find('\n') == std::string::npos);
  return err;
}

EndpointSpec spec_of(const FaultServer& s, const std::string& path = "/v1") {
  EndpointSpec e = parse_endpoint_arg("fault=" + s.url() + path);
  e.api_model = "fault-model";
  return e;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---------------------------------------------------------------- real formats

TEST_CASE("prometheus: vLLM's /metrics (prometheus_client text): families, labels, histograms, sums") {
  const Exposition e = parse_ok(fixture("metrics-vllm.txt"));
  const Family* run = e.find("vllm:num_requests_running");
  REQUIRE(run);
  CHECK(run->type == MetricType::gauge);
  CHECK(run->help == "Number of requests in model execution batches.");
  REQUIRE(run->samples.size() == 2);
  CHECK(*run->samples[0].label("engine") == "0");
  CHECK(*run->samples[1].label("model_name") == "Qwen/Qwen2.5-1.5B-Instruct");
  CHECK(e.sum("vllm:num_requests_running") == 7.0);  // summed over the two engines (data parallel)
  CHECK(e.sum("vllm:num_requests_waiting") == 1.0);
  CHECK_FALSE(e.sum("vllm:not_there").has_value());

  const Family* prompt = e.find("vllm:prompt_tokens_total");
  REQUIRE(prompt);
  CHECK(prompt->type == MetricType::counter);
  CHECK(e.sum("vllm:prompt_tokens_total") == 7200.0);
  const Family* created = e.find("vllm:prompt_tokens_created");
  REQUIRE(created);
  CHECK(created->samples[0].value == doctest::Approx(1.7491203352081916e9));

  // The histogram's _bucket/_count/_sum samples belong to it; le parses, +Inf included.
  const Family* iter = e.find("vllm:iteration_tokens_total");
  REQUIRE(iter);
  CHECK(iter->type == MetricType::histogram);
  REQUIRE(iter->samples.size() == 7);
  CHECK(iter->samples[0].name == "vllm:iteration_tokens_total_bucket");
  CHECK(*iter->samples[4].label("le") == "+Inf");
  CHECK(iter->samples[5].name == "vllm:iteration_tokens_total_count");
  CHECK(iter->samples[6].value == 16980.0);
  CHECK(e.find("vllm:iteration_tokens_total_bucket") == nullptr);

  const Family* ttft = e.find("vllm:time_to_first_token_seconds");
  REQUIRE(ttft);
  CHECK(ttft->samples.back().name == "vllm:time_to_first_token_seconds_sum");
  CHECK(ttft->samples.back().value == doctest::Approx(2.3719398975372314));
  const Family* info = e.find("vllm:cache_config_info");
  REQUIRE(info);
  CHECK(info->samples[0].labels.size() == 7);
  CHECK(*info->samples[0].label("num_gpu_blocks") == "12894");
  CHECK(e.find("python_gc_objects_collected_total")->samples.size() == 3);
  CHECK(e.find("process_resident_memory_bytes")->samples[0].value == 3.146686464e9);
}

TEST_CASE("prometheus: SGLang's /metrics (multiprocess collector) and llama.cpp's (no labels)") {
  const Exposition s = parse_ok(fixture("metrics-sglang.txt"));
  const Family* run = s.find("sglang:num_running_reqs");
  REQUIRE(run);
  CHECK(run->help == "Multiprocess metric");
  CHECK(*run->samples[0].label("tp_rank") == "0");
  CHECK(s.sum("sglang:num_running_reqs") == 3.0);
  const Family* ttft = s.find("sglang:time_to_first_token_seconds");
  REQUIRE(ttft);
  CHECK(ttft->samples.size() == 6);  // _sum first, then the buckets and _count
  CHECK(ttft->samples[0].name == "sglang:time_to_first_token_seconds_sum");

  const Exposition l = parse_ok(fixture("metrics-llamacpp.txt"));
  CHECK(l.families.size() == 11);
  CHECK(l.sum("llamacpp:requests_processing") == 4.0);
  CHECK(l.sum("llamacpp:requests_deferred") == 1.0);
  CHECK(l.sum("llamacpp:n_busy_slots_per_decode") == doctest::Approx(1.87209));
  CHECK(l.find("llamacpp:requests_processing")->samples[0].labels.empty());
}

TEST_CASE("prometheus: escapes, blanks, timestamps, NaN and infinities, exponents, CRLF, # EOF") {
  const Exposition e = parse_ok(test::slurp(std::filesystem::path(REPRO_SOURCE_DIR) / "fuzz/corpus/prometheus/seed-escapes"));
  const Family* f = e.find("esc_metric");
  REQUIRE(f);
  CHECK(f->help == "Help with a backslash \\ and a newline \n here.");
  REQUIRE(f->samples.size() == 3);
  CHECK(*f->samples[0].label("path") == "C:\\dir\\file");
  CHECK(*f->samples[0].label("quote") == "say \"hi\"");
  CHECK(*f->samples[0].label("nl") == "a\nb");
  CHECK(f->samples[0].value == -1.5e-3);
  CHECK(f->samples[0].timestamp_ms == 1700000000000);
  CHECK(std::isinf(f->samples[1].value));
  CHECK(f->samples[1].value > 0);
  CHECK(std::isnan(f->samples[2].value));
  CHECK(f->samples[2].timestamp_ms == -17);
  CHECK(*f->samples[2].label("a") == "1");

  const Exposition n = parse_ok("a 1E3\nb -Inf\nc .5\nd 5.\ne 1e-400\nf 3 0\ng{} 7\n");
  CHECK(n.sum("a") == 1000.0);
  CHECK(n.sum("b") == -HUGE_VAL);
  CHECK(n.sum("c") == 0.5);
  CHECK(n.sum("d") == 5.0);
  CHECK(n.sum("e") == 0.0);
  CHECK(n.find("f")->samples[0].timestamp_ms == 0);
  CHECK(n.sum("g") == 7.0);

  const Exposition c = parse_ok("x 1\r\n# EOF\nnot parsed {{{\n");
  CHECK(c.families.size() == 1);
  // A summary's quantiles and its _sum/_count stay one family.
  const Exposition s = parse_ok("# TYPE rpc summary\nrpc{quantile=\"0.5\"} 4773\nrpc_sum 1.7e7\nrpc_count 2693\n");
  CHECK(s.families.size() == 1);
  CHECK(s.find("rpc")->samples.size() == 3);
}

TEST_CASE("prometheus: garbage is refused with one line naming the line and what was expected") {
  CHECK(parse_err("<!DOCTYPE html>\n<html></html>\n").find("line 1: expected a metric name or a comment, found '<!DOCTYPE") == 0);
  CHECK(parse_err("{\"error\": \"not found\"}").find("line 1: expected a metric name") == 0);
  CHECK(parse_err("ok 1\nx{a=\"1\",a=\"2\"} 1\n") == "line 2: the label a appears twice in a sample of x");
  CHECK(parse_err("x{a=\"1\"\n").find("line 1: expected ',' or '}'") == 0);
  CHECK(parse_err("x{a=\"1} 2\n") == "line 1: the value of label a is not closed with '\"'");
  CHECK(parse_err("x{a=\"\\t\"} 2\n").find("an escape other than") != std::string::npos);
  CHECK(parse_err("x{1a=\"1\"} 2\n").find("expected a label name or '}'") != std::string::npos);
  CHECK(parse_err("x\n") == "line 1: expected a value after x");
  CHECK(parse_err("x one\n") == "line 1: expected a number, NaN, +Inf or -Inf as the value of x, found 'one'");
  CHECK(parse_err("x 1e400\n").find("expected a number") != std::string::npos);
  CHECK(parse_err("x 0x10\n").find("expected a number") != std::string::npos);
  CHECK(parse_err("x 1 2.5\n").find("expected an integer timestamp") != std::string::npos);
  CHECK(parse_err("x 1 2 3\n").find("unexpected text after the timestamp") != std::string::npos);
  CHECK(parse_err("x-y 1\n").find("a metric name holds only") != std::string::npos);
  CHECK(parse_err("# TYPE x counter\n# TYPE x gauge\n") == "line 2: a second TYPE line for x");
  CHECK(parse_err("x 1\n# TYPE x gauge\n") == "line 2: the TYPE line for x comes after its samples");
  CHECK(parse_err("# HELP x a\n# HELP x b\n") == "line 2: a second HELP line for x");
  CHECK(parse_err("# TYPE x bogus\n").find("unknown metric type 'bogus'") != std::string::npos);
  CHECK(parse_err("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket 2\n") ==
        "line 3: the histogram bucket h_bucket has no 'le' label");
  CHECK(parse_err("# TYPE h histogram\nh_bucket{le=\"big\"} 1\n").find("'le' label of h_bucket is not a number") !=
        std::string::npos);
  CHECK(parse_err("# TYPE s summary\ns{quantile=\"x\"} 1\n").find("'quantile' label") != std::string::npos);
  CHECK(parse_err(std::string("x 1\ny\0 2\n", 10)).find("line 2: a NUL byte") == 0);
  CHECK(parse_err("x{a=\"\xff\xfe\"} 1\n").find("not UTF-8") != std::string::npos);
  // Limits: size, samples, labels, families.
  ParseLimits lim;
  lim.max_bytes = 8;
  CHECK(parse_err("x 1\ny 2\nz 3\n", lim) == "the body has 12 bytes, more than the limit of 8");
  lim = {};
  lim.max_samples = 2;
  CHECK(parse_err("x 1\ny 2\nz 3\n", lim) == "line 3: more than 2 samples");
  lim = {};
  lim.max_labels = 2;
  CHECK(parse_err("x{a=\"1\",b=\"2\",c=\"3\"} 1\n", lim).find("more than 2 labels") != std::string::npos);
  lim = {};
  lim.max_families = 2;
  CHECK(parse_err("x 1\ny 2\nz 3\n", lim) == "line 3: more than 2 metric families");
}

TEST_CASE("prometheus: canonical text reads back to the same families (every fixture)") {
  for (const char* name : {"metrics-vllm.txt", "metrics-sglang.txt", "metrics-llamacpp.txt"}) {
    CAPTURE(name);
    const std::string text = fixture(name);
    CHECK(fuzz_prometheus_one(reinterpret_cast<const uint8_t*>(text.data()), text.size()) == 0);
    const Exposition a = parse_ok(text);
    const Exposition b = parse_ok(write_prometheus_text(a));
    REQUIRE(a.families.size() == b.families.size());
    CHECK(a.sample_count() == b.sample_count());
  }
}

TEST_CASE("fuzz corpus fuzz/corpus/prometheus replays through the fuzz entry without a trap (regression)") {
  const auto files = test::corpus_files("prometheus");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(fuzz_prometheus_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  MESSAGE("replayed " << files.size() << " corpus files");
  CHECK(files.size() >= 10);
}

// ---------------------------------------------------------------- the sampler, over real HTTP

TEST_CASE("server metrics: the root URL beside the API") {
  EndpointSpec s = parse_endpoint_arg("http://h:8000/v1");
  CHECK(server_root_url(s) == "http://h:8000");
  s = parse_endpoint_arg("http://h:8000/v1/?x=1#f");
  CHECK(server_root_url(s) == "http://h:8000");
  s = parse_endpoint_arg("https://h/proxy/llm/v1");
  CHECK(server_root_url(s) == "https://h/proxy/llm");
  s = parse_endpoint_arg("http://h:8080");
  CHECK(server_root_url(s) == "http://h:8080");
  s = parse_endpoint_arg("https://x.openai.azure.com/openai?api-version=2024-06-01");
  s.provider = Provider::azure;
  CHECK(server_root_url(s) == "https://x.openai.azure.com");
}

TEST_CASE("server metrics: each engine's running gauge is found and summed; llama.cpp /slots counts slots") {
  struct Case {
    const char* file;
    const char* source;
    double running;
  };
  for (const Case& c : {Case{"metrics-vllm.txt", "vllm:num_requests_running", 7},
                        Case{"metrics-sglang.txt", "sglang:num_running_reqs", 3},
                        Case{"metrics-llamacpp.txt", "llamacpp:requests_processing", 4}}) {
    CAPTURE(c.file);
    FaultServerOptions o;
    o.metrics_body = fixture(c.file);
    FaultServer srv(o);
    RunningScrape r = scrape_running(spec_of(srv));
    CAPTURE(r.error);
    REQUIRE(r.ok);
    CHECK(r.source == c.source);
    CHECK(r.running == c.running);
  }
  // llama.cpp without --metrics: /metrics answers 501, /slots has the slots.
  FaultServerOptions o;
  o.slots_body = fixture("slots-llamacpp.json");
  FaultServer srv(o);
  RunningScrape r = scrape_running(spec_of(srv));
  CAPTURE(r.error);
  REQUIRE(r.ok);
  CHECK(r.source == "/slots");
  CHECK(r.running == 2);
}

TEST_CASE("server metrics: the sampler follows the running count while requests are in flight") {
  FaultServerOptions o;
  o.metrics_body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} {running}\n";
  o.slow_s = 0.6;
  FaultServer srv(o);
  srv.set_default(test::Fault::slow);
  EndpointSpec spec = spec_of(srv);
  spec.api_key = "sk-sampler-SECRET";
  ServerMetricsOptions mo;
  mo.interval_s = 0.03;
  ServerMetricsSampler sampler(spec, mo);
  sampler.start();
  // Three slow completions at once: the server's own count reaches 3 while they run.
  std::vector<std::thread> th;
  for (int i = 0; i < 3; ++i)
    th.emplace_back([&srv] {
      httplib::Client c("127.0.0.1", srv.port());
      c.set_read_timeout(10, 0);
      c.Post("/v1/completions", R"({"model":"fault-model","prompt":"hi","max_tokens":2})", "application/json");
    });
  for (auto& t : th) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const ServerMetricsSummary s = sampler.stop();
  CAPTURE(s.status);
  REQUIRE(s.known());
  CHECK(s.source == "vllm:num_requests_running");
  CHECK(s.max_running == 3);
  CHECK(s.samples >= 10);
  CHECK(s.series.size() == static_cast<size_t>(s.samples));
  CHECK(s.mean_running > 0);
  CHECK(s.mean_running < 3);
  CHECK(s.failed == 0);
  for (size_t i = 1; i < s.series.size(); ++i) CHECK(s.series[i - 1].at <= s.series[i].at);
  // The metrics GETs carried the endpoint's key (as its requests do).
  bool saw = false;
  for (const auto& rcv : srv.received())
    if (rcv.path == "/metrics") saw = saw || rcv.authorization == "Bearer sk-sampler-SECRET";
  CHECK(saw);
}

TEST_CASE("server metrics: garbage, a huge body, a slow body, no route: unknown with the reason, promptly") {
  ServerMetricsOptions mo;
  mo.get_timeout_s = 0.5;
  mo.max_body_bytes = 1 << 20;
  mo.interval_s = 0.02;
  auto run = [&](FaultServerOptions o, EndpointSpec* keyed = nullptr) {
    FaultServer srv(o);
    EndpointSpec spec = keyed ? *keyed : spec_of(srv);
    if (keyed) spec.url = srv.url() + "/v1";
    const auto t0 = std::chrono::steady_clock::now();
    ServerMetricsSampler sampler(spec, mo);
    sampler.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ServerMetricsSummary s = sampler.stop();
    const double took = seconds_since(t0);
    CAPTURE(s.status);
    CHECK_FALSE(s.known());
    CHECK(s.samples == 0);
    CHECK(s.status.find('\n') == std::string::npos);
    CHECK(took < 2.0);  // one timeout at most, then stop() joins
    RunningScrape once = scrape_running(spec, mo);
    CHECK_FALSE(once.ok);
    return s.status;
  };
  SUBCASE("garbage") {
    FaultServerOptions o;
    o.metrics_body = "<html><body>Sign in</body></html>\n";
    const std::string st = run(o);
    CHECK(st.find("unknown: GET /metrics: not Prometheus text (line 1: expected a metric name") == 0);
    CHECK(st.find("GET /slots: no such route (HTTP 404)") != std::string::npos);
  }
  SUBCASE("a huge body") {
    FaultServerOptions o;
    o.metrics_body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
                     "padding_metric_with_a_long_name{label=\"value value value value\"} 1\n";
    o.metrics_repeat = 40000;  // about 4 MB, over the 1 MiB limit
    const std::string st = run(o);
    CHECK(st.find("unknown: GET /metrics: too large: more than 1048576 bytes") == 0);
  }
  SUBCASE("a slow body") {
    FaultServerOptions o;
    o.metrics_body = "vllm:num_requests_running 1\n";
    o.metrics_drip_s = 0.2;  // one byte every 0.2 s
    const std::string st = run(o);
    CHECK(st == "unknown: GET /metrics: too slow: no complete answer within 0.5 s");
  }
  SUBCASE("a server that never answers the GET") {
    FaultServerOptions o;
    o.metrics_body = "vllm:num_requests_running 1\n";
    o.metrics_delay_s = 5;
    const std::string st = run(o);
    CHECK(st == "unknown: GET /metrics: too slow: no complete answer within 0.5 s");
  }
  SUBCASE("no metrics and no slots") {
    const std::string st = run(FaultServerOptions{});
    CHECK(st == "unknown: GET /metrics: no such route (HTTP 404); GET /slots: no such route (HTTP 404)");
  }
  SUBCASE("Prometheus text without a known gauge") {
    FaultServerOptions o;
    o.metrics_body = fixture("metrics-vllm.txt");
    for (size_t at; (at = o.metrics_body.find("vllm:num_requests_running")) != std::string::npos;)
      o.metrics_body.replace(at, 25, "vllm:num_requests_runnin_");
    const std::string st = run(o);
    CHECK(st.find("unknown: GET /metrics: none of the known running-requests gauges") == 0);
  }
  SUBCASE("/slots that is not a list of slots, and an error that echoes the key") {
    FaultServerOptions o;
    o.slots_body = "{\"slots\": 3}";
    o.echo_auth_in_errors = true;
    EndpointSpec keyed = parse_endpoint_arg("http://127.0.0.1:1/v1");
    keyed.api_key = "sk-echo-SECRET-5";
    const std::string st = run(o, &keyed);
    CHECK(st.find("GET /slots: not a JSON array of slots") != std::string::npos);
    CHECK(st.find("sk-echo-SECRET-5") == std::string::npos);
  }
  SUBCASE("nothing listening") {
    EndpointSpec spec = parse_endpoint_arg("http://127.0.0.1:1/v1");
    ServerMetricsSampler sampler(spec, mo);
    sampler.start();
    const ServerMetricsSummary s = sampler.stop();
    CHECK_FALSE(s.known());
    const RunningScrape r = scrape_running(spec, mo);
    CHECK(r.error.find("GET /metrics: cannot connect") == 0);
    CHECK(r.error.find("/slots") == std::string::npos);  // an unreachable server is asked once
  }
}
