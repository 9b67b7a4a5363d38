// ctest-labels: model remote
// `repro-audit run --endpoint` (the real binary, libcurl) against `repro-audit serve` (the real engine on
// stories260K, cpp-httplib) on loopback: batch-invariant serving gives one unique completion per
// probe at every concurrency, bit for bit the local engine's output; the API key never reaches a file.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "repro/audit/plan.hpp"
#include "repro/engine/engine.hpp"
#include "repro/report/report.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

TEST_CASE("run --endpoint against serve (batch-invariant): 1 unique completion per case, equal to local generate") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  const std::string key = "sk-test-NEVER-IN-OUTPUT-5f1e2d";
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 64;
  so.api_key = key;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();

  auto out = test::scratch_dir("run-remote-invariant");
  std::string cmd = "TEST_API_KEY='" + key + "' '" + test::binary() + "' run --quiet --endpoint inv=" + server.url() +
                    " --api-model " + server.model_name() +
                    " --api completions --api-key-env TEST_API_KEY --concurrency 1,8,64 --repeats 3 --max-tokens 20"
                    " --prompt 'Once upon a time' --prompt 'The little dog was' --verbose --out '" +
                    out.string() + "' > '" + (out / "stdout.txt").string() + "' 2> '" + (out / "stderr.txt").string() + "'";
  int st = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(st) == 0);
  AuditReport r = load_report((out / "report.json").string());
  REQUIRE(r.cases.size() == 2);
  CHECK(r.summary.errors == 0);
  // The server really batched the concurrent requests.
  CHECK(server.stats().max_batch_seen > 1);

  Engine engine(*model, {Mode::BatchInvariant, 1});
  for (const auto& c : r.cases) {
    CAPTURE(c.prompt_id);
    CHECK(c.mode == "inv");
    CHECK(c.unique == 1);
    CHECK(c.tarr);
    CHECK(!c.bit_divergent);
    GenRequest g;
    g.prompt = model->tokenizer->encode(r.prompts.at(c.prompt_id), true);
    g.params.max_tokens = 20;
    GenResult local = engine.generate({g})[0];
    REQUIRE(!c.clusters.empty());
    CHECK(c.clusters[0].tokens == local.tokens);
    CHECK(c.clusters[0].text == local.text);
  }
  // every concurrency level was exercised
  std::set<int> levels;
  for (const auto& c : r.completions) levels.insert(c.batch_size);
  CHECK(levels.count(64) == 1);
  // The key was sent (the server checks it, so the run would have failed otherwise) and appears nowhere.
  std::string everything = test::slurp_dir(out);
  CHECK(everything.find(key) == std::string::npos);
  CHECK(everything.find("report") != std::string::npos);
  server.stop();
}

TEST_CASE("run --endpoint: two endpoints side by side; default-mode serving is measured, not assumed") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.max_batch = 64;
  Server inv(*model, {Mode::BatchInvariant, 1}, so), def(*model, {Mode::Default, 1}, so);
  inv.start();
  def.start();
  auto out = test::scratch_dir("run-remote-compare");
  auto r = test::run_cli("run --quiet --endpoint invariant=" + inv.url() + " --endpoint default=" + def.url() +
                         " --api-model " + inv.model_name() + " --api chat --stream --concurrency 1,16 --repeats 2" +
                         " --max-tokens 16 --prompt 'Once upon a time' --gate-modes invariant --out '" + out.string() + "'");
  INFO(r.output);
  CHECK(r.code == 0);
  AuditReport rep = load_report((out / "report.json").string());
  REQUIRE(rep.summary.modes.size() == 2);
  bool ratio = false;
  for (const auto& t : rep.throughput)
    if (t.ratio_vs_default) ratio = true;
  CHECK(ratio);
  for (const auto& c : rep.cases)
    if (c.mode == "invariant") CHECK(c.unique == 1);
  // The reports show what the endpoints answered with: TTFT (streamed) and system_fingerprint per endpoint,
  // and label the endpoints' tokens/s as the probe stream only.
  std::string fp;
  for (const auto& c : rep.completions)
    if (c.mode == "invariant" && c.error.empty()) {
      CHECK(c.ttft_s > 0);
      fp = c.system_fingerprint;
    }
  CHECK(!fp.empty());
  for (const char* name : {"report.md", "report.html"}) {
    CAPTURE(name);
    std::string text = test::slurp(out / name);
    CHECK(text.find("Endpoint responses") != std::string::npos);
    CHECK(text.find("time to first token") != std::string::npos);
    CHECK(text.find(" ms (") != std::string::npos);      // "12.3 ms, 10.1-15.2 ms (4 of 4 streamed)"
    CHECK(text.find(fp + " x") != std::string::npos);    // the fingerprint with its count
    CHECK(text.find("probe only") != std::string::npos);
    CHECK(text.find("whole batch") == std::string::npos);  // no endpoint row claims the whole batch
    CHECK(text.find("; per level: concurrency 1: ") != std::string::npos);
    // endpoints run at concurrency levels, not batch sizes: the throughput table and charts say so
    CHECK((text.find("<th>concurrency</th>") != std::string::npos || text.find("| mode | concurrency |") != std::string::npos));
    if (std::string(name) == "report.html") CHECK(text.find("Throughput per concurrency level") != std::string::npos);
    CHECK(text.find("tokens/s only, the fillers that load the server are not counted") != std::string::npos);
  }
  MESSAGE("default-mode server: " << rep.summary.modes[1].mode << " mean unique " << rep.summary.modes[1].mean_unique);
  inv.stop();
  def.stop();
}

