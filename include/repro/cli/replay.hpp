// The second half of `run` and of `canary`: replay a plan on the local engine or on endpoints,
// analyse, compare with a baseline, write the reports, sign, print, and pick the exit code.
// SIGINT / SIGTERM stop after what is in flight; finished work is kept (checkpoint) and written.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/result.hpp"
#include "repro/audit/shards.hpp"
#include "repro/model/model.hpp"
#include "repro/remote/endpoint.hpp"

namespace repro::cli {

struct ReplayJob {
  AuditReport* report = nullptr;            // empty, or the resumed run's completions
  const PlanOptions* plan = nullptr;
  const Model* model = nullptr;             // local runs; null for endpoints
  std::string model_path;
  nlohmann::json model_switch;              // model_switch_record() when the run switched models, else null
  EngineSetup engine;
  const std::vector<EndpointSpec>* endpoints = nullptr;  // remote runs
  ShardSpec shard;                          // run --shard: K/N and where it came from (count 0: none)
  std::string out_dir;                      // "-" = stdout
  std::string baseline;                     // golden report.json ("" = none); read before the replay
  std::string sign_key;                     // private key ("" = unsigned)
  bool quiet = false;
  // Called after the analysis, before anything is written (canary adds its classification); may
  // print, and returns the exit code to use instead of the verdict's (or -1 to keep it).
  std::function<int(AuditReport&)> after_analysis;
};

// Runs the job; returns the exit code (verdict, 130/143 when interrupted).
int replay_and_report(ReplayJob& job);

}  // namespace repro::cli
