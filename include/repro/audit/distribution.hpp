// Sampled outputs compared as distributions. At T > 0 without a seed that controls them, outputs
// never hash-equal, so clusters say nothing; a two-sample test asks whether two sets of completions
// (two contexts of one case, or a case and its baseline) come from one output distribution.
//
// The statistic is the maximum mean discrepancy (MMD) with a prefix kernel over token sequences:
// k(x, y) = (1/L) * sum over i = 1..L of [x and y agree on their first i tokens], where a sequence
// that ended reads as an end symbol from there on and L is kPrefixLength. It is a sum of indicator
// kernels on prefixes, so it is positive definite: the MMD is zero only when the distributions of
// every prefix up to L agree. The p-value comes from a permutation test (kPermutations relabelings
// of the pooled samples, drawn from a fixed seed, so one report always gives one p-value).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

inline constexpr int kPrefixLength = 32;
inline constexpr int kPermutations = 999;
inline constexpr double kDistributionAlpha = 0.05;   // "differs" below this p-value
inline constexpr double kDistributionRed = 0.001;    // canary: RED below this p-value, YELLOW below alpha
inline constexpr int kDistributionMinSamples = 5;    // per side; fewer: no test (10 recommended)

// The test of samples `a` (reference) against `b`; fills statistic, p_value, effect, differs, the
// sample sizes, or `note` when a side has fewer than kDistributionMinSamples.
DistributionTest two_sample_test(const std::vector<std::vector<int>>& a, const std::vector<std::vector<int>>& b,
                                 uint64_t seed = 1, double alpha = kDistributionAlpha);

// A completion as a sequence for the test: its token ids, or its text's bytes when ids are unknown.
std::vector<int> sample_of(const Completion& c);

// Whether a decoding id samples (T > 0): every id but "greedy" and "t0-...".
bool sampled_decoding(const std::string& decoding_id);

// For a sampled case whose outputs vary inside its reference context (the seed does not control
// them): the test of every other context (batch size / concurrency) against the reference context.
void analyze_distribution(CaseResult& c, const std::vector<Completion>& all, const std::vector<int>& members);

}  // namespace repro
