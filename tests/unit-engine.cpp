// End-to-end engine tests on a seeded synthetic model (no download, no ../shared needed).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "repro/audit/batch_context.hpp"
#include "repro/engine/engine.hpp"
#include "repro/kernels/backends.hpp"
#include "repro/common/error.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {
const Model& synth() {
  static std::unique_ptr<Model> m = [] {
    auto dir = test::scratch_dir("engine-synth");
    SynthOptions o;
    o.seed = 7;
    std::string path = (dir / "m.gguf").string();
    write_synth_model(o, path);
    return load_model(path);
  }();
  return *m;
}

GenRequest probe_request(const Model& m, int max_tokens, float temperature = 0, uint64_t seed = 0) {
  GenRequest r;
  r.prompt = m.tokenizer->encode("Once upon a time", true);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.top_p = temperature > 0 ? 0.9f : 1.0f;
  r.params.top_k = temperature > 0 ? 40 : 0;
  r.params.seed = seed;
  r.params.stop_at_eos = false;
  return r;
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}
}  // namespace

TEST_CASE("batch-invariant mode: the probe's tokens, logprobs and logits hash do not depend on the batch") {
  const Model& m = synth();
  for (int threads : {1, 2}) {
    Engine engine(m, {Mode::BatchInvariant, threads});
    GenRequest req = probe_request(m, 12);
    GenResult alone = run_in_batch(engine, req, {1, 0, 0}).probe;
    REQUIRE(alone.tokens.size() == 12);
    for (int b : {2, 3, 7, 8, 16, 33, 64})
      for (int pos : {0, b / 2, b - 1})
        for (uint64_t fillers : {1u, 2u}) {
          CAPTURE(threads);
          CAPTURE(b);
          CAPTURE(pos);
          CAPTURE(fillers);
          BatchRun run = run_in_batch(engine, req, {b, pos, fillers});
          CHECK(static_cast<int>(run.fillers.ids.size()) == b - 1);
          CHECK(same_bits(run.probe, alone));
        }
  }
}

TEST_CASE("batch-invariant mode: thread count does not change bits; sampled decoding depends only on the seed") {
  const Model& m = synth();
  Engine e1(m, {Mode::BatchInvariant, 1}), e2(m, {Mode::BatchInvariant, 2});
  GenRequest greedy = probe_request(m, 10);
  CHECK(same_bits(run_in_batch(e1, greedy, {1, 0, 0}).probe, run_in_batch(e2, greedy, {8, 3, 5}).probe));
  GenRequest s1 = probe_request(m, 16, 0.9f, 11), s2 = probe_request(m, 16, 0.9f, 12);
  GenResult a = run_in_batch(e1, s1, {1, 0, 0}).probe;
  GenResult b = run_in_batch(e2, s1, {16, 15, 3}).probe;
  GenResult c = run_in_batch(e1, s2, {1, 0, 0}).probe;
  CHECK(same_bits(a, b));
  CHECK(a.tokens != c.tokens);  // a different seed draws differently
}

TEST_CASE("default mode: measure how often the probe differs from its batch-of-1 bits (printed, not asserted)") {
  const Model& m = synth();
  Engine engine(m, {Mode::Default, 1});
  GenRequest req = probe_request(m, 12);
  GenResult alone = run_in_batch(engine, req, {1, 0, 0}).probe;
  int runs = 0, bit_diff = 0, token_diff = 0;
  for (int b : {2, 3, 7, 8, 16, 33, 64})
    for (int pos : {0, b - 1}) {
      GenResult r = run_in_batch(engine, req, {b, pos, 1}).probe;
      ++runs;
      bit_diff += same_bits(r, alone) ? 0 : 1;
      token_diff += r.tokens == alone.tokens ? 0 : 1;
    }
  MESSAGE("default mode (OpenBLAS): " << bit_diff << "/" << runs << " batch contexts differ in logits bits, "
                                      << token_diff << "/" << runs << " in tokens");
  // Same batch twice gives identical bits: the variance comes from the batch, not from noise.
  CHECK(same_bits(run_in_batch(engine, req, {16, 0, 1}).probe, run_in_batch(engine, req, {16, 0, 1}).probe));
}

TEST_CASE("continuous batching: sequences leave the batch as they finish") {
  const Model& m = synth();
  Engine engine(m, {Mode::BatchInvariant, 1});
  std::vector<int> handles;
  for (int len : {1, 3, 6}) {
    GenRequest r = probe_request(m, len);
    handles.push_back(engine.submit(r));
  }
  std::vector<int> sizes;
  while (engine.busy()) {
    sizes.push_back(engine.active());
    engine.step();
  }
  CHECK(sizes == std::vector<int>{3, 2, 2, 1, 1, 1});
  for (int i = 0; i < 3; ++i) CHECK(engine.result(handles[i]).finish_reason == "length");
  // A sequence that joins mid-way gives the same bits as alone.
  Engine e2(m, {Mode::BatchInvariant, 1});
  GenRequest long_req = probe_request(m, 8);
  int h0 = e2.submit(long_req);
  e2.step();
  e2.step();
  int h1 = e2.submit(probe_request(m, 8));
  while (e2.busy()) e2.step();
  CHECK(same_bits(e2.result(h0), e2.result(h1)));
}

