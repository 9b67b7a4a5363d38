// The local engine's bench: every op table side by side, decode and prefill (repro/bench/local.hpp).
#include "repro/bench/local.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "repro/audit/batch_context.hpp"
#include "repro/bench/loops.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/device.hpp"
#include "repro/engine/engine.hpp"
#include "repro/kernels/backends.hpp"
#include "repro/model/synth.hpp"

namespace repro::bench {
namespace {

// Each table's mean over the default table's (the first one's).
std::vector<double> ratios(const std::vector<Stats>& stats) {
  std::vector<double> out;
  for (const Stats& s : stats) out.push_back(stats[0].mean > 0 ? s.mean / stats[0].mean : 0.0);
  return out;
}

bool noisy(const std::vector<Stats>& stats, double noise_cv) {
  return std::any_of(stats.begin(), stats.end(), [&](const Stats& s) { return s.cv > noise_cv; });
}

// The cells' statistics and ratios, as every row of the JSON carries them.
void add_cells_json(nlohmann::json& row, const std::vector<BenchTable>& tables, const std::vector<Stats>& stats,
                    const std::vector<double>& ratio, double noise_cv) {
  for (size_t m = 0; m < tables.size(); ++m) {
    row[tables[m].key] = stats_json(stats[m], noise_cv);
    if (!tables[m].baseline()) row[tables[m].ratio_key] = ratio[m];
  }
}

// The model's numbers and the ceiling of one row, and each table's share of it.
void add_ceiling_json(nlohmann::json& row, const CellCeiling& cc, const std::vector<BenchTable>& tables,
                      const std::vector<Stats>& stats) {
  const StepCost& cost = cc.cost;
  const Ceiling& c = cc.limit;
  row["weight_bytes_per_step"] = cost.weight_bytes;
  row["kv_bytes_per_step"] = cost.kv_bytes;
  row["flops_per_token"] = cost.flops_per_token;
  row["memory_ceiling_tokens_per_s"] = c.memory_tokens_per_s;
  row["compute_ceiling_tokens_per_s"] = c.compute_tokens_per_s;
  row["ceiling_tokens_per_s"] = c.tokens_per_s;
  row["ceiling_kind"] = c.kind;
  for (size_t m = 0; m < tables.size(); ++m)
    row[tables[m].key + "_share_of_ceiling"] = c.tokens_per_s > 0 ? stats[m].mean / c.tokens_per_s : 0.0;
}

nlohmann::json decode_json(const DecodeRow& r, const std::vector<BenchTable>& tables, double noise_cv) {
  nlohmann::json row = {{"model", r.model},
                        {"threads", r.threads},
                        {"batch_size", r.batch_size},
                        {"decode_tokens", r.decode_tokens}};
  for (size_t m = 0; m < tables.size(); ++m) {
    row[tables[m].key + "_tokens_per_s"] = r.stats[m].mean;
    row[tables[m].key + (tables[m].baseline() ? "_probe_same_as_batch1" : "_probe_identical")] = r.probe_same[m];
  }
  add_cells_json(row, tables, r.stats, r.ratio, noise_cv);
  if (r.ceiling) add_ceiling_json(row, *r.ceiling, tables, r.stats);
  return row;
}

nlohmann::json prefill_json(const PrefillRow& r, const std::vector<BenchTable>& tables, double noise_cv) {
  nlohmann::json row = {{"model", r.model}, {"threads", r.threads}, {"prompt_tokens", r.prompt_tokens}};
  add_cells_json(row, tables, r.stats, r.ratio, noise_cv);
  if (r.ceiling) add_ceiling_json(row, *r.ceiling, tables, r.stats);
  return row;
}

}  // namespace

LocalResult run_local(const LocalConfig& cfg, LocalObserver& obs) {
  LocalSetup setup;
  setup.avx2_fma = kernels::cpu_has_avx2_fma();
  if (const char* core = std::getenv("OPENBLAS_CORETYPE")) setup.openblas_coretype = core;
  setup.load_average = load_average();
  obs.start(cfg, setup);

  LocalResult res;
  // Each op table says what it runs (validates the device before any model is loaded).
  res.tables = bench_tables(cfg.device, cfg.threads.front(), cfg.modes);
  const std::vector<BenchTable>& tables = res.tables;
  const size_t n = tables.size();
  obs.tables(tables);
  nlohmann::json jtables = nlohmann::json::array();
  for (const auto& t : tables) jtables.push_back(to_json(t.info));
  nlohmann::json& jout = res.json;
  jout = {{"max_tokens", cfg.max_tokens},
          {"warmup", cfg.warmup},
          {"repeats", cfg.repeats},
          {"noise_cv", cfg.noise_cv},
          {"avx2_fma", setup.avx2_fma},
          {"openblas_coretype", setup.openblas_coretype.value_or("")},
          {"device", device_name(cfg.device)},
          {"precision", precision_name(cfg.precision)},
          {"tp", cfg.tp},
          {"allreduce", allreduce_name(cfg.allreduce)},
          {"load_average_start", setup.load_average},
          {"op_tables", jtables},
          {"rows", nlohmann::json::array()},
          {"prefill_rows", nlohmann::json::array()}};

  // The ceilings are this CPU's: a cell on another device gets none.
  MachineCeilings ceilings;
  if (cfg.ceilings && cfg.device == Device::Cpu) {
    ceilings = measure_ceilings(cfg.threads, cfg.triad_mib, cfg.sgemm_size, cfg.ceiling_repeats);
    jout["ceilings"] = ceilings.json;
    obs.ceilings(&ceilings);
  } else if (cfg.ceilings) {
    obs.ceilings(nullptr);
  }

  std::vector<bool> all_ok(n, true);
  for (const std::string& spec : cfg.models) {
    const std::string path = resolve_model_spec(spec);
    auto model = load_model(path, cfg.tokenizer);
    const ModelConfig& c = model->config;
    ModelInfo info;
    info.name = std::filesystem::path(path).filename().string();
    info.config = c;
    info.costs = model_costs(*model);
    info.last_level_cache_bytes = last_level_cache_bytes();
    const std::string& name = info.name;
    const int probe_len = static_cast<int>(model->tokenizer->encode(cfg.prompt, true).size());
    int max_tokens = cfg.max_tokens;
    int longest_prompt = probe_len;
    for (const auto& f : filler_pool())
      longest_prompt = std::max(longest_prompt, static_cast<int>(model->tokenizer->encode(f, true).size()));
    if (longest_prompt + max_tokens > c.context_length) {
      max_tokens = std::max(2, c.context_length - longest_prompt);
      obs.note("bench: " + name + ": --max-tokens lowered to " + std::to_string(max_tokens) +
               " to fit the context length " + std::to_string(c.context_length));
    }
    obs.model(info);
    // Per table: the probe's bits at the model's first decode cell, and whether every cell kept them.
    std::vector<std::vector<int>> ref_tokens(n);
    Validation valid;
    valid.model = name;
    valid.identical.assign(n, true);
    valid.sha.assign(n, "");
    for (int t : cfg.threads) {
      const MachineCeiling* mc = ceilings.at(t);
      std::vector<std::unique_ptr<Engine>> engines;
      for (const auto& table : tables)
        engines.push_back(std::make_unique<Engine>(
            *model, EngineOptions{table.mode, t, cfg.device, cfg.precision, cfg.tp, cfg.allreduce}));

      // ---- decode ----
      obs.decode_start(t, mc);
      std::string default_sha1;  // default probe at batch 1 for this thread count
      for (int b : cfg.batch_sizes) {
        const auto reqs = make_batch(*model, cfg.prompt, b, max_tokens);
        std::vector<std::vector<double>> runs(n);
        std::vector<DecodeRun> first(n);
        std::vector<bool> have(n, false);
        interleaved(n, cfg.warmup, cfg.repeats, cfg.min_time, [&](size_t m, bool counted) {
          DecodeRun r = decode_once(*engines[m], reqs);
          if (static_cast<int>(r.probe_tokens.size()) != max_tokens)
            throw BackendError("bench: " + name + ": the " + mode_name(tables[m].mode) +
                               " engine produced fewer tokens than --max-tokens");
          if (!have[m]) {
            first[m] = r;
            have[m] = true;
          } else if (r.probe_tokens != first[m].probe_tokens || r.probe_sha != first[m].probe_sha) {
            throw BackendError(std::string("bench: the ") + mode_name(tables[m].mode) +
                               " engine gave different bits for the same batch on a rerun; the engine is not "
                               "deterministic");
          }
          if (counted) runs[m].push_back(r.tok_s);
        });
        DecodeRow row;
        row.model = name;
        row.threads = t;
        row.batch_size = b;
        row.decode_tokens = static_cast<int64_t>(b) * (max_tokens - 1);
        for (auto& r : runs) row.stats.push_back(summarize(std::move(r)));
        res.any_noisy = res.any_noisy || noisy(row.stats, cfg.noise_cv);
        row.ratio = ratios(row.stats);
        if (default_sha1.empty() && b == 1) default_sha1 = first[0].probe_sha;
        row.default_note = default_sha1.empty() || b == 1 ? "-"
                           : first[0].probe_sha == default_sha1 ? "same bits"
                                                                : "differs";
        row.probe_same.assign(n, true);
        row.probe_same[0] = b == 1 || first[0].probe_sha == default_sha1;
        for (size_t m = 1; m < n; ++m) {
          if (valid.sha[m].empty()) {
            ref_tokens[m] = first[m].probe_tokens;
            valid.sha[m] = first[m].probe_sha;
          }
          row.probe_same[m] = first[m].probe_tokens == ref_tokens[m] && first[m].probe_sha == valid.sha[m];
          valid.identical[m] = valid.identical[m] && row.probe_same[m];
        }
        if (mc) {
          std::vector<int> prompt_lengths;
          for (const auto& rq : reqs) prompt_lengths.push_back(static_cast<int>(rq.prompt.size()));
          const StepCost cost = decode_cost(info.costs, prompt_lengths, max_tokens);
          row.ceiling = CellCeiling{cost, ceiling_of(cost, mc->gb_per_s, mc->gflop_per_s)};
        }
        obs.decode_row(row);
        jout["rows"].push_back(decode_json(row, tables, cfg.noise_cv));
      }

      // ---- prefill ----
      if (cfg.prompt_lengths.empty()) continue;
      obs.prefill_start(t, mc);
      for (int len0 : cfg.prompt_lengths) {
        const int len = std::min(len0, c.context_length - 1);
        if (len != len0)
          obs.note("bench: " + name + ": prompt length " + std::to_string(len0) + " lowered to " +
                   std::to_string(len) + " to fit the context length " + std::to_string(c.context_length));
        GenRequest req;
        req.prompt = long_prompt(*model, len);
        req.params.max_tokens = 1;
        req.params.stop_at_eos = false;
        req.params.logprobs = false;
        std::vector<std::vector<double>> runs(n);
        interleaved(n, cfg.warmup, cfg.repeats, cfg.min_time, [&](size_t m, bool counted) {
          const double v = prefill_once(*engines[m], req);
          if (counted) runs[m].push_back(v);
        });
        PrefillRow row;
        row.model = name;
        row.threads = t;
        row.prompt_tokens = len;
        for (auto& r : runs) row.stats.push_back(summarize(std::move(r)));
        res.any_noisy = res.any_noisy || noisy(row.stats, cfg.noise_cv);
        row.ratio = ratios(row.stats);
        if (mc) {
          const StepCost cost = prefill_cost(info.costs, len);
          row.ceiling = CellCeiling{cost, ceiling_of(cost, mc->gb_per_s, mc->gflop_per_s)};
        }
        obs.prefill_row(row);
        jout["prefill_rows"].push_back(prefill_json(row, tables, cfg.noise_cv));
      }
    }
    obs.validation(valid);
    for (size_t m = 0; m < n; ++m) all_ok[m] = all_ok[m] && valid.identical[m];
  }
  res.load_average_end = load_average();
  jout["load_average_end"] = res.load_average_end;
  for (size_t m = 1; m < n; ++m) {
    jout[tables[m].key + "_validated"] = static_cast<bool>(all_ok[m]);
    if (!all_ok[m]) res.not_invariant.push_back(mode_name(tables[m].mode));
  }
  return res;
}

}  // namespace repro::bench
