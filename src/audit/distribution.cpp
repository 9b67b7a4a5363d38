// Two-sample tests of sampled outputs: see include/repro/audit/distribution.hpp.
#include "repro/audit/distribution.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "repro/audit/cases.hpp"
#include "repro/common/rng.hpp"

namespace repro {

namespace {

// Agreeing prefix length, capped at L, with an end symbol after each sequence.
int shared_prefix(const std::vector<int>& x, const std::vector<int>& y) {
  const size_t L = kPrefixLength;
  size_t i = 0;
  for (; i < L; ++i) {
    const bool xe = i >= x.size(), ye = i >= y.size();
    if (xe || ye) return xe && ye ? static_cast<int>(L) : static_cast<int>(i);  // both ended: equal from here
    if (x[i] != y[i]) return static_cast<int>(i);
  }
  return static_cast<int>(L);
}

// Unbiased MMD^2 of the split `first` (size n) / rest over the pooled kernel matrix K.
double mmd2(const std::vector<double>& K, size_t N, const std::vector<size_t>& order, size_t n) {
  double xx = 0, yy = 0, xy = 0;
  const size_t m = N - n;
  for (size_t i = 0; i < N; ++i)
    for (size_t j = i + 1; j < N; ++j) {
      const double k = K[order[i] * N + order[j]];
      const bool ia = i < n, ja = j < n;
      if (ia && ja) xx += k;
      else if (!ia && !ja) yy += k;
      else xy += k;
    }
  return 2 * xx / (static_cast<double>(n) * (n - 1)) + 2 * yy / (static_cast<double>(m) * (m - 1)) -
         2 * xy / (static_cast<double>(n) * m);
}

}  // namespace

DistributionTest two_sample_test(const std::vector<std::vector<int>>& a, const std::vector<std::vector<int>>& b,
                                 uint64_t seed, double alpha) {
  DistributionTest t;
  t.n_reference = static_cast<int>(a.size());
  t.n_other = static_cast<int>(b.size());
  if (a.size() < static_cast<size_t>(kDistributionMinSamples) || b.size() < static_cast<size_t>(kDistributionMinSamples)) {
    t.note = "too few samples (" + std::to_string(std::min(a.size(), b.size())) + "; the test needs " +
             std::to_string(kDistributionMinSamples) + " per side, 10 or more for useful power)";
    return t;
  }
  const size_t n = a.size(), N = a.size() + b.size();
  std::vector<const std::vector<int>*> pool;
  for (const auto& x : a) pool.push_back(&x);
  for (const auto& x : b) pool.push_back(&x);
  std::vector<double> K(N * N);
  for (size_t i = 0; i < N; ++i)
    for (size_t j = i; j < N; ++j)
      K[i * N + j] = K[j * N + i] = static_cast<double>(shared_prefix(*pool[i], *pool[j])) / kPrefixLength;
  std::vector<size_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  t.statistic = mmd2(K, N, order, n);
  // The biased estimate (diagonal included) is a squared distance >= 0: its root is the effect size.
  double xx = 0, yy = 0, xy = 0;
  for (size_t i = 0; i < N; ++i)
    for (size_t j = 0; j < N; ++j) {
      const double k = K[i * N + j];
      if (i < n && j < n) xx += k;
      else if (i >= n && j >= n) yy += k;
      else if (i < n) xy += k;
    }
  const double m = static_cast<double>(N - n);
  t.effect = std::sqrt(std::max(0.0, xx / (double(n) * n) + yy / (m * m) - 2 * xy / (double(n) * m)));
  uint64_t s = rng::splitmix64(seed ^ 0x6d6d6431ull);  // "mmd1"
  int at_least = 0;
  for (int p = 0; p < kPermutations; ++p) {
    for (size_t i = N - 1; i > 0; --i) std::swap(order[i], order[rng::splitmix64_next(s) % (i + 1)]);
    if (mmd2(K, N, order, n) >= t.statistic - 1e-12) ++at_least;
  }
  t.p_value = (1.0 + at_least) / (1.0 + kPermutations);
  t.differs = t.p_value < alpha;
  return t;
}

std::vector<int> sample_of(const Completion& c) {
  if (c.tokens_known && !c.tokens.empty()) return c.tokens;
  std::vector<int> out;
  for (unsigned char ch : c.text) out.push_back(ch);
  return out;
}

bool sampled_decoding(const std::string& id) { return id != "greedy" && id.rfind("t0-", 0) != 0 && id != "t0"; }

void analyze_distribution(CaseResult& c, const std::vector<Completion>& all, const std::vector<int>& members) {
  c.distribution.clear();
  if (!sampled_decoding(c.decoding_id) || c.unique <= 1 || members.empty()) return;
  std::map<int, std::vector<std::vector<int>>> by_context;  // batch size / concurrency -> samples
  for (int i : members) by_context[all[i].batch_size].push_back(sample_of(all[i]));
  const auto& [ref_ctx, ref] = *by_context.begin();
  // Only where the reference context itself varies: the seed does not control the outputs.
  bool varies = false;
  for (const auto& x : ref) varies = varies || x != ref.front();
  if (!varies) return;
  const bool remote = is_remote_completion(all[members.front()]);
  for (const auto& [ctx, samples] : by_context) {
    if (ctx == ref_ctx) continue;
    DistributionTest t = two_sample_test(ref, samples, static_cast<uint64_t>(ctx));
    t.factor = remote ? "concurrency" : "batch_size";
    t.value = std::to_string(ctx);
    t.reference = std::to_string(ref_ctx);
    c.distribution.push_back(std::move(t));
  }
}

}  // namespace repro
