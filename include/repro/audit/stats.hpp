// Small statistics for the report: rates with 95% confidence intervals.
#pragma once
#include <string>

#include "repro/audit/result.hpp"

namespace repro {

// k of n with its Wilson score interval at 95% (z = 1.96). n == 0 gives [0, 1].
Rate wilson(int k, int n);

// Plain text of a rate with its interval: "0 of 120 -> below 3.1%", "120 of 120 -> above 96.9%",
// "7 of 30 -> 12% to 41%", "none compared" (one decimal below 10%).
std::string rate_text(const Rate& r);

}  // namespace repro
