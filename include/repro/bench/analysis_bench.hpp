// How fast the analysis of a run is: a synthetic run, timed through analyze() (repro/audit/analysis.hpp).
#pragma once
#include <cstdint>

namespace repro::bench {

// Synthetic benchmark: `completions` completions of `tokens` tokens (100 completions per case, two
// modes, the "default" mode with a few divergent clusters), then times analyze(). Returns seconds.
double bench_analysis(int completions, int tokens, uint64_t seed);

}  // namespace repro::bench
