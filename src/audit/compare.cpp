// Run against run: case matching, drift between two reports, the baseline section (see
// include/repro/audit/compare.hpp).
#include "repro/audit/compare.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/verdict.hpp"

namespace repro {

std::string short_hash(const std::string& h) { return h.substr(0, 12); }

std::string recorded_text(const nlohmann::json& record, const char* a, const char* b) {
  if (!record.is_object()) return {};
  auto it = record.find(a);
  if (it == record.end() || !it->is_object()) return {};
  auto s = it->find(b);
  return s != it->end() && s->is_string() ? s->get<std::string>() : std::string();
}

// ============================================================================ case matching

std::string CaseMatching::mode_of(const std::string& mode, const std::string& precision) const {
  return with_precision ? mode_label(mode, precision) : mode;
}

std::string CaseMatching::mode_of_b(const std::string& mode, const std::string& precision) const {
  std::string l = mode_of(mode, precision);
  auto it = b_to_a.find(l);
  return it == b_to_a.end() ? l : it->second;
}

namespace {
// The labels of a run's cases in first-seen order, each with its mode name.
std::vector<std::pair<std::string, std::string>> case_labels(const AuditReport& r, const CaseMatching& m) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  for (const auto& c : r.cases) {
    std::string l = m.mode_of(c.mode, c.precision);
    if (seen.insert(l).second) out.push_back({l, c.mode});
  }
  return out;
}
}  // namespace

CaseMatching match_cases(const AuditReport& a, const AuditReport& b) {
  CaseMatching m;
  for (const auto& c : a.cases) m.with_precision = m.with_precision || !c.precision.empty();
  // ---- labels only one run has: mapped across a deliberate change where the pairing is unambiguous
  const auto la = case_labels(a, m), lb = case_labels(b, m);
  std::set<std::string> names_a, names_b;
  for (const auto& x : la) names_a.insert(x.first);
  for (const auto& x : lb) names_b.insert(x.first);
  std::vector<std::pair<std::string, std::string>> only_a, only_b;
  for (const auto& x : la)
    if (!names_b.count(x.first)) only_a.push_back(x);
  for (const auto& x : lb)
    if (!names_a.count(x.first)) only_b.push_back(x);
  auto pair_up = [&](size_t i, size_t j) {
    m.b_to_a[only_b[j].first] = only_a[i].first;
    m.mapped.push_back(only_a[i].first + " -> " + only_b[j].first);
    only_a.erase(only_a.begin() + static_cast<std::ptrdiff_t>(i));
    only_b.erase(only_b.begin() + static_cast<std::ptrdiff_t>(j));
  };
  auto count_mode = [](const std::vector<std::pair<std::string, std::string>>& v, const std::string& mode) {
    return std::count_if(v.begin(), v.end(), [&](const auto& x) { return x.second == mode; });
  };
  for (size_t i = 0; i < only_a.size();) {  // 1. the same mode at another precision
    const std::string& mode = only_a[i].second;
    auto j = std::find_if(only_b.begin(), only_b.end(), [&](const auto& x) { return x.second == mode; });
    if (j != only_b.end() && count_mode(only_a, mode) == 1 && count_mode(only_b, mode) == 1)
      pair_up(i, static_cast<size_t>(j - only_b.begin()));
    else
      ++i;
  }
  if (only_a.size() == 1 && only_b.size() == 1) pair_up(0, 0);  // 2. one mode or endpoint for another

  using Key = std::tuple<std::string, std::string, std::string>;
  auto key_a = [&](const CaseResult& c) { return Key{c.prompt_id, c.decoding_id, m.mode_of(c.mode, c.precision)}; };
  auto key_b = [&](const CaseResult& c) { return Key{c.prompt_id, c.decoding_id, m.mode_of_b(c.mode, c.precision)}; };
  std::map<Key, const CaseResult*> in_b;
  for (const auto& c : b.cases) in_b[key_b(c)] = &c;
  std::set<Key> in_a;
  for (const auto& ca : a.cases) {
    in_a.insert(key_a(ca));
    auto it = in_b.find(key_a(ca));
    m.cases.push_back({&ca, it == in_b.end() ? nullptr : it->second});
  }
  for (const auto& cb : b.cases)
    if (!in_a.count(key_b(cb))) m.cases.push_back({nullptr, &cb});
  return m;
}

// ============================================================================ drift

