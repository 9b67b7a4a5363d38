// `repro-audit bench` on the local engine: what each op table (repro/bench/tables.hpp) costs in
// throughput on this machine, with statistics. For each model and thread count it measures decode
// per batch size and prefill per prompt length (repro/bench/loops.hpp), every table side by side:
// each cell is warmed up (`warmup` runs, not counted) and measured `repeats` times, the tables
// interleaved run by run (repro/bench/stats.hpp) so a change of machine load hits all of them. It
// validates as it goes: every table but the default one must give the probe the same bits (tokens
// and logits SHA-256) at every batch size, thread count and run; the default table's divergence
// from batch 1 is reported, not asserted. Before the cells it measures this machine's ceilings at
// each thread count (repro/bench/ceilings.hpp) and gives every cell its share of the lower of its
// two ceilings (repro/bench/perf_model.hpp).
//
// run_local() measures and builds the JSON; what is printed, and when, is the observer's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/bench/ceilings.hpp"
#include "repro/bench/perf_model.hpp"
#include "repro/bench/stats.hpp"
#include "repro/bench/tables.hpp"
#include "repro/model/model.hpp"

namespace repro::bench {

struct LocalConfig : Runs {
  std::vector<std::string> models;  // paths or synth: specs (resolve_model_spec)
  std::string tokenizer;
  std::vector<int> threads = {1};
  Device device = Device::Cpu;
  Precision precision = Precision::F32;
  int tp = 1;                           // simulated tensor-parallel size of every table (EngineOptions::tp)
  AllReduce allreduce = AllReduce::Ring;
  std::vector<Mode> modes;          // bench --modes: the tables beside default (empty: bench_tables' rule)
  std::vector<int> batch_sizes = {1};
  std::vector<int> prompt_lengths;  // empty: decode only
  double min_time = 0;              // > 0: a cell stops after this many seconds once 3 runs are in
  bool ceilings = true;             // measure this machine's ceilings (the CPU's: --device cpu only)
  int triad_mib = 256, sgemm_size = 1024, ceiling_repeats = 5;
};

// What the run starts from, before any table is made.
struct LocalSetup {
  bool avx2_fma = false;
  std::optional<std::string> openblas_coretype;  // the environment variable, when set
  std::string load_average;
};

// A model, as it is loaded.
struct ModelInfo {
  std::string name;  // file name
  ModelConfig config;
  ModelCosts costs;
  size_t last_level_cache_bytes = 0;
};

// The performance model's numbers for one cell and the ceiling they give at its thread count.
struct CellCeiling {
  StepCost cost;
  Ceiling limit;
};

// One decode cell: per table (in bench_tables order) its statistics and its mean over the default
// table's mean (the default table's own entry is 1 when it measured anything).
struct DecodeRow {
  std::string model;
  int threads = 0, batch_size = 0;
  int64_t decode_tokens = 0;
  std::vector<Stats> stats;
  std::vector<double> ratio;
  // Per table: the default table: its probe has the bits it had at batch 1 (true at batch 1 itself);
  // the others: their probe has the bits of the model's first decode cell.
  std::vector<bool> probe_same;
  std::string default_note;  // "-" (batch 1, or no batch-1 cell yet), "same bits" or "differs"
  std::optional<CellCeiling> ceiling;
};

// One prefill cell: one sequence's prompt of prompt_tokens tokens.
struct PrefillRow {
  std::string model;
  int threads = 0, prompt_tokens = 0;
  std::vector<Stats> stats;
  std::vector<double> ratio;
  std::optional<CellCeiling> ceiling;
};

// After a model: per table, whether its probe kept its bits everywhere (the default table: always
// true, not asserted) and the probe's logits SHA-256 at the model's first decode cell.
struct Validation {
  std::string model;
  std::vector<bool> identical;
  std::vector<std::string> sha;
};

// Told of each step of the run as it happens; every method does nothing unless overridden.
class LocalObserver {
 public:
  virtual ~LocalObserver() = default;
  virtual void start(const LocalConfig&, const LocalSetup&) {}
  virtual void tables(const std::vector<BenchTable>&) {}
  // After the ceilings are measured; nullptr when they are not the device's (--device cuda).
  // Not called when LocalConfig::ceilings is false.
  virtual void ceilings(const MachineCeilings*) {}
  virtual void model(const ModelInfo&) {}
  virtual void decode_start(int threads, const MachineCeiling*) {}
  virtual void decode_row(const DecodeRow&) {}
  virtual void prefill_start(int threads, const MachineCeiling*) {}
  virtual void prefill_row(const PrefillRow&) {}
  virtual void validation(const Validation&) {}
  // A change the run made to what it was asked ("--max-tokens lowered to ...").
  virtual void note(const std::string&) {}
};

struct LocalResult {
  nlohmann::json json;                    // what `bench --json` writes
  std::vector<BenchTable> tables;
  std::vector<std::string> not_invariant;  // mode names of the tables whose probe changed bits
  bool any_noisy = false;                  // a cell's coefficient of variation above noise_cv
  std::string load_average_end;
};

// max_tokens is at least 2 (the first token comes from the prefill step). Throws BackendError when
// an engine produces fewer tokens than max_tokens or different bits for the same batch on a rerun.
LocalResult run_local(const LocalConfig& cfg, LocalObserver& observer);

}  // namespace repro::bench
