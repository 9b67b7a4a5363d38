// Reads a JSON report back into the AuditReport (for `report` re-rendering, `diff`, `run --baseline`).
#include <cmath>
#include <limits>

#include "repro/common/error.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"

namespace repro {

using nlohmann::json;

namespace {

// Reads optional fields with defaults; a present field of the wrong type is an error naming its path.
struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw UsageError("report '" + file + "': " + where + ": " + why +
                     "; give a report.json written by repro-audit (schema " + kReportSchema + ")");
  }
  const json* field(const json& o, const char* key, const std::string& where) const {
    if (!o.is_object()) fail(where, "expected an object");
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string str(const json& o, const char* key, const std::string& where) const {
    const json* v = field(o, key, where);
    if (!v) return {};
    if (!v->is_string()) fail(where + "." + key, "expected a string");
    return v->get<std::string>();
  }
  template <class T>
  T integer(const json& o, const char* key, const std::string& where, T def = 0) const {
    const json* v = field(o, key, where);
    if (!v) return def;
    if (!v->is_number_integer()) fail(where + "." + key, "expected an integer");
    return v->get<T>();
  }
  double number(const json& o, const char* key, const std::string& where, double def = 0) const {
    const json* v = field(o, key, where);
    if (!v) return def;
    if (!v->is_number()) fail(where + "." + key, "expected a number");
    return v->get<double>();
  }
  std::optional<double> opt_number(const json& o, const char* key, const std::string& where) const {
    const json* v = field(o, key, where);
    if (!v) return std::nullopt;
    if (!v->is_number()) fail(where + "." + key, "expected a number or null");
    return v->get<double>();
  }
  bool boolean(const json& o, const char* key, const std::string& where, bool def = false) const {
    const json* v = field(o, key, where);
    if (!v) return def;
    if (!v->is_boolean()) fail(where + "." + key, "expected true or false");
    return v->get<bool>();
  }
  const json& array(const json& o, const char* key, const std::string& where) const {
    static const json empty = json::array();
    const json* v = field(o, key, where);
    if (!v) return empty;
    if (!v->is_array()) fail(where + "." + key, "expected an array");
    return *v;
  }
  std::vector<int> ints(const json& o, const char* key, const std::string& where) const {
    std::vector<int> out;
    for (const auto& x : array(o, key, where)) {
      if (!x.is_number_integer()) fail(where + "." + key, "expected integers");
      out.push_back(x.get<int>());
    }
    return out;
  }
  std::vector<std::string> strs(const json& o, const char* key, const std::string& where) const {
    std::vector<std::string> out;
    for (const auto& x : array(o, key, where)) {
      if (!x.is_string()) fail(where + "." + key, "expected strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }
};

FactorTable read_factor(const Reader& rd, const json& j, const std::string& w) {
  FactorTable t;
  t.factor = rd.str(j, "factor", w);
  t.values = rd.strs(j, "values", w);
  for (const auto& row : rd.array(j, "counts", w)) {
    if (!row.is_array()) rd.fail(w + ".counts", "expected arrays of integers");
    std::vector<int> r;
    for (const auto& x : row) {
      if (!x.is_number_integer()) rd.fail(w + ".counts", "expected arrays of integers");
      r.push_back(x.get<int>());
    }
    t.counts.push_back(std::move(r));
  }
  t.explains = rd.boolean(j, "explains", w);
  return t;
}

}  // namespace

AuditReport from_json(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UsageError("report '" + path + "': invalid JSON at byte " + std::to_string(e.byte) +
                     "; give a report.json written by repro-audit");
  }
  Reader rd{path};
  if (!j.is_object()) rd.fail("top level", "expected an object");
  std::string schema = rd.str(j, "schema", "top level");
  if (schema != kReportSchema)
    throw UsageError("report '" + path + "': schema '" + schema + "' is not " + kReportSchema +
                     "; give a report.json written by this version of repro-audit");

  AuditReport r;
  r.schema = schema;
  r.created = rd.str(j, "created", "top level");
  r.profile = rd.str(j, "profile", "top level");
  if (auto it = j.find("plan"); it != j.end()) r.plan = *it;
  if (auto it = j.find("environment"); it != j.end()) r.environment = *it;
  r.answer_regex = rd.str(j, "answer_regex", "top level");
  r.answer_json_path = rd.str(j, "answer_json_path", "top level");
  if (const json* t = rd.field(j, "thresholds", "top level")) {
    r.thresholds.max_divergent = rd.integer<int>(*t, "max_divergent", "thresholds");
    r.thresholds.min_tarr = rd.number(*t, "min_tarr", "thresholds", 1.0);
    r.thresholds.modes = rd.strs(*t, "modes", "thresholds");
    r.thresholds.max_error_rate = rd.number(*t, "max_error_rate", "thresholds");
  }
  if (const json* p = rd.field(j, "prompts", "top level")) {
    if (!p->is_object()) rd.fail("prompts", "expected an object of id -> text");
    for (const auto& [k, v] : p->items()) {
      if (!v.is_string()) rd.fail("prompts." + k, "expected a string");
      r.prompts[k] = v.get<std::string>();
    }
  }

  if (const json* s = rd.field(j, "summary", "top level")) {
    Summary& S = r.summary;
    S.cases = rd.integer<int>(*s, "cases", "summary");
    S.divergent_cases = rd.integer<int>(*s, "divergent_cases", "summary");
    S.max_unique = rd.integer<int>(*s, "max_unique", "summary");
    S.completions = rd.integer<int>(*s, "completions", "summary");
    S.errors = rd.integer<int>(*s, "errors", "summary");
    S.verdict = rd.str(*s, "verdict", "summary");
    S.interrupted = rd.boolean(*s, "interrupted", "summary");
    int i = 0;
    for (const auto& m : rd.array(*s, "modes", "summary")) {
      std::string w = "summary.modes[" + std::to_string(i++) + "]";
      ModeSummary ms;
      ms.mode = rd.str(m, "mode", w);
      ms.cases = rd.integer<int>(m, "cases", w);
      ms.divergent_cases = rd.integer<int>(m, "divergent_cases", w);
      ms.tarr_rate = rd.number(m, "tarr_rate", w);
      ms.mean_unique = rd.number(m, "mean_unique", w);
      ms.bit_divergent_share = rd.number(m, "bit_divergent_share", w);
      ms.throughput_ratio = rd.opt_number(m, "throughput_ratio", w);
      ms.errors = rd.integer<int>(m, "errors", w);
      ms.gated = rd.boolean(m, "gated", w, true);
      ms.verdict = rd.str(m, "verdict", w);
      S.modes.push_back(ms);
    }
  }

  int ci = 0;
  for (const auto& c : rd.array(j, "cases", "top level")) {
    std::string w = "cases[" + std::to_string(ci++) + "]";
    CaseResult cr;
    cr.prompt_id = rd.str(c, "prompt_id", w);
    cr.decoding_id = rd.str(c, "decoding", w);
    cr.mode = rd.str(c, "mode", w);
    if (auto p = r.prompts.find(cr.prompt_id); p != r.prompts.end()) cr.prompt_text = p->second;
    cr.n = rd.integer<int>(c, "n", w);
    cr.errors = rd.integer<int>(c, "errors", w);
    cr.unique = rd.integer<int>(c, "unique", w);
    cr.tarr = rd.boolean(c, "tarr", w);
    if (rd.field(c, "tara", w)) cr.tara = rd.boolean(c, "tara", w);
    cr.answer_unique = rd.integer<int>(c, "answer_unique", w);
    cr.answer_missing = rd.integer<int>(c, "answer_missing", w);
    cr.bit_divergent = rd.boolean(c, "bit_divergent", w);
    cr.bit_unique = rd.integer<int>(c, "bit_unique", w);
    cr.divergent = rd.boolean(c, "divergent", w);
    cr.failed = rd.boolean(c, "failed", w);
    int k = 0;
    for (const auto& x : rd.array(c, "clusters", w)) {
      std::string wc = w + ".clusters[" + std::to_string(k++) + "]";
      Cluster cl;
      cl.hash = rd.str(x, "hash", wc);
      cl.count = rd.integer<int>(x, "count", wc);
      cl.majority = rd.boolean(x, "majority", wc);
      cl.members = rd.ints(x, "members", wc);
      cl.text = rd.str(x, "text", wc);
      cl.tokens = rd.ints(x, "tokens", wc);
      cl.first_divergence_token = rd.integer<int>(x, "first_divergence_token", wc, -1);
      cl.first_divergence_char = rd.integer<int>(x, "first_divergence_char", wc, -1);
      cl.majority_token = rd.integer<int>(x, "majority_token", wc, -1);
      cl.cluster_token = rd.integer<int>(x, "cluster_token", wc, -1);
      if (auto v = rd.opt_number(x, "majority_logprob", wc)) cl.majority_logprob = static_cast<float>(*v);
      if (auto v = rd.opt_number(x, "cluster_logprob", wc)) cl.cluster_logprob = static_cast<float>(*v);
      cl.family = rd.integer<int>(x, "family", wc);
      cl.distance_to_majority = rd.number(x, "distance_to_majority", wc);
      cl.bit_variants = rd.integer<int>(x, "bit_variants", wc, 1);
      if (rd.field(x, "answer", wc)) cl.answer = rd.str(x, "answer", wc);
      cr.clusters.push_back(std::move(cl));
    }
    k = 0;
    for (const auto& f : rd.array(c, "factors", w))
      cr.factors.push_back(read_factor(rd, f, w + ".factors[" + std::to_string(k++) + "]"));
    r.cases.push_back(std::move(cr));
  }

  int xi = 0;
  for (const auto& x : rd.array(j, "cross_mode", "top level")) {
    std::string w = "cross_mode[" + std::to_string(xi++) + "]";
    CrossModeTable t;
    t.prompt_id = rd.str(x, "prompt_id", w);
    t.decoding_id = rd.str(x, "decoding", w);
    t.hashes = rd.strs(x, "hashes", w);
    if (const json* tb = rd.field(x, "table", w)) t.table = read_factor(rd, *tb, w + ".table");
    r.cross_mode.push_back(std::move(t));
  }

  int ti = 0;
  for (const auto& t : rd.array(j, "throughput", "top level")) {
    std::string w = "throughput[" + std::to_string(ti++) + "]";
    ThroughputRow row;
    row.mode = rd.str(t, "mode", w);
    row.batch_size = rd.integer<int>(t, "batch_size", w, 1);
    row.tokens = rd.integer<int64_t>(t, "tokens", w);
    row.seconds = rd.number(t, "seconds", w);
    row.tokens_per_s = rd.number(t, "tokens_per_s", w);
    row.ratio_vs_default = rd.opt_number(t, "ratio", w);
    r.throughput.push_back(row);
  }

  int pi = 0;
  for (const auto& c : rd.array(j, "completions", "top level")) {
    std::string w = "completions[" + std::to_string(pi++) + "]";
    Completion x;
    x.prompt_id = rd.str(c, "prompt_id", w);
    x.decoding_id = rd.str(c, "decoding", w);
    x.mode = rd.str(c, "mode", w);
    x.batch_size = rd.integer<int>(c, "batch_size", w, 1);
    x.position = rd.integer<int>(c, "position", w);
    x.filler_set = rd.str(c, "filler_set", w);
    x.filler_ids = rd.strs(c, "filler_ids", w);
    x.seed = rd.integer<uint64_t>(c, "seed", w);
    x.repeat = rd.integer<int>(c, "repeat", w);
    x.cache_state = rd.str(c, "cache_state", w);
    x.tokens_known = rd.boolean(c, "tokens_known", w, true);
    x.tokens = rd.ints(c, "tokens", w);
    x.text = rd.str(c, "text", w);
    for (const auto& v : rd.array(c, "logprobs", w)) {
      if (v.is_null())
        x.logprobs.push_back(-std::numeric_limits<float>::infinity());
      else if (v.is_number())
        x.logprobs.push_back(v.get<float>());
      else
        rd.fail(w + ".logprobs", "expected numbers");
    }
    x.logits_sha256 = rd.str(c, "logits_sha256", w);
    x.finish_reason = rd.str(c, "finish_reason", w);
    x.latency_s = rd.number(c, "latency_s", w);
    x.ttft_s = rd.number(c, "ttft_s", w);
    x.tokens_per_s = rd.number(c, "tokens_per_s", w);
    x.prompt_tokens = rd.integer<int>(c, "prompt_tokens", w);
    x.completion_tokens = rd.integer<int>(c, "completion_tokens", w);
    x.system_fingerprint = rd.str(c, "system_fingerprint", w);
    x.response_model = rd.str(c, "response_model", w);
    x.response_id = rd.str(c, "response_id", w);
    x.created = rd.integer<int64_t>(c, "created", w);
    x.error = rd.str(c, "error", w);
    x.attempts = rd.integer<int>(c, "attempts", w, 1);
    r.completions.push_back(std::move(x));
  }
  return r;
}

AuditReport load_report(const std::string& path) { return from_json(read_file(path, "report"), path); }

bool verify_report_digest(const std::string& text, std::string* stored, std::string* actual) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  std::string want;
  if (auto d = j.find("digests"); d != j.end() && d->is_object()) {
    if (auto s = d->find("report_sha256"); s != d->end() && s->is_string()) want = s->get<std::string>();
    d->erase("report_sha256");
  }
  std::string got = sha256_hex(canonical_json_compact(j));
  if (stored) *stored = want;
  if (actual) *actual = got;
  return !want.empty() && want == got;
}

}  // namespace repro
