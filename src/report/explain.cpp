// Explanatory text shared by the Markdown and HTML reports: token and prompt text instead of bare ids,
// the answer extractor's misses in words, the environment record, endpoint metadata (TTFT,
// system_fingerprint) and throughput with the statistics of its measurements. Plain text; each writer
// escapes it.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "repro/audit/analysis.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {

using nlohmann::json;

// At most `max_chars` UTF-8 characters of s, "…" appended when cut.
std::string first_chars(const std::string& s, size_t max_chars) {
  size_t i = 0, chars = 0;
  while (i < s.size() && chars < max_chars) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    ++chars;
  }
  return i < s.size() ? s.substr(0, i) + "…" : s;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

const json& obj(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string join(const std::vector<std::string>& parts, const char* sep = ", ") {
  std::string o;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    if (!o.empty()) o += sep;
    o += p;
  }
  return o;
}

std::string with_thousands(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) o += ',';
    o += d[i];
  }
  return v < 0 ? "-" + o : o;
}

// Modes of the report that are endpoints: labels in environment.endpoints, or (a report without that
// record) a mode without precision that is not one of the local engine's modes.
bool is_endpoint(const AuditReport& r, const std::string& mode, const std::string& precision) {
  const json& eps = obj(r.environment, "endpoints");
  if (eps.is_array()) {
    for (const auto& e : eps)
      if (str(e, "label") == mode) return true;
    return false;
  }
  return precision.empty() && mode != "default" && mode != "batch-invariant" && mode != "deterministic" &&
         mode != "tp-invariant";
}

std::string lp(const std::optional<float>& v) { return v ? fmt::format(", logprob {:.4f}", *v) : ""; }

}  // namespace

std::string token_label(const AuditReport& r, int id) {
  if (id < 0) return "end of text";
  auto it = r.token_text.find(std::to_string(id));
  if (it == r.token_text.end()) return fmt::format("id {}", id);
  return fmt::format("{} (id {})", quoted(it->second), id);
}

std::string prompt_snippet(const AuditReport& r, const std::string& prompt_id, size_t max_chars) {
  auto it = r.prompts.find(prompt_id);
  if (it == r.prompts.end() || it->second.empty()) return prompt_id;
  return quoted(first_chars(display_text(it->second), max_chars));
}

