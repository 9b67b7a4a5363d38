// ctest-labels: model remote
// Remote evidence: co-batching per level (client lifetimes), the endpoint's posture from its info
// routes, the seed probe, the replica panel, sampled outputs as distributions and batch-mate
// isolation. Real parts: the engine on stories260K, `repro-audit serve` and the real binary on
// loopback, and a loopback server speaking the engines' info formats (tests/data/info/).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fault_server.hpp"
#include "repro/audit/batch_context.hpp"
#include "repro/audit/canary.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/compare.hpp"
#include "repro/audit/distribution.hpp"
#include "repro/audit/posture.hpp"
#include "repro/audit/remote_probe.hpp"
#include "repro/engine/engine.hpp"
#include "repro/report/report.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

const fs::path kInfo = fs::path(REPRO_SOURCE_DIR) / "tests" / "data" / "info";

std::string info(const std::string& name) { return test::slurp(kInfo / name); }

// `n` samples of `tokens` tokens from the real model at temperature t, seeds from `seed0` on,
// decoded together (batch-invariant: each one's bits are its own).
std::vector<std::vector<int>> samples(Engine& engine, const Model& m, double t, int n, uint64_t seed0, int tokens) {
  std::vector<GenRequest> reqs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    reqs[i].prompt = m.tokenizer->encode("Once upon a time", true);
    reqs[i].params.max_tokens = tokens;
    reqs[i].params.temperature = static_cast<float>(t);
    reqs[i].params.seed = seed0 + static_cast<uint64_t>(i);
  }
  std::vector<std::vector<int>> out;
  for (auto& g : engine.generate(reqs)) out.push_back(g.tokens);
  return out;
}

}  // namespace

TEST_CASE("overlap_with_others: fewest, most and time-weighted mean of the other requests in flight") {
  // me: [0, 10); others: [-5, 4) (at the start), [2, 6), [5, 20) (past the end), [12, 15) (outside)
  std::vector<Interval> all = {{0, 10}, {-5, 4}, {2, 6}, {5, 20}, {12, 15}};
  int lo = -1;
  double mean = -1;
  const int hi = overlap_with_others(all, 0, lo, mean);
  // counts over time: [0,2) 1, [2,4) 2, [4,5) 1, [5,6) 2, [6,10) 1
  CHECK(lo == 1);
  CHECK(hi == 2);
  CHECK(mean == doctest::Approx((1 * 2 + 2 * 2 + 1 * 1 + 2 * 1 + 1 * 4) / 10.0));
  // alone
  std::vector<Interval> alone = {{0, 1}, {2, 3}};
  CHECK(overlap_with_others(alone, 0, lo, mean) == 0);
  CHECK(lo == 0);
  CHECK(mean == 0);
}

TEST_CASE("decide_evidence: a level is co-batched by the server's word when it has one, UNVERIFIED otherwise") {
  AuditReport r;
  Completion c;
  c.mode = "ep";
  c.send_s = 0;
  c.last_byte_s = 1;
  c.others_min = 3;
  c.others_max = 7;
  c.others_mean = 5;
  c.server_max_batch = 1;  // the server says the probe decoded alone
  record_level(r, "ep", 8, {c}, ServerMetricsSummary{});
  Completion alone = c;
  alone.others_min = alone.others_max = 0;
  alone.others_mean = 0;
  record_level(r, "ep", 1, {alone}, ServerMetricsSummary{});
  decide_evidence(r);
  REQUIRE(r.evidence.size() == 1);
  REQUIRE(r.evidence[0].levels.size() == 2);
  CHECK(r.evidence[0].levels[0].concurrency == 1);
  CHECK(r.evidence[0].levels[0].control);
  CHECK_FALSE(r.evidence[0].levels[1].co_batched);
  CHECK_FALSE(r.evidence[0].verified);
  CHECK(r.evidence[0].finding.find("no probe shared the server") == 0);

  // The server's running count (sampled) says two ran at once: co-batched.
  c.server_max_batch = -1;
  AuditReport r2;
  ServerMetricsSummary s;
  s.status = "known";
  s.source = "vllm:num_requests_running";
  s.max_running = 4;
  s.mean_running = 3;
  s.samples = 10;
  record_level(r2, "ep", 8, {c}, s);
  decide_evidence(r2);
  CHECK(r2.evidence[0].levels[0].co_batched);
  CHECK(r2.evidence[0].verified);
  // ... and a server that ran one at a time while the client had 8 in flight: not co-batched.
  AuditReport r3;
  s.max_running = 1;
  record_level(r3, "ep", 8, {c}, s);
  decide_evidence(r3);
  CHECK_FALSE(r3.evidence[0].verified);
  // Client side only (the server says nothing): the overlap decides.
  AuditReport r4;
  record_level(r4, "ep", 8, {c}, ServerMetricsSummary{});
  decide_evidence(r4);
  CHECK(r4.evidence[0].verified);
  CHECK(r4.evidence[0].levels[0].evidence.find("client side only") != std::string::npos);
}

