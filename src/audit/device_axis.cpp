// The cross-device tier against the first device: see include/repro/audit/device_axis.hpp.
#include "repro/audit/device_axis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "repro/audit/cases.hpp"
#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Everything of a completion's context but its device.
using Twin = std::tuple<std::string, std::string, std::string, std::string, int, int, std::string, int, int,
                        std::string, int, std::string, uint64_t, int, std::string>;
Twin twin_key(const Completion& c) {
  return {c.prompt_id, c.decoding_id, c.mode, c.precision, c.batch_size, c.position, c.filler_set,
          c.mate_join_step, c.mate_prompt_delta, c.mate_contents, c.tp, c.allreduce, c.seed, c.repeat, c.speculative};
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The first step whose token or logprob bits differ; -1 when every step agrees (then only the final
// logits hash can differ).
int first_step_differing(const Completion& a, const Completion& b) {
  const size_t n = std::max(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < n; ++i) {
    if (i >= a.tokens.size() || i >= b.tokens.size() || a.tokens[i] != b.tokens[i]) return static_cast<int>(i);
    const bool lp_a = i < a.logprobs.size(), lp_b = i < b.logprobs.size();
    if (lp_a != lp_b || (lp_a && !same_float(a.logprobs[i], b.logprobs[i]))) return static_cast<int>(i);
  }
  return -1;
}

struct Acc {
  int n = 0, bit = 0, tok = 0;
  std::string first_diff;
  std::optional<double> max_dlp;
};

std::string where(const Completion& c, int step) {
  std::string s = fmt::format("prompt {}, {}, batch {}", c.prompt_id, c.decoding_id, c.batch_size);
  if (c.batch_size > 1) s += fmt::format(" at position {}", c.position);
  if (c.tp != 1) s += fmt::format(", TP {}", c.tp);
  return s + (step >= 0 ? fmt::format(": step {}", step) : std::string(": the final logits only"));
}

}  // namespace

void analyze_devices(AuditReport& r) {
  const std::vector<std::string> devices = plan_strings(r, "devices");
  if (devices.size() < 2) return;
  if (const auto* s = r.plan.contains("devices_skipped") ? &r.plan["devices_skipped"] : nullptr; s && s->is_object())
    for (const auto& [dev, why] : s->items())
      r.summary.device_findings.push_back(fmt::format(
          "cross-device: {} not checked: {}; the completions of {} are not verified on {}", dev,
          why.is_string() ? why.get<std::string>() : std::string("not present"), dev, devices[0]));
  const std::string& first = devices[0];
  std::map<Twin, const Completion*> base;
  for (const auto& c : r.completions)
    if (c.error.empty() && !is_remote_completion(c) && c.device == first) base[twin_key(c)] = &c;
  // (mode, precision) -> device -> counts, in the report's completion order
  std::map<std::pair<std::string, std::string>, std::map<std::string, Acc>> acc;
  for (const auto& c : r.completions) {
    if (!c.error.empty() || is_remote_completion(c) || c.device.empty() || c.device == first) continue;
    auto it = base.find(twin_key(c));
    if (it == base.end()) continue;
    const Completion& b = *it->second;
    Acc& a = acc[{c.mode, c.precision}][c.device];
    ++a.n;
    const int step = first_step_differing(c, b);
    const bool bits = step >= 0 || c.logits_sha256 != b.logits_sha256;
    a.bit += bits;
    a.tok += c.tokens != b.tokens;
    if (bits && a.first_diff.empty()) a.first_diff = where(c, step);
    size_t prefix = 0;
    while (prefix < c.tokens.size() && prefix < b.tokens.size() && c.tokens[prefix] == b.tokens[prefix]) ++prefix;
    const size_t steps = std::min({prefix + (c.tokens != b.tokens ? 1 : 0), c.logprobs.size(), b.logprobs.size()});
    for (size_t i = 0; i < steps; ++i)
      a.max_dlp = std::max(a.max_dlp.value_or(0.0),
                           std::fabs(static_cast<double>(c.logprobs[i]) - static_cast<double>(b.logprobs[i])));
  }
  for (auto& ms : r.summary.modes) {
    auto it = acc.find({ms.mode, ms.precision});
    if (it == acc.end()) continue;
    std::string line;
    for (const auto& [dev, a] : it->second) {
      DeviceRow row;
      row.device = dev;
      row.against = first;
      row.bit_differ = wilson(a.bit, a.n);
      row.token_differ = wilson(a.tok, a.n);
      row.first_diff = a.first_diff;
      row.max_dlogprob = a.max_dlp;
      ms.devices.push_back(row);
      line += fmt::format("{}cross-device ({} against {}), {}: ", line.empty() ? "" : "; ", dev, first,
                          mode_label(ms.mode, ms.precision));
      if (a.bit == 0)
        line += fmt::format("identical in {} of {} completions", a.n, a.n);
      else
        line += fmt::format("{} of {} completions differ in bits, {} in tokens; the first at {}{}", a.bit, a.n, a.tok,
                            a.first_diff,
                            a.max_dlp ? fmt::format(" (max |dlogprob| {:.3g})", *a.max_dlp) : std::string());
    }
    ms.device_finding = line;
  }
}

}  // namespace repro
