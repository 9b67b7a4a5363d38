// Prompt variants compared per variant and per task: see include/repro/audit/variants.hpp.
#include "repro/audit/variants.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "repro/audit/stats.hpp"

namespace repro {

namespace {

// Sums the cases of the given prompts into one row.
VariantResult summarize(const std::vector<CaseResult>& cases, const std::vector<std::string>& prompt_ids) {
  VariantResult v;
  int tarr = 0, ran = 0, tara = 0, tara_n = 0, token = 0, bit = 0, compared = 0;
  double unique = 0;
  for (const auto& c : cases) {
    if (std::find(prompt_ids.begin(), prompt_ids.end(), c.prompt_id) == prompt_ids.end()) continue;
    ++v.cases;
    v.completions += c.n;
    v.errors += c.errors;
    if (c.n == 0) continue;  // only errors: no output to judge
    ++ran;
    tarr += c.tarr ? 1 : 0;
    unique += c.unique;
    if (c.tara) {
      ++tara_n;
      tara += *c.tara ? 1 : 0;
    }
    compared += c.drift_size.compared;
    token += c.drift_size.token_differ;
    bit += c.drift_size.bit_differ;
  }
  v.tarr = wilson(tarr, ran);
  if (tara_n > 0) v.tara = wilson(tara, tara_n);
  v.token_differ = wilson(token, compared);
  v.bit_differ = wilson(bit, compared);
  v.mean_unique = ran > 0 ? unique / ran : 0;
  return v;
}

double share(const Rate& r) { return r.n > 0 ? static_cast<double>(r.k) / r.n : 0; }

// The ranking key: lower is better. A variant with nothing compared ranks after every measured one.
std::tuple<int, double, double, double, double> rank_key(const VariantResult& v) {
  return {v.token_differ.n > 0 ? 0 : 1, share(v.token_differ), -share(v.tarr), v.tara ? -share(*v.tara) : 0.0,
          share(v.bit_differ)};
}

bool disjoint(const Rate& a, const Rate& b) { return a.n > 0 && b.n > 0 && (a.hi < b.lo || b.hi < a.lo); }

std::string measured(const VariantResult& v) {
  std::string s = fmt::format("tokens differ from the reference in {}, TARr@N {}", rate_text(v.token_differ),
                              rate_text(v.tarr));
  if (v.tara) s += fmt::format(", TARa@N {}", rate_text(*v.tara));
  return s;
}

}  // namespace

void analyze_variants(AuditReport& r) {
  r.variants.clear();
  std::vector<std::string> task_order;
  std::map<std::string, std::vector<const PromptVariant*>> of_task;
  for (const auto& pv : r.prompt_variants) {
    if (!of_task.count(pv.task)) task_order.push_back(pv.task);
    of_task[pv.task].push_back(&pv);
  }
  for (const auto& task : task_order) {
    TaskVariants t;
    t.task = task;
    std::vector<std::string> all_ids;
    for (const PromptVariant* pv : of_task[task]) {
      VariantResult v = summarize(r.cases, {pv->prompt_id});
      v.task = task;
      v.variant = pv->variant;
      v.prompt_id = pv->prompt_id;
      t.variants.push_back(std::move(v));
      all_ids.push_back(pv->prompt_id);
    }
    t.overall = summarize(r.cases, all_ids);
    t.overall.task = task;

    std::vector<size_t> order(t.variants.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rank_key(t.variants[a]) < rank_key(t.variants[b]); });
    for (size_t i = 0; i < order.size(); ++i) t.variants[order[i]].rank = static_cast<int>(i) + 1;
    const VariantResult& best = t.variants[order[0]];
    if (t.variants.size() == 1) {
      t.best = best.variant;
      t.finding = fmt::format("task '{}': one variant ('{}'), nothing to compare; {}", task, best.variant, measured(best));
    } else if (best.token_differ.n == 0) {
      t.finding = fmt::format("task '{}': no variant produced completions to compare; no ranking", task);
    } else if (rank_key(best) == rank_key(t.variants[order[1]]) &&
               std::all_of(order.begin(), order.end(),
                           [&](size_t i) { return rank_key(t.variants[i]) == rank_key(best); })) {
      t.finding = fmt::format("task '{}': all {} variants are equally reproducible ({}); no variant ranks first", task,
                              t.variants.size(), measured(best));
    } else {
      t.best = best.variant;
      std::vector<std::string> overlap;
      for (size_t i : order)
        if (&t.variants[i] != &best && !disjoint(best.token_differ, t.variants[i].token_differ))
          overlap.push_back(fmt::format("'{}' ({})", t.variants[i].variant, rate_text(t.variants[i].token_differ)));
      t.significant = overlap.empty();
      std::string others;
      for (const auto& o : overlap) others += (others.empty() ? "" : ", ") + o;
      t.finding = fmt::format("task '{}': most reproducible variant '{}' ({}); ", task, best.variant, measured(best)) +
                  (t.significant ? std::string("significant: its 95% interval is disjoint from every other variant's")
                                 : "not significant: its 95% interval overlaps " + others +
                                       "; more repeats, batch contexts or seeds narrow the intervals");
    }
    r.variants.push_back(std::move(t));
  }
}

}  // namespace repro