TEST_CASE("decide_seed_probe: honoured, ignored (either way) and unknown") {
  using O = std::optional<std::string>;
  SeedProbeResult r;
  decide_seed_probe(r, {{O("a"), O("a")}, {O("b"), O("b")}, {O("c"), O("c")}});
  CHECK(r.result == "honoured");
  CHECK(r.same_pairs == 3);
  CHECK(r.same_equal == 3);
  CHECK(r.diff_distinct == 3);
  decide_seed_probe(r, {{O("a"), O("x")}, {O("b"), O("b")}});
  CHECK(r.result == "ignored");
  decide_seed_probe(r, {{O("a"), O("a")}, {O("a"), O("a")}, {O("a"), O("a")}});
  CHECK(r.result == "ignored");
  CHECK(r.detail.find("no effect") != std::string::npos);
  decide_seed_probe(r, {{O("a"), std::nullopt}, {std::nullopt, O("b")}});
  CHECK(r.result == "unknown");
}

TEST_CASE("posture: each engine's info route is read by its shape; unknown is never guessed") {
  struct Case {
    const char* route;
    const char* file;
    const char* engine;
    const char* version;
    const char* deterministic;
    const char* invariance;
  };
  const Case cases[] = {
      {"/version", "vllm-version.json", "vllm", "0.11.0", "unknown", "not claimed"},
      {"/get_server_info", "sglang-get_server_info.json", "sglang", "0.5.4", "on", "claimed"},
      {"/props", "llamacpp-props.json", "llama.cpp", "b6500-8f1d81a0", "unknown", "not claimed"},
      {"/info", "tgi-info.json", "tgi", "3.3.6", "unknown", "not claimed"},
      {"/api/version", "ollama-version.json", "ollama", "0.12.3", "unknown", "not claimed"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.file);
    EndpointPosture p;
    REQUIRE(read_info_route(c.route, info(c.file), p));
    CHECK(p.engine == c.engine);
    CHECK(p.version == c.version);
    CHECK(p.deterministic == c.deterministic);
    CHECK(p.batch_invariance == c.invariance);
  }
  // A route answered with another engine's shape, or garbage, is not that engine.
  EndpointPosture p;
  CHECK_FALSE(read_info_route("/get_server_info", info("vllm-version.json"), p));
  CHECK_FALSE(read_info_route("/props", "<html>login</html>", p));
  CHECK_FALSE(read_info_route("/info", "{\"status\":\"ok\"}", p));
  CHECK(p.engine == "unknown");
  CHECK(api_base_url("http://h:8000/v1/chat/completions") == "http://h:8000");
  CHECK(api_base_url("https://h/proxy/v1") == "https://h/proxy");
  CHECK(api_base_url("http://h:9/x/completions?k=1") == "http://h:9");
}

