// The endpoint load bench (repro/bench/endpoint.hpp).
#include "repro/bench/endpoint.hpp"

#include <utility>

#include "repro/remote/load.hpp"
#include "repro/remote/redact.hpp"

namespace repro::bench {
namespace {

// The measured runs of one endpoint at one level: the row's counts, summed as the runs come in.
struct Cell {
  EndpointRow row;
  std::vector<double> req_s, tok_s;
  std::vector<double> latency, ttft;
};

void add_run(Cell& c, const LoadRun& r) {
  c.req_s.push_back(r.requests_per_s());
  c.tok_s.push_back(r.completion_tokens_per_s());
  c.latency.insert(c.latency.end(), r.latency_s.begin(), r.latency_s.end());
  c.ttft.insert(c.ttft.end(), r.ttft_s.begin(), r.ttft_s.end());
  c.row.requests += r.requests;
  c.row.failed += r.failed;
  c.row.completion_tokens += r.completion_tokens;
  c.row.prompt_tokens += r.prompt_tokens;
  for (const auto& [k, v] : r.errors) c.row.errors[k] += v;
  if (c.row.first_error.empty()) c.row.first_error = r.first_error;
}

nlohmann::json row_json(const EndpointRow& r, double noise_cv) {
  nlohmann::json row = {{"endpoint", r.endpoint},
                        {"concurrency", r.concurrency},
                        {"requests", r.requests},
                        {"failed", r.failed},
                        {"errors", r.errors},
                        {"completion_tokens", r.completion_tokens},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens_per_request", r.tokens_per_request},
                        {"requests_per_s", stats_json(r.requests_per_s, noise_cv)},
                        {"completion_tokens_per_s", stats_json(r.tokens_per_s, noise_cv)},
                        {"tokens_per_s_vs_first", r.tokens_per_s_vs_first},
                        {"latency_s", {{"p50", r.latency_p50}, {"p95", r.latency_p95}, {"max", r.latency_max}}}};
  if (r.ttft_p50) row["ttft_s"] = {{"p50", *r.ttft_p50}, {"p95", *r.ttft_p95}};
  return row;
}

}  // namespace

EndpointResult run_endpoints(const EndpointConfig& cfg, EndpointObserver& obs) {
  const std::vector<EndpointSpec>& eps = cfg.endpoints;
  RequestParams params;
  params.prompt = cfg.prompt;
  params.decoding = RequestDecoding{"greedy", 0.0, 1.0, 0, cfg.max_tokens};
  params.seed = 0;

  const std::string load_start = load_average();
  obs.start(cfg, load_start);
  nlohmann::json jeps = nlohmann::json::array();
  for (const auto& e : eps)
    jeps.push_back({{"label", e.label}, {"url", redact_url(e.url)}, {"api", e.api}, {"stream", e.stream}});
  EndpointResult res;
  res.json = {{"mode", "endpoint"},
              {"endpoints", jeps},
              {"prompt", cfg.prompt},
              {"max_tokens", cfg.max_tokens},
              {"requests_per_stream", cfg.requests},
              {"warmup", cfg.warmup},
              {"repeats", cfg.repeats},
              {"noise_cv", cfg.noise_cv},
              {"load_average_start", load_start},
              {"rows", nlohmann::json::array()}};
  for (int c : cfg.concurrency) {
    std::vector<Cell> cells(eps.size());
    interleaved(eps.size(), cfg.warmup, cfg.repeats, 0.0, [&](size_t i, bool counted) {
      const LoadRun run = run_load(eps[i], params, c, cfg.requests);
      if (counted) add_run(cells[i], run);
    });
    const double first_mean = summarize(cells[0].tok_s).mean;
    std::vector<EndpointRow> rows;
    for (size_t i = 0; i < eps.size(); ++i) {
      Cell& cell = cells[i];
      EndpointRow& r = cell.row;
      r.endpoint = eps[i].label;
      r.concurrency = c;
      r.requests_per_s = summarize(cell.req_s);
      r.tokens_per_s = summarize(cell.tok_s);
      res.any_noisy = res.any_noisy || r.requests_per_s.cv > cfg.noise_cv || r.tokens_per_s.cv > cfg.noise_cv;
      const double ok = static_cast<double>(r.requests - r.failed);
      r.tokens_per_request = ok > 0 ? static_cast<double>(r.completion_tokens) / ok : 0.0;
      r.tokens_per_s_vs_first = first_mean > 0 ? r.tokens_per_s.mean / first_mean : 0.0;
      r.latency_p50 = quantile(cell.latency, 0.5);
      r.latency_p95 = quantile(cell.latency, 0.95);
      r.latency_max = quantile(cell.latency, 1.0);
      if (!cell.ttft.empty()) {
        r.ttft_p50 = quantile(cell.ttft, 0.5);
        r.ttft_p95 = quantile(cell.ttft, 0.95);
      }
      res.json["rows"].push_back(row_json(r, cfg.noise_cv));
      res.failed += r.failed;
      if (res.first_error.empty() && !r.first_error.empty()) res.first_error = eps[i].label + ": " + r.first_error;
      rows.push_back(r);
    }
    obs.level(c, rows);
  }
  res.load_average_end = load_average();
  res.json["load_average_end"] = res.load_average_end;
  res.json["failed"] = res.failed;
  return res;
}

}  // namespace repro::bench
