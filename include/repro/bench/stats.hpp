// What every `bench` cell shares, local engine or endpoint under load: the spread of its runs, how
// that spread is written, and the order in which the competitors of a cell are measured.
#pragma once
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace repro::bench {

// What every cell has, local or endpoint: the probe and how often it is measured.
struct Runs {
  int max_tokens = 32;
  int repeats = 5;
  int warmup = 1;
  double noise_cv = 0.10;  // a cell whose stddev / mean is above this is noisy
  std::string prompt = "Once upon a time";
};

// Mean, sample standard deviation and range of one cell's measurements.
struct Stats {
  std::vector<double> runs;
  double mean = 0, stddev = 0, min = 0, max = 0, cv = 0;
};

Stats summarize(std::vector<double> runs);
nlohmann::json stats_json(const Stats& st, double noise_cv);
// "105.2 ±2.1 [102.0-108.3]" with a trailing '*' when the cell is noisy.
std::string stats_cell(const Stats& st, double noise_cv);
// /proc/loadavg's first line, trimmed (empty when unreadable).
std::string load_average();

// Runs measure(i, false) `warmup` times for each of the n competitors (not counted), then
// measure(i, true) `repeats` times for each, interleaved run by run and rotating which goes first
// (run r starts with competitor r % n), so a change of machine load hits all of them. With
// min_time > 0 it stops after a run once at least 3 runs are in and min_time seconds have passed.
template <typename F>
void interleaved(size_t n, int warmup, int repeats, double min_time, F&& measure) {
  for (int w = 0; w < warmup; ++w)
    for (size_t i = 0; i < n; ++i) measure(i, false);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t k = 0; k < n; ++k) measure((k + static_cast<size_t>(rep)) % n, true);
    if (min_time > 0 && rep + 1 >= 3 && std::chrono::duration<double>(Clock::now() - t0).count() >= min_time)
      break;
  }
}

}  // namespace repro::bench
