// Canary classification (see include/repro/audit/canary.hpp for the rules).
#include "repro/audit/canary.hpp"

#include <fmt/core.h>

#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "repro/audit/compare.hpp"
#include "repro/audit/distribution.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

const char* canary_level_name(CanaryLevel l) {
  switch (l) {
    case CanaryLevel::Green: return "GREEN";
    case CanaryLevel::Yellow: return "YELLOW";
    case CanaryLevel::Red: return "RED";
  }
  return "RED";
}

int canary_exit_code(CanaryLevel l) {
  switch (l) {
    case CanaryLevel::Green: return kExitOk;
    case CanaryLevel::Yellow: return kExitDivergent;
    case CanaryLevel::Red: return kExitCanaryRed;
  }
  return kExitCanaryRed;
}

namespace {

using ContextKey = std::tuple<std::string, std::string, std::string, int, int, std::string, uint64_t, int, std::string>;

// A completion's context, its mode named as the case matching names it (a baseline written before
// precisions were recorded ran one precision, and is compared by mode alone).
// `rerun`: a completion of run B, named by its counterpart in run A where the matching mapped it.
ContextKey context_key(const CaseMatching& m, const Completion& c, bool rerun) {
  return {c.prompt_id, c.decoding_id, rerun ? m.mode_of_b(c.mode, c.precision) : m.mode_of(c.mode, c.precision),
          c.batch_size, c.position, c.filler_set, c.seed, c.repeat, c.cache_state};
}
std::string case_name(const CaseMatching& m, const CaseResult& c) {
  return fmt::format("{} [{}] {}", c.prompt_id, c.decoding_id, m.mode_of(c.mode, c.precision));
}

// The bits a completion's output carries beyond its tokens: final-logits hash and logprob bits.
std::string bit_fingerprint(const Completion& c) {
  std::string f = c.logits_sha256;
  f.push_back('|');
  for (float x : c.logprobs) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    f += fmt::format("{:08x}", u);
  }
  return f;
}
bool has_bits(const Completion& c) { return !c.logits_sha256.empty() || !c.logprobs.empty(); }

std::set<std::string> token_outputs(const CaseResult& c) {
  std::set<std::string> s;
  for (const auto& k : c.clusters) s.insert(k.hash);
  return s;
}
std::set<std::string> answers(const CaseResult& c) {
  std::set<std::string> s;
  for (const auto& k : c.clusters) s.insert(k.answer ? "=" + *k.answer : std::string("(missing)"));
  return s;
}

// Per mode or endpoint: the served identity the completions report (model name, fingerprint).
std::map<std::string, std::set<std::string>> identities(const AuditReport& r, bool fingerprint) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& c : r.completions) {
    if (!c.error.empty()) continue;
    const std::string& v = fingerprint ? c.system_fingerprint : c.response_model;
    if (!v.empty()) out[c.mode].insert(v);
  }
  return out;
}
std::string join(const std::set<std::string>& s) {
  std::string o;
  for (const auto& x : s) o += (o.empty() ? "" : ",") + x;
  return o.empty() ? "(none)" : o;
}

// A case's completions as samples for the two-sample test.
std::vector<std::vector<int>> samples_of(const AuditReport& r, const CaseResult& c) {
  std::vector<std::vector<int>> out;
  for (const auto& k : c.clusters)
    for (int i : k.members)
      if (i >= 0 && i < static_cast<int>(r.completions.size())) out.push_back(sample_of(r.completions[i]));
  return out;
}

// The majority output of a case, as recorded (text; empty when the case has none).
const Completion* majority_completion(const AuditReport& r, const CaseResult& c) {
  if (c.clusters.empty() || c.clusters[0].members.empty()) return nullptr;
  int i = c.clusters[0].members[0];
  return i >= 0 && i < static_cast<int>(r.completions.size()) ? &r.completions[i] : nullptr;
}

// Where two majority outputs part, as text a person reads: the shared words just before, then each
// side's next characters ("majority parts after 'the dog': ' ran to' -> ' sat on'"), at a character
// boundary of UTF-8 and with control bytes escaped. Hashes only when the text is not recorded.
std::string first_divergence_text(const AuditReport& ra, const CaseResult& ca, const AuditReport& rb,
                                  const CaseResult& cb) {
  const Completion* a = majority_completion(ra, ca);
  const Completion* b = majority_completion(rb, cb);
  if (!a || !b) return fmt::format("majority {} -> {}", a ? short_hash(ca.clusters[0].hash) : "(no output)",
                                   b ? short_hash(cb.clusters[0].hash) : "(no output)");
  const std::string &x = a->text, &y = b->text;
  size_t p = 0;
  while (p < x.size() && p < y.size() && x[p] == y[p]) ++p;
  auto continuation = [](unsigned char ch) { return (ch & 0xC0) == 0x80; };
  while (p > 0 && ((p < x.size() && continuation(static_cast<unsigned char>(x[p]))) ||
                   (p < y.size() && continuation(static_cast<unsigned char>(y[p])))))
    --p;  // back to the start of the character that differs
  auto cut = [&](const std::string& s, size_t from, size_t n) {
    size_t end = std::min(s.size(), from + n);
    while (end < s.size() && continuation(static_cast<unsigned char>(s[end]))) ++end;
    return printable(s.substr(from, end - from));
  };
  size_t ctx = p > 24 ? p - 24 : 0;
  while (ctx > 0 && continuation(static_cast<unsigned char>(x[ctx]))) --ctx;
  auto side = [&](const std::string& s) { return p >= s.size() ? std::string("(end)") : "'" + cut(s, p, 24) + "'"; };
  if (p == 0) return fmt::format("majority output differs from its first character: {} -> {}", side(x), side(y));
  return fmt::format("majority output parts at character {} after '{}{}': {} -> {}", p, ctx > 0 ? "..." : "",
                     cut(x, ctx, p - ctx), side(x), side(y));
}

}  // namespace

