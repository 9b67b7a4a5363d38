// Shards of a plan and their merge: see include/repro/audit/shards.hpp.
#include "repro/audit/shards.hpp"

#include "repro/audit/advice.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "repro/audit/analysis.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/compare.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/runner.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/remote/client.hpp"

namespace repro {

using nlohmann::json;

namespace {

std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

// ============================================================================ cases

std::string case_id(const std::string& prompt_id, const std::string& decoding_id, const std::string& mode,
                    const std::string& precision) {
  return prompt_id + "|" + decoding_id + "|" + mode + "|" + precision;
}

std::string case_id(const Completion& c) { return case_id(c.prompt_id, c.decoding_id, c.mode, c.precision); }

int case_shard(const std::string& id, int count) {
  if (count <= 1) return 1;
  const std::string h = sha256_hex(id);
  const uint64_t v = std::stoull(h.substr(0, 16), nullptr, 16);  // the first 8 bytes, big-endian
  return static_cast<int>(v % static_cast<uint64_t>(count)) + 1;
}

std::vector<std::string> plan_case_ids(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels) {
  const bool remote = !endpoint_labels.empty();
  const std::vector<std::string>& modes = remote ? endpoint_labels : plan.modes;
  const std::vector<std::string> precisions = remote ? std::vector<std::string>{""} : plan.precisions;
  std::vector<std::string> ids;
  const auto decodings = decoding_cells(plan);
  for (const auto& p : plan.prompts)
    for (const auto& d : decodings)
      for (const auto& m : modes)
        for (const auto& pr : precisions) ids.push_back(case_id(p.id, d.cfg.id, m, pr));
  return ids;
}

std::vector<std::string> shard_case_ids(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels) {
  std::vector<std::string> all = plan_case_ids(plan, endpoint_labels);
  const ShardSpec s = parse_shard(plan.shard);
  if (s.count == 0 || plan.replicate_shards) return all;
  std::vector<std::string> mine;
  for (auto& id : all)
    if (case_shard(id, s.count) == s.index) mine.push_back(std::move(id));
  return mine;
}

// ============================================================================ digests, host

std::string plan_digest(const json& plan_block, const std::string& prompts_sha256) {
  json p = plan_block.is_object() ? plan_block : json::object();
  p.erase("shard");
  p.erase("positions_skipped");
  p.erase("devices_skipped");
  return sha256_hex(compact(json{{"plan", p}, {"prompts_sha256", prompts_sha256}}));
}

ShardHost host_record(const json& environment) {
  ShardHost h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) h.hostname = printable(name);
  if (h.hostname.empty()) h.hostname = "unknown";
  json e = environment.is_object() ? environment : json::object();
  for (const char* k : {"model", "endpoints", "remote_stats", "digests"}) e.erase(k);
  h.fingerprint = sha256_hex(compact(e));
  return h;
}

namespace {

std::string recorded_prompts_digest(const AuditReport& r) {
  return recorded_text(r.environment, "digests", "prompts_sha256");
}

std::vector<std::string> endpoint_labels_of(const AuditReport& r) {
  std::vector<std::string> out;
  const auto& env = r.environment;
  if (env.is_object() && env.contains("endpoints") && env["endpoints"].is_array())
    for (const auto& e : env["endpoints"])
      if (e.is_object() && e.contains("label") && e["label"].is_string()) out.push_back(e["label"].get<std::string>());
  return out;
}

}  // namespace

ShardInfo shard_info(const AuditReport& report, const PlanOptions& plan, const ShardSpec& spec,
                     const std::vector<std::string>& endpoint_labels) {
  ShardInfo s;
  s.plan_sha256 = plan_digest(report.plan, recorded_prompts_digest(report));
  s.index = spec.index;
  s.count = spec.count;
  s.replicate = plan.replicate_shards;
  s.scheduler = spec.scheduler;
  s.source = spec.source;
  s.cases = shard_case_ids(plan, endpoint_labels);
  s.host = host_record(report.environment);
  return s;
}

bool shard_lacks(const AuditReport& r, const std::string& mode, const std::string& precision) {
  if (!r.shard) return false;
  for (const auto& id : r.shard->cases) {
    // "prompt|decoding|mode|precision": the last two fields (prompt ids may hold '|', modes do not)
    const size_t b = id.rfind('|');
    if (b == std::string::npos) continue;
    const size_t a = id.rfind('|', b == 0 ? 0 : b - 1);
    if (a == std::string::npos) continue;
    if (id.compare(a + 1, b - a - 1, mode) == 0 && (precision.empty() || id.compare(b + 1, std::string::npos, precision) == 0))
      return false;
  }
  return true;
}

bool shard_without_cases(const AuditReport& r) { return r.shard && r.shard->cases.empty(); }

std::string assignment_text(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels,
                            const std::string& plan_sha256) {
  const ShardSpec s = parse_shard(plan.shard);
  const std::vector<std::string> all = plan_case_ids(plan, endpoint_labels);
  const int n = s.count > 0 ? s.count : 1;
  std::string out = "plan sha256 " + plan_sha256 + ": " + std::to_string(all.size()) + " cases";
  if (s.count == 0) {
    out += ", not sharded (give --shard K/N)\n";
  } else if (plan.replicate_shards) {
    out += ", every one on each of the " + std::to_string(n) + " shards (--replicate-shards)\n";
  } else {
    std::vector<int> per(static_cast<size_t>(n) + 1, 0);
    for (const auto& id : all) per[static_cast<size_t>(case_shard(id, n))]++;
    out += " over " + std::to_string(n) + " shards (";
    for (int k = 1; k <= n; ++k) out += (k > 1 ? ", " : "") + std::to_string(k) + ": " + std::to_string(per[static_cast<size_t>(k)]);
    out += ")\n";
  }
  const std::vector<std::string> mine = shard_case_ids(plan, endpoint_labels);
  out += (s.count == 0 ? std::string("the run") : "shard " + shard_text(s)) + " runs " + std::to_string(mine.size()) +
         " cases:\n";
  for (const auto& id : mine) out += "  " + printable(id) + "\n";
  return out;
}

// ============================================================================ merge

namespace {

struct Named {
  const ShardInput* in;
  std::string name;  // "'FILE' (shard K/N)"
};

std::string shown(const json& v) {
  std::string s = v.is_null() ? std::string("(none)") : compact(v);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// The first plan field where two plan blocks differ ("max_tokens", "thresholds.min_tarr"), or "".
std::string differing_field(const json& a, const json& b, const std::string& prefix = "") {
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  for (const auto& k : keys) {
    if (prefix.empty() && (k == "shard" || k == "positions_skipped" || k == "devices_skipped")) continue;
    const json va = a.contains(k) ? a[k] : json(), vb = b.contains(k) ? b[k] : json();
    if (va == vb) continue;
    if (va.is_object() && vb.is_object()) return differing_field(va, vb, prefix + k + ".");
    return prefix + k;
  }
  return "";
}

const json* at_path(const json& j, const std::string& dotted) {
  const json* cur = &j;
  for (const auto& part : split(dotted, '.')) {
    if (!cur->is_object() || !cur->contains(part)) return nullptr;
    cur = &(*cur)[part];
  }
  return cur;
}

std::string tool_of(const AuditReport& r) {
  const json* v = at_path(r.environment, "tool.version");
  const json* c = at_path(r.environment, "tool.commit");
  return (v && v->is_string() ? v->get<std::string>() : std::string("unknown")) + " (commit " +
         (c && c->is_string() ? c->get<std::string>() : std::string("unknown")) + ")";
}

std::string model_of(const AuditReport& r) {
  const json* m = at_path(r.environment, "model.sha256");
  return m && m->is_string() ? m->get<std::string>() : std::string();
}

json endpoints_of(const AuditReport& r) {
  const json* e = at_path(r.environment, "endpoints");
  return e ? *e : json();
}

// Pools throughput cells of one (mode, precision, batch size): totals add, and the runs' mean and sample
// standard deviation combine exactly from each cell's count, mean and deviation.
void pool_throughput(ThroughputRow& a, const ThroughputRow& b) {
  const int n = a.runs + b.runs;
  if (n > 0 && b.runs > 0) {
    const double mean = (a.mean_tokens_per_s * a.runs + b.mean_tokens_per_s * b.runs) / n;
    double ss = 0;
    for (const ThroughputRow* r : {static_cast<const ThroughputRow*>(&a), &b})
      if (r->runs > 0)
        ss += (r->runs - 1) * r->stddev_tokens_per_s * r->stddev_tokens_per_s +
              r->runs * (r->mean_tokens_per_s - mean) * (r->mean_tokens_per_s - mean);
    a.min_tokens_per_s = a.runs > 0 ? std::min(a.min_tokens_per_s, b.min_tokens_per_s) : b.min_tokens_per_s;
    a.max_tokens_per_s = a.runs > 0 ? std::max(a.max_tokens_per_s, b.max_tokens_per_s) : b.max_tokens_per_s;
    a.mean_tokens_per_s = mean;
    a.stddev_tokens_per_s = n > 1 ? std::sqrt(ss / (n - 1)) : 0;
    a.runs = n;
  }
  a.tokens += b.tokens;
  a.seconds += b.seconds;
  a.tokens_per_s = a.seconds > 0 ? static_cast<double>(a.tokens) / a.seconds : 0;
}

// Co-batching evidence of one endpoint from another shard: its levels pooled as record_level pools a
// level's probes (counts add, means weighted by probes or samples, extremes kept); the posture and
// seed probes of the first shard that has them. decide_evidence (analyze) then judges the union.
void pool_evidence(AuditReport& m, const EndpointEvidence& from) {
  const bool fresh = find_evidence(m, from.endpoint) == nullptr;
  EndpointEvidence& to = evidence_for(m, from.endpoint);
  if (fresh || (to.posture.sources.empty() && !from.posture.sources.empty())) to.posture = from.posture;
  if (to.seeds.empty()) to.seeds = from.seeds;
  for (const CoBatchLevel& b : from.levels) {
    auto it = std::find_if(to.levels.begin(), to.levels.end(),
                           [&](const CoBatchLevel& l) { return l.concurrency == b.concurrency; });
    if (it == to.levels.end()) {
      to.levels.insert(std::upper_bound(to.levels.begin(), to.levels.end(), b,
                                        [](const CoBatchLevel& x, const CoBatchLevel& y) {
                                          return x.concurrency < y.concurrency;
                                        }),
                       b);
      continue;
    }
    CoBatchLevel& a = *it;
    if (b.probes > 0) {
      a.others_min = a.probes > 0 ? std::min(a.others_min, b.others_min) : b.others_min;
      a.others_mean = (a.others_mean * a.probes + b.others_mean * b.probes) / (a.probes + b.probes);
      a.others_max = std::max(a.others_max, b.others_max);
      a.probes += b.probes;
    }
    if (b.response_max_batch) a.response_max_batch = std::max(a.response_max_batch.value_or(0), *b.response_max_batch);
    a.isolation_fillers += b.isolation_fillers;
    a.isolation_same_tokens += b.isolation_same_tokens;
    if (b.server_status == "known") {
      const int n = a.server_status == "known" ? a.server_samples : 0;
      a.server_running_mean = (a.server_running_mean.value_or(0) * n + b.server_running_mean.value_or(0) * b.server_samples) /
                              std::max(1, n + b.server_samples);
      a.server_running_max = std::max(a.server_status == "known" ? a.server_running_max.value_or(0) : 0.0,
                                      b.server_running_max.value_or(0));
      a.server_samples = n + b.server_samples;
      a.server_source = b.server_source;
      a.server_status = "known";
    }
  }
}

std::string list_text(const std::vector<std::string>& v, size_t most = 5) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < most; ++i) s += (i ? ", " : "") + printable(v[i]);
  if (v.size() > most) s += " and " + std::to_string(v.size() - most) + " more";
  return s;
}

}  // namespace