TEST_CASE("posture over HTTP: vLLM, SGLang (deterministic), llama.cpp with one slot, and nothing") {
  struct Case {
    std::string route, file, engine;
    bool single;
  };
  const Case cases[] = {{"/version", "vllm-version.json", "vllm", false},
                        {"/get_server_info", "sglang-get_server_info.json", "sglang", false},
                        {"/props", "llamacpp-props-one-slot.json", "llama.cpp", true}};
  for (const auto& c : cases) {
    CAPTURE(c.file);
    test::FaultServerOptions o;
    o.get_routes[c.route] = {"application/json", info(c.file)};
    test::FaultServer srv(o);
    EndpointSpec spec;
    spec.url = srv.url();
    spec.api_model = "m";
    EndpointPosture p = detect_posture(spec, srv.url() + "/v1/completions", {});
    CHECK(p.engine == c.engine);
    REQUIRE(!p.sources.empty());
    CHECK(p.sources[0] == "GET " + c.route);
    REQUIRE(!p.findings.empty());
    if (c.engine == "sglang")
      CHECK(p.findings[0].find("reports a deterministic, batch-invariant mode") != std::string::npos);
    else if (c.single)
      CHECK(p.findings[0].find("one request at a time") != std::string::npos);
    else
      CHECK(p.findings[0].find("temperature 0 is not determinism") == 0);
  }
  // A server with no info route: unknown, said so.
  test::FaultServer bare;
  EndpointSpec spec;
  spec.url = bare.url();
  spec.api_model = "m";
  EndpointPosture p = detect_posture(spec, bare.url() + "/v1/completions", {});
  CHECK(p.engine == "unknown");
  CHECK(p.version.empty());
  // The Server header alone names llama.cpp (its server sends it).
  test::FaultServerOptions lo;
  lo.server_header = "llama.cpp";
  test::FaultServer named(lo);
  spec.url = named.url();
  p = detect_posture(spec, named.url() + "/v1/completions", {});
  CHECK(p.engine == "llama.cpp");
}

TEST_CASE("seed probe: a server that honours the seed, and one that ignores it") {
  for (bool ignores : {false, true}) {
    CAPTURE(ignores);
    test::FaultServerOptions o;
    o.vary_per_request = ignores;
    test::FaultServer srv(o);
    for (const char* api : {"completions", "chat"}) {
      EndpointSpec spec;
      spec.url = srv.url();
      spec.api_model = "m";
      spec.api = api;
      RemoteProbe probe;
      probe.prompt_id = "p";
      probe.prompt = "Once upon a time";
      probe.decoding.max_tokens = 8;
      probe.seed = 7;
      SeedProbeResult r = run_seed_probe(spec, probe, kSeedProbeSeeds, nullptr);
      CHECK(r.api == api);
      CHECK(r.result == (ignores ? "ignored" : "honoured"));
      CHECK(r.same_pairs == kSeedProbeSeeds);
      CHECK(r.errors == 0);
    }
  }
}

TEST_CASE("two-sample test: false-positive rate at most alpha over 200 same-distribution trials; power on a shifted temperature") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  Engine engine(*model, {Mode::BatchInvariant, 1});
  const int trials = 200, n = 10, tokens = 12;
  // The same endpoint against itself over many seeds: 2 x 200 x 10 samples at T = 1, all seeds distinct.
  auto same = samples(engine, *model, 1.0, 2 * trials * n, 1000, tokens);
  int false_positives = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<std::vector<int>> a(same.begin() + 2 * t * n, same.begin() + (2 * t + 1) * n);
    std::vector<std::vector<int>> b(same.begin() + (2 * t + 1) * n, same.begin() + (2 * t + 2) * n);
    false_positives += two_sample_test(a, b, static_cast<uint64_t>(t)).differs;
  }
  const double fpr = static_cast<double>(false_positives) / trials;
  MESSAGE("false-positive rate at alpha 0.05: " << false_positives << " of " << trials);
  CHECK(fpr <= kDistributionAlpha);
  // Power: T = 1 against T = 1.6, 10 samples per side.
  const int power_trials = 60;
  auto hot = samples(engine, *model, 1.6, power_trials * n, 900000, tokens);
  int detected = 0;
  for (int t = 0; t < power_trials; ++t) {
    std::vector<std::vector<int>> a(same.begin() + t * n, same.begin() + (t + 1) * n);
    std::vector<std::vector<int>> b(hot.begin() + t * n, hot.begin() + (t + 1) * n);
    detected += two_sample_test(a, b, static_cast<uint64_t>(t)).differs;
  }
  MESSAGE("power, T 1.0 vs 1.6, 10 samples per side: " << detected << " of " << power_trials);
  CHECK(detected > power_trials / 2);
  // Too few samples: no test, said so.
  std::vector<std::vector<int>> few(same.begin(), same.begin() + 3);
  DistributionTest t = two_sample_test(few, few);
  CHECK(!t.note.empty());
  CHECK_FALSE(t.differs);
}

