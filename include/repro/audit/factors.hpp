// The factors a completion's context varies along, defined once: the name the reports use, the value a
// completion has, how values sort and the words a finding uses for it. Two analyses tabulate them:
//   - the cluster tables of a case (CaseResult::factors, src/audit/cases.cpp): how many members of
//     each cluster fall on each value, for the factors that vary in the case;
//   - the drift-size tables (DriftSize::factors, src/audit/drift_size.cpp): per value, how many
//     completions differ from the reference context.
// Each analysis lists the factors it tabulates, in report order, below. A new factor is one row in
// kFactors (src/audit/factors.cpp), one FactorId, and its id in the lists that should show it.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

enum class FactorId {
  BatchSize,          // "batch_size"
  Concurrency,        // "concurrency": an endpoint's batch_size
  Position,           // "position"
  FillerSet,          // "filler_set": "" (no batch mates), "f0", "f1", ...
  MateJoinStep,       // "mate_join_step"
  MatePromptDelta,    // "mate_prompt_delta"
  MateContents,       // "mate_contents": "" (the drawn batch mates), "other" (same shapes, other contents)
  Seed,               // "seed"
  CacheState,         // "cache_state": "cold" / "warm" (endpoints)
  SystemFingerprint,  // "system_fingerprint" (endpoints)
  Repeat,             // "repeat"
  Host,               // "host": the machine of a replicated shard (report merge of --replicate-shards)
  Tp,                 // "tp": simulated tensor-parallel size (local)
  AllReduce,          // "allreduce": its all-reduce order ("" at TP 1 and 2)
  Device,             // "device": the device of run --devices ("" without the axis)
  Speculative,        // "speculative": the setting of run --speculative ("" without the axis)
  // "routing": "same" / "flipped" against the case's reference completion ("" without routing
  // traces). Not a context the plan sets but an intermediate outcome of one (analyze() derives it
  // before the tables are built, Completion::routing_vs_reference): beside the contexts it shows
  // whether the clusters and the drift follow the router's flips or happen without them.
  Routing,
};

struct Factor {
  FactorId id;
  const char* name;                         // the factor's key in the reports
  std::string (*value)(const Completion&);  // the completion's value, as the tables show it
  bool numeric;                             // values sort as numbers
  const char* phrase;                       // in a finding: "logits change with <phrase>"
};

const Factor& factor(FactorId id);
// The row named `name`, or nullptr.
const Factor* find_factor(const std::string& name);

// The cluster tables of a case: local runs, and endpoints.
inline constexpr FactorId kCaseFactorsLocal[] = {FactorId::BatchSize,    FactorId::Position,
                                                 FactorId::FillerSet,    FactorId::MateJoinStep,
                                                 FactorId::MatePromptDelta, FactorId::MateContents,
                                                 FactorId::Seed,
                                                 FactorId::Tp,           FactorId::AllReduce,
                                                 FactorId::Device,       FactorId::Speculative,
                                                 FactorId::Routing,
                                                 FactorId::Host};
inline constexpr FactorId kCaseFactorsRemote[] = {FactorId::Concurrency, FactorId::CacheState, FactorId::Seed,
                                                  FactorId::SystemFingerprint, FactorId::Host};
// The drift-size tables, for both (an endpoint's concurrency is its batch_size there).
inline constexpr FactorId kDriftSizeFactors[] = {FactorId::BatchSize,       FactorId::Position,  FactorId::FillerSet,
                                                 FactorId::MateJoinStep,    FactorId::MatePromptDelta,
                                                 FactorId::MateContents,
                                                 FactorId::Seed,            FactorId::CacheState, FactorId::Repeat,
                                                 FactorId::Tp,              FactorId::AllReduce,
                                                 FactorId::Device,          FactorId::Speculative,
                                                 FactorId::Routing,
                                                 FactorId::Host};

// Which table a sort is for: the two order filler draws differently (see sort_factor_values).
enum class FactorUse { Clusters, DriftSize };

// Sorts the values of factor `name` for a table: a numeric factor's by number (decimal text: the
// shorter first, then as text), others as text. Filler draws: the drift-size tables by draw index
// ("", f0, f1, ..., f2 before f10: filler_draw_index), the cluster tables as text (f10 before f2).
void sort_factor_values(const std::string& name, std::vector<std::string>& values, FactorUse use);

// The draw index of a filler_set value: -1 for "" (no batch mates), N for "fN", 2^30 for anything else.
int filler_draw_index(const std::string& filler_set);

}  // namespace repro
