// Size of the drift against a reference context: see include/repro/audit/drift_size.hpp.
#include "repro/audit/drift_size.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "repro/audit/factors.hpp"
#include "repro/audit/stats.hpp"

namespace repro {

namespace {

bool remote_completion(const Completion& c) {
  return !c.cache_state.empty() || !c.response_id.empty() || !c.system_fingerprint.empty() ||
         !c.response_model.empty();
}

bool same_tokens(const Completion& a, const Completion& b) {
  if (a.tokens_known && b.tokens_known) return a.tokens == b.tokens;
  return a.text == b.text;
}

bool same_bits(const Completion& a, const Completion& b) {
  return same_tokens(a, b) && a.text == b.text && a.logits_sha256 == b.logits_sha256 &&
         a.logprobs.size() == b.logprobs.size() &&
         (a.logprobs.empty() || std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)) == 0);
}

// Accumulates a DriftFactor by value.
struct FactorAcc {
  std::map<std::string, std::tuple<int, int, int, double>> rows;  // value -> n, bit, token, max |dlp|
  void add(const std::string& v, int n, int bit, int tok, double dlp) {
    auto& r = rows[v];
    std::get<0>(r) += n;
    std::get<1>(r) += bit;
    std::get<2>(r) += tok;
    std::get<3>(r) = std::max(std::get<3>(r), dlp);
  }
  DriftFactor table(const std::string& name) const {
    DriftFactor f;
    f.factor = name;
    for (const auto& [v, r] : rows) f.values.push_back(v);
    sort_factor_values(name, f.values, FactorUse::DriftSize);
    for (const auto& v : f.values) {
      const auto& r = rows.at(v);
      f.n.push_back(std::get<0>(r));
      f.bit_differ.push_back(std::get<1>(r));
      f.token_differ.push_back(std::get<2>(r));
      f.max_dlogprob.push_back(std::get<3>(r));
    }
    return f;
  }
};

}  // namespace

int reference_completion(const std::vector<Completion>& all, const std::vector<int>& members) {
  int best = -1;
  auto key = [&](int i) {
    const Completion& c = all[i];
    int cache = c.cache_state == "warm" ? 1 : 0;
    // The first device of --devices first ("" without the axis; "cpu" before "cuda"), then without
    // speculation, then TP 1 (then the first all-reduce order in name order: "" at TP 1)
    const int spec = c.speculative.empty() || c.speculative == "off" ? 0 : 1;
    return std::make_tuple(c.device, spec, c.tp, c.allreduce, c.batch_size, c.position, filler_draw_index(c.filler_set),
                           c.mate_join_step, c.mate_prompt_delta, cache, c.repeat, i);
  };
  for (int i : members)
    if (best < 0 || key(i) < key(best)) best = i;
  return best;
}

double topk_kl(const int* p_ids, const float* p_lp, const int* q_ids, const float* q_lp, int k) {
  const double eps = 1e-30;
  double q_known = 0, q_kth = 1;
  for (int j = 0; j < k; ++j)
    if (q_ids[j] >= 0 && std::isfinite(q_lp[j])) {
      double q = std::exp(static_cast<double>(q_lp[j]));
      q_known += q;
      q_kth = std::min(q_kth, q);
    }
  const double q_tail_all = std::max(0.0, 1.0 - q_known);
  // Q's probability of each of P's top-k tokens: recorded, or a share of Q's tail
  std::vector<double> p(k, 0), q(k, 0);
  int missing = 0;
  for (int j = 0; j < k; ++j) {
    if (p_ids[j] < 0 || !std::isfinite(p_lp[j])) continue;
    p[j] = std::exp(static_cast<double>(p_lp[j]));
    bool found = false;
    for (int i = 0; i < k; ++i)
      if (q_ids[i] == p_ids[j] && std::isfinite(q_lp[i])) q[j] = std::exp(static_cast<double>(q_lp[i])), found = true;
    if (!found) q[j] = -1, ++missing;
  }
  const double share = missing > 0 ? std::min(q_kth, q_tail_all / (missing + 1)) : 0;
  double p_sum = 0, q_sum = 0;
  for (int j = 0; j < k; ++j) {
    if (q[j] < 0) q[j] = share;
    p_sum += p[j];
    q_sum += q[j];
  }
  double kl = 0;
  for (int j = 0; j < k; ++j)
    if (p[j] > 0) kl += p[j] * std::log(p[j] / std::max(q[j], eps));
  const double p_tail = std::max(0.0, 1.0 - p_sum), q_tail = std::max(0.0, 1.0 - q_sum);
  if (p_tail > 0) kl += p_tail * std::log(p_tail / std::max(q_tail, eps));
  return std::max(0.0, kl);
}

