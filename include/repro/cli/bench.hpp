// The flags `bench` shares between its local-engine cells (src/cli/cmd_bench.cpp) and its endpoint
// load cells (src/cli/bench_endpoint.cpp). What they measure is the bench layer's (repro/bench/).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/bench/stats.hpp"
#include "repro/cli/flags.hpp"

namespace repro::cli {

// "1,8,32": integers in 1..4096; UsageError naming `flag` otherwise (--batch-sizes, --concurrency, ...).
std::vector<int> parse_int_list(const std::string& s, const char* flag);

// What every bench cell has, local or endpoint: the probe and how often it is measured.
struct BenchRuns : bench::Runs {
  std::string json;  // optional JSON output file ('-' = stdout)
  // UsageError naming --repeats (at least 2), --warmup (0 or more) or --noise-cv (above 0).
  void check() const;
  // After the cells: the noisy cells explained (with the load average at the end), the JSON written.
  void finish(bool any_noisy, const std::string& load_average_end, const nlohmann::json& result) const;
};

// `bench --endpoint`: closed-loop load at each concurrency level on each endpoint, side by side.
// (The local bench's options extend these: one set of flags, the endpoint ones refused without
// --endpoint.)
struct EndpointBenchOptions : BenchRuns {
  EndpointFlags remote;
  std::string concurrency = "1,8,32,64";
  int requests = 4;  // per stream and run
};

int run_bench_endpoints(const EndpointBenchOptions& o);

}  // namespace repro::cli