TEST_CASE("run against serve: --max-batch 1 is UNVERIFIED (exit 4), --max-batch 64 at concurrency 8 is co-batched") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  for (int max_batch : {1, 64}) {
    CAPTURE(max_batch);
    ServerOptions so;
    so.port = 0;
    so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
    so.max_batch = max_batch;
    Server server(*model, {Mode::BatchInvariant, 1}, so);
    server.start();
    auto out = test::scratch_dir("evidence-serve-" + std::to_string(max_batch));
    auto res = test::run_cli("run --quiet --endpoint srv=" + server.url() + " --api-model " + server.model_name() +
                             " --api completions --concurrency 1,8 --repeats 4 --max-tokens 24 --no-cache-probe"
                             " --prompt 'Once upon a time' --format json,md,html,junit --out '" +
                             out.string() + "'");
    server.stop();
    AuditReport r = load_report((out / "report.json").string());
    REQUIRE(r.evidence.size() == 1);
    const EndpointEvidence& ev = r.evidence[0];
    CHECK(ev.posture.engine == "repro-audit");
    CHECK(ev.posture.batch_invariance == "claimed");
    REQUIRE(ev.levels.size() == 2);
    CHECK(ev.levels[0].control);
    CHECK(ev.levels[0].others_max == 0);  // the control arm ran alone
    const CoBatchLevel& l8 = ev.levels[1];
    CHECK(l8.concurrency == 8);
    CHECK(l8.others_max >= 1);            // the client had other requests in flight either way
    REQUIRE(l8.response_max_batch.has_value());
    if (max_batch == 1) {
      CHECK(*l8.response_max_batch == 1);
      CHECK_FALSE(l8.co_batched);
      CHECK_FALSE(ev.verified);
      CHECK(r.summary.verdict == "unverified");
      CHECK(res.code == 4);
      for (const char* f : {"report.md", "report.html", "report.junit.xml"})
        CHECK(test::slurp(out / f).find(kUnverifiedWhy) != std::string::npos);
    } else {
      CHECK(*l8.response_max_batch >= 2);
      CHECK(l8.co_batched);
      CHECK(ev.verified);
      CHECK(r.summary.verdict == "reproducible");
      CHECK(res.code == 0);
    }
  }
}

TEST_CASE("run --seed-probe against serve: the seed is honoured on both APIs") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 16;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto out = test::scratch_dir("evidence-seed-probe");
  test::run_cli("run --quiet --endpoint srv=" + server.url() + " --api-model " + server.model_name() +
                " --api completions --concurrency 1,4 --repeats 2 --max-tokens 16 --no-cache-probe --seed-probe"
                " --prompt 'Once upon a time' --format json --out '" + out.string() + "'");
  server.stop();
  AuditReport r = load_report((out / "report.json").string());
  REQUIRE(r.evidence.size() == 1);
  REQUIRE(r.evidence[0].seeds.size() == 2);
  for (const auto& s : r.evidence[0].seeds) {
    CAPTURE(s.api);
    CHECK(s.result == "honoured");
    CHECK(s.same_equal == s.same_pairs);
  }
}

TEST_CASE("replica panel: two replicas and a third serving other weights under the same model name") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  auto scratch = test::scratch_dir("evidence-panel");
  const fs::path other = scratch / "other.gguf";
  REQUIRE(test::run_cli("model synth --out '" + other.string() + "' --dim 64 --hidden 128 --layers 2 --heads 4 "
                        "--kv-heads 4 --vocab 512 --seed 5").code == 0);
  auto other_model = load_model(other.string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 16;
  so.model_name = "story";
  Server a(*model, {Mode::BatchInvariant, 1}, so), b(*model, {Mode::BatchInvariant, 1}, so),
      c(*other_model, {Mode::BatchInvariant, 1}, so);
  a.start();
  b.start();
  c.start();
  auto out = scratch / "run";
  test::run_cli("run --quiet --endpoint a=" + a.url() + " --endpoint b=" + b.url() + " --endpoint c=" + c.url() +
                " --api-model story --api completions --concurrency 1,4 --repeats 2 --max-tokens 16 --no-cache-probe"
                " --prompt 'Once upon a time' --format json,md --out '" + out.string() + "'");
  a.stop();
  b.stop();
  c.stop();
  AuditReport r = load_report((out / "report.json").string());
  REQUIRE(r.panel.size() == 1);
  const PanelCase& pc = r.panel[0];
  REQUIRE(pc.members.size() == 3);
  CHECK(pc.agreeing == 2);
  CHECK(pc.members[0].agrees);
  CHECK(pc.members[1].agrees);
  CHECK_FALSE(pc.members[2].agrees);
  CHECK(pc.members[2].first_divergence >= 0);
  CHECK(test::slurp(out / "report.md").find("'c' leaves the panel's majority") != std::string::npos);
}

