// The trade-off table: one row per approach to reproducibility (default, batch-invariant,
// deterministic, controlled sampling), each with its throughput relative to default and its
// reproducibility, measured on the same prompts in the same run. What white papers publish as
// estimates ("batch-invariant: ~40% slower, ~95% reproducible"), measured on the user's own stack.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// The approaches, in table order.
const std::vector<std::string>& tradeoff_approaches();

// Fills r.tradeoff from r.completions and r.cases (analyze() calls it after the cases and drift):
// always one row per approach; an approach the run did not include is a row with measured = false
// and a note that says how to include it.
void compute_tradeoff(AuditReport& r);

}  // namespace repro
