// ctest-labels: unit
// Simulated tensor parallelism (docs/ENGINE.md "Tensor parallelism"): the all-reduce orders pinned
// on values where the order shows, the model divisibility errors, and end to end on the embedded
// stories260K and on a synthetic model that divides by 8: --tp 1 is the engine without TP, TP sizes
// and all-reduce orders change the bits of batch-invariant and default, and tp-invariant gives one
// set of bits for every TP size, all-reduce order, batch size, in f32 and bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <cstring>
#include <vector>

#include "../kernels/tp.hpp"
#include "repro/audit/batch_context.hpp"
#include "repro/audit/compare.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/device.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/synth.hpp"
#include <nlohmann/json.hpp>
#include "test_util.hpp"

using namespace repro;

namespace {

const Model& stories() {
  static std::unique_ptr<Model> m = load_model(default_model_path());
  return *m;
}

// dim 128, hidden 256, 8 heads, 8 KV heads: divides by 8.
const Model& synth8() {
  static std::unique_ptr<Model> m = [] {
    const auto dir = test::scratch_dir("tp-synth");
    SynthOptions o;
    o.seed = 5;
    o.dim = 128;
    o.hidden_dim = 256;
    o.n_heads = 8;
    o.n_kv_heads = 8;
    o.n_layers = 2;
    const std::string path = (dir / "m.gguf").string();
    write_synth_model(o, path);
    return load_model(path);
  }();
  return *m;
}

GenRequest probe(const Model& m, int max_tokens) {
  GenRequest r;
  r.prompt = m.tokenizer->encode("Once upon a time, there was a", true);
  r.params.max_tokens = max_tokens;
  r.params.stop_at_eos = false;
  return r;
}

EngineOptions opts(Mode mode, Precision p, int tp, AllReduce a) {
  EngineOptions o;
  o.mode = mode;
  o.precision = p;
  o.tp = tp;
  o.allreduce = a;
  return o;
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0 &&
         a.logprobs.size() == b.logprobs.size();
}

GenResult run(const Model& m, const EngineOptions& o, int batch, int max_tokens = 16) {
  Engine e(m, o);
  return run_in_batch(e, probe(m, max_tokens), {batch, batch / 2, 1}).probe;
}

}  // namespace

TEST_CASE("tp all-reduce orders: ring chunks start at their own rank, tree is pairwise, bf16 rounds every sum") {
  using kernels::ring_first_rank;
  // 10 elements over 4 ranks: chunks of 3.
  const int first[10] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3};
  for (int i = 0; i < 10; ++i) CHECK(ring_first_rank(4, i, 10) == first[i]);
  // x = {1, 2^-24, 2^-24, -1} at every element: the order shows in the result.
  const float e = std::ldexp(1.0f, -24);
  std::vector<float> x0(8, 1.0f), x1(8, e), x2(8, e), x3(8, -1.0f);
  auto reduce = [&](AllReduce a, Precision p) {
    std::vector<float> a0 = x0, a1 = x1, a2 = x2, a3 = x3;
    float* parts[4] = {a0.data(), a1.data(), a2.data(), a3.data()};
    kernels::allreduce_reference(parts, 4, a, p, 8);
    return a0;
  };
  const std::vector<float> ring = reduce(AllReduce::Ring, Precision::F32);
  // chunk 0 (elements 0, 1): ((1 + e) + e) + -1 = 0 (1 + e rounds to 1);
  // chunk 1: ((e + e) + -1) + 1 = 2e; chunk 2: ((e + -1) + 1) + e = 2e (e - 1 is exact, + 1 gives e);
  // chunk 3: ((-1 + 1) + e) + e = 2e.
  CHECK(ring[0] == 0.0f);
  CHECK(ring[1] == 0.0f);
  CHECK(ring[2] == 2 * e);
  CHECK(ring[4] == 2 * e);
  CHECK(ring[6] == 2 * e);
  // tree: (1 + e) + (e + -1) = 1 + (e - 1) = e, every element.
  const std::vector<float> tree = reduce(AllReduce::Tree, Precision::F32);
  for (float v : tree) CHECK(v == e);
  // bf16: e rounds to itself (a power of two), 1 + e to 1: the tree gives bf16(e - 1) + 1 = 0
  // (e - 1 rounds to -1 in bf16).
  for (float v : reduce(AllReduce::Tree, Precision::BF16)) CHECK(v == 0.0f);
  // N = 2: ring and tree are one sum.
  std::vector<float> a0 = {0.1f, 0.7f, 1e-3f}, a1 = {0.2f, -0.3f, 3.0f}, b0 = a0, b1 = a1;
  float* pa[2] = {a0.data(), a1.data()};
  float* pb[2] = {b0.data(), b1.data()};
  kernels::allreduce_reference(pa, 2, AllReduce::Ring, Precision::F32, 3);
  kernels::allreduce_reference(pb, 2, AllReduce::Tree, Precision::F32, 3);
  CHECK(std::memcmp(a0.data(), b0.data(), 12) == 0);
  // tp-invariant: the pairwise tree in f32 whatever the algorithm, one rounding at the end.
  std::vector<float> c0 = x0, c1 = x1, c2 = x2, c3 = x3;
  float* pc[4] = {c0.data(), c1.data(), c2.data(), c3.data()};
  kernels::tp_allreduce_reference(pc, 4, Precision::BF16, 8);
  for (float v : c0) CHECK(v == e);
}

