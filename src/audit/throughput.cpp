// Throughput cells of the report: totals and per-measurement statistics (see add_throughput_run in
// include/repro/audit/analysis.hpp).
#include <algorithm>
#include <cmath>

#include "repro/audit/analysis.hpp"

namespace repro {

void add_throughput_run(ThroughputRow& row, int64_t tokens, double seconds) {
  row.tokens += tokens;
  row.seconds += seconds;
  row.tokens_per_s = row.seconds > 0 ? static_cast<double>(row.tokens) / row.seconds : 0;
  if (tokens <= 0 || !(seconds > 0)) return;
  const double x = static_cast<double>(tokens) / seconds;
  // Welford's update from the stored mean and sample standard deviation (a resumed run continues
  // the statistics of the rows it read back).
  const double n = row.runs;
  double m2 = row.runs > 1 ? row.stddev_tokens_per_s * row.stddev_tokens_per_s * (n - 1) : 0.0;
  const double delta = x - row.mean_tokens_per_s;
  const double mean = row.mean_tokens_per_s + delta / (n + 1);
  m2 += delta * (x - mean);
  row.min_tokens_per_s = row.runs == 0 ? x : std::min(row.min_tokens_per_s, x);
  row.max_tokens_per_s = row.runs == 0 ? x : std::max(row.max_tokens_per_s, x);
  row.runs += 1;
  row.mean_tokens_per_s = mean;
  row.stddev_tokens_per_s = row.runs > 1 ? std::sqrt(std::max(m2, 0.0) / (row.runs - 1)) : 0.0;
}

}  // namespace repro