AuditReport merge_shards(std::vector<ShardInput> shards, const MergeOptions& opt) {
  namespace fs = std::filesystem;
  if (shards.empty()) throw UsageError("report merge: give the shard reports (or their --out directories)");
  // ---- each one a shard report, each one given once
  for (const auto& s : shards)
    if (!s.report.shard)
      throw UsageError("report merge: '" + s.file +
                       "' is not a shard report (it has no \"shard\" block); write shard reports with run --shard "
                       "K/N or --shard auto");
  for (size_t i = 0; i < shards.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      std::error_code e1, e2;
      const bool same_file = fs::equivalent(shards[i].file, shards[j].file, e1) && !e1;
      if (same_file || (!shards[i].text_sha256.empty() && shards[i].text_sha256 == shards[j].text_sha256))
        throw UsageError("report merge: '" + shards[i].file + "' and '" + shards[j].file +
                         "' are the same report (digest " + shards[i].text_sha256.substr(0, 12) +
                         "..); merging a report with itself is refused: give each shard's report once");
    }
  {  // by shard index (ties keep the command line's order)
    std::vector<std::pair<int, size_t>> order;
    for (size_t i = 0; i < shards.size(); ++i) order.emplace_back(shards[i].report.shard->index, i);
    std::stable_sort(order.begin(), order.end(),
                     [](const std::pair<int, size_t>& a, const std::pair<int, size_t>& b) { return a.first < b.first; });
    std::vector<ShardInput> sorted;
    for (const auto& [index, i] : order) sorted.push_back(std::move(shards[i]));
    shards = std::move(sorted);
  }
  auto name = [](const ShardInput& s) {
    return "'" + s.file + "' (shard " + std::to_string(s.report.shard->index) + "/" +
           std::to_string(s.report.shard->count) + ")";
  };
  const ShardInput& first = shards[0];
  const ShardInfo& f = *first.report.shard;
  const std::string fname = name(first);
  for (size_t i = 1; i < shards.size(); ++i) {
    const ShardInfo& s = *shards[i].report.shard;
    if (s.count != f.count)
      throw UsageError("report merge: " + name(shards[i]) + " is one of " + std::to_string(s.count) + " shards but " +
                       fname + " is one of " + std::to_string(f.count) + ": the shard count differs; merge the shards "
                       "of one run");
    if (s.index == shards[i - 1].report.shard->index)
      throw UsageError("report merge: shard " + std::to_string(s.index) + "/" + std::to_string(s.count) +
                       " is given twice: '" + shards[i - 1].file + "' and '" + shards[i].file + "'; give each shard once");
  }
  for (const auto& s : shards) {
    const ShardInfo& si = *s.report.shard;
    if (si.index < 1 || si.index > si.count || si.count > kMaxShards)
      throw UsageError("report merge: '" + s.file + "' records shard " + std::to_string(si.index) + "/" +
                       std::to_string(si.count) + ", which is not K/N with 1 <= K <= N");
    // Its recorded plan digest is its plan's (a hand-edited plan block or shard block shows here).
    const std::string d = plan_digest(s.report.plan, recorded_prompts_digest(s.report));
    if (d != si.plan_sha256)
      throw UsageError("report merge: " + name(s) + ": its shard block's plan_sha256 " + si.plan_sha256.substr(0, 12) +
                       ".. is not the digest of its plan (" + d.substr(0, 12) +
                       "..); the report was edited after it was written");
    if (s.report.summary.interrupted && !opt.allow_partial)
      throw UsageError("report merge: " + name(s) +
                       " was interrupted before it finished; finish it with run --resume on its directory, or "
                       "pass --allow-partial");
  }
  // ---- the same plan, tool and model (or endpoints)
  for (size_t i = 1; i < shards.size(); ++i) {
    const AuditReport& r = shards[i].report;
    const std::string ni = name(shards[i]);
    if (r.shard->plan_sha256 != f.plan_sha256) {
      std::string field = differing_field(r.plan, first.report.plan);
      if (!field.empty()) {
        const json* a = at_path(r.plan, field);
        const json* b = at_path(first.report.plan, field);
        throw UsageError("report merge: " + ni + " and " + fname + " are shards of different plans: plan field \"" +
                         field + "\" is " + shown(a ? *a : json()) + " in one and " + shown(b ? *b : json()) +
                         " in the other; merge the shards of one run");
      }
      throw UsageError("report merge: " + ni + " and " + fname +
                       " are shards of different plans: their prompts differ (prompts_sha256 " +
                       recorded_prompts_digest(r).substr(0, 12) + ".. and " +
                       recorded_prompts_digest(first.report).substr(0, 12) + "..); merge the shards of one run");
    }
    if (r.shard->replicate != f.replicate)
      throw UsageError("report merge: " + ni + " and " + fname + " differ in --replicate-shards");
    if (tool_of(r) != tool_of(first.report))
      throw UsageError("report merge: " + ni + " was written by repro-audit " + tool_of(r) + " but " + fname +
                       " by " + tool_of(first.report) + "; run every shard with one version");
    if (model_of(r) != model_of(first.report))
      throw UsageError("report merge: " + ni + " ran the model with sha256 " +
                       (model_of(r).empty() ? std::string("(none)") : model_of(r).substr(0, 12) + "..") + " but " +
                       fname + " ran " +
                       (model_of(first.report).empty() ? std::string("(none)") : model_of(first.report).substr(0, 12) + "..") +
                       "; run every shard on the same model file");
    if (endpoints_of(r) != endpoints_of(first.report))
      throw UsageError("report merge: " + ni + " audited the endpoints " + shown(endpoints_of(r)) + " but " + fname +
                       " audited " + shown(endpoints_of(first.report)) + "; run every shard against the same endpoints");
  }
  // ---- the plan, and each shard's assignment as the plan gives it
  PlanOptions plan;
  try {
    plan = plan_from_report(first.report);
  } catch (const UsageError& e) {
    throw UsageError("report merge: " + fname + ": " + e.what());
  }
  const std::vector<std::string> labels = endpoint_labels_of(first.report);
  const std::vector<std::string> all_cases = plan_case_ids(plan, labels);
  std::map<std::string, int> owner;  // case -> shard index (split shards)
  for (const auto& s : shards) {
    PlanOptions p = plan;
    p.shard = std::to_string(s.report.shard->index) + "/" + std::to_string(f.count);
    const std::vector<std::string> want = shard_case_ids(p, labels);
    const std::vector<std::string>& got = s.report.shard->cases;
    if (got != want) {
      std::set<std::string> w(want.begin(), want.end()), g(got.begin(), got.end());
      std::vector<std::string> extra, lack;
      for (const auto& c : got)
        if (!w.count(c)) extra.push_back(c);
      for (const auto& c : want)
        if (!g.count(c)) lack.push_back(c);
      throw UsageError("report merge: " + name(s) + ": its assigned cases are not the ones the plan gives shard " +
                       p.shard + (extra.empty() ? "" : "; not its own: " + list_text(extra)) +
                       (lack.empty() ? "" : "; lacking: " + list_text(lack)));
    }
    std::set<std::string> mine(got.begin(), got.end());
    for (const auto& c : s.report.completions)
      if (!mine.count(case_id(c)))
        throw UsageError("report merge: " + name(s) + " holds completions of case '" + printable(case_id(c)) +
                         "', which the plan does not assign to it");
    if (!f.replicate)
      for (const auto& c : got) {
        auto [it, added] = owner.emplace(c, s.report.shard->index);
        if (!added)
          throw UsageError("report merge: case '" + printable(c) + "' is assigned to both shard " +
                           std::to_string(it->second) + " and " + name(s) + "; the assignments must be disjoint");
      }
  }
  // ---- coverage: every shard 1..N, every case of the plan
  std::vector<int> missing_shards;
  {
    size_t at = 0;
    for (int k = 1; k <= f.count; ++k) {
      if (at < shards.size() && shards[at].report.shard->index == k) {
        ++at;
        continue;
      }
      missing_shards.push_back(k);
    }
  }
  if (!missing_shards.empty() && !opt.allow_partial) {
    std::string given, missing;
    for (const auto& s : shards) given += (given.empty() ? "" : ", ") + std::to_string(s.report.shard->index);
    for (int k : missing_shards) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    throw UsageError("report merge: shard" + std::string(missing_shards.size() > 1 ? "s " : " ") + missing + " of " +
                     std::to_string(f.count) + (missing_shards.size() > 1 ? " are" : " is") + " missing (given: " +
                     given + "); add " + (missing_shards.size() > 1 ? "their reports" : "its report") +
                     ", or pass --allow-partial for a report marked incomplete");
  }
  std::set<std::string> covered;
  bool interrupted = false;
  for (const auto& s : shards) {
    interrupted = interrupted || s.report.summary.interrupted;
    for (const auto& c : s.report.completions) covered.insert(case_id(c));
  }
  std::vector<std::string> missing_cases;
  std::map<std::string, std::vector<int>> replicas;  // replicated: case -> the shards that lack it
  for (const auto& c : all_cases) {
    if (f.replicate) {
      for (const auto& s : shards) {
        bool has = false;
        for (const auto& x : s.report.completions)
          if (case_id(x) == c) {
            has = true;
            break;
          }
        if (!has) replicas[c].push_back(s.report.shard->index);
      }
      if (!replicas[c].empty() || !missing_shards.empty()) missing_cases.push_back(c);
    } else if (!covered.count(c)) {
      missing_cases.push_back(c);
    }
  }
  if (!missing_cases.empty() && !opt.allow_partial)
    throw UsageError("report merge: " + std::to_string(missing_cases.size()) + " case" +
                     (missing_cases.size() > 1 ? "s" : "") + " of the plan have no completions in the shard that " +
                     "runs them (" + list_text(missing_cases) +
                     "); finish those shards (run --resume), or pass --allow-partial");

  // ---- the union as one report
  AuditReport m;
  m.created = utc_now();
  m.profile = first.report.profile;
  m.plan = first.report.plan;
  m.plan["shard"] = "";  // the plan as one unsharded run records it (merge.replicate keeps the fleet's)
  m.plan["replicate_shards"] = false;
  m.thresholds = first.report.thresholds;
  m.answer_regex = first.report.answer_regex;
  m.answer_json_path = first.report.answer_json_path;
  m.fragile_margin = first.report.fragile_margin;
  m.environment = first.report.environment;
  m.prompts = first.report.prompts;
  m.prompt_variants = first.report.prompt_variants;
  // Host labels of replicated shards: the host name, with the shard when two shards share one.
  std::map<std::string, int> host_count;
  for (const auto& s : shards) host_count[s.report.shard->host.hostname]++;
  std::vector<std::string> host_label(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto& h = shards[i].report.shard->host.hostname;
    host_label[i] = host_count[h] > 1 ? h + "#" + std::to_string(shards[i].report.shard->index) : h;
  }
  // Completions in the order an unsharded run records them (replicated: shard by shard).
  std::map<std::string, size_t> order;
  if (labels.empty()) {
    const auto keys = local_cell_order(plan);
    for (size_t i = 0; i < keys.size(); ++i) order.emplace(keys[i], i);
  } else {
    for (size_t i = 0; i < all_cases.size(); ++i) order.emplace(all_cases[i], i);
  }
  struct Item {
    size_t shard, ordinal, seq;
    const Completion* c;
  };
  std::vector<Item> items;
  size_t seq = 0;
  for (size_t i = 0; i < shards.size(); ++i)
    for (const auto& c : shards[i].report.completions) {
      auto it = order.find(labels.empty() ? cell_key(c) : case_id(c));
      items.push_back({f.replicate ? i : 0, it == order.end() ? order.size() : it->second, seq++, &c});
    }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.shard != b.shard) return a.shard < b.shard;
    return a.ordinal < b.ordinal;
  });
  for (const auto& it : items) {
    m.completions.push_back(*it.c);
    if (f.replicate) m.completions.back().host = host_label[it.shard];
  }
  // Throughput cells pooled; request statistics of endpoints summed; token texts united.
  std::map<std::string, RemoteStats> stats;
  bool any_stats = false;
  for (const auto& s : shards) {
    for (const auto& row : s.report.throughput) {
      auto same = [&](const ThroughputRow& x) {
        return x.mode == row.mode && x.precision == row.precision && x.batch_size == row.batch_size;
      };
      auto at = std::find_if(m.throughput.begin(), m.throughput.end(), same);
      if (at == m.throughput.end()) {
        m.throughput.push_back(row);
        m.throughput.back().ratio_vs_default.reset();
      } else {
        pool_throughput(*at, row);
      }
    }
    for (const auto& [id, text] : s.report.token_text) m.token_text.emplace(id, text);
    for (const auto& ev : s.report.evidence) pool_evidence(m, ev);
    if (const json* st = at_path(s.report.environment, "remote_stats"); st && st->is_object()) {
      any_stats = true;
      for (const auto& [label, v] : st->items()) stats[label].merge(RemoteStats::from_json(v));
    }
  }
  if (any_stats) {
    json st = json::object();
    for (const auto& [label, v] : stats) st[label] = v.to_json();
    m.environment["remote_stats"] = st;
  }
  // ---- the merge block
  MergeInfo mi;
  mi.plan_sha256 = f.plan_sha256;
  mi.count = f.count;
  mi.replicate = f.replicate;
  mi.missing_shards = missing_shards;
  mi.missing_cases = missing_cases;
  mi.complete = missing_shards.empty() && missing_cases.empty() && !interrupted;
  for (size_t i = 0; i < shards.size(); ++i) {
    const AuditReport& r = shards[i].report;
    MergedShard ms;
    ms.index = r.shard->index;
    ms.file = shards[i].file;
    ms.report_sha256 = shards[i].text_sha256;
    ms.source = r.shard->source;
    ms.host = r.shard->host;
    if (f.replicate) ms.host_label = host_label[i];
    ms.cases = static_cast<int>(r.shard->cases.size());
    ms.completions = static_cast<int>(r.completions.size());
    mi.shards.push_back(std::move(ms));
  }
  m.merge = std::move(mi);
  return m;
}