CanaryResult classify_canary(const AuditReport& baseline, const AuditReport& rerun) {
  CanaryResult res;
  std::vector<std::string> red, yellow;
  const CaseMatching matched = match_cases(baseline, rerun);
  res.mapped = matched.mapped;

  // ---- the endpoints' engine, version and posture, named first: they explain what follows
  for (const auto& ea : baseline.evidence)
    for (const auto& eb : rerun.evidence) {
      if (ea.endpoint != eb.endpoint) continue;
      const EndpointPosture& pa = ea.posture;
      const EndpointPosture& pb = eb.posture;
      auto show = [](const EndpointPosture& p) { return p.engine + (p.version.empty() ? "" : " " + p.version); };
      if (pa.engine != pb.engine || pa.version != pb.version)
        red.push_back(fmt::format("{}: engine {} -> {}", eb.endpoint, show(pa), show(pb)));
      if (pa.deterministic != pb.deterministic || pa.batch_invariance != pb.batch_invariance)
        red.push_back(fmt::format("{}: posture deterministic mode {}, batch invariance {} -> deterministic mode {}, "
                                  "batch invariance {}",
                                  eb.endpoint, pa.deterministic, pa.batch_invariance, pb.deterministic,
                                  pb.batch_invariance));
    }

  // ---- identity
  const std::string ma = recorded_text(baseline.environment, "digests", "model_sha256");
  const std::string mb = recorded_text(rerun.environment, "digests", "model_sha256");
  if (ma != mb)
    red.push_back(fmt::format("model digest {} -> {}", ma.empty() ? "(none)" : short_hash(ma),
                              mb.empty() ? "(none)" : short_hash(mb)));
  // The chat template renders every chat prompt: another one (another file, --chat-template) changes
  // the prompts the model sees even with the same weights. Digests are compared where both runs
  // recorded one (reports before environment.model.chat_template_sha256 did not).
  {
    const std::string na = recorded_text(baseline.environment, "model", "chat_template");
    const std::string nb = recorded_text(rerun.environment, "model", "chat_template");
    const std::string da = recorded_text(baseline.environment, "model", "chat_template_sha256");
    const std::string db = recorded_text(rerun.environment, "model", "chat_template_sha256");
    auto show = [](const std::string& name, const std::string& digest) {
      return (name.empty() ? std::string("(none)") : name) + (digest.empty() ? "" : " sha256 " + short_hash(digest));
    };
    if (na != nb || (!da.empty() && !db.empty() && da != db))
      red.push_back(fmt::format("chat template {} -> {}", show(na, da), show(nb, db)));
  }
  for (bool fp : {false, true}) {
    auto ia = identities(baseline, fp), ib_raw = identities(rerun, fp);
    std::map<std::string, std::set<std::string>> ib;  // keyed as the baseline names the mode or endpoint
    for (auto& [mode, set_b] : ib_raw) ib[matched.with_precision ? mode : matched.mode_of_b(mode, "")] = set_b;
    for (const auto& [mode, set_a] : ia) {
      auto it = ib.find(mode);
      if (it != ib.end() && it->second != set_a)
        red.push_back(fmt::format("{} {}: {} -> {}", mode, fp ? "system_fingerprint" : "served model", join(set_a),
                                  join(it->second)));
    }
  }
  if (rerun.summary.interrupted || rerun.summary.verdict == "interrupted")
    red.push_back("the rerun was interrupted: nothing is vouched for");
  else if (rerun.summary.verdict == "errors")
    red.push_back(fmt::format("the rerun failed: {} request(s) with errors", rerun.summary.errors));

  // ---- cases: token and answer drift
  for (const auto& [pa, pb] : matched.cases) {
    if (!pa) {
      red.push_back("case " + case_name(matched, *pb) + " is new in the rerun (the plan changed)");
      continue;
    }
    const CaseResult& ca = *pa;
    if (!pb) {
      red.push_back("case " + case_name(matched, ca) + " missing from the rerun");
      continue;
    }
    const CaseResult& cb = *pb;
    res.cases_compared++;
    // Sampled outputs the seed does not control never hash-equal: compare them as distributions.
    if (sampled_decoding(ca.decoding_id) && (ca.unique > 1 || cb.unique > 1)) {
      DistributionTest t = two_sample_test(samples_of(baseline, ca), samples_of(rerun, cb));
      res.distribution_tests++;
      if (!t.note.empty())
        yellow.push_back(fmt::format("case {}: sampled outputs vary and cannot be compared as distributions: {}",
                                     case_name(matched, ca), t.note));
      else if (t.p_value < kDistributionRed || t.differs)
        (t.p_value < kDistributionRed ? red : yellow)
            .push_back(fmt::format("case {}: the sampled output distribution changed (MMD^2 {:.4f}, p = {:.3f}, "
                                   "effect {:.3f}, {} vs {} samples)",
                                   case_name(matched, ca), t.statistic, t.p_value, t.effect, t.n_reference, t.n_other));
      continue;
    }
    if (token_outputs(ca) == token_outputs(cb)) continue;
    const bool extractor = ca.tara.has_value() && cb.tara.has_value();
    if (extractor && answers(ca) == answers(cb)) {
      res.answer_preserving++;
      yellow.push_back(fmt::format("case {}: token outputs changed ({} -> {} distinct), answers unchanged ({})",
                                   case_name(matched, ca), ca.clusters.size(), cb.clusters.size(), join(answers(ca))));
    } else if (extractor) {
      res.answer_drift++;
      red.push_back(fmt::format("case {}: answers {} -> {}", case_name(matched, ca), join(answers(ca)), join(answers(cb))));
    } else {
      res.token_drift++;
      red.push_back(fmt::format("case {}: token outputs changed ({} distinct -> {}); {}", case_name(matched, ca),
                                ca.clusters.size(), cb.clusters.size(), first_divergence_text(baseline, ca, rerun, cb)));
    }
  }

  // ---- bits, context by context, where the tokens agree. The local engine gives the same bits for
  // the same context run after run; an endpoint need not, so there only cases whose bits were stable
  // in the baseline are compared (one that was already bit-divergent would flag noise, not drift).
  const bool remote = baseline.environment.is_object() && baseline.environment.contains("endpoints");
  using CaseKey = std::tuple<std::string, std::string, std::string>;  // prompt, decoding, mode as matched
  std::set<CaseKey> stable;
  for (const auto& ca : baseline.cases)
    if (!remote || (ca.bit_unique <= 1 && ca.unique <= 1))
      stable.insert(CaseKey{ca.prompt_id, ca.decoding_id, matched.mode_of(ca.mode, ca.precision)});
  std::map<ContextKey, const Completion*> base_ctx;
  for (const auto& c : baseline.completions)
    if (c.error.empty() && has_bits(c) && stable.count(CaseKey{c.prompt_id, c.decoding_id, matched.mode_of(c.mode, c.precision)}))
      base_ctx.emplace(context_key(matched, c, false), &c);
  std::map<std::string, int> bit_by_mode;
  std::map<std::string, const Completion*> first_by_mode;
  for (const auto& c : rerun.completions) {
    if (!c.error.empty() || !has_bits(c)) continue;
    auto it = base_ctx.find(context_key(matched, c, true));
    if (it == base_ctx.end()) continue;
    // same output: token ids where both know them (a report stores text with invalid UTF-8 replaced)
    const Completion& b = *it->second;
    if (b.tokens_known && c.tokens_known ? b.tokens != c.tokens : b.text != c.text) continue;
    if (bit_fingerprint(*it->second) != bit_fingerprint(c)) {
      res.bit_drift++;
      const std::string m = matched.mode_of_b(c.mode, c.precision);
      if (!bit_by_mode[m]++) first_by_mode[m] = &c;
    }
  }
  for (const auto& [mode, n] : bit_by_mode) {
    const Completion& c = *first_by_mode[mode];
    yellow.push_back(fmt::format("{}: {} completion(s) with the same tokens but other bits (first: {} [{}] batch {}, "
                                 "position {}, repeat {})",
                                 mode, n, c.prompt_id, c.decoding_id, c.batch_size, c.position, c.repeat));
  }

  for (auto& s : red) res.alarms.push_back("RED " + s);
  for (auto& s : yellow) res.alarms.push_back("YELLOW " + s);
  res.level = !red.empty() ? CanaryLevel::Red : !yellow.empty() ? CanaryLevel::Yellow : CanaryLevel::Green;
  return res;
}

std::string canary_text(const CanaryResult& c) {
  std::string out = fmt::format("canary {}: {} cases compared; token drift {}, answer drift {}, answer-preserving {}, "
                                "bit-level {}\n",
                                canary_level_name(c.level), c.cases_compared, c.token_drift, c.answer_drift,
                                c.answer_preserving, c.bit_drift);
  for (const auto& m : c.mapped) out += "  compared across the change: " + m + "\n";
  for (const auto& a : c.alarms) out += "  " + a + "\n";
  return out;
}

}  // namespace repro
