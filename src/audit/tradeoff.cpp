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

#include "repro/audit/drift_size.hpp"
#include "repro/audit/stats.hpp"

namespace repro {

namespace {

bool greedy(const std::string& decoding_id) { return decoding_id == "greedy"; }

// Without speculative decoding: no run --speculative axis, or its "off" setting. The rows of the
// approaches and every speed ratio's baseline are measured on these; speculation has its own rows.
bool spec_off(const Completion& c) { return c.speculative.empty() || c.speculative == "off"; }

// A completion of the local engine: no remote response metadata (the rule analysis.cpp applies).
bool is_local(const Completion& c) {
  return c.cache_state.empty() && c.response_id.empty() && c.system_fingerprint.empty() && c.response_model.empty();
}

using ContextKey = std::tuple<std::string, int, int, std::string>;  // prompt, b (or concurrency), pos, fillers
ContextKey context_of(const Completion& c) { return {c.prompt_id, c.batch_size, c.position, c.filler_set}; }

double batch_rate(const Completion& c) {
  return c.batch_seconds > 0 && c.batch_tokens > 0 ? static_cast<double>(c.batch_tokens) / c.batch_seconds : 0.0;
}

// A cell's measured rate: the whole batch's (local), else the completion's own tokens/s (endpoints:
// the probe's; local reports written before batch times were recorded).
double cell_rate(const Completion& c) {
  if (!c.error.empty()) return 0;
  const double b = batch_rate(c);
  return b > 0 ? b : c.tokens_per_s;
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

// run --speculative: a row per mode and setting other than off, of the mode's greedy completions
// with that setting. Reproducibility against each case's reference completion (the reference context
// without speculation, as for every row); speed against default greedy without speculation in the
// same context.
void add_speculative_rows(AuditReport& r, const std::string& precision) {
  if (!r.plan.is_object() || !r.plan.contains("speculative") || !r.plan["speculative"].is_array()) return;
  std::vector<std::string> settings;
  for (const auto& e : r.plan["speculative"])
    if (e.is_string() && e.get<std::string>() != "off") settings.push_back(e.get<std::string>());
  if (settings.empty()) return;
  // The members of each greedy case at the table's precision: (prompt, mode) -> completion indices.
  std::map<std::pair<std::string, std::string>, std::vector<int>> members;
  for (size_t i = 0; i < r.completions.size(); ++i) {
    const Completion& c = r.completions[i];
    if (c.error.empty() && is_local(c) && c.precision == precision && greedy(c.decoding_id))
      members[{c.prompt_id, c.mode}].push_back(static_cast<int>(i));
  }
  std::vector<std::string> modes;
  for (const auto& [key, m] : members)
    if (std::find(modes.begin(), modes.end(), key.second) == modes.end()) modes.push_back(key.second);
  if (r.plan.contains("modes") && r.plan["modes"].is_array()) {  // the plan's order
    std::vector<std::string> ordered;
    for (const auto& m : r.plan["modes"])
      if (m.is_string() && std::find(modes.begin(), modes.end(), m.get<std::string>()) != modes.end())
        ordered.push_back(m.get<std::string>());
    modes = ordered;
  }
  for (const auto& mode : modes)
    for (const auto& setting : settings) {
      TradeoffRow row;
      row.approach = mode + " + speculative " + setting;
      row.mode = mode;
      row.decoding = "greedy";
      row.precision = precision;
      row.speculative = setting;
      int tarr = 0, tok = 0, bit = 0, compared = 0;
      int64_t steps = 0;
      double sum_dlp = 0;
      for (const auto& [key, m] : members) {
        if (key.second != mode) continue;
        const int ref = reference_completion(r.completions, m);
        if (ref < 0) continue;
        const Completion& b = r.completions[static_cast<size_t>(ref)];
        int n = 0;
        bool all_same = true;
        for (int i : m) {
          const Completion& c = r.completions[static_cast<size_t>(i)];
          if (c.speculative != setting) continue;
          ++n;
          const bool tokens_differ = c.tokens != b.tokens;
          const bool bits_differ = tokens_differ || c.logits_sha256 != b.logits_sha256 || c.logprobs != b.logprobs;
          tok += tokens_differ;
          bit += bits_differ;
          all_same = all_same && !tokens_differ;  // TARr is token for token, as in every row
          ++compared;
          size_t common = 0;
          while (common < c.tokens.size() && common < b.tokens.size() && c.tokens[common] == b.tokens[common]) ++common;
          const size_t k = std::min({common + (tokens_differ ? 1 : 0), c.logprobs.size(), b.logprobs.size()});
          for (size_t s = 0; s < k; ++s) {
            const double d = std::fabs(static_cast<double>(c.logprobs[s]) - static_cast<double>(b.logprobs[s]));
            row.max_dlogprob = std::max(row.max_dlogprob.value_or(0.0), d);
            sum_dlp += d;
            ++steps;
          }
        }
        if (n == 0) continue;
        row.cases++;
        row.n_min = row.cases == 1 ? n + 1 : std::min(row.n_min, n + 1);
        row.n_max = std::max(row.n_max, n + 1);
        tarr += all_same;
      }
      if (row.cases == 0) {
        row.note = "no greedy completion of " + mode + " mode ran with --speculative " + setting;
        r.tradeoff.push_back(std::move(row));
        continue;
      }
      row.measured = true;
      row.tarr = wilson(tarr, row.cases);
      row.token_differ = wilson(tok, compared);
      row.bit_differ = wilson(bit, compared);
      if (steps > 0) row.mean_dlogprob = sum_dlp / static_cast<double>(steps);
      int64_t tokens = 0;
      double seconds = 0;
      auto pick = [&](const Completion& c) {
        return c.mode == mode && c.precision == precision && greedy(c.decoding_id) && c.speculative == setting;
      };
      for (const auto& c : r.completions)
        if (c.error.empty() && pick(c) && batch_rate(c) > 0) {
          tokens += c.batch_tokens;
          seconds += c.batch_seconds;
        }
      row.tokens_per_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
      const SpeedRatio sp = speed_ratio_of(r, pick, [&](const Completion& c) {
        return c.mode == "default" && c.precision == precision && greedy(c.decoding_id) && spec_off(c);
      });
      row.speed_n = sp.n;
      row.speed_mean = sp.mean;
      row.speed_sd = sp.sd;
      row.speed_min = sp.min;
      row.speed_max = sp.max;
      row.note = fmt::format("{} greedy case(s) of {} mode at {} with speculative decoding {}; N = the reference "
                             "context without speculation and the setting's completions",
                             row.cases, mode, precision, setting);
      if (row.speed_n == 0) row.note += "; speed not measured: default greedy without speculation did not run in the same contexts";
      r.tradeoff.push_back(std::move(row));
    }
}

}  // namespace

std::string speed_baseline(const AuditReport& r) {
  for (const auto& c : r.completions)
    if (is_local(c)) return "default";
  const auto& env = r.environment;
  if (env.is_object() && env.contains("endpoints") && env["endpoints"].is_array())
    for (const auto& e : env["endpoints"])
      if (e.is_object() && e.contains("label") && e["label"].is_string()) return e["label"].get<std::string>();
  return r.completions.empty() ? std::string("default") : r.completions.front().mode;
}

SpeedRatio speed_ratio_of(const AuditReport& r, const std::function<bool(const Completion&)>& pick,
                          const std::function<bool(const Completion&)>& base) {
  std::map<ContextKey, std::pair<double, int>> den;
  for (const auto& c : r.completions)
    if (const double rate = cell_rate(c); rate > 0 && base(c)) {
      auto& b = den[context_of(c)];
      b.first += rate;
      b.second++;
    }
  std::vector<double> ratios;
  for (const auto& c : r.completions) {
    const double rate = cell_rate(c);
    if (rate <= 0 || !pick(c)) continue;
    auto b = den.find(context_of(c));
    if (b == den.end() || b->second.first <= 0) continue;
    ratios.push_back(rate / (b->second.first / b->second.second));
  }
  SpeedRatio out;
  out.n = static_cast<int>(ratios.size());
  if (ratios.empty()) return out;
  double sum = 0;
  for (double x : ratios) sum += x;
  const double mean = sum / static_cast<double>(ratios.size());
  double ss = 0;
  for (double x : ratios) ss += (x - mean) * (x - mean);
  out.mean = mean;
  out.sd = ratios.size() > 1 ? std::sqrt(ss / static_cast<double>(ratios.size() - 1)) : 0.0;
  out.min = *std::min_element(ratios.begin(), ratios.end());
  out.max = *std::max_element(ratios.begin(), ratios.end());
  return out;
}

SpeedRatio speed_ratio(const AuditReport& r, const std::string& mode, const std::string& precision, SpeedCells which,
                       int batch_size) {
  const std::string base = speed_baseline(r);
  bool sampled = which == SpeedCells::sampled;
  if (which == SpeedCells::greedy_else_sampled) {
    sampled = true;
    for (const auto& c : r.completions)
      if (c.mode == mode && c.precision == precision && greedy(c.decoding_id)) sampled = false;
  }
  auto in_batch = [&](const Completion& c) { return batch_size == 0 || c.batch_size == batch_size; };
  return speed_ratio_of(
      r,
      [&](const Completion& c) {
        return c.mode == mode && c.precision == precision && greedy(c.decoding_id) != sampled && in_batch(c) &&
               spec_off(c);
      },
      [&](const Completion& c) {
        return c.mode == base && c.precision == precision && greedy(c.decoding_id) && spec_off(c);
      });
}

std::string speed_text(const SpeedRatio& s) {
  if (s.n == 0 || !s.mean) return "not measured";
  return fmt::format("{:.2f}x ±{:.2f} (n {})", *s.mean, s.sd.value_or(0), s.n);
}

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