TEST_CASE("bad requests are usage errors that name the fix") {
  const Model& m = synth();
  Engine engine(m, {Mode::BatchInvariant, 1});
  GenRequest r = probe_request(m, m.config.context_length);
  CHECK_THROWS_WITH_AS(engine.submit(r), doctest::Contains("exceeds the model's context length"), UsageError);
  GenRequest empty;
  CHECK_THROWS_AS(engine.submit(empty), UsageError);
  CHECK_THROWS_WITH_AS(run_in_batch(engine, probe_request(m, 4), {4, 4, 0}), doctest::Contains("--position 4"),
                       UsageError);
}

TEST_CASE("sampling primitives") {
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f};
  DecodeParams greedy;
  CHECK(sample_token(logits.data(), 4, greedy, 0) == 1);  // first index of the maximum
  DecodeParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  for (int t = 0; t < 20; ++t) CHECK(sample_token(logits.data(), 4, p, t) == 1);  // top-1 keeps index 1
  p.top_k = 0;
  p.seed = 3;
  int a = sample_token(logits.data(), 4, p, 5), b = sample_token(logits.data(), 4, p, 5);
  CHECK(a == b);
  double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0));
  CHECK(token_logprob(logits.data(), 4, 1) == doctest::Approx(3.0 - lse));
}

TEST_CASE("step_stats with a chosen token: its logprob is token_logprob bit for bit, the stats unchanged") {
  std::vector<float> lg(777);
  uint32_t h = 12345;
  for (auto& v : lg) {
    h = h * 1664525u + 1013904223u;
    v = static_cast<float>(h >> 8) / 16777216.0f * 20.0f - 10.0f;
  }
  const int n = static_cast<int>(lg.size());
  const StepStats plain = step_stats(lg.data(), n);
  for (int id : {0, 1, 17, 400, n - 1, plain.top_ids[0]}) {
    float lp = 1.0f;
    const StepStats st = step_stats(lg.data(), n, id, &lp);
    const float want = token_logprob(lg.data(), n, id);
    CHECK(std::memcmp(&lp, &want, sizeof lp) == 0);
    CHECK(std::memcmp(st.top_logprobs, plain.top_logprobs, sizeof st.top_logprobs) == 0);
    CHECK(std::memcmp(st.top_ids, plain.top_ids, sizeof st.top_ids) == 0);
  }
}

TEST_CASE("beam search: width 1 is greedy; wider beams score at least as well") {
  const Model& m = synth();
  EngineOptions eo{Mode::BatchInvariant, 1};
  GenRequest req = probe_request(m, 8);
  Engine engine(m, eo);
  GenResult greedy = engine.generate({req})[0];
  GenResult b1 = beam_search(m, eo, req.prompt, 1, 8);
  CHECK(b1.tokens == std::vector<int>(greedy.tokens.begin(), greedy.tokens.begin() + b1.tokens.size()));
  GenResult b4 = beam_search(m, eo, req.prompt, 4, 8);
  double s1 = 0, s4 = 0;
  for (float x : b1.logprobs) s1 += x;
  for (float x : b4.logprobs) s4 += x;
  if (b1.tokens.size() == b4.tokens.size()) CHECK(s4 >= s1 - 1e-6);
  CHECK(same_bits(b4, beam_search(m, eo, req.prompt, 4, 8)));
}

TEST_CASE("beam search on an engine shares its op table and KV slots; the slots go back to the pool") {
  const Model& m = synth();
  Engine engine(m, {Mode::BatchInvariant, 1});
  GenRequest req = probe_request(m, 8);
  GenResult a = engine.beam_search(req.prompt, 4, 8);
  // The same search again, then with a decode running beside it: same bits.
  CHECK(same_bits(a, engine.beam_search(req.prompt, 4, 8)));
  CHECK(same_bits(a, beam_search(m, {Mode::BatchInvariant, 1}, req.prompt, 4, 8)));
  GenResult g = engine.generate({req})[0];
  CHECK(g.tokens.size() == 8);
}

TEST_CASE("precision bf16 and f16: batch-invariant mode stays bitwise invariant; the rounding is applied") {
  const Model& m = synth();
  GenRequest req = probe_request(m, 12);
  Engine f32(m, {Mode::BatchInvariant, 1});
  const GenResult ref32 = run_in_batch(f32, req, {1, 0, 0}).probe;
  for (Precision p : {Precision::BF16, Precision::F16}) {
    CAPTURE(precision_name(p));
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      Engine engine(m, {Mode::BatchInvariant, threads, Device::Cpu, p});
      GenResult alone = run_in_batch(engine, req, {1, 0, 0}).probe;
      REQUIRE(alone.tokens.size() == 12);
      CHECK(alone.logits_sha256 != ref32.logits_sha256);  // activations really were rounded
      for (int b : {2, 7, 16, 33})
        for (int pos : {0, b - 1}) {
          CAPTURE(b);
          CAPTURE(pos);
          CHECK(same_bits(run_in_batch(engine, req, {b, pos, 1}).probe, alone));
        }
    }
  }
}

