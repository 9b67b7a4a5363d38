// `repro-audit bench` through the real binary on a small synthesized model: decode and prefill
// tables with warm-up, several runs per cell, mean, spread and min-max, noisy cells flagged, the
// JSON carrying the same figures, prompt lengths fitted to the context, the machine's ceilings and
// each cell's share of them (small triad and sgemm sizes), --no-ceilings, and usage errors.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
// A 2-layer synthesized model with a 96-token context (writes in well under a second).
fs::path tiny_model(const fs::path& dir) {
  const fs::path p = dir / "tiny.gguf";
  auto r = test::run_cli("model synth --out '" + p.string() +
                         "' --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --vocab 512 --context 96");
  REQUIRE(r.code == 0);
  return p;
}

void check_stats(const nlohmann::json& s, int runs, double noise_cv) {
  REQUIRE(s.contains("runs"));
  CHECK(static_cast<int>(s["runs"].size()) == runs);
  double lo = 1e300, hi = 0, sum = 0;
  for (double v : s["runs"]) {
    CHECK(v > 0);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  CHECK(s["min"].get<double>() == doctest::Approx(lo));
  CHECK(s["max"].get<double>() == doctest::Approx(hi));
  CHECK(s["mean"].get<double>() == doctest::Approx(sum / runs));
  CHECK(s["stddev"].get<double>() >= 0);
  CHECK(s["cv"].get<double>() == doctest::Approx(s["stddev"].get<double>() / s["mean"].get<double>()));
  CHECK(s["noisy"].get<bool>() == (s["cv"].get<double>() > noise_cv));
}
}  // namespace