namespace {
std::string short_value(const nlohmann::json& v) {
  if (v.is_null()) return "(none)";
  std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (v.is_string() && s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos) s = short_hash(s);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}
const nlohmann::json& at(const nlohmann::json& j, const char* a, const char* b = nullptr) {
  static const nlohmann::json null;
  if (!j.is_object() || !j.contains(a)) return null;
  const auto& x = j[a];
  if (!b) return x;
  return x.is_object() && x.contains(b) ? x[b] : null;
}
}  // namespace

std::vector<std::string> config_drift(const AuditReport& a, const AuditReport& b) {
  std::vector<std::string> out;
  auto cmp = [&](const std::string& what, const nlohmann::json& x, const nlohmann::json& y) {
    if (x != y) out.push_back(what + " " + short_value(x) + " -> " + short_value(y));
  };
  // The endpoints' engine, version, posture and server flags first: they explain what follows.
  for (const auto& ea : a.evidence)
    for (const auto& eb : b.evidence) {
      if (ea.endpoint != eb.endpoint && !(a.evidence.size() == 1 && b.evidence.size() == 1)) continue;
      const EndpointPosture& pa = ea.posture;
      const EndpointPosture& pb = eb.posture;
      const std::string who = "endpoint '" + eb.endpoint + "' ";
      cmp(who + "engine", pa.engine, pb.engine);
      cmp(who + "engine version", pa.version, pb.version);
      cmp(who + "deterministic mode", pa.deterministic, pb.deterministic);
      cmp(who + "batch invariance", pa.batch_invariance, pb.batch_invariance);
      std::set<std::string> flags;
      for (const auto* info : {&pa.info, &pb.info})
        if (info->is_object())
          for (auto it = info->begin(); it != info->end(); ++it) flags.insert(it.key());
      for (const auto& f : flags) cmp(who + f, at(pa.info, f.c_str()), at(pb.info, f.c_str()));
      cmp(who + "system_fingerprint", pa.system_fingerprint, pb.system_fingerprint);
    }
  cmp("tool version", at(a.environment, "tool", "version"), at(b.environment, "tool", "version"));
  cmp("cpu", at(a.environment, "cpu", "model"), at(b.environment, "cpu", "model"));
  cmp("model digest", at(a.environment, "digests", "model_sha256"), at(b.environment, "digests", "model_sha256"));
  cmp("profile digest", at(a.environment, "digests", "profile_sha256"), at(b.environment, "digests", "profile_sha256"));
  cmp("chat template", at(a.environment, "model", "chat_template"), at(b.environment, "model", "chat_template"));
  cmp("chat template digest", at(a.environment, "model", "chat_template_sha256"),
      at(b.environment, "model", "chat_template_sha256"));
  // Prompts: the one digest, recomputed from each report's own prompts, so a report that recorded an
  // earlier form of the digest compares by its prompts, not by how it hashed them.
  cmp("prompts digest", prompts_digest(report_prompts(a)), prompts_digest(report_prompts(b)));
  auto without_posture = [](nlohmann::json eps) {  // the posture was compared above, field by field
    if (eps.is_array())
      for (auto& e : eps)
        if (e.is_object()) e.erase("posture");
    return eps;
  };
  // Local against remote: the rule each side encoded completion prompts' special-token text with
  // (the local plan's parse_special, each endpoint's parse_special), so a comparison of the two says
  // whether it compared the same token sequences.
  auto special_rule = [](const AuditReport& r) -> nlohmann::json {
    const nlohmann::json& eps = at(r.environment, "endpoints");
    if (eps.is_array()) {
      nlohmann::json m = nlohmann::json::object();
      for (const auto& e : eps)
        if (e.is_object()) m[e.value("label", std::string())] = e.value("parse_special", std::string("unknown"));
      return m;
    }
    const nlohmann::json& p = at(r.plan, "parse_special");
    return p.is_boolean() && p.get<bool>() ? "yes" : "no";
  };
  if (at(a.environment, "endpoints").is_array() != at(b.environment, "endpoints").is_array())
    cmp("special-token text in completion prompts parsed", special_rule(a), special_rule(b));
  cmp("endpoints", without_posture(at(a.environment, "endpoints")), without_posture(at(b.environment, "endpoints")));
  std::set<std::string> keys;
  for (const auto* p : {&a.plan, &b.plan})
    if (p->is_object())
      for (auto it = p->begin(); it != p->end(); ++it) keys.insert(it.key());
  // Reports written before TP was a plan axis ran at TP 1 (ring): the same plan as "tp": [1]; before
  // devices was one, on one device: "devices": [].
  auto plan_value = [](const AuditReport& r, const std::string& k) -> nlohmann::json {
    const nlohmann::json& v = at(r.plan, k.c_str());
    if (v.is_null() && r.plan.is_object() && !at(r.environment, "endpoints").is_array()) {
      if (k == "tp") return nlohmann::json::array({1});
      if (k == "allreduce") return nlohmann::json::array({"ring"});
      if (k == "devices") return nlohmann::json::array();  // ... and on one device
      if (k == "speculative") return nlohmann::json::array();  // ... and without speculation
    }
    return v;
  };
  for (const auto& k : keys)
    if (k != "prompt_ids") cmp("plan." + k, plan_value(a, k), plan_value(b, k));
  return out;
}

