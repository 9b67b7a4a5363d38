// The trade-off table as plain text (every writer renders it; src/audit/tradeoff.cpp measures it).
#include <fmt/core.h>

#include "repro/audit/stats.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {

std::string pct(double share) { return fmt::format("{:.0f}%", 100 * share); }

// "100% (3 of 3; 95%: 44-100%)"
std::string rate_cell(const Rate& r) {
  if (r.n <= 0) return "-";
  return fmt::format("{} ({} of {}; 95%: {}-{})", pct(static_cast<double>(r.k) / r.n), r.k, r.n, pct(r.lo), pct(r.hi));
}

std::string speed_cell(const TradeoffRow& row) {
  if (!row.measured || !row.speed_mean) return "not measured";
  return fmt::format("{:.2f}x ±{:.2f} [{:.2f}-{:.2f}], n {}", *row.speed_mean, row.speed_sd.value_or(0),
                     row.speed_min.value_or(0), row.speed_max.value_or(0), row.speed_n);
}

std::string n_cell(const TradeoffRow& row) {
  if (!row.measured) return "-";
  return row.n_min == row.n_max ? std::to_string(row.n_min) : fmt::format("{}-{}", row.n_min, row.n_max);
}

}  // namespace

std::string tradeoff_intro() {
  return "Throughput is each cell's tokens/s (probe and batch mates) relative to default greedy's mean tokens/s in the "
         "same context (prompt, precision, batch size, position, filler draw): mean ± standard deviation [min-max] over "
         "the approach's cells; the same ratio as the headline's. Reproducibility is over the approach's cases on the "
         "same prompts. Every number is measured in this run; an approach the run did not include is not measured.";
}

std::string mode_speed_text(const ModeSummary& m) {
  if (!m.throughput_ratio || m.throughput_ratio_n == 0) return "not measured";
  return fmt::format("{:.2f}x ±{:.2f} (n {})", *m.throughput_ratio, m.throughput_ratio_sd.value_or(0),
                     m.throughput_ratio_n);
}

TextTable tradeoff_table(const AuditReport& r) {
  TextTable t;
  t.head = {"approach",       "mode, decoding", "throughput vs default (mean ±sd [min-max])", "N", "TARr@N",
            "TARa@N",         "differing from reference (tokens)", "differing bitwise", "max |dlogprob|",
            "how measured"};
  for (const auto& row : r.tradeoff) {
    const std::string how = row.mode + ", " + row.decoding + (row.precision.empty() ? "" : ", " + row.precision);
    if (!row.measured) {
      t.rows.push_back({row.approach, how, "not measured", "-", "not measured", "not measured", "not measured",
                        "not measured", "-", row.note});
      continue;
    }
    t.rows.push_back({row.approach, how, speed_cell(row), n_cell(row), rate_cell(row.tarr),
                      row.tara ? rate_cell(*row.tara) : "no answer extractor", rate_text(row.token_differ),
                      rate_text(row.bit_differ), fmt_dlogprob(row.max_dlogprob), row.note});
  }
  return t;
}

std::string tradeoff_line(const TradeoffRow& row) {
  if (!row.measured) return fmt::format("{}: not measured ({})", row.approach, row.note);
  std::string s = fmt::format("{}: speed {}; TARr@{} {}", row.approach, speed_cell(row), n_cell(row), rate_cell(row.tarr));
  if (row.tara) s += fmt::format("; TARa@{} {}", n_cell(row), rate_cell(*row.tara));
  s += fmt::format("; tokens differ from reference {}; bitwise {}; max |dlogprob| {}", rate_text(row.token_differ),
                   rate_text(row.bit_differ), fmt_dlogprob(row.max_dlogprob));
  return s;
}

}  // namespace repro
