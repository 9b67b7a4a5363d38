// The spread of a bench cell's runs (repro/bench/stats.hpp).
#include "repro/bench/stats.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "repro/common/util.hpp"

namespace repro::bench {

Stats summarize(std::vector<double> runs) {
  Stats st;
  st.runs = std::move(runs);
  if (st.runs.empty()) return st;
  double sum = 0;
  for (double v : st.runs) sum += v;
  st.mean = sum / static_cast<double>(st.runs.size());
  double ss = 0;
  for (double v : st.runs) ss += (v - st.mean) * (v - st.mean);
  st.stddev = st.runs.size() > 1 ? std::sqrt(ss / static_cast<double>(st.runs.size() - 1)) : 0.0;
  st.min = *std::min_element(st.runs.begin(), st.runs.end());
  st.max = *std::max_element(st.runs.begin(), st.runs.end());
  st.cv = st.mean > 0 ? st.stddev / st.mean : 0.0;
  return st;
}

nlohmann::json stats_json(const Stats& st, double noise_cv) {
  return {{"mean", st.mean}, {"stddev", st.stddev}, {"min", st.min},         {"max", st.max},
          {"cv", st.cv},     {"runs", st.runs},     {"noisy", st.cv > noise_cv}};
}

std::string stats_cell(const Stats& st, double noise_cv) {
  return fmt::format("{:.1f} ±{:.1f} [{:.1f}-{:.1f}]{}", st.mean, st.stddev, st.min, st.max,
                     st.cv > noise_cv ? "*" : "");
}

std::string load_average() {
  std::string s;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f)) s = trim(buf);
    std::fclose(f);
  }
  return s;
}

}  // namespace repro::bench
