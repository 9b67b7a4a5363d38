// The trade-off table (repro/audit/tradeoff.hpp).
//
// Which completions make a row:
//   default, batch-invariant, deterministic   greedy cases (decoding "greedy") of that mode
//   controlled sampling                        sampled cases (T > 0, one fixed seed per case, so
//                                              every completion of a case replays the same seed)
//                                              of the default mode: the API controls on a normal
//                                              serving stack, kernels unchanged
// all at one activation precision: the first of the run (the plan's order), so every row compares
// the same kind of numbers.
//
// Reproducibility over the row's cases: TARr@N (cases whose N raw outputs are identical), TARa@N
// (identical extracted answers; only with an answer extractor), the share of completions differing
// from their case's reference completion in tokens and bitwise, and the drift size (per-step
// |delta logprob| of chosen tokens against the reference), from the per-case drift analysis.
//
// Throughput relative to default, per measurement: for each completion of the row with a measured
// batch (batch_tokens / batch_seconds, the whole cell's work), its tokens/s divided by the mean
// tokens/s of default greedy's completions in the same context (prompt, batch size, position,
// filler draw; over the repeats). Mean, standard deviation, min and max over those measurements;
// the default row's spread is then the run-to-run noise of the baseline itself.
#include "repro/audit/tradeoff.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "repro/audit/stats.hpp"

namespace repro {

namespace {

bool greedy(const std::string& decoding_id) { return decoding_id == "greedy"; }

// A completion of the local engine: no remote response metadata (the rule analysis.cpp applies).
bool is_local(const Completion& c) {
  return c.cache_state.empty() && c.response_id.empty() && c.system_fingerprint.empty() && c.response_model.empty();
}

using ContextKey = std::tuple<std::string, std::string, int, int, std::string>;  // prompt, precision, b, pos, fillers
ContextKey context_of(const Completion& c) {
  return {c.prompt_id, c.precision, c.batch_size, c.position, c.filler_set};
}

double batch_rate(const Completion& c) {
  return c.batch_seconds > 0 && c.batch_tokens > 0 ? static_cast<double>(c.batch_tokens) / c.batch_seconds : 0.0;
}

struct Selector {
  std::string approach, mode, decoding;
  bool sampled;
  std::string how_to_include;
};

const std::vector<Selector>& selectors() {
  static const std::vector<Selector> s = {
      {"default", "default", "greedy", false, "add default to --modes with temperature 0 in --temperatures"},
      {"batch-invariant", "batch-invariant", "greedy", false,
       "add batch-invariant to --modes with temperature 0 in --temperatures"},
      {"deterministic", "deterministic", "greedy", false,
       "add deterministic to --modes with temperature 0 in --temperatures"},
      {"controlled sampling", "default", "sampled, seed replayed", true,
       "add default to --modes and a temperature above 0 to --temperatures (one --seeds value is replayed)"},
  };
  return s;
}

}  // namespace

const std::vector<std::string>& tradeoff_approaches() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : selectors()) n.push_back(s.approach);
    return n;
  }();
  return names;
}

