// ctest-labels: model
// The deterministic mode: the reference-order kernels on one thread, every request decoded alone.
// Its reduction order IS the batch-invariant order (kernels/*/reference.cpp defines it and the
// invariant kernels reproduce it), so on the real stories260K model its tokens, chosen-token
// logprobs and final-logits hash equal batch-invariant's bit for bit, at every precision, whatever
// the batch the request was submitted with; what differs is the schedule (one request at a time)
// and so the time.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <vector>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"
#include "repro/kernels/ops.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}

GenRequest request(const Model& m, const char* text, int max_tokens, float temperature, uint64_t seed) {
  GenRequest r;
  r.prompt = m.tokenizer->encode(text, true);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.top_p = temperature > 0 ? 0.95f : 1.0f;
  r.params.top_k = temperature > 0 ? 40 : 0;
  r.params.seed = seed;
  return r;
}

const Model& synth() {
  static std::unique_ptr<Model> m = [] {
    auto dir = test::scratch_dir("deterministic-synth");
    SynthOptions o;
    o.seed = 5;
    const std::string path = (dir / "m.gguf").string();
    write_synth_model(o, path);
    return load_model(path);
  }();
  return *m;
}

}  // namespace

TEST_CASE("deterministic mode: the cpu-deterministic table runs the reference kernels on one thread") {
  auto ops = kernels::make_ops(Device::Cpu, Mode::Deterministic, 4);
  const kernels::OpsInfo i = ops->describe();
  CHECK(i.name == "cpu-deterministic");
  CHECK(i.mode == "deterministic");
  CHECK(i.threads == 1);  // --threads 4 asked; the deterministic switch means one thread
  CHECK(i.requests_alone);
  CHECK(i.library.find("reference kernels") != std::string::npos);
  CHECK_FALSE(kernels::make_ops(Device::Cpu, Mode::BatchInvariant, 1)->describe().requests_alone);
  CHECK(parse_mode("deterministic") == Mode::Deterministic);
  CHECK(std::string(mode_name(Mode::Deterministic)) == "deterministic");
  CHECK_THROWS_WITH_AS(parse_mode("determinstic"),
                       "--mode: unknown mode 'determinstic'; use default, batch-invariant, deterministic, tp-invariant", UsageError);
  CHECK_THROWS_WITH_AS(kernels::make_ops(Device::Cuda, Mode::Deterministic, 1),
                       doctest::Contains("--mode deterministic runs the CPU reference kernels only"), BackendError);
}

TEST_CASE("deterministic mode: requests submitted together are decoded one at a time, in order") {
  const Model& m = synth();
  const char* texts[] = {"Once upon a time", "The cat sat", "A bird sang", "Tom and Anna"};
  auto steps_for = [&](Mode mode, std::vector<std::vector<int>>* order) {
    Engine e(m, {mode, 2});
    std::vector<int> step_handles;
    e.on_token = [&](int h, int, float, const std::vector<TokenLogprob>&) { step_handles.push_back(h); };
    std::vector<int> handles;
    for (const char* t : texts) {
      GenRequest r = request(m, t, 6, 0, 0);
      r.params.stop_at_eos = false;
      handles.push_back(e.submit(r));
    }
    int steps = 0;
    while (e.busy()) {
      const size_t before = step_handles.size();
      e.step();
      ++steps;
      if (order) order->push_back(std::vector<int>(step_handles.begin() + before, step_handles.end()));
    }
    for (int h : handles) e.take_result(h);
    return steps;
  };
  std::vector<std::vector<int>> order;
  CHECK(steps_for(Mode::BatchInvariant, nullptr) == 6);  // one batch of 4: 6 steps
  CHECK(steps_for(Mode::Deterministic, &order) == 24);   // alone: 4 requests x 6 steps
  REQUIRE(order.size() == 24);
  for (size_t s = 0; s < order.size(); ++s) {
    CAPTURE(s);
    REQUIRE(order[s].size() == 1);                      // a batch of 1 at every step
    CHECK(order[s][0] == static_cast<int>(s / 6));      // request 0 finishes before request 1 starts
  }
}

TEST_CASE("deterministic mode equals batch-invariant bit for bit on stories260K (tokens, logprobs, logits hash)") {
  REPRO_REQUIRE_MODELS(dir);
  auto m = load_model((dir / "stories260K.gguf").string());
  const char* prompts[] = {"Once upon a time", "Lily and Ben went to the park", "The little dog was sad because"};
  for (Precision prec : {Precision::F32, Precision::BF16}) {
    Engine det(*m, {Mode::Deterministic, 1, Device::Cpu, prec});
    Engine inv1(*m, {Mode::BatchInvariant, 1, Device::Cpu, prec});
    Engine inv2(*m, {Mode::BatchInvariant, 2, Device::Cpu, prec});
    for (const char* p : prompts)
      for (float temperature : {0.0f, 0.8f}) {
        CAPTURE(precision_name(prec));
        CAPTURE(p);
        CAPTURE(temperature);
        const GenRequest req = request(*m, p, 40, temperature, 7);
        const GenResult d = run_in_batch(det, req, {1, 0, 0}).probe;
        REQUIRE(!d.tokens.empty());
        REQUIRE(d.logits_sha256.size() == 64);
        CHECK(same_bits(d, run_in_batch(inv1, req, {1, 0, 0}).probe));
        // batch-invariant in a real batch of 8 and deterministic "in" the same batch (decoded alone)
        CHECK(same_bits(d, run_in_batch(inv2, req, {8, 3, 2}).probe));
        const BatchRun alone8 = run_in_batch(det, req, {8, 5, 2});
        CHECK(same_bits(d, alone8.probe));
        CHECK(alone8.fillers.ids.size() == 7);  // the batch mates ran too, each alone
      }
  }
}
