// Pieces `bench` shares between its local-engine cells (src/cli/cmd_bench.cpp) and its endpoint
// load cells (src/cli/bench_endpoint.cpp): the spread of a cell's runs and how it is printed.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/cli/flags.hpp"

namespace repro::cli {

// Mean, sample standard deviation and range of one cell's measurements.
struct Stats {
  std::vector<double> runs;
  double mean = 0, stddev = 0, min = 0, max = 0, cv = 0;
};

Stats summarize(std::vector<double> runs);
nlohmann::json stats_json(const Stats& st, double noise_cv);
// "105.2 ±2.1 [102.0-108.3]" with a trailing '*' when the cell is noisy.
std::string stats_cell(const Stats& st, double noise_cv);
// /proc/loadavg's first line, trimmed (empty when unreadable).
std::string load_average();

// "1,8,32": integers in 1..4096; UsageError naming `flag` otherwise (--batch-sizes, --concurrency, ...).
std::vector<int> parse_int_list(const std::string& s, const char* flag);

// What every bench cell has, local or endpoint: the probe and how often it is measured.
struct BenchRuns {
  int max_tokens = 32;
  int repeats = 5;
  int warmup = 1;
  double noise_cv = 0.10;
  std::string prompt = "Once upon a time";
  std::string json;  // optional JSON output file ('-' = stdout)
  // UsageError naming --repeats (at least 2), --warmup (0 or more) or --noise-cv (above 0).
  void check() const;
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