Drift compute_drift(const AuditReport& a, const AuditReport& b) {
  auto majority = [](const CaseResult& c) { return c.clusters.empty() ? std::string() : c.clusters[0].hash; };
  auto verdict = [](const CaseResult& c) { return c.n == 0 ? std::string("reproducible") : case_verdict(c); };
  const CaseMatching m = match_cases(a, b);
  auto label = [&](const CaseResult& c) { return m.mode_of(c.mode, c.precision); };
  auto label_b = [&](const CaseResult& c) { return m.mode_of_b(c.mode, c.precision); };
  Drift d;
  d.verdict_a = a.summary.verdict;
  d.verdict_b = b.summary.verdict;
  d.mapped = m.mapped;
  d.config = config_drift(a, b);
  for (const auto& x : m.mapped) d.config.push_back("cases of " + x + " compared across the change");
  for (const auto& [pa, pb] : m.cases) {
    if (!pa) {
      d.cases.push_back({pb->prompt_id, pb->decoding_id, label_b(*pb), "added", {}});
      continue;
    }
    const CaseResult& ca = *pa;
    if (!pb) {
      d.cases.push_back({ca.prompt_id, ca.decoding_id, label(ca), "removed", {}});
      continue;
    }
    const CaseResult& cb = *pb;
    CaseDrift cd{ca.prompt_id, ca.decoding_id, label(ca), "changed", {}};
    if (majority(ca) != majority(cb))
      cd.what.push_back("majority output " + short_hash(majority(ca)) + " -> " + short_hash(majority(cb)));
    if (ca.unique != cb.unique) cd.what.push_back(fmt::format("unique {} -> {}", ca.unique, cb.unique));
    if (verdict(ca) != verdict(cb)) cd.what.push_back("verdict " + verdict(ca) + " -> " + verdict(cb));
    if (ca.structured && cb.structured) {  // structured output: conformance and JSON agreement
      const StructuredCase& sa = *ca.structured;
      const StructuredCase& sb = *cb.structured;
      if (sa.valid.k != sb.valid.k || sa.valid.n != sb.valid.n)
        cd.what.push_back(fmt::format("schema-valid {} of {} -> {} of {}", sa.valid.k, sa.valid.n, sb.valid.k, sb.valid.n));
      if (sa.tara_json != sb.tara_json)
        cd.what.push_back(fmt::format("TARa@N (parsed JSON) {} -> {}", sa.tara_json ? "yes" : "no", sb.tara_json ? "yes" : "no"));
    }
    if (cd.what.empty())
      d.unchanged++;
    else
      d.cases.push_back(std::move(cd));
  }
  return d;
}

// ============================================================================ the baseline section

BaselineResult baseline_result(const Drift& d, const std::string& file, const std::string& digest, bool digest_ok) {
  BaselineResult b;
  b.file = file;
  b.report_sha256 = digest;
  b.digest_ok = digest_ok;
  b.drifted = d.drifted();
  b.config_changes = d.config;
  if (d.verdict_a != d.verdict_b) b.changes.push_back("verdict " + d.verdict_a + " -> " + d.verdict_b);
  for (const auto& c : d.cases) {
    std::string line = fmt::format("{} {} [{}] {}", c.change, c.prompt_id, c.decoding_id, c.mode);
    for (size_t i = 0; i < c.what.size(); ++i) line += (i == 0 ? ": " : ", ") + c.what[i];
    b.changes.push_back(line);
  }
  return b;
}

}  // namespace repro