TEST_CASE("tp block length: fixed by K and the weight type, a whole number of blocks per rank") {
  CHECK(kernels::tp_block(64, DType::F32) == 8);
  CHECK(kernels::tp_block(172, DType::F32) == 43);  // 172 = 4 * 43: G = 4
  CHECK(kernels::tp_block(2048, DType::F16) == 256);
  CHECK(kernels::tp_block(768, DType::Q8_0) == 96);
  CHECK(kernels::tp_block(512, DType::Q4_K) == 256);  // two 256-blocks: G = 2
  CHECK(kernels::tp_block(256, DType::Q4_K) == 256);
  CHECK(kernels::tp_block(37, DType::F32) == 37);
}

TEST_CASE("tp: a model that does not divide is refused with the dimension named (exit 2)") {
  const Model& m = stories();  // 8 heads, 4 KV heads, hidden 172
  CHECK(valid_tp_sizes(m) == std::vector<int>{1, 2, 4});
  CHECK_THROWS_WITH_AS(check_tensor_parallel(m, 8),
                       "--tp 8: the 4 KV heads are not divisible by 8; the FFN hidden size 172 is not divisible by 8; "
                       "use --tp 1, 2 or 4 (the sizes this model divides into)",
                       UsageError);
  CHECK_THROWS_WITH_AS(check_tensor_parallel(m, 3),
                       "--tp 3: must be 1, 2, 4 or 8; use --tp 1, 2 or 4 (the sizes this model divides into)",
                       UsageError);
  CHECK_THROWS_WITH_AS(Engine(m, opts(Mode::BatchInvariant, Precision::F32, 8, AllReduce::Ring)),
                       doctest::Contains("--tp 8: the 4 KV heads are not divisible by 8"), UsageError);
  CHECK(valid_tp_sizes(synth8()) == std::vector<int>{1, 2, 4, 8});
  auto r = test::run_cli("generate --tp 8 --prompt hi --max-tokens 2");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --tp 8: the 4 KV heads are not divisible by 8") != std::string::npos);
}

TEST_CASE("tp 1 is the engine without tensor parallelism, in every mode and precision") {
  const Model& m = stories();
  for (Mode mode : {Mode::Default, Mode::BatchInvariant, Mode::TpInvariant})
    for (Precision p : {Precision::F32, Precision::BF16}) {
      CAPTURE(std::string(mode_name(mode)));
      CAPTURE(std::string(precision_name(p)));
      EngineOptions plain;
      plain.mode = mode;
      plain.precision = p;
      const GenResult a = run(m, plain, 4);
      CHECK(same_bits(a, run(m, opts(mode, p, 1, AllReduce::Tree), 4)));
    }
}