void compute_tradeoff(AuditReport& r) {
  r.tradeoff.clear();
  const auto& all = r.completions;
  // The precision of the table: the plan's first, else the first a local completion ran at.
  std::string precision;
  if (r.plan.is_object() && r.plan.contains("precisions") && r.plan["precisions"].is_array() &&
      !r.plan["precisions"].empty() && r.plan["precisions"][0].is_string())
    precision = r.plan["precisions"][0].get<std::string>();
  bool any_local = false;
  for (const auto& c : all) {
    if (!is_local(c)) continue;
    any_local = true;
    if (precision.empty()) precision = c.precision;
  }

  // Default greedy's mean tokens/s per context (over its repeats): the denominators.
  std::map<ContextKey, std::pair<double, int>> base;
  for (const auto& c : all)
    if (c.error.empty() && is_local(c) && c.mode == "default" && greedy(c.decoding_id) && batch_rate(c) > 0) {
      auto& b = base[context_of(c)];
      b.first += batch_rate(c);
      b.second++;
    }

  for (const Selector& s : selectors()) {
    TradeoffRow row;
    row.approach = s.approach;
    row.mode = s.mode;
    row.decoding = s.decoding;
    row.precision = precision;
    if (!any_local) {
      row.note = "the trade-off table compares the local engine's modes; this run audited endpoints";
      r.tradeoff.push_back(std::move(row));
      continue;
    }
    // ---- reproducibility over the row's cases
    int tarr = 0, tara = 0, tara_n = 0, tok = 0, bit = 0, compared = 0;
    int64_t steps = 0;
    double sum_dlp = 0;
    for (const auto& cr : r.cases) {
      if (cr.mode != s.mode || cr.precision != precision || greedy(cr.decoding_id) == s.sampled || cr.n == 0) continue;
      row.cases++;
      row.n_min = row.cases == 1 ? cr.n : std::min(row.n_min, cr.n);
      row.n_max = std::max(row.n_max, cr.n);
      tarr += cr.tarr;
      if (cr.tara) tara_n++, tara += *cr.tara;
      const DriftSize& d = cr.drift_size;
      tok += d.token_differ;
      bit += d.bit_differ;
      compared += d.compared;
      if (d.max_dlogprob) {
        row.max_dlogprob = std::max(row.max_dlogprob.value_or(0), *d.max_dlogprob);
        sum_dlp += d.mean_dlogprob.value_or(0) * d.steps_compared;
        steps += d.steps_compared;
      }
    }
    if (row.cases == 0) {
      row.note = "not in this run (" + s.how_to_include + ")";
      r.tradeoff.push_back(std::move(row));
      continue;
    }
    row.measured = true;
    row.tarr = wilson(tarr, row.cases);
    if (tara_n > 0) row.tara = wilson(tara, tara_n);
    row.token_differ = wilson(tok, compared);
    row.bit_differ = wilson(bit, compared);
    if (row.max_dlogprob) row.mean_dlogprob = steps > 0 ? sum_dlp / static_cast<double>(steps) : 0.0;

    // ---- throughput relative to default greedy, one measurement per completion with a measured batch
    std::vector<double> ratios;
    int64_t tokens = 0;
    double seconds = 0;
    for (const auto& c : all) {
      if (!c.error.empty() || c.mode != s.mode || c.precision != precision || greedy(c.decoding_id) == s.sampled)
        continue;
      const double rate = batch_rate(c);
      if (rate <= 0) continue;
      tokens += c.batch_tokens;
      seconds += c.batch_seconds;
      auto b = base.find(context_of(c));
      if (b == base.end() || b->second.second == 0) continue;
      ratios.push_back(rate / (b->second.first / b->second.second));
    }
    row.tokens_per_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
    row.speed_n = static_cast<int>(ratios.size());
    if (!ratios.empty()) {
      double sum = 0;
      for (double x : ratios) sum += x;
      const double mean = sum / static_cast<double>(ratios.size());
      double ss = 0;
      for (double x : ratios) ss += (x - mean) * (x - mean);
      row.speed_mean = mean;
      row.speed_sd = ratios.size() > 1 ? std::sqrt(ss / static_cast<double>(ratios.size() - 1)) : 0.0;
      row.speed_min = *std::min_element(ratios.begin(), ratios.end());
      row.speed_max = *std::max_element(ratios.begin(), ratios.end());
    }

    // ---- how it was measured
    std::string how = fmt::format("{} {} case(s) of {} mode at {}, N = {}", row.cases,
                                  s.sampled ? "sampled" : "greedy", s.mode, precision,
                                  row.n_min == row.n_max ? std::to_string(row.n_min)
                                                         : fmt::format("{}..{}", row.n_min, row.n_max));
    if (s.mode == "deterministic")
      how += "; every request decoded alone (cells of batch size b > 1 ran the probe and its b-1 batch mates one "
             "after another), one thread, reference kernels";
    if (s.sampled) how += "; each case replays one seed at T > 0 across every batch context and repeat";
    if (row.speed_n == 0)
      how += base.empty() ? "; speed not measured: no default greedy cells with measured batch times in this run"
                          : "; speed not measured: no cell of this approach has a measured batch time";
    row.note = how;
    r.tradeoff.push_back(std::move(row));
  }
}

}  // namespace repro
