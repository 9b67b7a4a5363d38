// ctest-labels: unit
// The performance model behind `bench`'s ceilings: bytes and FLOPs of a step for a synthesized
// model, checked against a hand computation from its config; the ceilings they give; and the two
// machine measurements (triad bandwidth, sgemm peak) on small sizes.
#include <doctest/doctest.h>

#include <cmath>

#include "repro/bench/ceilings.hpp"
#include "repro/bench/perf_model.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

extern "C" int openblas_get_num_threads(void);

using namespace repro;
using namespace repro::bench;
namespace fs = std::filesystem;

namespace {
// dim 64, hidden 128, 2 layers, 4 query heads / 2 KV heads (head_dim 16: q_dim 64, kv_dim 32),
// vocab 512, tied classifier.
std::unique_ptr<Model> tiny(const std::string& type) {
  SynthOptions o;
  o.dim = 64;
  o.hidden_dim = 128;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 512;
  o.context_length = 96;
  o.type = type;
  const fs::path p = test::scratch_dir("perf-model-" + type) / "m.gguf";
  write_synth_model(o, p.string());
  return load_model(p.string());
}
}  // namespace

TEST_CASE("perf model: parameters, bytes and FLOPs of a step from the config") {
  // Per layer: wq 64x64 + wk 32x64 + wv 32x64 + wo 64x64 + gate 128x64 + up 128x64 + down 64x128
  //          = 4096 + 2048 + 2048 + 4096 + 8192 + 8192 + 8192 = 36864; two layers 73728.
  // Classifier (tied token_embd): 512 x 64 = 32768.
  const ModelCosts f32 = model_costs(*tiny("f32"));
  CHECK(f32.layer_matmul_params == 73728);
  CHECK(f32.classifier_params == 32768);
  CHECK(f32.layer_matmul_bytes == 73728 * 4);
  CHECK(f32.classifier_bytes == 32768 * 4);
  CHECK(f32.weight_bytes() == 425984);
  CHECK(f32.kv_bytes_per_position == 2 * 2 * 32 * 4);        // K and V, 2 layers, kv_dim 32, f32
  CHECK(f32.attention_flops_per_position == 4 * 2 * 64);     // q.k and p.v, 2 layers, q_dim 64

  // Stored type counts: F16 2 bytes an element; Q8_0 34 bytes per block of 32.
  const ModelCosts f16 = model_costs(*tiny("f16"));
  CHECK(f16.layer_matmul_params == 73728);
  CHECK(f16.weight_bytes() == (73728 + 32768) * 2);
  const ModelCosts q8 = model_costs(*tiny("q8_0"));
  // rows of 64 elements: 2 blocks = 68 bytes; w_down's rows of 128: 136 bytes.
  // per layer 68 x (64 + 32 + 32 + 64 + 128 + 128) + 136 x 64 = 30464 + 8704 = 39168
  CHECK(q8.layer_matmul_bytes == 2 * 39168);
  CHECK(q8.classifier_bytes == 512 * 68);
  CHECK(q8.kv_bytes_per_position == f32.kv_bytes_per_position);  // the cache is f32 whatever the weights

  // Decode: prompts of 3 and 5 tokens, 4 tokens each: timed steps 1..3 attend 4,5,6 and 6,7,8
  // positions = 36 in all over 6 rows.
  const StepCost d = decode_cost(f32, {3, 5}, 4);
  CHECK(d.tokens_per_step == 2);
  CHECK(d.weight_bytes == 425984);
  CHECK(d.kv_bytes == doctest::Approx(512.0 * 36 / 3));
  CHECK(d.flops_per_token == doctest::Approx(2.0 * (73728 + 32768) + 512.0 * 36 / 6));  // 216064

  // Prefill of 10 tokens: rows attend 1..10 positions (55), one classifier row, K/V written once.
  const StepCost p = prefill_cost(f32, 10);
  CHECK(p.tokens_per_step == 10);
  CHECK(p.kv_bytes == 512 * 10);
  CHECK(p.flops_per_token == doctest::Approx(2.0 * 73728 + 2.0 * 32768 / 10 + 512.0 * 55 / 10));

  // Ceilings: memory = bandwidth / bytes per step * tokens per step, compute = peak / flops per token.
  Ceiling c = ceiling_of(d, 10.0, 100.0);
  CHECK(c.memory_tokens_per_s == doctest::Approx(10e9 / (425984 + 6144) * 2));
  CHECK(c.compute_tokens_per_s == doctest::Approx(100e9 / 216064));
  CHECK(c.kind == "mem");
  CHECK(c.tokens_per_s == c.memory_tokens_per_s);
  c = ceiling_of(d, 10.0, 1.0);  // a slow enough core makes compute bind
  CHECK(c.kind == "compute");
  CHECK(c.tokens_per_s == doctest::Approx(1e9 / 216064));
}

TEST_CASE("ceilings: triad bandwidth and sgemm peak are positive, finite, best of their runs") {
  const auto triad = bench::measure_triad({1, 2}, 4u << 20, 3);
  REQUIRE(triad.size() == 2);
  for (size_t i = 0; i < triad.size(); ++i) {
    CHECK(triad[i].threads == static_cast<int>(i) + 1);
    REQUIRE(triad[i].runs.size() == 3);
    double best = 0;
    for (double v : triad[i].runs) {
      CHECK(std::isfinite(v));
      CHECK(v > 0);
      best = std::max(best, v);
    }
    CHECK(triad[i].gb_per_s == best);
  }
  const int blas_threads = openblas_get_num_threads();
  const auto sgemm = bench::measure_sgemm({2, 1}, 96, 2);
  CHECK(openblas_get_num_threads() == blas_threads);  // restored for the engine's matmul
  REQUIRE(sgemm.size() == 2);
  CHECK(sgemm[0].threads == 2);
  CHECK(sgemm[1].threads == 1);
  for (const auto& s : sgemm) {
    REQUIRE(s.runs.size() == 2);
    CHECK(std::isfinite(s.gflop_per_s));
    CHECK(s.gflop_per_s > 0);
    CHECK(s.gflop_per_s == std::max(s.runs[0], s.runs[1]));
  }
  CHECK_THROWS(bench::measure_triad({0}, 1 << 20, 1));  // thread counts are checked like --threads
}