TEST_CASE("speculation on against off, two servers: batch-invariant serve agrees on every case; the panel says so") {
  // docs/REMOTE.md "Speculative decoding: on against off": the control pair, one server verifying
  // n-gram drafts and one without speculation, greedy, at concurrency 1 and 4.
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  auto scratch = test::scratch_dir("evidence-spec-pair");
  ServerOptions so;
  so.port = 0;
  so.max_batch = 16;
  so.model_name = "story";
  EngineOptions with{Mode::BatchInvariant, 1};
  with.speculative = parse_speculative("ngram:3");
  Server spec(*model, with, so), plain(*model, {Mode::BatchInvariant, 1}, so);
  spec.start();
  plain.start();
  auto out = scratch / "run";
  auto res = test::run_cli("run --quiet --endpoint spec=" + spec.url() + " --endpoint plain=" + plain.url() +
                           " --api-model story --api completions --concurrency 1,4 --repeats 1 --max-tokens 64"
                           " --no-cache-probe --prompt 'Once upon a time' --prompt 'Lily and Tom went to the park'"
                           " --format json --out '" + out.string() + "'");
  spec.stop();
  plain.stop();
  INFO(res.output);
  AuditReport r = load_report((out / "report.json").string());
  REQUIRE(r.panel.size() == 2);
  for (const auto& pc : r.panel) {
    CAPTURE(pc.prompt_id);
    REQUIRE(pc.members.size() == 2);
    CHECK(pc.agreeing == 2);
  }
  // serve's /info says which one speculates, and the posture records it
  REQUIRE(r.evidence.size() == 2);
  for (const auto& e : r.evidence) {
    CAPTURE(e.endpoint);
    REQUIRE(e.posture.info.contains("speculative"));
    CHECK(e.posture.info["speculative"] == (e.endpoint == "spec" ? "ngram:3" : "off"));
  }
}

TEST_CASE("--isolation: other batch-mate contents at the same shapes leave the probe's bits alone, in every mode") {
  REPRO_REQUIRE_MODELS(dir);
  auto out = test::scratch_dir("evidence-isolation");
  auto res = test::run_cli("run --quiet --model '" + (dir / "stories260K.gguf").string() +
                           "' --modes default,batch-invariant --batch-sizes 1,4 --positions first,last --filler-sets 1"
                           " --repeats 1 --max-tokens 16 --isolation --prompt 'Once upon a time' --format json --out '" +
                           out.string() + "'");
  CHECK((res.code == 0 || res.code == 1));  // reproducible, or default mode divergent across batch sizes
  AuditReport r = load_report((out / "report.json").string());
  int other = 0;
  for (const auto& c : r.completions) other += c.mate_contents == "other";
  CHECK(other == 2 * 2 * 2);  // two modes x two precisions (the quick profile's f32, bf16) x two positions at batch 4
  // The same shapes: the whole batch generated as many tokens with the other contents.
  for (const auto& a : r.completions)
    for (const auto& b : r.completions)
      if (a.mate_contents.empty() && b.mate_contents == "other" && a.mode == b.mode && a.position == b.position &&
          a.batch_size == b.batch_size)
        CHECK(a.batch_tokens == b.batch_tokens);
  for (const auto& ms : r.summary.modes) {
    CAPTURE(ms.mode);
    CHECK(ms.isolation.n == 2);
    CHECK(ms.isolation.k == 0);
    CHECK(ms.isolation_finding.find("no leakage between rows") != std::string::npos);
  }
}

TEST_CASE("canary: sampled outputs the seed does not control are compared as distributions") {
  test::FaultServerOptions o;
  o.vary_per_request = true;  // every answer differs: no seed controls it
  test::FaultServer srv(o);
  auto dir = test::scratch_dir("evidence-canary");
  auto run = [&](const std::string& name) {
    test::run_cli("run --quiet --endpoint e=" + srv.url() + " --api-model m --api completions --concurrency 1"
                             " --repeats 12 --max-tokens 8 --no-cache-probe --temperatures 0.8 --top-p 1 --top-k 0"
                  " --prompt 'Once upon a time' --format json --out '" + (dir / name).string() + "'");
    return load_report((dir / name / "report.json").string());
  };
  AuditReport a = run("a"), b = run("b");
  CanaryResult c = classify_canary(a, b);
  CHECK(c.distribution_tests == 1);
  CHECK(c.token_drift == 0);
}