TEST_CASE("bench: decode and prefill per mode with warm-up, runs, mean, stddev, min-max; JSON carries them") {
  auto dir = test::scratch_dir("bench-stats");
  const fs::path model = tiny_model(dir);
  const fs::path json = dir / "bench.json";
  auto r = test::run_cli("bench --model '" + model.string() +
                         "' --threads 1,2 --batch-sizes 1,3 --max-tokens 4 --repeats 3 --warmup 1 "
                         "--prompt-lengths 16,200 --noise-cv 0.25 --triad-mib 4 --sgemm-size 128 --json '" +
                         json.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("decode, 1 thread: generated tokens/s after the prefill step, mean ±stddev [min-max]") !=
        std::string::npos);
  CHECK(r.output.find("prefill, 2 threads: prompt tokens/s of one sequence") != std::string::npos);
  CHECK(r.output.find("warm-up 1, 3 runs per cell (modes interleaved)") != std::string::npos);
  // 200 prompt tokens do not fit the 96-token context: lowered to 95, said on stderr.
  CHECK(r.output.find("prompt length 200 lowered to 95 to fit the context length 96") != std::string::npos);
  CHECK(r.output.find("validation: batch-invariant probe bit-identical") != std::string::npos);
  CHECK(r.output.find("ceilings, best of 5 after a warm-up: memory = STREAM-style triad a[i] = b[i] + s*c[i] over 3 "
                      "x 4 MiB of doubles (24 bytes per element: 2 reads + 1 write") != std::string::npos);
  CHECK(r.output.find("compute = OpenBLAS sgemm 128 x 128 x 128") != std::string::npos);
  CHECK(r.output.find("\n  2 threads: memory ") != std::string::npos);
  CHECK(r.output.find("performance model: 0.4 MiB of matmul weights read per step") != std::string::npos);
  // Every table that batches is a column: default, batch-invariant and tp-invariant.
  CHECK(r.output.find("tp-invariant/default     ceiling tok/s share d/inv/tp-invariant") != std::string::npos);

  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["warmup"] == 1);
  CHECK(j["repeats"] == 3);
  CHECK(j["invariant_validated"] == true);
  // The machine's ceilings per thread count.
  REQUIRE(j.contains("ceilings"));
  const auto& ce = j["ceilings"];
  CHECK(ce["triad_array_bytes"] == 4 << 20);
  CHECK(ce["triad_bytes_per_element"] == 24);
  CHECK(ce["sgemm_size"] == 128);
  REQUIRE(ce["per_threads"].size() == 2);
  std::map<int, std::pair<double, double>> machine;  // threads -> GB/s, GFLOP/s
  for (const auto& m : ce["per_threads"]) {
    const double gb = m["triad_gb_per_s"], gf = m["sgemm_gflop_per_s"];
    CHECK(std::isfinite(gb));
    CHECK(gb > 0);
    CHECK(std::isfinite(gf));
    CHECK(gf > 0);
    CHECK(m["triad_runs"].size() == 5);
    machine[m["threads"].get<int>()] = {gb, gf};
  }
  REQUIRE(machine.count(1) == 1);
  REQUIRE(machine.count(2) == 1);
  // Each row's ceiling follows from its model numbers and its thread count's measurements.
  auto check_ceiling = [&](const nlohmann::json& row, double tokens_per_step) {
    CAPTURE(row.dump());
    const auto [gb, gf] = machine[row["threads"].get<int>()];
    CHECK(row["weight_bytes_per_step"] == 425984.0);  // (73728 layer + 32768 classifier) f32 weights
    const double bytes = row["weight_bytes_per_step"].get<double>() + row["kv_bytes_per_step"].get<double>();
    const double mem = gb * 1e9 / bytes * tokens_per_step, comp = gf * 1e9 / row["flops_per_token"].get<double>();
    CHECK(row["memory_ceiling_tokens_per_s"].get<double>() == doctest::Approx(mem));
    CHECK(row["compute_ceiling_tokens_per_s"].get<double>() == doctest::Approx(comp));
    CHECK(row["ceiling_tokens_per_s"].get<double>() == doctest::Approx(std::min(mem, comp)));
    CHECK(row["ceiling_kind"] == (mem <= comp ? "mem" : "compute"));
    CHECK(row["default_share_of_ceiling"].get<double>() ==
          doctest::Approx(row["default"]["mean"].get<double>() / std::min(mem, comp)));
    CHECK(row["invariant_share_of_ceiling"].get<double>() ==
          doctest::Approx(row["invariant"]["mean"].get<double>() / std::min(mem, comp)));
  };
  REQUIRE(j["rows"].size() == 4);  // 2 thread counts x 2 batch sizes
  for (const auto& row : j["rows"]) {
    check_ceiling(row, row["batch_size"].get<double>());
    CHECK(row["flops_per_token"].get<double>() > 2.0 * (73728 + 32768));  // plus attention
  }
  for (const auto& row : j["prefill_rows"]) check_ceiling(row, row["prompt_tokens"].get<double>());
  for (const auto& row : j["rows"]) {
    check_stats(row["default"], 3, 0.25);
    check_stats(row["invariant"], 3, 0.25);
    CHECK(row["decode_tokens"] == row["batch_size"].get<int>() * 3);
    CHECK(row["ratio"].get<double>() ==
          doctest::Approx(row["invariant"]["mean"].get<double>() / row["default"]["mean"].get<double>()));
    CHECK(row["invariant_probe_identical"] == true);
  }
  REQUIRE(j["prefill_rows"].size() == 4);  // 2 thread counts x 2 prompt lengths
  CHECK(j["prefill_rows"][0]["prompt_tokens"] == 16);
  CHECK(j["prefill_rows"][1]["prompt_tokens"] == 95);
  for (const auto& row : j["prefill_rows"]) {
    check_stats(row["default"], 3, 0.25);
    check_stats(row["invariant"], 3, 0.25);
  }
  // A flagged cell is explained under the tables.
  bool noisy = false;
  for (const char* key : {"rows", "prefill_rows"})
    for (const auto& row : j[key])
      for (const auto& [name, cell] : row.items())  // default, invariant and each other mode's column
        if (cell.is_object() && cell.contains("noisy")) noisy = noisy || cell["noisy"].get<bool>();
  CHECK((r.output.find("* noisy: coefficient of variation above 25%") != std::string::npos) == noisy);
}

