// `repro-audit bench --endpoint`: a server under load. For each concurrency level C it runs a closed
// loop on every endpoint (repro/remote/load.hpp): C streams, each sending the same greedy request
// --requests times back to back, so C requests stay in flight. A run's requests/s and completion
// tokens/s are its answered requests and usage-block tokens over its wall time. Every cell is warmed
// up (--warmup runs, not counted) and measured --repeats times, the endpoints interleaved run by run
// (rotating which goes first) so a change of machine load hits all of them; each row prints mean,
// standard deviation and min-max, the latency quantiles over all measured requests, and the ratio
// to the first endpoint. Any failed request is reported and makes the exit status 3.
#include <fmt/core.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/cli/bench.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/remote/load.hpp"
#include "repro/remote/redact.hpp"

namespace repro::cli {

namespace {

// What one endpoint did at one level over its measured runs.
struct Cell {
  std::vector<double> req_s, tok_s;
  std::vector<double> latency, ttft;
  int64_t requests = 0, failed = 0, completion_tokens = 0, prompt_tokens = 0;
  std::map<std::string, int64_t> errors;
  std::string first_error;
};

void add_run(Cell& c, const LoadRun& r) {
  c.req_s.push_back(r.requests_per_s());
  c.tok_s.push_back(r.completion_tokens_per_s());
  c.latency.insert(c.latency.end(), r.latency_s.begin(), r.latency_s.end());
  c.ttft.insert(c.ttft.end(), r.ttft_s.begin(), r.ttft_s.end());
  c.requests += r.requests;
  c.failed += r.failed;
  c.completion_tokens += r.completion_tokens;
  c.prompt_tokens += r.prompt_tokens;
  for (const auto& [k, v] : r.errors) c.errors[k] += v;
  if (c.first_error.empty()) c.first_error = r.first_error;
}

}  // namespace

int run_bench_endpoints(const EndpointBenchOptions& o) {
  const std::vector<int> levels = parse_int_list(o.concurrency, "--concurrency");
  if (o.max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  if (o.requests < 1 || o.requests > 100000)
    throw UsageError("--requests must be in 1..100000 (requests each concurrent stream sends per measured run)");
  o.check();
  const std::vector<EndpointSpec> eps = o.remote.build();

  RequestParams params;
  params.prompt = o.prompt;
  params.decoding = RequestDecoding{"greedy", 0.0, 1.0, 0, o.max_tokens};
  params.seed = 0;

  const std::string load_start = load_average();
  fmt::print("repro-audit bench --endpoint: closed loop, C requests in flight, each of the C streams sends {} "
             "request{} per run; prompt \"{}\", greedy, max-tokens {}, api {}, {}; warm-up {}, {} runs per cell "
             "(endpoints interleaved), load average {}\n",
             o.requests, o.requests == 1 ? "" : "s", o.prompt, o.max_tokens, o.remote.api,
             o.remote.stream ? "streamed" : "not streamed", o.warmup, o.repeats,
             load_start.empty() ? "unknown" : load_start);
  nlohmann::json jeps = nlohmann::json::array();
  for (const auto& e : eps) {
    fmt::print("  {}: {}\n", e.label, redact_url(e.url));
    jeps.push_back({{"label", e.label}, {"url", redact_url(e.url)}, {"api", e.api}, {"stream", e.stream}});
  }
  nlohmann::json jout = {{"mode", "endpoint"},
                         {"endpoints", jeps},
                         {"prompt", o.prompt},
                         {"max_tokens", o.max_tokens},
                         {"requests_per_stream", o.requests},
                         {"warmup", o.warmup},
                         {"repeats", o.repeats},
                         {"noise_cv", o.noise_cv},
                         {"load_average_start", load_start},
                         {"rows", nlohmann::json::array()}};
  int64_t failed_total = 0;
  std::string first_error;
  bool any_noisy = false;
  for (int c : levels) {
    std::vector<Cell> cells(eps.size());
    for (int w = 0; w < o.warmup; ++w)
      for (const auto& e : eps) run_load(e, params, c, o.requests);
    for (int rep = 0; rep < o.repeats; ++rep)
      for (size_t k = 0; k < eps.size(); ++k) {
        const size_t i = (k + static_cast<size_t>(rep)) % eps.size();
        add_run(cells[i], run_load(eps[i], params, c, o.requests));
      }
    fmt::print("\nconcurrency {}: per run mean ±stddev [min-max]; latency over all measured requests\n", c);
    fmt::print("{:>16} {:>30} {:>32} {:>10} {:>9} {:>17} {:>8}\n", "endpoint", "requests/s", "completion tokens/s",
               "tok/req", "x first", "latency p50/p95 s", "failed");
    const double first_mean = summarize(cells[0].tok_s).mean;
    for (size_t i = 0; i < eps.size(); ++i) {
      const Cell& cell = cells[i];
      const Stats rq = summarize(cell.req_s), tk = summarize(cell.tok_s);
      any_noisy = any_noisy || rq.cv > o.noise_cv || tk.cv > o.noise_cv;
      const double ok = static_cast<double>(cell.requests - cell.failed);
      const double per_req = ok > 0 ? static_cast<double>(cell.completion_tokens) / ok : 0.0;
      const double ratio = first_mean > 0 ? tk.mean / first_mean : 0.0;
      const double p50 = quantile(cell.latency, 0.5), p95 = quantile(cell.latency, 0.95);
      fmt::print("{:>16} {:>30} {:>32} {:>10.1f} {:>9.2f} {:>17} {:>8}\n", eps[i].label, stats_cell(rq, o.noise_cv),
                 stats_cell(tk, o.noise_cv), per_req, ratio, fmt::format("{:.3f}/{:.3f}", p50, p95), cell.failed);
      nlohmann::json row = {{"endpoint", eps[i].label},
                            {"concurrency", c},
                            {"requests", cell.requests},
                            {"failed", cell.failed},
                            {"errors", cell.errors},
                            {"completion_tokens", cell.completion_tokens},
                            {"prompt_tokens", cell.prompt_tokens},
                            {"completion_tokens_per_request", per_req},
                            {"requests_per_s", stats_json(rq, o.noise_cv)},
                            {"completion_tokens_per_s", stats_json(tk, o.noise_cv)},
                            {"tokens_per_s_vs_first", ratio},
                            {"latency_s", {{"p50", p50}, {"p95", p95}, {"max", quantile(cell.latency, 1.0)}}}};
      if (!cell.ttft.empty())
        row["ttft_s"] = {{"p50", quantile(cell.ttft, 0.5)}, {"p95", quantile(cell.ttft, 0.95)}};
      jout["rows"].push_back(std::move(row));
      failed_total += cell.failed;
      if (first_error.empty() && !cell.first_error.empty()) first_error = eps[i].label + ": " + cell.first_error;
    }
    std::fflush(stdout);
  }
  const std::string load_end = load_average();
  if (any_noisy)
    fmt::print("* noisy: coefficient of variation above {:.0f}% (load average now {}); rerun or raise --repeats\n",
               o.noise_cv * 100, load_end.empty() ? "unknown" : load_end);
  jout["load_average_end"] = load_end;
  jout["failed"] = failed_total;
  if (!o.json.empty()) write_file_atomic(o.json, jout.dump(2) + "\n");
  if (failed_total > 0) {
    fmt::print(stderr, "error: {} request{} failed (first: {}); check the endpoint, --api-model and --timeout\n",
               failed_total, failed_total == 1 ? "" : "s", first_error);
    return kExitBackend;
  }
  return kExitOk;
}

}  // namespace repro::cli
