// The op tables the local bench measures side by side, and the names their cells carry.
//
// Every table the registry (kernels::available_op_tables(), kernels/ops.cpp) has for the device is
// measured, the default table first: it is the fair production baseline every other table's ratio
// divides by, and the one table whose probe may follow the batch (its divergence from batch 1 is
// reported, not asserted). Every other table is validated: its probe must keep the same bits at every
// batch size, thread count and run. A table that decodes requests alone (OpsInfo::requests_alone:
// the deterministic tables) is left out: it never forms the batch a decode cell times, and its
// reference loops would take hours on the default models; `bench --modes deterministic` (on a small
// model) or `run --modes deterministic` prices it.
// A newly registered table of the device is measured without a change here.
#pragma once
#include <string>
#include <vector>

#include "repro/kernels/ops.hpp"

namespace repro::bench {

struct BenchTable {
  Mode mode = Mode::Default;
  kernels::OpsInfo info;   // the table's describe()
  // The names of its cells: `key` prefixes its JSON fields ("default", "invariant": "invariant",
  // "invariant_tokens_per_s", "invariant_share_of_ceiling", ...), `short_name` heads its ratio column
  // ("inv/default") and its share of the ceiling ("share d/inv"), `ratio_key` is the JSON field of its
  // ratio to the default table (empty for the default table itself).
  std::string key, short_name, ratio_key;
  bool baseline() const { return mode == Mode::Default; }
};

// Default first, then the device's other registered tables in registry order. Throws what
// kernels::make_ops throws when the device has no default table (a build without CUDA, no GPU).
// `modes` (bench --modes) names the tables to measure beside the default one, in that order, the
// deterministic ones included; empty: every registered table of the device that batches. A mode
// the device has no table for is a UsageError naming --modes and the device's tables.
std::vector<BenchTable> bench_tables(Device device, int threads, const std::vector<Mode>& modes = {});

}  // namespace repro::bench