std::string divergence_label(const AuditReport& r, const CaseResult& c, const Cluster& k) {
  if (k.majority) return "";
  if (k.first_divergence_token >= 0 && (k.majority_token >= 0 || k.cluster_token >= 0))
    return fmt::format("token {}: {}{} vs {}{}", k.first_divergence_token, token_label(r, k.majority_token),
                       lp(k.majority_logprob), token_label(r, k.cluster_token), lp(k.cluster_logprob));
  if (k.first_divergence_char >= 0) {
    const Cluster* maj = nullptr;
    for (const auto& m : c.clusters)
      if (m.majority) maj = &m;
    auto rest = [&](const std::string& t) {
      size_t at = std::min(static_cast<size_t>(k.first_divergence_char), t.size());
      while (at > 0 && at < t.size() && (static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) --at;
      std::string s = t.substr(at);
      return s.empty() ? std::string("end of text") : quoted(first_chars(display_text(s), 16));
    };
    std::string where = k.first_divergence_token >= 0 ? fmt::format("token {}, char {}", k.first_divergence_token,
                                                                     k.first_divergence_char)
                                                      : fmt::format("char {}", k.first_divergence_char);
    return fmt::format("{}: {} vs {}", where, maj ? rest(maj->text) : std::string("?"), rest(k.text));
  }
  return fmt::format("token {}", k.first_divergence_token);
}

std::string answer_status(const CaseResult& c) {
  if (!c.tara) return "";
  const int present = c.n - c.answer_missing;
  const int distinct = c.answer_unique - (c.answer_missing > 0 ? 1 : 0);  // "no answer" is not an answer
  if (c.n > 0 && c.answer_missing == c.n)
    return fmt::format("TARa@N = no: answer missing in {}/{} (the extractor matched none of the completions)",
                       c.answer_missing, c.n);
  std::string s = fmt::format("TARa@N = {} ({} distinct answer{}", *c.tara ? "yes" : "no", distinct,
                              distinct == 1 ? "" : "s");
  if (c.answer_missing > 0) s += fmt::format(" among {}; answer missing in {}/{}", present, c.answer_missing, c.n);
  return s + ")";
}

std::vector<std::pair<std::string, std::string>> environment_rows(const AuditReport& r) {
  std::vector<std::pair<std::string, std::string>> rows;
  const json& env = r.environment;
  auto add = [&](const std::string& what, const std::string& value) {
    if (!value.empty()) rows.emplace_back(what, value);
  };
  // tool
  const json& tool = obj(env, "tool");
  if (tool.is_object()) {
    const json& b = obj(tool, "build");
    std::string build = join({str(b, "compiler"), str(b, "build_type")});
    add("tool", join({str(tool, "name") + " " + str(tool, "version"),
                      str(tool, "commit").empty() ? "" : "commit " + str(tool, "commit"), build}));
  } else {  // older or hand-made records: "tool" and "version" as strings
    add("tool", join({str(env, "tool") + (str(env, "version").empty() ? "" : " " + str(env, "version"))}));
  }
  // model and digests
  const json& model = obj(env, "model");
  if (model.is_object()) {
    std::string path = str(model, "path");
    std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    std::string params;
    if (auto it = model.find("parameters"); it != model.end() && it->is_number_integer())
      params = with_thousands(it->get<int64_t>()) + " parameters";
    add("model", name + " (" + join({str(model, "format"), str(model, "arch"), params, str(model, "tokenizer")}) + ")");
    add("model file", path);
  }
  const json& dig = obj(env, "digests");
  std::string model_sha = str(model, "sha256");
  if (model_sha.empty()) model_sha = str(dig, "model_sha256");
  if (model_sha.empty()) model_sha = str(env, "model_sha256");
  add("model SHA-256", model_sha);
  add("prompts SHA-256", str(dig, "prompts_sha256"));
  add("profile SHA-256", str(dig, "profile_sha256"));
  // engine
  const json& eng = obj(env, "engine");
  if (eng.is_object()) {
    std::vector<std::string> precs;
    if (const json& p = obj(eng, "precisions"); p.is_array())
      for (const auto& x : p)
        if (x.is_string()) precs.push_back(x.get<std::string>());
    add("engine", join({"device " + str(eng, "device"), str(eng, "threads").empty() ? "" : "threads " + str(eng, "threads"),
                        precs.empty() ? "" : "precisions " + join(precs, " ")}));
  } else if (!str(env, "threads").empty()) {
    add("threads", str(env, "threads"));
  }
  // BLAS
  const json& blas = obj(env, "blas");
  if (blas.is_object()) {
    std::string config = str(blas, "config");
    add("BLAS", join({config.empty() ? str(blas, "library") + " " + str(blas, "version") : config,
                      str(blas, "threads").empty() ? "" : "threads " + str(blas, "threads")}));
  }
  // CPU
  const json& cpu = obj(env, "cpu");
  if (cpu.is_object()) {
    std::vector<std::string> feats;
    if (const json& f = obj(cpu, "features"); f.is_array())
      for (const auto& x : f)
        if (x.is_string()) feats.push_back(x.get<std::string>());
    add("CPU", join({str(cpu, "model"), str(cpu, "logical_cores").empty() ? "" : str(cpu, "logical_cores") + " logical cores",
                     feats.empty() ? "" : "features " + join(feats, " "),
                     str(cpu, "invariant_kernels").empty() ? "" : "invariant kernels " + str(cpu, "invariant_kernels")}));
  }
  // GPU
  const json& gpu = obj(env, "gpu");
  if (gpu.is_object()) {
    const json& dev = obj(gpu, "device");
    std::string device = dev.is_object() ? join({str(dev, "name"), str(dev, "compute_capability").empty()
                                                                     ? ""
                                                                     : "compute capability " + str(dev, "compute_capability")})
                                         : str(gpu, "device");
    std::vector<std::string> parts{device};
    if (dev.is_object()) {
      if (std::string d = str(gpu, "driver_version"); !d.empty() && d != "0") parts.push_back("driver " + d);
      if (std::string rt = str(gpu, "runtime_version"); !rt.empty() && rt != "0") parts.push_back("CUDA runtime " + rt);
      if (std::string cb = str(gpu, "cublas_version"); !cb.empty()) parts.push_back("cuBLAS " + cb);
    }
    if (std::string nd = str(gpu, "nvidia_driver"); !nd.empty()) parts.push_back("NVIDIA driver " + nd);
    add("GPU", join(parts));
  }
  // OS
  const json& os = obj(env, "os");
  if (os.is_object())
    add("OS", join({str(os, "distribution"), str(os, "sysname") + " " + str(os, "release"), str(os, "machine")}));
  // endpoints
  if (const json& eps = obj(env, "endpoints"); eps.is_array())
    for (const auto& e : eps)
      add("endpoint " + str(e, "label"),
          join({str(e, "url"), str(e, "provider"), str(e, "api"),
                str(e, "api_model").empty() ? "" : "model " + str(e, "api_model"),
                str(e, "stream") == "true" ? "streaming" : ""}));
  // environment variables that change results, and known risks
  if (const json& vars = obj(env, "environment_variables"); vars.is_object() && !vars.empty()) {
    std::vector<std::string> kv;
    for (auto it = vars.begin(); it != vars.end(); ++it)
      kv.push_back(it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump()));
    add("environment variables", join(kv, " "));
  }
  if (const json& risks = obj(env, "nondeterminism_risks"); risks.is_array())
    for (const auto& x : risks)
      if (x.is_string()) add("risk", x.get<std::string>());
  return rows;
}