TEST_CASE("run against a vLLM-speaking loopback server: /version and /metrics are the evidence; bad /metrics never fails the run") {
  // Its running gauge reports the completions really in flight ({running}), in vLLM's format.
  const std::string vllm_metrics =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} {running}\n";
  struct Case {
    const char* name;
    std::string body;
    int repeat;
    double delay_s;
  };
  const Case cases[] = {{"vllm", vllm_metrics, 1, 0},
                        {"garbage", "this is {not} prometheus text\n\x01\x02", 1, 0},
                        {"huge", vllm_metrics, 200000, 0},
                        {"slow", vllm_metrics, 1, 4.0}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    test::FaultServerOptions o;
    o.get_routes["/version"] = {"application/json", info("vllm-version.json")};
    o.metrics_body = c.body;
    o.metrics_repeat = c.repeat;
    o.metrics_delay_s = c.delay_s;
    o.slow_s = 0.25;  // the level lasts about a second: the 50 ms sampler sees it even on a busy machine
    test::FaultServer srv(o);
    srv.add_rule("", test::Fault::slow);  // every completion takes a while: requests overlap
    auto out = test::scratch_dir(std::string("evidence-vllm-") + c.name);
    auto res = test::run_cli("run --quiet --endpoint v=" + srv.url() + "/v1 --api-model m --api completions"
                             " --concurrency 1,4 --repeats 3 --max-tokens 4 --no-cache-probe --prompt hi"
                             " --format json,md --out '" + out.string() + "'");
    CHECK(res.code == 0);
    AuditReport r = load_report((out / "report.json").string());
    REQUIRE(r.evidence.size() == 1);
    CHECK(r.evidence[0].posture.engine == "vllm");
    CHECK(r.evidence[0].posture.version == "0.11.0");
    REQUIRE(r.evidence[0].levels.size() == 2);
    const CoBatchLevel& l4 = r.evidence[0].levels[1];
    CHECK(l4.co_batched);
    if (std::string(c.name) == "vllm") {
      CHECK(l4.server_status == "known");
      CHECK(l4.server_source.find("vllm:num_requests_running") != std::string::npos);
      REQUIRE(l4.server_running_max.has_value());
      CHECK(*l4.server_running_max >= 2);
    } else {
      CHECK(l4.server_status.rfind("unknown: ", 0) == 0);  // said so, with the reason
      CHECK(l4.evidence.find("client side only") != std::string::npos);
    }
  }
}

TEST_CASE("diff and canary name an engine, version or posture change before any output change") {
  AuditReport a;
  EndpointEvidence ev;
  ev.endpoint = "v";
  ev.posture.engine = "vllm";
  ev.posture.version = "0.10.2";
  ev.posture.batch_invariance = "not claimed";
  ev.posture.info = {{"attention_backend", "flash"}};
  a.evidence.push_back(ev);
  a.environment = {{"digests", {{"profile_sha256", "p"}}}};
  AuditReport b = a;
  b.evidence[0].posture.version = "0.11.0";
  b.evidence[0].posture.info["attention_backend"] = "triton";
  b.environment["digests"]["profile_sha256"] = "q";
  const auto changes = config_drift(a, b);
  REQUIRE(changes.size() >= 3);
  CHECK(changes[0] == "endpoint 'v' engine version 0.10.2 -> 0.11.0");
  CHECK(changes[1] == "endpoint 'v' attention_backend flash -> triton");
  CHECK(changes.back().rfind("profile digest", 0) == 0);
  const CanaryResult c = classify_canary(a, b);
  REQUIRE(!c.alarms.empty());
  CHECK(c.alarms[0] == "RED v: engine vllm 0.10.2 -> vllm 0.11.0");
  CHECK(c.level == CanaryLevel::Red);
}

TEST_CASE("other_contents_text: the filler's words in reverse order, whitespace kept") {
  CHECK(other_contents_text("Once upon a time") == "time a upon Once");
  CHECK(other_contents_text("  Q: Why?\nA:") == "  A: Why?\nQ:");
  CHECK(other_contents_text("one") == "one");
  CHECK(other_contents_text("") == "");
  for (const auto& f : filler_pool()) CHECK(other_contents_text(other_contents_text(f)) == f);
}