TEST_CASE("run --endpoint with a model name serve does not have: exit 2 naming the model it serves, before any replay") {
  REPRO_REQUIRE_MODELS(dir);
  auto model = load_model((dir / "stories260K.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto out = test::scratch_dir("run-remote-wrong-model");
  auto r = test::run_cli("run --quiet --endpoint " + server.url() + " --api-model stories --out '" + out.string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.rfind("error: --api-model 'stories': ", 0) == 0);
  CHECK(r.output.find("it serves '" + server.model_name() + "'") != std::string::npos);
  CHECK(r.output.find("it offers " + server.model_name() + " (did you mean '" + server.model_name() + "'?)") !=
        std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(!std::filesystem::exists(out / "report.json"));
  server.stop();
}

TEST_CASE("run --profile long --endpoint: the shipped long prompt, and a plan block without local-only settings") {
  auto dir = test::scratch_dir("run-remote-long");
  // a long-context model (the long prompt is about 1,700 tokens of a Llama tokenizer, more for 512 pieces)
  auto synth = test::run_cli("model synth --out '" + (dir / "long.gguf").string() +
                             "' --seed 3 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --context 8192");
  INFO(synth.output);
  REQUIRE(synth.code == 0);
  auto model = load_model((dir / "long.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap
  so.max_batch = 8;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto r = test::run_cli("run --quiet --profile long --endpoint inv=" + server.url() + " --api-model " +
                         server.model_name() + " --api completions --concurrency 1,2 --max-tokens 4 --out '" +
                         (dir / "out").string() + "'");
  INFO(r.output);
  CHECK(r.code == 0);  // before: exit 2 naming --prompt-tokens, a flag nobody passed
  server.stop();
  const AuditReport rep = load_report((dir / "out" / "report.json").string());
  REQUIRE(rep.prompts.size() == 2);  // the long profile's generated_prompts
  for (const auto& [id, text] : rep.prompts) {
    CHECK(text.find("The Keeper of the Tide Clock") == 0);
    CHECK(std::count(text.begin(), text.end(), ' ') > 1000);  // 1,000-2,000 words
  }
  CHECK(rep.summary.errors == 0);
  // the plan block records what the run did, not the local engine's settings it never used
  for (const char* key : {"modes", "precisions", "batch_sizes", "positions", "filler_sets", "mate_join_steps",
                          "mate_prompt_deltas", "prompt_tokens", "generated_prompts", "threads", "long_context_model"}) {
    CAPTURE(key);
    CHECK_FALSE(rep.plan.contains(key));
  }
  CHECK(rep.plan.contains("concurrency"));
  CHECK(rep.plan.contains("max_tokens"));
  // ... and a remote report reads back (resume, canary) with those settings at their defaults
  CHECK_NOTHROW(plan_from_report(rep));

  // --prompt-tokens given on purpose still needs a local tokenizer: the error names that flag
  auto given = test::run_cli("run --quiet --endpoint http://127.0.0.1:9 --api-model m --prompt-tokens 512 --out '" +
                             (dir / "x").string() + "'");
  CHECK(given.code == 2);
  CHECK(given.output.find("--prompt-tokens generates prompts with the local model's tokenizer") != std::string::npos);
}
