// Wilson score interval (Wilson 1927): for k successes in n trials at z = 1.96,
//   center = (p + z^2 / 2n) / (1 + z^2 / n),  half = z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n).
// Unlike the normal approximation it stays inside [0, 1] and is informative at k = 0 and k = n:
// 0 of 120 gives [0, 3.1%] (the "rule of three" would say 2.5%).
#include "repro/audit/stats.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace repro {

Rate wilson(int k, int n) {
  Rate r;
  r.k = k;
  r.n = n;
  if (n <= 0) {
    r.lo = 0;
    r.hi = 1;
    return r;
  }
  const double z = 1.96, z2 = z * z, nn = n, p = static_cast<double>(k) / nn;
  const double denom = 1 + z2 / nn;
  const double center = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  r.lo = k == 0 ? 0.0 : std::max(0.0, center - half);
  r.hi = k == n ? 1.0 : std::min(1.0, center + half);
  return r;
}

namespace {
std::string pct(double share) {
  double v = share * 100;
  return v < 10 ? fmt::format("{:.1f}%", v) : fmt::format("{:.0f}%", v);
}
}  // namespace

std::string rate_text(const Rate& r) {
  if (r.n <= 0) return "none compared";
  if (r.k == 0) return fmt::format("0 of {} -> below {}", r.n, pct(r.hi));
  if (r.k == r.n) return fmt::format("{} of {} -> above {}", r.k, r.n, pct(r.lo));
  return fmt::format("{} of {} -> {} to {}", r.k, r.n, pct(r.lo), pct(r.hi));
}

}  // namespace repro
