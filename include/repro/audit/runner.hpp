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
#include "repro/openai/protocol.hpp"
#include "repro/audit/result.hpp"

namespace repro {

struct RunControl {
  Device device = Device::Cpu;                    // the local engine's device and activation precision
  Precision precision = Precision::F32;           // (modes and threads come from the plan)
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

// Copies the engine's per-step records (top-2 margins, top-k tokens and logprobs) into a completion.
void record_steps(const GenResult& g, Completion& c);

// A key naming a completion's cell, for resume: prompt|decoding|mode|batch|position|fillers|cache|repeat.
std::string cell_key(const Completion& c);

}  // namespace repro