TEST_CASE("tp-invariant: one set of bits for every TP size, all-reduce order and batch size, f32 and bf16") {
  struct Case {
    const Model* m;
    const char* name;
  };
  for (const Case c : {Case{&stories(), "stories260K"}, Case{&synth8(), "synth dim 128"}}) {
    const Model& m = *c.m;
    CAPTURE(std::string(c.name));
    for (Precision p : {Precision::F32, Precision::BF16}) {
      CAPTURE(std::string(precision_name(p)));
      const GenResult ref = run(m, opts(Mode::TpInvariant, p, 1, AllReduce::Ring), 1);
      REQUIRE(ref.tokens.size() == 16);
      for (int tp : valid_tp_sizes(m))
        for (AllReduce a : {AllReduce::Ring, AllReduce::Tree})
          for (int batch : {1, 3, 8}) {
            CAPTURE(tp);
            CAPTURE(std::string(allreduce_name(a)));
            CAPTURE(batch);
            CHECK(same_bits(run(m, opts(Mode::TpInvariant, p, tp, a), batch), ref));
          }
      // Batch-invariant: the TP size changes its bits. The tree all-reduce is element-wise, so it
      // stays batch-invariant; the ring's chunks cut the flattened [rows][dim] buffer, so from TP 4
      // on which rank starts an element's sum depends on the batch size and the row's position:
      // batch-invariant kernels stop being batch-invariant under a ring all-reduce (printed).
      int differ = 0, runs = 0, ring_batch = 0, ring_runs = 0;
      for (int tp : valid_tp_sizes(m)) {
        if (tp == 1) continue;
        for (AllReduce a : {AllReduce::Ring, AllReduce::Tree}) {
          CAPTURE(tp);
          CAPTURE(std::string(allreduce_name(a)));
          const GenResult alone = run(m, opts(Mode::BatchInvariant, p, tp, a), 1);
          const bool batch_same = same_bits(alone, run(m, opts(Mode::BatchInvariant, p, tp, a), 8));
          if (a == AllReduce::Tree || tp == 2) {
            CHECK(batch_same);
          } else {
            ++ring_runs;
            ring_batch += !batch_same;
          }
          ++runs;
          differ += !same_bits(alone, run(m, opts(Mode::BatchInvariant, p, 1, a), 1));
        }
      }
      MESSAGE(std::string(c.name) << " " << std::string(precision_name(p)) << ": batch-invariant differs from TP 1 in " << differ << "/" << runs
                     << " (TP size, all-reduce) runs; with a ring from TP 4 on, batch 8 differs from batch 1 in "
                     << ring_batch << "/" << ring_runs);
      CHECK(differ > 0);
    }
  }
}

TEST_CASE("tp: ring and tree orders part from TP 4 on (batch-invariant and default)") {
  const Model& m = synth8();
  int differ = 0;
  for (Mode mode : {Mode::BatchInvariant, Mode::Default})
    for (Precision p : {Precision::F32, Precision::BF16}) {
      // N = 2: both orders are x_0 + x_1.
      CHECK(same_bits(run(m, opts(mode, p, 2, AllReduce::Ring), 1), run(m, opts(mode, p, 2, AllReduce::Tree), 1)));
      for (int tp : {4, 8}) differ += !same_bits(run(m, opts(mode, p, tp, AllReduce::Ring), 1),
                                                 run(m, opts(mode, p, tp, AllReduce::Tree), 1));
    }
  MESSAGE("ring vs tree differ in " << differ << "/8 (mode, precision, TP 4 and 8) runs");
  CHECK(differ > 0);
}