TEST_CASE("device cuda: a clear backend error when this build or machine cannot run it") {
  const Model& m = synth();
  bool has_cuda = false;
  for (const auto& t : kernels::available_op_tables()) has_cuda = has_cuda || t.device == Device::Cuda;
  if (has_cuda) return;
  CHECK_THROWS_WITH_AS(Engine(m, {Mode::BatchInvariant, 1, Device::Cuda}), doctest::Contains("--device cuda: "),
                       BackendError);
}

TEST_CASE("device cuda: models in stored types pass the bind check; without a device the one error is the device's") {
#ifdef REPRO_HAVE_CUDA
  // The type check needs no GPU: it comes before the device is opened. Every stored type is read by
  // the CUDA tables, so what a machine without a GPU reports is the missing device (exit 3).
  const bool gpu = kernels::backend(Device::Cuda).present();
  const auto dir = test::scratch_dir("engine-cuda-types");
  for (const char* type : {"q8_0", "q4_k", "bf16"}) {
    CAPTURE(type);
    const std::string path = (dir / (std::string(type) + ".gguf")).string();
    auto made = test::run_cli("model synth --out '" + path + "' --dim 256 --hidden 256 --layers 1 --heads 2 "
                              "--kv-heads 2 --vocab 400 --type " + type);
    REQUIRE(made.code == 0);
    for (const char* mode : {"batch-invariant", "default"}) {
      auto r = test::run_cli("generate --model '" + path + "' --device cuda --mode " + mode +
                             " --prompt hi --max-tokens 1");
      CAPTURE(r.output);
      CHECK(r.output.find("does not read") == std::string::npos);
      if (gpu) {
        CHECK(r.code == 0);
      } else {
        CHECK(r.code == 3);
        CHECK(r.output.find("error: --device cuda: no CUDA device") != std::string::npos);
      }
    }
  }
#endif
}

TEST_CASE("Engine::cancel drops a queued or decoding sequence; the others decode as if it never ran") {
  const Model& m = synth();
  EngineOptions eo;
  eo.mode = Mode::BatchInvariant;
  GenRequest a = probe_request(m, 12), b = probe_request(m, 40, 0.8f, 3), c = probe_request(m, 20, 0.7f, 9);
  Engine solo(m, eo);
  const GenResult ra = solo.generate({a})[0], rc = solo.generate({c})[0];

  Engine e(m, eo);
  int ha = e.submit(a), hb = e.submit(b);
  e.step();
  e.step();
  CHECK(e.cancel(hb));        // decoding
  int hc = e.submit(c);
  int hq = e.submit(b);
  CHECK(e.cancel(hq));        // still queued
  CHECK_FALSE(e.cancel(hq));  // already gone
  CHECK(e.active() == 2);
  std::vector<int> done;
  while (e.busy())
    for (int h : e.step()) done.push_back(h);
  CHECK(done.size() == 2);
  CHECK(e.take_result(ha).tokens == ra.tokens);
  CHECK(e.take_result(hc).tokens == rc.tokens);
  CHECK_THROWS(e.result(hb));
  CHECK_FALSE(e.cancel(ha));  // finished
}

TEST_CASE("top_logprobs: the k most likely tokens, descending, the greedy choice first") {
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  auto t = top_logprobs(logits, 5, 3);
  REQUIRE(t.size() == 3);
  CHECK(t[0].id == 1);  // ties by index
  CHECK(t[1].id == 3);
  CHECK(t[2].id == 4);
  CHECK(t[0].logprob == token_logprob(logits, 5, 1));
  CHECK(top_logprobs(logits, 5, 9).size() == 5);
  DecodeParams p;
  CHECK(sample_token(logits, 5, p, 0) == t[0].id);
}

TEST_CASE("logprobs off: no per-step log-softmax, the same tokens, text and logits hash; top_logprobs still records") {
  const Model& m = synth();
  for (float t : {0.0f, 0.8f}) {
    CAPTURE(t);
    Engine e(m, EngineOptions{Mode::BatchInvariant, 1});
    GenRequest with = probe_request(m, 12, t, 5);
    GenRequest without = with;
    without.params.logprobs = false;
    auto r = e.generate({with, without});
    REQUIRE(r[0].tokens.size() == 12);
    CHECK(r[1].tokens == r[0].tokens);
    CHECK(r[1].text == r[0].text);
    CHECK(r[1].logits_sha256 == r[0].logits_sha256);
    CHECK(r[0].logprobs.size() == 12);
    CHECK(r[0].steps.size() == 12);
    CHECK(r[1].logprobs.empty());
    CHECK(r[1].steps.empty());
    GenRequest tops = without;
    tops.params.top_logprobs = 2;
    GenResult g = e.generate({tops})[0];
    CHECK(g.tokens == r[0].tokens);
    CHECK(g.logprobs.size() == 12);
    CHECK(g.top_logprobs.size() == 12);
  }
}
