// `bench --speculative`: decode tokens/s with and without speculative decoding, side by side, on the
// local engine, per mode and batch size. Each cell decodes the same batch (the probe among filler
// prompts, repro/bench/loops.hpp) on two engines of the same mode, one without speculation and one
// with it, interleaved run by run (repro/bench/stats.hpp). It validates as it goes: in every mode
// but default the probe's tokens and final-logits hash with speculation must be the ones without it
// (else BackendError); in default mode whether they are is reported, not asserted.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/bench/stats.hpp"
#include "repro/engine/engine.hpp"

namespace repro::bench {

struct SpecBenchConfig : Runs {
  int threads = 1;
  Device device = Device::Cpu;
  Precision precision = Precision::F32;
  std::vector<Mode> modes;            // default first, then the others
  std::vector<int> batch_sizes = {1};
  std::vector<Speculative> specs;     // each measured against no speculation
};

struct SpecBenchRow {
  std::string mode, speculative;
  int batch_size = 0;
  Stats off, on;        // decode tokens/s (the steps after the prefill step)
  double ratio = 0;     // on.mean / off.mean
  // over every sequence of the first measured run with speculation
  int64_t drafted = 0, accepted = 0, verify_steps = 0;
  bool same_bits = true;  // the probe's tokens and final-logits hash equal the run without speculation
};

// Runs every (mode, spec, batch size) cell of `model`; on_row is told of each row as it is measured.
// Returns the JSON rows. Throws BackendError when a mode other than default changes the probe's bits.
nlohmann::json run_speculative_bench(const Model& model, const SpecBenchConfig& cfg,
                                     const std::function<void(const SpecBenchRow&)>& on_row);

}  // namespace repro::bench