TEST_CASE("run --tp 1,2,4 --allreduce ring,tree: TP is a factor; the report says which sizes agree and what changes") {
  const auto dir = test::scratch_dir("tp-run");
  const std::string out = (dir / "rep").string();
  const std::string env = "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' ";
  const std::string cmd = env + "'" + test::binary() + "' run --quiet --out '" + out +
                          "' --modes default,batch-invariant,tp-invariant --precisions f32,bf16 --tp 1,2,4 "
                          "--allreduce ring,tree --batch-sizes 1,4 --positions first --filler-sets 1 --max-tokens 24 "
                          "--gate-modes tp-invariant --format json,md";
  auto r = test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.code == 0);  // the gate: tp-invariant, one output per case across batch sizes and TP sizes
  const nlohmann::json doc = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  CHECK(doc["plan"]["tp"] == nlohmann::json::array({1, 2, 4}));
  CHECK(doc["plan"]["allreduce"] == nlohmann::json::array({"ring", "tree"}));
  // Every batch context at TP 1, 2, 4 ring and 4 tree: 4 TP cells per context.
  std::map<std::string, int> cells;
  for (const auto& c : doc["completions"])
    cells[std::to_string(c.value("tp", 1)) + c.value("allreduce", std::string())]++;
  CHECK(cells.size() == 4);
  CHECK(cells["1"] == cells["4ring"]);
  CHECK(cells["2"] == cells["4tree"]);
  // tp-invariant: every TP size and order agrees with TP 1 bit for bit, at f32 and bf16.
  int tp_rows = 0;
  for (const auto& ms : doc["summary"]["modes"]) {
    CAPTURE(ms["mode"].get<std::string>());
    CAPTURE(ms["precision"].get<std::string>());
    REQUIRE(ms.contains("tp"));
    CHECK(ms["tp"].size() == 3);  // TP 2, 4 ring, 4 tree against TP 1
    CHECK(ms["tp_finding"].get<std::string>().find(ms["mode"].get<std::string>()) == 0);
    for (const auto& t : ms["tp"]) {
      CHECK(t["bit_differ"]["n"].get<int>() > 0);
      if (ms["mode"] == "tp-invariant") {
        ++tp_rows;
        CHECK(t["bit_differ"]["k"] == 0);
        CHECK(t["tokens_changed"] == 0);
      }
    }
    if (ms["mode"] == "tp-invariant")
      CHECK(ms["tp_finding"].get<std::string>().find("TP 2, TP 4 ring, TP 4 tree agree with TP 1 bit for bit") !=
            std::string::npos);
  }
  CHECK(tp_rows == 6);
  // One cross-mode line per precision and TP cell, ending with tp-invariant's 0.
  const auto& lines = doc["summary"]["tp_findings"];
  CHECK(lines.size() == 6);
  for (const auto& l : lines) {
    const std::string s = l.get<std::string>();
    CHECK(s.rfind("changing TP 1 -> ", 0) == 0);
    CHECK(s.find("greedy completions at ") != std::string::npos);
    CHECK(s.find("; 0 with tp-invariant") != std::string::npos);
  }
  // batch-invariant (or default) moves somewhere with TP: the axis has an effect to show.
  int moved = 0;
  for (const auto& ms : doc["summary"]["modes"])
    if (ms["mode"] != "tp-invariant")
      for (const auto& t : ms["tp"]) moved += t["bit_differ"]["k"].get<int>();
  CHECK(moved > 0);
  const std::string md = test::slurp(std::filesystem::path(out) / "report.md");
  CHECK(md.find("## Tensor parallelism against TP 1") != std::string::npos);
  // The resume of a finished run runs nothing again and keeps the TP completions.
  auto again = test::run_shell(env + "'" + test::binary() + "' run --quiet --resume '" + out + "'");
  INFO(again.output);
  CHECK(again.code == r.code);
  const nlohmann::json doc2 = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  CHECK(doc2["completions"].size() == doc["completions"].size());
  // A TP size the model does not divide into is refused before anything runs.
  auto bad = test::run_shell(env + "'" + test::binary() + "' run --quiet --out '" + (dir / "bad").string() +
                             "' --tp 1,8");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("error: --tp 8: the 4 KV heads are not divisible by 8") != std::string::npos);
}

TEST_CASE("tp: reports from before the TP axis compare as TP 1 ring; another TP plan is a config change") {
  AuditReport old_run, new_run, tp_run;
  old_run.plan = {{"profile", "quick"}, {"batch_sizes", {1, 8}}};
  new_run.plan = old_run.plan;
  new_run.plan["tp"] = {1};
  new_run.plan["allreduce"] = {"ring"};
  tp_run.plan = new_run.plan;
  tp_run.plan["tp"] = {1, 4};
  for (const auto& line : config_drift(old_run, new_run)) CHECK_MESSAGE(line.find("plan.") != 0, line);
  bool named = false;
  for (const auto& line : config_drift(old_run, tp_run)) named = named || line.rfind("plan.tp ", 0) == 0;
  CHECK(named);
}

TEST_CASE("tp: serve and bench refuse a TP size the model does not divide into (exit 2)") {
  for (const char* cmd : {"serve --tp 8 --port 0", "bench --tp 8 --batch-sizes 1 --no-prefill --no-ceilings --repeats 2 --max-tokens 2"}) {
    CAPTURE(std::string(cmd));
    auto r = test::run_cli(cmd);
    CHECK(r.code == 2);
    CHECK(r.output.find("error: --tp 8: the 4 KV heads are not divisible by 8") != std::string::npos);
  }
}