TEST_CASE("bench: --no-prefill measures decode only") {
  auto dir = test::scratch_dir("bench-noprefill");
  const fs::path model = tiny_model(dir);
  auto r = test::run_cli("bench --model '" + model.string() +
                         "' --threads 1 --batch-sizes 2 --max-tokens 3 --repeats 2 --warmup 0 --no-prefill --json - "
                         "--no-ceilings");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("prefill, ") == std::string::npos);
  // --no-ceilings: nothing measured, no model line, no ceiling columns or fields.
  CHECK(r.output.find("ceilings") == std::string::npos);
  CHECK(r.output.find("performance model") == std::string::npos);
  CHECK(r.output.find("ceiling tok/s") == std::string::npos);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find("\n{") + 1));
  CHECK(j["rows"].size() == 1);
  CHECK(j["prefill_rows"].empty());
  CHECK_FALSE(j.contains("ceilings"));
  CHECK_FALSE(j["rows"][0].contains("ceiling_tokens_per_s"));
  CHECK_FALSE(j["rows"][0].contains("default_share_of_ceiling"));
}

TEST_CASE("bench: --modes measures the tables it names beside default, the deterministic one included") {
  auto dir = test::scratch_dir("bench-modes");
  const fs::path model = tiny_model(dir);
  auto r = test::run_cli("bench --model '" + model.string() +
                         "' --modes deterministic --threads 1 --batch-sizes 1,3 --max-tokens 3 --repeats 2 --warmup 0 "
                         "--no-prefill --no-ceilings --json -");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("deterministic/default") != std::string::npos);
  CHECK(r.output.find("inv/default") == std::string::npos);  // not named: not measured
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find("\n{") + 1));
  CHECK(j["deterministic_validated"] == true);
  REQUIRE(j["rows"].size() == 2);
  for (const auto& row : j["rows"]) {
    check_stats(row["default"], 2, 0.1);
    check_stats(row["deterministic"], 2, 0.1);
    CHECK_FALSE(row.contains("invariant"));
    CHECK(row["deterministic_ratio"].get<double>() ==
          doctest::Approx(row["deterministic"]["mean"].get<double>() / row["default"]["mean"].get<double>()));
  }
  // Without --modes the deterministic table is left out (it decodes requests alone).
  r = test::run_cli("bench --model '" + model.string() +
                    "' --threads 1 --batch-sizes 2 --max-tokens 3 --repeats 2 --warmup 0 --no-prefill --no-ceilings");
  REQUIRE(r.code == 0);
  CHECK(r.output.find("deterministic") == std::string::npos);
  CHECK(r.output.find("inv/default") != std::string::npos);
  // A mode name that does not exist names the flag and the choices.
  r = test::run_cli("bench --model '" + model.string() + "' --modes batch-invarant --no-ceilings");
  CHECK(r.code == 2);
  CHECK(r.output.find("--modes") != std::string::npos);
}

TEST_CASE("bench: usage errors name the flag") {
  auto dir = test::scratch_dir("bench-usage");
  const fs::path model = tiny_model(dir);
  const std::string m = "bench --model '" + model.string() + "' --threads 1 --batch-sizes 1 ";
  auto r = test::run_cli(m + "--repeats 1");
  CHECK(r.code == 2);
  CHECK(r.output.find("--repeats must be at least 2 (a spread needs two measurements)") != std::string::npos);
  r = test::run_cli(m + "--max-tokens 1");
  CHECK(r.code == 2);
  CHECK(r.output.find("--max-tokens must be at least 2") != std::string::npos);
  r = test::run_cli(m + "--noise-cv 0");
  CHECK(r.code == 2);
  CHECK(r.output.find("--noise-cv must be above 0") != std::string::npos);
  r = test::run_cli(m + "--prompt-lengths 128,x");
  CHECK(r.code == 2);
  CHECK(r.output.find("--prompt-lengths '128,x': expected a comma-separated list of integers") != std::string::npos);
  r = test::run_cli(m + "--triad-mib 0");
  CHECK(r.code == 2);
  CHECK(r.output.find("--triad-mib must be in 1..16384") != std::string::npos);
  r = test::run_cli(m + "--sgemm-size 8");
  CHECK(r.code == 2);
  CHECK(r.output.find("--sgemm-size must be in 16..8192") != std::string::npos);
}