  bool base_measured = false;  // default greedy cells with a measured rate
  for (const auto& c : all)
    base_measured = base_measured ||
                    (is_local(c) && c.mode == "default" && greedy(c.decoding_id) && cell_rate(c) > 0);

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

    // ---- throughput relative to default greedy (speed_ratio: the one definition of every report)
    int64_t tokens = 0;
    double seconds = 0;
    for (const auto& c : all) {
      if (!c.error.empty() || c.mode != s.mode || c.precision != precision || greedy(c.decoding_id) == s.sampled ||
          !spec_off(c))
        continue;
      const double rate = batch_rate(c);
      if (rate <= 0) continue;
      tokens += c.batch_tokens;
      seconds += c.batch_seconds;
    }
    row.tokens_per_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
    const SpeedRatio sp = speed_ratio(r, s.mode, precision, s.sampled ? SpeedCells::sampled : SpeedCells::greedy);
    row.speed_n = sp.n;
    row.speed_mean = sp.mean;
    row.speed_sd = sp.sd;
    row.speed_min = sp.min;
    row.speed_max = sp.max;

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
      how += !base_measured ? "; speed not measured: default greedy did not run in the same contexts"
                            : "; speed not measured: no cell of this approach shares a context with default greedy";
    row.note = how;
    r.tradeoff.push_back(std::move(row));
  }
  add_speculative_rows(r, precision);
}

}  // namespace repro
