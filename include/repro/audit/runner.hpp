// The audit runner: executes a plan's cells on the local engine (or remote endpoints) and fills
// AuditReport::completions and throughput rows. Analysis and writing happen afterwards.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/kernels/ops.hpp"
#include "repro/model/model.hpp"
#include "repro/audit/plan.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/audit/result.hpp"

namespace repro {

struct RunControl {
  Device device = Device::Cpu;                    // the local engine's device (modes, precisions and
                                                  // threads come from the plan)
  const std::atomic<bool>* stop = nullptr;       // Ctrl-C: finish the current cell, then return
  bool progress = false;                          // progress bar with ETA on stderr
  std::function<void(const AuditReport&)> checkpoint;  // called every few seconds with the partial report
};

// Runs every local cell not already in report.completions (so a resumed report continues).
// Cells run with the modes interleaved, so throughput is measured side by side.
void run_local(const PlanOptions& plan, const Model& model, AuditReport& report, RunControl& ctl);

// Runs every remote cell (probe x decoding x endpoint x concurrency, `repeats` probes each, plus the
// cold/warm cache probe) not already in report.completions.
void run_remote(const PlanOptions& plan, const std::vector<EndpointSpec>& endpoints, AuditReport& report,
                RunControl& ctl);

// Tool version and commit, OS, CPU and its SIMD features, threads, BLAS, relevant environment
// variables (never secrets), GPU (none without CUDA).
nlohmann::json environment_record(int threads);

// Copies the engine's per-step records (top-2 margins, top-k tokens and logprobs; a mixture of
// experts' routing trace) into a completion.
void record_steps(const GenResult& g, Completion& c);

// A key naming a completion's cell, for resume:
// prompt|decoding|mode|precision|batch|position|fillers|cache|repeat.
std::string cell_key(const Completion& c);
// The cell keys of a local plan in the order run_local runs them (every case, whatever the shard).
std::vector<std::string> local_cell_order(const PlanOptions& plan);

// What the progress bar shows: cells done, the share of the tokens to generate done (the ETA comes
// from tokens generated per second so far, cells resumed from a report excluded), the cell running
// now ("default bf16 batch 8") and the cases that diverged so far.
struct ProgressState {
  int done_cells = 0, total_cells = 0;
  int64_t done_work = 0, total_work = 0;   // tokens: batch size x max tokens per cell
  int64_t measured_work = 0;               // tokens of the cells run now (not resumed)
  double measured_seconds = 0;             // their wall time
  double elapsed_s = 0;
  std::string current;
  int divergent_cases = 0;
};
// `width`: the terminal's columns (0 = no limit); the line then takes at most width - 1 of them.
std::string progress_line(const ProgressState& p, int width = 0);

}  // namespace repro