void analyze_drift_size(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                   double fragile_margin) {
  DriftSize d;
  d.reference = reference_completion(all, members);
  if (d.reference < 0) {
    cr.drift_size = d;
    return;
  }
  const Completion& ref = all[d.reference];
  d.reference_context = remote_completion(ref)
                            ? fmt::format("concurrency {}{}, repeat {}", ref.batch_size,
                                          ref.cache_state.empty() ? "" : ", " + ref.cache_state + " cache", ref.repeat)
                            : fmt::format("batch {}, position {}{}{}, repeat {}", ref.batch_size, ref.position,
                                          ref.filler_set.empty() ? "" : ", fillers " + ref.filler_set,
                                          ref.tp == 1 ? "" : ", TP " + std::to_string(ref.tp), ref.repeat);
  // fragile steps of the reference
  if (!ref.margins_rel.empty()) {
    int fragile = 0;
    double mn = 1e300;
    for (float m : ref.margins_rel) {
      fragile += m < fragile_margin;
      mn = std::min(mn, static_cast<double>(m));
    }
    d.fragile = fragile;
    d.min_margin_rel = mn;
  }
  std::vector<FactorAcc> acc(std::size(kDriftSizeFactors));
  std::vector<std::set<std::string>> seen(std::size(kDriftSizeFactors));
  double sum_dlp = 0, max_dlp = 0;
  bool any_lp = false;
  double max_kl = -1;
  for (int i : members) {
    const Completion& c = all[i];
    const bool self = i == d.reference;
    const bool bit = !self && !same_bits(c, ref);
    const bool tok = !self && !same_tokens(c, ref);
    double c_max = 0;
    if (!self) {
      d.compared++;
      d.bit_differ += bit;
      d.token_differ += tok;
      size_t prefix = 0;
      if (c.tokens_known && ref.tokens_known) {
        while (prefix < c.tokens.size() && prefix < ref.tokens.size() && c.tokens[prefix] == ref.tokens[prefix]) ++prefix;
        const size_t steps = std::min({prefix, c.logprobs.size(), ref.logprobs.size()});
        for (size_t t = 0; t < steps; ++t) {
          if (!std::isfinite(c.logprobs[t]) || !std::isfinite(ref.logprobs[t])) continue;
          double dl = std::fabs(static_cast<double>(c.logprobs[t]) - static_cast<double>(ref.logprobs[t]));
          sum_dlp += dl;
          c_max = std::max(c_max, dl);
          d.steps_compared++;
          any_lp = true;
        }
        if (tok) {
          const int k = static_cast<int>(prefix);
          if (d.first_divergence < 0 || k < d.first_divergence) {
            d.first_divergence = k;
            d.first_divergence_completion = i;
            d.reference_token = prefix < ref.tokens.size() ? ref.tokens[prefix] : -1;
            d.divergent_token = prefix < c.tokens.size() ? c.tokens[prefix] : -1;
            d.flip_margin.reset();
            d.flip_margin_rel.reset();
            if (prefix < ref.margins.size()) d.flip_margin = ref.margins[prefix];
            if (prefix < ref.margins_rel.size()) d.flip_margin_rel = ref.margins_rel[prefix];
          }
          const size_t need = (prefix + 1) * static_cast<size_t>(ref.top_k);
          if (ref.top_k > 0 && ref.top_k == c.top_k && ref.top_ids.size() >= need && c.top_ids.size() >= need &&
              ref.top_logprobs.size() >= need && c.top_logprobs.size() >= need) {
            const size_t o = prefix * static_cast<size_t>(ref.top_k);
            double kl = topk_kl(&ref.top_ids[o], &ref.top_logprobs[o], &c.top_ids[o], &c.top_logprobs[o], ref.top_k);
            max_kl = std::max(max_kl, kl);
          }
        }
      }
      max_dlp = std::max(max_dlp, c_max);
    }
    for (size_t f = 0; f < std::size(kDriftSizeFactors); ++f) {
      std::string v = factor(kDriftSizeFactors[f]).value(c);
      seen[f].insert(v);
      acc[f].add(v, 1, bit, tok, c_max);
    }
  }
  if (any_lp) {
    d.max_dlogprob = max_dlp;
    d.mean_dlogprob = d.steps_compared > 0 ? sum_dlp / d.steps_compared : 0.0;
  }
  if (max_kl >= 0) d.topk_kl = max_kl;
  for (size_t f = 0; f < std::size(kDriftSizeFactors); ++f)
    if (seen[f].size() > 1) d.factors.push_back(acc[f].table(factor(kDriftSizeFactors[f]).name));
  d.status = d.token_differ > 0                  ? "token-divergent"
             : d.fragile.value_or(0) > 0         ? "reproducible here, fragile"
             : d.bit_differ > 0                  ? "bit-divergent"
                                                 : "reproducible";
  cr.drift_size = std::move(d);
}

