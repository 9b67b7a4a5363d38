// What to do about the findings: see include/repro/audit/advice.hpp.
#include "repro/audit/advice.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

#include "repro/audit/cobatch.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/tradeoff.hpp"

namespace repro {

namespace {

bool is_endpoint(const AuditReport& r, const std::string& mode) {
  const auto& env = r.environment;
  if (!env.is_object() || !env.contains("endpoints") || !env["endpoints"].is_array()) return false;
  for (const auto& e : env["endpoints"])
    if (e.is_object() && e.value("label", "") == mode) return true;
  return false;
}

const ModeSummary* find_mode(const AuditReport& r, const std::string& mode, const std::string& precision) {
  for (const auto& m : r.summary.modes)
    if (m.mode == mode && m.precision == precision && m.cases > 0) return &m;
  return nullptr;
}

// "2 of 3 cases"
std::string cases_text(int k, int n) { return fmt::format("{} of {} case{}", k, n, n == 1 ? "" : "s"); }

// The factors that explain the mode's divergent cases: "batch_size (2 of 2 divergent cases)".
std::string explaining_factors(const AuditReport& r, const ModeSummary& m) {
  std::map<std::string, int> by;
  int divergent = 0;
  for (const auto& c : r.cases) {
    if (c.mode != m.mode || c.precision != m.precision || !c.divergent) continue;
    ++divergent;
    for (const auto& f : c.factors)
      if (f.explains) by[f.factor]++;
  }
  if (by.empty()) return "";
  std::string out;
  for (const auto& [f, n] : by) out += fmt::format("{}{} ({} of {})", out.empty() ? "" : ", ", f, n, divergent);
  return "; it follows " + out;
}

std::string cost_of(const SpeedRatio& s, const std::string& what, const std::string& against) {
  if (s.n == 0 || !s.mean) return fmt::format("not measured: {} and {} did not run in the same contexts", what, against);
  return fmt::format("{} ran at {:.2f}x ±{:.2f} the throughput of {} (mean ± sd over {} cells, same prompts and batch "
                     "contexts; range {:.2f}-{:.2f}x)",
                     what, *s.mean, s.sd.value_or(0), against, s.n, s.min.value_or(0), s.max.value_or(0));
}

void local_advice(AuditReport& r, std::vector<Advice>& out) {
  for (const auto& m : r.summary.modes) {
    if (is_endpoint(r, m.mode) || m.mode == "batch-invariant" || m.divergent_cases == 0) continue;
    const std::string label = mode_label(m.mode, m.precision);
    const std::string found = fmt::format("{} diverged in {}", label, cases_text(m.divergent_cases, m.cases)) +
                              explaining_factors(r, m);
    const ModeSummary* bi = find_mode(r, "batch-invariant", m.precision);
    const std::string bi_label = mode_label("batch-invariant", m.precision);
    Advice a;
    a.about = label;
    if (bi && bi->divergent_cases == 0) {
      a.action = "Use batch-invariant kernels (--modes batch-invariant here; a serving engine's batch-invariant mode in "
                 "production): they remove this divergence";
      a.because = found + fmt::format("; {} reproduced all {} on the same prompts", bi_label, cases_text(bi->cases, bi->cases));
      SpeedRatio sp;
      sp.n = bi->throughput_ratio_n;
      sp.mean = bi->throughput_ratio;
      sp.sd = bi->throughput_ratio_sd;
      SpeedRatio full = speed_ratio(r, "batch-invariant", m.precision, SpeedCells::greedy_else_sampled);
      a.cost = cost_of(full.n > 0 ? full : sp, bi_label, speed_baseline(r));
    } else if (bi) {
      a.action = "Look beyond batch variance: batch-invariant kernels did not remove this divergence";
      a.because = found + fmt::format("; {} diverged too, in {}", bi_label, cases_text(bi->divergent_cases, bi->cases));
      a.cost = "";
    } else {
      a.action = fmt::format("Rerun with --modes {},batch-invariant to see whether batch-invariant kernels remove it",
                             m.mode);
      a.because = found;
      a.cost = "not measured: batch-invariant did not run at " + (m.precision.empty() ? std::string("this precision") : m.precision);
    }
    out.push_back(std::move(a));
  }
  // Precision: diverged at bf16/f16, not at f32.
  for (const auto& m : r.summary.modes) {
    if (is_endpoint(r, m.mode) || m.divergent_cases == 0 || (m.precision != "bf16" && m.precision != "f16")) continue;
    const ModeSummary* f32 = find_mode(r, m.mode, "f32");
    if (!f32 || f32->divergent_cases > 0) continue;
    Advice a;
    a.about = mode_label(m.mode, m.precision);
    a.action = "Keep f32 activations (--precisions f32; in an engine, its f32 activation / KV-cache dtype)";
    a.because = fmt::format("{} diverged in {}; {} diverged in none of its {}", mode_label(m.mode, m.precision),
                            cases_text(m.divergent_cases, m.cases), mode_label(m.mode, "f32"),
                            f32->cases == 1 ? std::string("1 case") : fmt::format("{} cases", f32->cases));
    const std::string mode = m.mode, prec = m.precision;
    SpeedRatio sp = speed_ratio_of(
        r, [&](const Completion& c) { return c.mode == mode && c.precision == "f32" && c.decoding_id == "greedy"; },
        [&](const Completion& c) { return c.mode == mode && c.precision == prec && c.decoding_id == "greedy"; });
    a.cost = cost_of(sp, mode_label(mode, "f32"), mode_label(mode, prec));
    out.push_back(std::move(a));
  }
  // ISA: replicated shards whose hosts disagree (default mode reads OpenBLAS, which picks kernels by CPU).
  if (r.merge && r.merge->replicate) {
    const bool default_ran = std::any_of(r.summary.modes.begin(), r.summary.modes.end(),
                                         [](const ModeSummary& m) { return m.mode == "default" && m.cases > 0; });
    for (const auto& h : r.merge->hosts) {
      if (h.token_differ + h.bit_differ == 0 || !default_ran) continue;
      Advice a;
      a.about = h.host;
      a.action = "Pin OPENBLAS_CORETYPE to one value (for example OPENBLAS_CORETYPE=Haswell) on every host, so "
                 "OpenBLAS runs the same kernels whatever CPU it finds";
      a.because = fmt::format("host {} differs from the first host in {} of the {} cases run on both (tokens in {}, "
                              "bits only in {}){}",
                              h.host, h.token_differ + h.bit_differ, h.cases,
                              h.token_differ, h.bit_differ, h.first_difference.empty() ? "" : "; " + h.first_difference);
      a.cost = "not measured: rerun the replicated shards with the variable set to measure it";
      out.push_back(std::move(a));
    }
  }
}

void endpoint_advice(AuditReport& r, std::vector<Advice>& out) {
  const std::string vllm_limits =
      "vLLM documents batch invariance as beta, for a list of supported accelerators (NVIDIA GPUs of compute "
      "capability 8.0 or newer in its stable documentation; newer releases list more platforms); set it in the "
      "server's environment before it starts";
  const std::string sglang_limits =
      "SGLang supports deterministic inference only with the FlashInfer, FlashAttention 3 and Triton attention "
      "backends";
  for (const auto& m : r.summary.modes) {
    if (!is_endpoint(r, m.mode)) continue;
    if (m.response_cache && cache_confirmed(*m.response_cache)) {
      Advice a;
      a.about = m.mode;
      a.action = "Turn off the response cache in front of this endpoint (or make every request unique), then rerun";
      a.because = m.response_cache->finding;
      out.push_back(std::move(a));
    }
    if (m.divergent_cases == 0) continue;
    const EndpointEvidence* ev = find_evidence(r, m.mode);
    const std::string engine = ev ? ev->posture.engine : "unknown";
    const std::string found = fmt::format("{} diverged in {}", m.mode, cases_text(m.divergent_cases, m.cases)) +
                              explaining_factors(r, m) + "; each divergent case has a curl reproducer in the report";
    const std::string cost = "not measured: a server setting; rerun this audit against the restarted server to measure "
                             "its throughput and reproducibility";
    // The engine's own switch; both engines' when the endpoint did not say which it runs.
    auto engine_switch = [&](const char* name, const char* key, const std::string& action, const std::string& limits,
                             const char* source) {
      if (engine != key && engine != "unknown") return;
      Advice a;
      a.about = m.mode;
      a.action = (engine == "unknown" ? "If the server is " + std::string(name) + ": " : std::string()) + action;
      a.because = found + (engine == "unknown" ? " (the endpoint did not say which engine it runs)" : "");
      a.cost = cost;
      a.limits = limits;
      a.source = source;
      out.push_back(std::move(a));
    };
    engine_switch("vLLM", "vllm", "start it with VLLM_BATCH_INVARIANT=1 in its environment", vllm_limits,
                  kVllmBatchInvarianceDoc);
    engine_switch("SGLang", "sglang", "start it with --enable-deterministic-inference", sglang_limits,
                  kSglangDeterministicDoc);
    if (engine != "vllm" && engine != "sglang" && engine != "unknown") {
      Advice a;
      a.about = m.mode;
      a.action = fmt::format("Reproduce the divergent cases with their curl commands and ask the {} server for a "
                             "batch-invariant mode; this tool knows of none documented for it",
                             engine);
      a.because = found;
      a.cost = cost;
      out.push_back(std::move(a));
    }
  }
}

}  // namespace

void compute_advice(AuditReport& r) {
  std::vector<Advice> out;
  local_advice(r, out);
  endpoint_advice(r, out);
  if (out.empty()) {
    Advice a;
    bool any_divergent = false;
    for (const auto& m : r.summary.modes) any_divergent = any_divergent || m.divergent_cases > 0;
    if (!any_divergent && r.summary.cases > 0) {
      a.action = "Nothing to change: no mode or endpoint diverged in this run";
      a.because = fmt::format("{} of {} cases reproduced", r.summary.cases - r.summary.divergent_cases, r.summary.cases);
    } else if (r.summary.cases == 0) {
      a.action = "Nothing to advise: no case ran";
    } else {
      a.action = "Read the divergent cases below: no remedy this tool knows applies to them";
      a.because = fmt::format("{} of {} cases diverged", r.summary.divergent_cases, r.summary.cases);
    }
    out.push_back(std::move(a));
  }
  r.advice = std::move(out);
}

}  // namespace repro
