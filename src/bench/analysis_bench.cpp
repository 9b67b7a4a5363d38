// The analysis benchmark (repro/bench/analysis_bench.hpp).
#include "repro/bench/analysis_bench.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "repro/audit/analysis.hpp"

namespace repro::bench {

double bench_analysis(int completions, int tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AuditReport r;
  const int per_case = 100;
  const int batch_sizes[] = {1, 4, 16, 64};
  r.completions.reserve(completions);
  std::vector<int> base(tokens);
  for (int i = 0; i < completions; ++i) {
    int case_id = i / per_case;
    int rep = i % per_case;
    bool def = case_id % 2 == 0;
    if (rep == 0) {
      std::mt19937_64 cr(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(case_id / 2 + 1)));
      for (auto& t : base) t = static_cast<int>(cr() % 32000);
    }
    Completion c;
    c.prompt_id = "p" + std::to_string(case_id / 2);
    c.decoding_id = "greedy";
    c.mode = def ? "default" : "batch-invariant";
    c.batch_size = batch_sizes[rep % 4];
    c.position = rep % 3;
    c.filler_set = "f" + std::to_string(rep % 5);
    c.repeat = rep;
    c.tokens = base;
    if (def && c.batch_size >= 16) {
      // divergence: from a batch-size-dependent point on, a different continuation
      int at = tokens / 2 + (c.batch_size == 16 ? 0 : 7) + static_cast<int>(rng() % 2);
      for (int t = std::min(at, tokens); t < tokens; ++t) c.tokens[t] = static_cast<int>((c.tokens[t] * 31 + at) % 32000);
    }
    c.logprobs.assign(tokens, -0.5f);
    c.logits_sha256 = def ? std::to_string(c.batch_size) : "x";
    c.text.reserve(tokens * 4);
    for (int t : c.tokens) c.text += std::to_string(t % 1000) + " ";
    c.completion_tokens = tokens;
    c.latency_s = 0.001 * tokens * (def ? 1.0 : 1.4);
    r.completions.push_back(std::move(c));
  }
  auto t0 = std::chrono::steady_clock::now();
  analyze(r);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace repro::bench
