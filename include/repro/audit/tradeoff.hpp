// The trade-off table: one row per approach to reproducibility (default, batch-invariant,
// deterministic, controlled sampling), each with its throughput relative to default and its
// reproducibility, measured on the same prompts in the same run, on the user's own stack.
//
// The one throughput ratio of every report (headline, trade-off table, throughput table, advice):
// a cell is one completion with its measured rate (local: its batch's tokens / the batch's wall time,
// probe and batch mates; endpoints: the probe's tokens/s); its ratio is that rate divided by the mean
// rate of the baseline's greedy cells in the same context (prompt, precision, batch size or
// concurrency, position, filler draw; over the repeats). Mean, sample standard deviation, min and max
// over the cells. The baseline is the mode "default" for the local engine, the first endpoint for
// endpoints; a mode with no baseline cell in its contexts is not measured.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// The approaches, in table order.
const std::vector<std::string>& tradeoff_approaches();

// Fills r.tradeoff from r.completions and r.cases (analyze() calls it after the cases and drift):
// always one row per approach; an approach the run did not include is a row with measured = false
// and a note that says how to include it.
void compute_tradeoff(AuditReport& r);

struct SpeedRatio {
  int n = 0;                      // cells with a baseline to compare with
  std::optional<double> mean, sd, min, max;
};
enum class SpeedCells { greedy, sampled, greedy_else_sampled };
// The ratio of `mode` at `precision` (see above); batch_size 0: every batch size, else that one only.
SpeedRatio speed_ratio(const AuditReport& r, const std::string& mode, const std::string& precision, SpeedCells which,
                       int batch_size = 0);
// The same definition for any two sets of completions: each cell of `pick` against the mean rate of
// the `base` cells in its context (prompt, batch size, position, filler draw; precision excluded, so a
// caller may compare precisions).
SpeedRatio speed_ratio_of(const AuditReport& r, const std::function<bool(const Completion&)>& pick,
                          const std::function<bool(const Completion&)>& base);
// The baseline mode speed_ratio compares with: "default" for the local engine, else the first endpoint.
std::string speed_baseline(const AuditReport& r);
// "0.98x ±0.03 (n 12)"; "not measured" when n is 0.
std::string speed_text(const SpeedRatio& s);

}  // namespace repro