namespace {

std::string context_text(const Completion& c) {
  if (!c.cache_state.empty()) return c.cache_state + " cache, repeat " + std::to_string(c.repeat);
  std::string s = "batch " + std::to_string(c.batch_size);
  if (c.precision.empty()) s = "concurrency " + std::to_string(c.batch_size);
  else s += ", position " + std::to_string(c.position) + (c.filler_set.empty() ? "" : ", fillers " + c.filler_set);
  return s + ", repeat " + std::to_string(c.repeat);
}

bool same_bits(const Completion& a, const Completion& b) {
  if (a.tokens != b.tokens || a.text != b.text || a.logits_sha256 != b.logits_sha256) return false;
  if (a.logprobs.size() != b.logprobs.size()) return false;
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    if (std::memcmp(&a.logprobs[i], &b.logprobs[i], sizeof(float)) != 0) return false;
  return true;
}

}  // namespace

void finish_merge(AuditReport& m) {
  if (!m.merge) return;
  MergeInfo& mi = *m.merge;
  mi.hosts.clear();
  if (mi.replicate && !mi.shards.empty()) {
    // The reference host is the lowest shard's; every other host's completions against it, cell by cell.
    const std::string ref_host = mi.shards[0].host_label;
    std::map<std::string, const Completion*> ref;
    std::vector<std::string> case_order;
    std::set<std::string> seen;
    for (const auto& c : m.completions) {
      if (!c.error.empty()) continue;
      if (c.host == ref_host) ref.emplace(cell_key(c), &c);
      if (seen.insert(case_id(c)).second) case_order.push_back(case_id(c));
    }
    for (size_t s = 1; s < mi.shards.size(); ++s) {
      HostAgreement h;
      h.host = mi.shards[s].host_label;
      std::map<std::string, int> state;  // case -> 0 identical, 1 bit differ, 2 token differ
      std::map<std::string, std::string> first_at;
      for (const auto& c : m.completions) {
        if (c.host != h.host || !c.error.empty()) continue;
        auto r = ref.find(cell_key(c));
        if (r == ref.end()) continue;
        const std::string id = case_id(c);
        int& st = state[id];
        if (same_bits(c, *r->second)) continue;
        const Completion& a = *r->second;
        size_t k = 0;
        while (k < a.tokens.size() && k < c.tokens.size() && a.tokens[k] == c.tokens[k]) ++k;
        const bool tokens = a.tokens != c.tokens || a.text != c.text;
        const int now = tokens ? 2 : 1;
        if (now > st || !first_at.count(id)) {
          std::string where = printable(id) + ", " + context_text(c) + ": ";
          if (tokens)
            where += "token " + std::to_string(k) + " (" +
                     (k < a.tokens.size() ? std::to_string(a.tokens[k]) : std::string("end")) + " on " + ref_host +
                     ", " + (k < c.tokens.size() ? std::to_string(c.tokens[k]) : std::string("end")) + " here)";
          else
            where += "same tokens, other logits or logprob bits";
          if (now > st || !first_at.count(id)) first_at[id] = where;
        }
        st = std::max(st, now);
      }
      for (const auto& id : case_order) {
        auto it = state.find(id);
        if (it == state.end()) continue;
        h.cases++;
        if (it->second == 0) h.identical++;
        if (it->second == 1) h.bit_differ++;
        if (it->second == 2) h.token_differ++;
        if (it->second > 0 && h.first_difference.empty()) h.first_difference = first_at[id];
      }
      mi.hosts.push_back(std::move(h));
    }
  }
  // An incomplete merge is never a pass: its verdict says so, unless what ran already diverged.
  if (!mi.complete && m.summary.verdict != "divergent") m.summary.verdict = "incomplete";
  compute_advice(m);  // again, now that the hosts are compared (src/audit/advice.cpp)
}

}  // namespace repro
