// `repro-audit bench` through the real binary on a small synthesized model: decode and prefill
// tables with warm-up, several runs per cell, mean, spread and min-max, noisy cells flagged, the
// JSON carrying the same figures, prompt lengths fitted to the context, and usage errors.
#include <doctest/doctest.h>

#include <fstream>
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
                         "--prompt-lengths 16,200 --noise-cv 0.25 --json '" + json.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("decode, 1 thread: generated tokens/s after the prefill step, mean ±stddev [min-max]") !=
        std::string::npos);
  CHECK(r.output.find("prefill, 2 threads: prompt tokens/s of one sequence") != std::string::npos);
  CHECK(r.output.find("warm-up 1, 3 runs per cell (modes interleaved)") != std::string::npos);
  // 200 prompt tokens do not fit the 96-token context: lowered to 95, said on stderr.
  CHECK(r.output.find("prompt length 200 lowered to 95 to fit the context length 96") != std::string::npos);
  CHECK(r.output.find("validation: batch-invariant probe bit-identical") != std::string::npos);

  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["warmup"] == 1);
  CHECK(j["repeats"] == 3);
  CHECK(j["invariant_validated"] == true);
  REQUIRE(j["rows"].size() == 4);  // 2 thread counts x 2 batch sizes
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
    for (const auto& row : j[key]) noisy = noisy || row["default"]["noisy"] || row["invariant"]["noisy"];
  CHECK((r.output.find("* noisy: coefficient of variation above 25%") != std::string::npos) == noisy);
}

TEST_CASE("bench: --no-prefill measures decode only") {
  auto dir = test::scratch_dir("bench-noprefill");
  const fs::path model = tiny_model(dir);
  auto r = test::run_cli("bench --model '" + model.string() +
                         "' --threads 1 --batch-sizes 2 --max-tokens 3 --repeats 2 --warmup 0 --no-prefill --json -");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("prefill, ") == std::string::npos);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find("\n{") + 1));
  CHECK(j["rows"].size() == 1);
  CHECK(j["prefill_rows"].empty());
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
}