namespace {

std::string factor_phrase(const std::string& f) {
  const Factor* row = find_factor(f);
  return row ? row->phrase : f;
}

// Where a count is non-zero along a factor: "from batch size 8 up", "at batch sizes 2, 8", or the
// names of the factors it follows. Empty when no value counts.
std::string locate(const std::vector<DriftFactor>& factors, bool tokens) {
  auto count = [&](const DriftFactor& f, size_t i) { return tokens ? f.token_differ[i] : f.bit_differ[i]; };
  for (const auto& f : factors) {
    if (f.factor != "batch_size") continue;
    std::vector<size_t> hit;
    for (size_t i = 0; i < f.values.size(); ++i)
      if (count(f, i) > 0) hit.push_back(i);
    if (hit.empty()) break;
    bool upward = hit.back() == f.values.size() - 1 && hit.size() == f.values.size() - hit.front();
    if (upward) return "from batch size " + f.values[hit.front()] + " up";
    std::string s = hit.size() == 1 ? "at batch size " : "at batch sizes ";
    for (size_t j = 0; j < hit.size() && j < 5; ++j) s += (j ? ", " : "") + f.values[hit[j]];
    if (hit.size() > 5) s += ", ...";
    return s;
  }
  std::string s;
  for (const auto& f : factors) {
    if (f.factor == "batch_size") continue;
    int nz = 0;
    for (size_t i = 0; i < f.values.size(); ++i) nz += count(f, i) > 0;
    if (nz > 0) s += (s.empty() ? "" : ", ") + factor_phrase(f.factor);
  }
  return s.empty() ? "" : "with " + s;
}

std::string sci(double v) { return v == 0 ? "0" : fmt::format("{:.2g}", v); }

}  // namespace

void summarize_drift_size(ModeSummary& ms, const std::vector<CaseResult>& cases) {
  ModeDriftSize md;
  int bit = 0, tok = 0, compared = 0, div_cases = 0, cmp_cases = 0;
  int64_t steps = 0;
  double sum_dlp = 0;
  std::map<std::string, FactorAcc> acc;
  std::vector<std::string> factor_order;
  for (const auto& cr : cases) {
    if (cr.mode != ms.mode || cr.precision != ms.precision) continue;
    const DriftSize& d = cr.drift_size;
    bit += d.bit_differ;
    tok += d.token_differ;
    compared += d.compared;
    if (d.compared > 0) {
      cmp_cases++;
      div_cases += d.token_differ > 0;
    }
    if (d.max_dlogprob) {
      md.max_dlogprob = std::max(md.max_dlogprob.value_or(0), *d.max_dlogprob);
      sum_dlp += d.mean_dlogprob.value_or(0) * d.steps_compared;
      steps += d.steps_compared;
    }
    if (d.topk_kl) md.max_topk_kl = std::max(md.max_topk_kl.value_or(0), *d.topk_kl);
    if (d.flip_margin) md.max_flip_margin = std::max(md.max_flip_margin.value_or(0), *d.flip_margin);
    md.fragile += d.fragile.value_or(0);
    md.fragile_cases += d.status == "reproducible here, fragile";
    for (const auto& f : d.factors) {
      if (!acc.count(f.factor)) factor_order.push_back(f.factor);
      for (size_t i = 0; i < f.values.size(); ++i)
        acc[f.factor].add(f.values[i], f.n[i], f.bit_differ[i], f.token_differ[i], f.max_dlogprob[i]);
    }
  }
  if (md.max_dlogprob) md.mean_dlogprob = steps > 0 ? sum_dlp / static_cast<double>(steps) : 0.0;
  md.bit_differ = wilson(bit, compared);
  md.token_differ = wilson(tok, compared);
  md.token_divergent_cases = wilson(div_cases, cmp_cases);
  for (const auto& f : factor_order) md.factors.push_back(acc[f].table(f));

  // ---- the finding, one line
  std::string who = mode_label(ms.mode, ms.precision);
  std::string s;
  if (compared == 0) {
    s = who + ": nothing to compare (each case ran in one context only)";
  } else if (bit == 0) {
    s = fmt::format("{}: bitwise identical to the reference context in all {} completions (differing: {})", who,
                    compared, rate_text(md.bit_differ));
  } else {
    std::string where = locate(md.factors, false);
    s = who + ": logits change" + (where.empty() ? "" : " " + where);
    if (md.max_dlogprob) s += " (max |dlogprob| " + sci(*md.max_dlogprob) + ")";
    if (div_cases == 0) {
      s += fmt::format("; tokens never change (cases: {})", rate_text(md.token_divergent_cases));
    } else {
      std::string twhere = locate(md.factors, true);
      s += fmt::format("; tokens change in {} of {} cases{}", div_cases, cmp_cases, twhere.empty() ? "" : " " + twhere);
      if (md.max_topk_kl) s += " (top-5 KL at the first divergent step up to " + sci(*md.max_topk_kl) + ")";
      if (md.max_flip_margin)
        s += "; each flip was a near-tie: the reference's top-2 logit margin there was at most " +
             sci(*md.max_flip_margin);
    }
  }
  if (md.fragile > 0)
    s += fmt::format("; {} fragile token{} (top-2 margin below the threshold)", md.fragile, md.fragile == 1 ? "" : "s");
  md.finding = s;
  ms.drift_size = std::move(md);
}

}  // namespace repro