TextTable endpoint_table(const AuditReport& r) {
  struct Acc {
    int requests = 0, with_ttft = 0;
    double ttft_sum = 0, ttft_min = 0, ttft_max = 0;
    std::map<std::string, int> fingerprints, models;
  };
  std::vector<std::string> order;
  std::map<std::string, Acc> acc;
  bool any = false;
  for (const auto& c : r.completions) {
    if (!c.error.empty() || !is_endpoint(r, c.mode, c.precision)) continue;
    if (!acc.count(c.mode)) order.push_back(c.mode);
    Acc& a = acc[c.mode];
    a.requests += 1;
    if (c.ttft_s > 0) {
      a.ttft_min = a.with_ttft == 0 ? c.ttft_s : std::min(a.ttft_min, c.ttft_s);
      a.ttft_max = a.with_ttft == 0 ? c.ttft_s : std::max(a.ttft_max, c.ttft_s);
      a.ttft_sum += c.ttft_s;
      a.with_ttft += 1;
      any = true;
    }
    if (!c.system_fingerprint.empty()) a.fingerprints[c.system_fingerprint] += 1, any = true;
    if (!c.response_model.empty()) a.models[c.response_model] += 1;
  }
  TextTable t;
  if (!any) return t;
  t.head = {"endpoint", "completions", "time to first token (mean, min-max)", "system_fingerprint (responses)",
            "model (responses)"};
  auto counts = [](const std::map<std::string, int>& m) {
    if (m.empty()) return std::string("not sent");
    std::vector<std::string> parts;
    for (const auto& [k, n] : m) parts.push_back(fmt::format("{} x{}", display_text(k), n));
    return join(parts) + (m.size() > 1 ? fmt::format(" ({} values: the backend changed during the run)", m.size()) : "");
  };
  for (const auto& mode : order) {
    const Acc& a = acc[mode];
    std::string ttft = a.with_ttft == 0 ? "not measured (non-streaming)"
                                        : fmt::format("{:.1f} ms, {:.1f}-{:.1f} ms ({} of {} streamed)",
                                                      1e3 * a.ttft_sum / a.with_ttft, 1e3 * a.ttft_min,
                                                      1e3 * a.ttft_max, a.with_ttft, a.requests);
    std::map<std::string, int> models = a.models;
    t.rows.push_back({mode, std::to_string(a.requests), ttft, counts(a.fingerprints),
                      models.empty() ? std::string("not sent") : counts(models)});
  }
  return t;
}

TextTable throughput_table(const AuditReport& r) {
  TextTable t;
  bool all_endpoints = !r.throughput.empty();
  for (const auto& row : r.throughput) all_endpoints = all_endpoints && is_endpoint(r, row.mode, row.precision);
  t.head = {"mode", all_endpoints ? "concurrency" : "batch size", "measures", "tokens", "seconds", "tokens/s", "runs",
            "per run: mean ± sd", "min-max", "vs " + speed_baseline(r) + " (mean ± sd over cells)"};
  for (const auto& row : r.throughput) {
    bool ep = is_endpoint(r, row.mode, row.precision);
    bool noisy = row.runs > 1 && row.mean_tokens_per_s > 0 && row.stddev_tokens_per_s / row.mean_tokens_per_s > kNoisyCv;
    t.rows.push_back(
        {mode_label(row.mode, row.precision), std::to_string(row.batch_size),
         ep ? "probe only (fillers not counted)" : "whole batch", std::to_string(row.tokens),
         fmt::format("{:.3f}", row.seconds), fmt::format("{:.1f}", row.tokens_per_s),
         row.runs > 0 ? std::to_string(row.runs) : "-",
         row.runs > 1 ? fmt::format("{:.1f} ± {:.1f}{}", row.mean_tokens_per_s, row.stddev_tokens_per_s, noisy ? " *" : "")
         : row.runs == 1 ? fmt::format("{:.1f}", row.mean_tokens_per_s)
                         : "-",
         row.runs > 0 ? fmt::format("{:.1f}-{:.1f}", row.min_tokens_per_s, row.max_tokens_per_s) : "-",
         row.ratio_vs_default ? fmt::format("{:.2f}x ±{:.2f}", *row.ratio_vs_default, row.ratio_sd.value_or(0))
                              : "not measured"});
  }
  return t;
}

