// JSON report writer (canonical, schema repro-audit/report/v1, see docs/REPORT-SCHEMA.md) and
// write_reports, which writes every requested format.
#include <cmath>
#include <filesystem>
#include <system_error>

#include "repro/common/error.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"

namespace repro {

using nlohmann::json;

namespace {

// Non-finite floats have no JSON form: they are written as null (read back as -inf for logprobs).
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json opt_num(const std::optional<float>& v) { return v ? num(*v) : json(nullptr); }

json completion_json(const Completion& c) {
  json j;
  j["prompt_id"] = c.prompt_id;
  j["decoding"] = c.decoding_id;
  j["mode"] = c.mode;
  j["batch_size"] = c.batch_size;
  j["position"] = c.position;
  j["filler_set"] = c.filler_set;
  j["filler_ids"] = c.filler_ids;
  j["seed"] = c.seed;
  j["repeat"] = c.repeat;
  j["cache_state"] = c.cache_state;
  j["tokens_known"] = c.tokens_known;
  j["tokens"] = c.tokens;
  j["text"] = c.text;
  json lp = json::array();
  for (float f : c.logprobs) lp.push_back(num(f));
  j["logprobs"] = lp;
  j["logits_sha256"] = c.logits_sha256;
  j["finish_reason"] = c.finish_reason;
  j["latency_s"] = num(c.latency_s);
  j["ttft_s"] = num(c.ttft_s);
  j["tokens_per_s"] = num(c.tokens_per_s);
  j["prompt_tokens"] = c.prompt_tokens;
  j["completion_tokens"] = c.completion_tokens;
  j["system_fingerprint"] = c.system_fingerprint;
  j["response_model"] = c.response_model;
  j["response_id"] = c.response_id;
  j["created"] = c.created;
  j["error"] = c.error;
  j["attempts"] = c.attempts;
  return j;
}

json factor_json(const FactorTable& t) {
  return json{{"factor", t.factor}, {"values", t.values}, {"counts", t.counts}, {"explains", t.explains}};
}

json cluster_json(const Cluster& c) {
  json j;
  j["hash"] = c.hash;
  j["count"] = c.count;
  j["majority"] = c.majority;
  j["members"] = c.members;
  j["text"] = c.text;
  j["tokens"] = c.tokens;
  j["first_divergence_token"] = c.first_divergence_token;
  j["first_divergence_char"] = c.first_divergence_char;
  j["majority_token"] = c.majority_token;
  j["cluster_token"] = c.cluster_token;
  j["majority_logprob"] = opt_num(c.majority_logprob);
  j["cluster_logprob"] = opt_num(c.cluster_logprob);
  j["family"] = c.family;
  j["distance_to_majority"] = num(c.distance_to_majority);
  j["bit_variants"] = c.bit_variants;
  j["answer"] = c.answer ? json(*c.answer) : json(nullptr);
  return j;
}

json case_json(const CaseResult& c) {
  json j;
  j["prompt_id"] = c.prompt_id;
  j["decoding"] = c.decoding_id;
  j["mode"] = c.mode;
  j["n"] = c.n;
  j["errors"] = c.errors;
  j["unique"] = c.unique;
  j["tarr"] = c.tarr;
  if (c.tara) {
    j["tara"] = *c.tara;
    j["answer_unique"] = c.answer_unique;
    j["answer_missing"] = c.answer_missing;
  }
  j["bit_divergent"] = c.bit_divergent;
  j["bit_unique"] = c.bit_unique;
  j["divergent"] = c.divergent;
  j["failed"] = c.failed;
  json cl = json::array();
  for (const auto& x : c.clusters) cl.push_back(cluster_json(x));
  j["clusters"] = cl;
  json f = json::array();
  for (const auto& x : c.factors) f.push_back(factor_json(x));
  j["factors"] = f;
  return j;
}

// A digest recorded by the runner in the environment, as environment[key] or environment[obj][sub].
void copy_digest(const json& env, json& digests, const char* out, const char* key, const char* obj) {
  if (!env.is_object()) return;
  if (auto it = env.find(key); it != env.end() && it->is_string()) {
    digests[out] = *it;
    return;
  }
  if (auto it = env.find(obj); it != env.end() && it->is_object())
    if (auto s = it->find("sha256"); s != it->end() && s->is_string()) digests[out] = *s;
}

std::string dump_compact(const json& j) { return canonical_json_compact(j); }

}  // namespace

// nlohmann::json objects are std::maps, so keys come out sorted at every depth.
std::string canonical_json(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"; }
std::string canonical_json_compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json to_json_value(const AuditReport& r) {
  json j;
  j["schema"] = kReportSchema;
  j["created"] = r.created;
  j["profile"] = r.profile;
  j["plan"] = r.plan;
  j["thresholds"] = json{{"max_divergent", r.thresholds.max_divergent},
                         {"min_tarr", num(r.thresholds.min_tarr)},
                         {"modes", r.thresholds.modes},
                         {"max_error_rate", num(r.thresholds.max_error_rate)}};
  j["answer_regex"] = r.answer_regex;
  j["answer_json_path"] = r.answer_json_path;

  const Summary& s = r.summary;
  json modes = json::array();
  for (const auto& m : s.modes) {
    modes.push_back(json{{"mode", m.mode},
                         {"cases", m.cases},
                         {"divergent_cases", m.divergent_cases},
                         {"tarr_rate", num(m.tarr_rate)},
                         {"mean_unique", num(m.mean_unique)},
                         {"bit_divergent_share", num(m.bit_divergent_share)},
                         {"throughput_ratio", m.throughput_ratio ? num(*m.throughput_ratio) : json(nullptr)},
                         {"errors", m.errors},
                         {"gated", m.gated},
                         {"verdict", m.verdict}});
  }
  j["summary"] = json{{"cases", s.cases},
                      {"divergent_cases", s.divergent_cases},
                      {"max_unique", s.max_unique},
                      {"completions", s.completions},
                      {"errors", s.errors},
                      {"verdict", s.verdict},
                      {"interrupted", s.interrupted},
                      {"modes", modes}};

  json cases = json::array();
  for (const auto& c : r.cases) cases.push_back(case_json(c));
  j["cases"] = cases;

  json cross = json::array();
  for (const auto& x : r.cross_mode)
    cross.push_back(json{{"prompt_id", x.prompt_id},
                         {"decoding", x.decoding_id},
                         {"hashes", x.hashes},
                         {"table", factor_json(x.table)}});
  j["cross_mode"] = cross;

  json tp = json::array();
  for (const auto& t : r.throughput)
    tp.push_back(json{{"mode", t.mode},
                      {"batch_size", t.batch_size},
                      {"tokens", t.tokens},
                      {"seconds", num(t.seconds)},
                      {"tokens_per_s", num(t.tokens_per_s)},
                      {"ratio", t.ratio_vs_default ? num(*t.ratio_vs_default) : json(nullptr)}});
  j["throughput"] = tp;

  json comps = json::array();
  for (const auto& c : r.completions) comps.push_back(completion_json(c));
  j["completions"] = comps;
  j["environment"] = r.environment.is_null() ? json::object() : r.environment;
  j["prompts"] = r.prompts;

  json digests = json::object();
  digests["prompts_sha256"] = sha256_hex(dump_compact(json(r.prompts)));
  copy_digest(r.environment, digests, "model_sha256", "model_sha256", "model");
  copy_digest(r.environment, digests, "profile_sha256", "profile_sha256", "profile");
  j["digests"] = digests;
  return j;
}

std::string to_json(const AuditReport& r) {
  json j = to_json_value(r);
  j["digests"]["report_sha256"] = sha256_hex(dump_compact(j));
  return canonical_json(j);
}

// ============================================================================ write_reports

namespace {
struct FormatInfo {
  const char* name;
  const char* file;
  std::string (*render)(const AuditReport&);
};
const FormatInfo kFormats[] = {
    {"json", "report.json", to_json},
    {"md", "report.md", to_markdown},
    {"markdown", "report.md", to_markdown},
    {"html", "report.html", to_html},
    {"junit", "report.junit.xml", to_junit},
};
const char* kAllowed = "json, md, html, junit (optionally FORMAT=PATH, '-' for stdout)";

const FormatInfo* find_format(const std::string& name) {
  for (const auto& f : kFormats)
    if (name == f.name) return &f;
  return nullptr;
}
}  // namespace

std::vector<std::string> parse_formats(const std::string& csv) {
  std::vector<std::string> out;
  for (auto& part : split(csv, ',')) {
    std::string f = trim(part);
    if (f.empty()) continue;
    std::string name = f.substr(0, f.find('='));
    if (!find_format(name))
      throw UsageError("--format: unknown format '" + name + "'; allowed: " + kAllowed);
    out.push_back(f);
  }
  if (out.empty()) throw UsageError("--format: no format given; allowed: " + std::string(kAllowed));
  return out;
}

std::vector<std::string> write_reports(const AuditReport& r, const std::string& out_dir,
                                       const std::vector<std::string>& formats) {
  // Every format is rendered from the JSON document (written, then read back), so Markdown, HTML
  // and JUnit say exactly what report.json says (text that is not valid UTF-8 shows as U+FFFD in
  // all of them), and `verify` can check them by rendering them again from report.json.
  const std::string json_text = to_json(r);
  const AuditReport doc = from_json(json_text, "report.json (in memory)");
  std::vector<std::string> written;
  bool dir_made = false;
  for (const auto& spec : formats) {
    size_t eq = spec.find('=');
    std::string name = spec.substr(0, eq);
    const FormatInfo* f = find_format(name);
    if (!f) throw UsageError("--format: unknown format '" + name + "'; allowed: " + kAllowed);
    std::string path;
    if (eq != std::string::npos) {
      path = spec.substr(eq + 1);
      if (path.empty()) throw UsageError("--format " + spec + ": empty path; give FORMAT=PATH or '-' for stdout");
    } else if (out_dir == "-") {
      path = "-";
    } else {
      if (out_dir.empty()) throw UsageError("--out: empty directory; give a directory or '-' for stdout");
      if (!dir_made) {
        std::error_code ec;
        std::filesystem::create_directories(out_dir, ec);
        if (ec || !std::filesystem::is_directory(out_dir))
          throw UsageError("--out '" + out_dir + "': cannot create directory (" +
                           (ec ? ec.message() : std::string("a file is in the way")) +
                           "); choose a writable directory");
        dir_made = true;
      }
      path = (std::filesystem::path(out_dir) / f->file).string();
    }
    write_file_atomic(path, f->render == to_json ? json_text : f->render(doc));
    written.push_back(path);
  }
  return written;
}

}  // namespace repro