TEST_CASE("run --isolation against serve: each co-batched level again with other filler contents; the same output") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap
  so.max_batch = 16;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto out = test::scratch_dir("evidence-isolation-serve");
  auto res = test::run_cli("run --quiet --endpoint srv=" + server.url() + " --api-model " + server.model_name() +
                           " --api completions --concurrency 1,4 --repeats 2 --max-tokens 16 --no-cache-probe"
                           " --isolation --prompt 'Once upon a time' --format json,md --out '" + out.string() + "'");
  server.stop();
  INFO(res.output);
  CHECK(res.code == 0);
  AuditReport r = load_report((out / "report.json").string());
  int other = 0;
  for (const auto& c : r.completions) {
    if (c.mate_contents != "other") continue;
    ++other;
    CHECK(c.batch_size == 4);  // co-batched levels only: none at concurrency 1
    CHECK(c.others_max >= 1);  // it shared the server
  }
  CHECK(other == 2);
  REQUIRE(r.evidence.size() == 1);
  REQUIRE(r.evidence[0].levels.size() == 2);
  const CoBatchLevel& l4 = r.evidence[0].levels[1];
  CHECK(l4.co_batched);
  CHECK(l4.isolation_fillers >= 3);  // serve's usage counts for the drawn and the reversed fillers
  CHECK(l4.isolation_same_tokens <= l4.isolation_fillers);
  CHECK(r.evidence[0].levels[0].isolation_fillers == 0);
  REQUIRE(r.summary.modes.size() == 1);
  CHECK(r.summary.modes[0].isolation.n == 2);
  CHECK(r.summary.modes[0].isolation.k == 0);
  CHECK(r.summary.modes[0].isolation_finding.find("no leakage between requests seen") != std::string::npos);
  CHECK(test::slurp(out / "report.md").find("no leakage between requests seen") != std::string::npos);
}

TEST_CASE("run --isolation: an endpoint whose output depends on another request's contents is caught, and named "
          "leakage only where the endpoint claims batch invariance") {
  for (const bool claims : {true, false}) {
    CAPTURE(claims);
    test::FaultServerOptions o;
    if (claims) o.get_routes["/get_server_info"] = {"application/json", info("sglang-get_server_info.json")};
    o.slow_s = 0.15;
    o.leak_known = {filler_pool().begin(), filler_pool().end()};
    o.leak_known.insert("hi");
    test::FaultServer srv(o);
    srv.add_rule("", test::Fault::slow);  // every completion takes a while: requests overlap
    auto out = test::scratch_dir(claims ? "evidence-leak-claimed" : "evidence-leak-unclaimed");
    auto res = test::run_cli("run --quiet --endpoint e=" + srv.url() + "/v1 --api-model m --api completions"
                             " --concurrency 1,4 --repeats 3 --max-tokens 4 --no-cache-probe --isolation --prompt hi"
                             " --format json,md --out '" + out.string() + "'");
    INFO(res.output);
    CHECK(res.code == 1);  // the other-contents outputs differ: divergent
    AuditReport r = load_report((out / "report.json").string());
    REQUIRE(r.evidence.size() == 1);
    CHECK(r.evidence[0].posture.deterministic == (claims ? "on" : "unknown"));
    REQUIRE(r.evidence[0].levels.size() == 2);
    const CoBatchLevel& l4 = r.evidence[0].levels[1];
    CHECK(l4.co_batched);
    CHECK(l4.isolation_fillers >= 3);
    CHECK(l4.isolation_same_tokens == l4.isolation_fillers);  // reversed words: as many words
    REQUIRE(r.summary.modes.size() == 1);
    const ModeSummary& ms = r.summary.modes[0];
    CHECK(ms.isolation.n == 3);
    CHECK(ms.isolation.k >= 2);  // fillers are always in flight at concurrency 4
    const std::string md = test::slurp(out / "report.md");
    if (claims) {
      CHECK(ms.isolation_finding.find("LEAKAGE BETWEEN REQUESTS") != std::string::npos);
      CHECK(md.find("LEAKAGE BETWEEN REQUESTS") != std::string::npos);
    } else {
      CHECK(ms.isolation_finding.find("not attributable to leakage: the endpoint claims no batch invariance") !=
            std::string::npos);
      CHECK(md.find("LEAKAGE") == std::string::npos);
    }
    CHECK(ms.isolation_finding.find("equal prompt token counts for") != std::string::npos);
  }
}