std::vector<std::string> throughput_cost_lines(const AuditReport& r) {
  // One ratio definition everywhere (repro/audit/tradeoff.hpp): per cell against the baseline's mean in
  // the same context; mean ± sd over the mode's cells, then per batch size (concurrency level).
  std::vector<std::string> out;
  const std::string base = speed_baseline(r);
  for (const auto& m : r.summary.modes) {
    if (m.mode == base) continue;
    const bool ep = is_endpoint(r, m.mode, m.precision);
    if (!m.throughput_ratio || m.throughput_ratio_n == 0) {
      out.push_back(fmt::format("{}: throughput against {} not measured ({} did not run in the same contexts)",
                                mode_label(m.mode, m.precision), base, base));
      continue;
    }
    std::vector<std::string> per;
    for (const auto& row : r.throughput)
      if (row.mode == m.mode && row.precision == m.precision && row.ratio_vs_default)
        per.push_back(fmt::format("{}{}: {:.2f}x ±{:.2f}", per.empty() ? (ep ? "concurrency " : "batch ") : "",
                                  row.batch_size, *row.ratio_vs_default, row.ratio_sd.value_or(0)));
    std::string list = join(per);
    out.push_back(fmt::format("{}: {:.2f}x ±{:.2f} the throughput of {} (mean ± sd over {} cells, each against the "
                              "mean of {} in the same context){}{}",
                              mode_label(m.mode, m.precision), *m.throughput_ratio, m.throughput_ratio_sd.value_or(0),
                              base, m.throughput_ratio_n, base, list.empty() ? "" : "; per " + std::string(ep ? "level" : "batch size") + ": " + list,
                              ep ? "; probe requests' tokens/s only, the fillers that load the server are not counted"
                                 : ""));
  }
  return out;
}

// ---- shards (run --shard, report merge)

std::string shard_intro(const AuditReport& r) {
  if (r.shard) {
    const ShardInfo& s = *r.shard;
    return fmt::format("Shard {}/{} of plan {} ({}): {} case{} of the plan{}, on {} (environment fingerprint {}). "
                       "Merge the shards with `repro-audit report merge`.",
                       s.index, s.count, s.plan_sha256.substr(0, 12), s.source, s.cases.size(),
                       s.cases.size() == 1 ? "" : "s", s.replicate ? " (every case: --replicate-shards)" : "",
                       s.host.hostname, s.host.fingerprint.substr(0, 12));
  }
  if (!r.merge) return "";
  const MergeInfo& m = *r.merge;
  std::string o = fmt::format("Merged from {} of {} shard reports of plan {}{}, analysed as one run.", m.shards.size(),
                              m.count, m.plan_sha256.substr(0, 12),
                              m.replicate ? " (--replicate-shards: every host ran every case; the host is a factor)" : "");
  if (!m.complete) {
    std::vector<std::string> ks;
    for (int k : m.missing_shards) ks.push_back(std::to_string(k));
    o += fmt::format(" INCOMPLETE: {} shard{} missing{}{}, {} case{} of the plan without completions{}; the verdict "
                     "is never a pass.",
                     m.missing_shards.size(), m.missing_shards.size() == 1 ? "" : "s", ks.empty() ? "" : " (",
                     ks.empty() ? "" : join(ks) + ")", m.missing_cases.size(), m.missing_cases.size() == 1 ? "" : "s",
                     m.missing_cases.empty() ? "" : " (" + first_chars(join(m.missing_cases), 300) + ")");
  }
  return o;
}

TextTable shard_table(const AuditReport& r) {
  TextTable t;
  if (!r.merge) return t;
  t.head = {"shard", "report sha256", "host", "environment fingerprint", "from", "cases", "completions"};
  for (const auto& s : r.merge->shards)
    t.rows.push_back({fmt::format("{}/{}", s.index, r.merge->count), s.report_sha256.substr(0, 12),
                      s.host_label.empty() ? s.host.hostname : s.host_label, s.host.fingerprint.substr(0, 12), s.source,
                      std::to_string(s.cases), std::to_string(s.completions)});
  return t;
}

TextTable host_table(const AuditReport& r) {
  TextTable t;
  if (!r.merge || r.merge->hosts.empty()) return t;
  const std::string ref = r.merge->shards.empty() ? std::string() : r.merge->shards[0].host_label;
  t.head = {"host (against " + ref + ")", "cases", "bitwise identical", "token-divergent", "bit-divergent",
            "first difference"};
  for (const auto& h : r.merge->hosts)
    t.rows.push_back({h.host, std::to_string(h.cases), std::to_string(h.identical), std::to_string(h.token_differ),
                      std::to_string(h.bit_differ), h.first_difference.empty() ? "none" : h.first_difference});
  return t;
}

}  // namespace repro
