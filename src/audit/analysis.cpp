// Analysis of an audit run: see include/repro/analysis.hpp and docs/REPORT-SCHEMA.md.
#include "repro/audit/analysis.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "repro/audit/advice.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/distribution.hpp"
#include "repro/audit/drift_size.hpp"
#include "repro/audit/isolation.hpp"
#include "repro/audit/device_axis.hpp"
#include "repro/audit/spec_axis.hpp"
#include "repro/audit/routing.hpp"
#include "repro/audit/tp_axis.hpp"
#include "repro/audit/panel.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/stats.hpp"
#include "repro/audit/structured.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/variants.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/remote/request.hpp"

namespace repro {

// ============================================================================ analysis

namespace {

struct CaseKey {
  std::string prompt, decoding, mode, precision;
  bool operator<(const CaseKey& o) const {
    return std::tie(prompt, decoding, mode, precision) < std::tie(o.prompt, o.decoding, o.mode, o.precision);
  }
};

}  // namespace

void analyze(AuditReport& r, const GoldenReport* golden) {
  AnswerExtractor extractor(r.answer_regex, r.answer_json_path);
  // Structured output: whether each answer conforms to the plan's schema, checked here from its text
  // (the same check the runner's --retry-invalid used), so a report read back is analysed the same.
  std::unique_ptr<JsonSchema> schema;
  if (r.plan.is_object() && r.plan.contains("json_schema") && r.plan["json_schema"].is_object())
    schema = std::make_unique<JsonSchema>(schema_of(r.plan["json_schema"]), "the report's plan json_schema");
  for (auto& c : r.completions) {
    c.schema_valid.reset();
    if (schema && c.error.empty()) c.schema_valid = schema->validate(c.text);
  }
  const auto& all = r.completions;

  // ---- group by (prompt, decoding, mode, precision), in order of first appearance
  std::vector<std::string> hashes(all.size());
  std::map<CaseKey, int> case_of;
  std::vector<std::vector<int>> members;
  r.cases.clear();
  std::vector<std::string> mode_order;
  std::vector<std::string> label_order;  // "default (f32)", "default (bf16)": the cross-mode tables' rows
  bool any_remote = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const Completion& c = all[i];
    CaseKey key{c.prompt_id, c.decoding_id, c.mode, c.precision};
    auto [it, added] = case_of.emplace(key, static_cast<int>(r.cases.size()));
    if (added) {
      CaseResult cr;
      cr.prompt_id = c.prompt_id;
      cr.decoding_id = c.decoding_id;
      cr.mode = c.mode;
      cr.precision = c.precision;
      if (auto p = r.prompts.find(c.prompt_id); p != r.prompts.end()) cr.prompt_text = p->second;
      r.cases.push_back(std::move(cr));
      members.emplace_back();
      if (std::find(mode_order.begin(), mode_order.end(), c.mode) == mode_order.end()) mode_order.push_back(c.mode);
      std::string label = mode_label(c.mode, c.precision);
      if (std::find(label_order.begin(), label_order.end(), label) == label_order.end()) label_order.push_back(label);
    }
    any_remote = any_remote || is_remote_completion(c);
    if (!c.error.empty()) {
      r.cases[it->second].errors++;
      continue;
    }
    hashes[i] = output_hash(c);
    members[it->second].push_back(static_cast<int>(i));
  }
  for (size_t k = 0; k < r.cases.size(); ++k) {
    // A mixture of experts: routing against the reference first, so the factor tables can show each
    // member's "routing" (same / flipped) beside its contexts (src/audit/routing.cpp).
    r.cases[k].routing = compare_routing(r.completions, members[k], reference_completion(all, members[k]),
                                         r.fragile_margin);
    analyze_case(r.cases[k], all, members[k], hashes, extractor);
    analyze_drift_size(r.cases[k], all, members[k], r.fragile_margin);  // src/audit/drift_size.cpp
    r.cases[k].structured.reset();
    if (schema) analyze_structured(r.cases[k], all, members[k]);
    analyze_fields(r.cases[k], all, members[k], extractor);
    analyze_distribution(r.cases[k], all, members[k]);  // sampled outputs as distributions (distribution.cpp)
    // Where a case diverged: the command that replays each cluster's first member alone.
    if (r.cases[k].clusters.size() > 1 || (r.cases[k].tara && !*r.cases[k].tara))
      for (auto& cl : r.cases[k].clusters)
        if (!cl.members.empty()) cl.repro_command = repro_command(r, all[cl.members[0]]);
  }

  // ---- cross-mode tables: per (prompt, decoding), which outputs each mode (at each precision) produced
  r.cross_mode.clear();
  if (label_order.size() > 1) {
    std::map<std::pair<std::string, std::string>, std::vector<int>> groups;
    std::vector<std::pair<std::string, std::string>> group_order;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].error.empty()) continue;
      auto key = std::make_pair(all[i].prompt_id, all[i].decoding_id);
      auto [it, added] = groups.try_emplace(key);
      if (added) group_order.push_back(key);
      it->second.push_back(static_cast<int>(i));
    }
    for (const auto& key : group_order) {
      const auto& g = groups[key];
      std::map<std::string, int> total;
      for (int i : g) total[hashes[i]]++;
      CrossModeTable x;
      x.prompt_id = key.first;
      x.decoding_id = key.second;
      for (const auto& [h, n] : total) x.hashes.push_back(h);
      std::stable_sort(x.hashes.begin(), x.hashes.end(),
                       [&](const std::string& a, const std::string& b) { return total[a] > total[b]; });
      std::map<std::string, int> col;
      for (size_t c = 0; c < x.hashes.size(); ++c) col[x.hashes[c]] = static_cast<int>(c);
      x.table.factor = any_remote ? "endpoint" : "mode";
      for (const auto& m : label_order) {
        std::vector<int> row(x.hashes.size(), 0);
        bool present = false;
        for (int i : g)
          if (mode_label(all[i].mode, all[i].precision) == m) row[col[hashes[i]]]++, present = true;
        if (!present) continue;
        x.table.values.push_back(m);
        x.table.counts.push_back(row);
      }
      if (x.table.values.size() < 2) continue;
      bool single = true;
      for (const auto& row : x.table.counts)
        single = single && std::count_if(row.begin(), row.end(), [](int v) { return v > 0; }) == 1;
      x.table.explains = x.hashes.size() > 1 && single;
      r.cross_mode.push_back(std::move(x));
    }
  }

  // ---- throughput: rows given by the runner (measured wall time) are kept; otherwise computed per
  // (mode, batch size) as sum of generated tokens / sum of completion latencies, each completion one
  // measurement of the cell's statistics
  if (r.throughput.empty()) {
    std::map<std::tuple<std::string, std::string, int>, ThroughputRow> rows;
    for (const auto& c : all) {
      if (!c.error.empty()) continue;
      auto& row = rows[{c.mode, c.precision, c.batch_size}];
      row.mode = c.mode;
      row.precision = c.precision;
      row.batch_size = c.batch_size;
      add_throughput_run(row, c.completion_tokens > 0 ? c.completion_tokens : static_cast<int64_t>(c.tokens.size()),
                         c.latency_s);  // one measurement per completion
    }
    for (const auto& m : mode_order)
      for (auto& [k, row] : rows)
        if (std::get<0>(k) == m) r.throughput.push_back(row);
  }
  for (auto& row : r.throughput) {
    if (row.seconds > 0 && row.tokens > 0) row.tokens_per_s = static_cast<double>(row.tokens) / row.seconds;
    row.ratio_vs_default.reset();
    row.ratio_sd.reset();
  }
  for (auto& row : r.throughput) {  // the one ratio definition (repro/audit/tradeoff.hpp), per batch size
    const SpeedRatio sp = speed_ratio(r, row.mode, row.precision, SpeedCells::greedy_else_sampled, row.batch_size);
    row.ratio_vs_default = sp.mean;
    row.ratio_sd = sp.n > 0 ? sp.sd : std::nullopt;
  }

  // ---- per-case verdicts, per-mode summaries, the gate
  for (const auto& row : r.throughput)
    if (std::find(mode_order.begin(), mode_order.end(), row.mode) == mode_order.end()) mode_order.push_back(row.mode);
  decide_evidence(r);  // co-batching per level, UNVERIFIED endpoints (src/audit/cobatch.cpp)
  analyze_panel(r);    // two or more endpoints: the replica panel (src/audit/panel.cpp)
  compute_verdicts(r, mode_order);
  if (golden) {  // run against run: the drift from the golden report is part of the verdict
    r.baseline = baseline_result(compute_drift(golden->report, r), golden->file, golden->digest, golden->digest_ok);
    compute_verdicts(r, mode_order);
  }
  // Drift size against the reference context, per mode and precision (src/audit/drift_size.cpp).
  for (auto& ms : r.summary.modes) summarize_drift_size(ms, r.cases);
  if (schema)
    for (auto& ms : r.summary.modes) summarize_structured(ms, r.cases, all);
  // The trade-off table: each approach's speed relative to default and its reproducibility (tradeoff.cpp).
  compute_tradeoff(r);
  analyze_variants(r);        // prompt variants per variant and per task (src/audit/variants.cpp)
  analyze_isolation(r);       // --isolation: leakage between rows (src/audit/isolation.cpp)
  analyze_tp(r);              // --tp: each TP size against TP 1 (src/audit/tp_axis.cpp)
  analyze_devices(r);         // --devices: each device against the first (src/audit/device_axis.cpp)
  analyze_speculative(r);     // --speculative: each setting against off (src/audit/spec_axis.cpp)
  summarize_routing(r);       // a mixture of experts: routing flips per mode (src/audit/routing.cpp)
  record_endpoint_token_text(r);  // endpoints: divergent tokens as the text their logprobs named
  compute_advice(r);          // what to do about the findings (src/audit/advice.cpp)
}

// ============================================================================ repro command

namespace {
std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char ch : s) o += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return o + "'";
}
}  // namespace

// An endpoint's completion: the request again, as a curl command with the body the run sent (no
// streaming; the API key as an environment variable reference, never its value).
static std::string remote_repro_command(const AuditReport& r, const Completion& c) {
  const auto& env = r.environment;
  if (!env.is_object() || !env.contains("endpoints") || !env["endpoints"].is_array()) return "";
  const nlohmann::json* rec = nullptr;
  for (const auto& e : env["endpoints"])
    if (e.is_object() && e.value("label", "") == c.mode) rec = &e;
  auto prompt = r.prompts.find(c.prompt_id);
  if (!rec || prompt == r.prompts.end()) return "";
  try {
    EndpointSpec spec;
    spec.label = c.mode;
    spec.url = rec->value("url", "");
    spec.api_model = rec->value("api_model", "");
    spec.api = rec->value("api", "chat");
    spec.provider = parse_provider(rec->value("provider", "openai"));
    RequestParams p;
    p.prompt = prompt->second;
    // A chat prompt goes again as the messages, tools and template arguments the run sent.
    bool tools = false;
    if (const auto rp = report_prompt(r, c.prompt_id)) {
      if (rp->messages.is_array() && !rp->messages.empty()) p.messages = rp->messages;
      p.tools = rp->tools;
      p.chat_template_kwargs = rp->chat_template_kwargs;
      tools = !rp->tools.is_null();
    }
    p.decoding.id = c.decoding_id;
    p.decoding.max_tokens = r.plan.is_object() ? r.plan.value("max_tokens", 32) : 32;
    for (const auto& part : split(c.decoding_id, '-')) {  // "t0.8-p0.95-k40-s1" (see decoding_cells)
      if (part.size() < 2 || c.decoding_id == "greedy") continue;
      const std::string v = part.substr(1);
      if (part[0] == 't') p.decoding.temperature = std::stod(v);
      if (part[0] == 'p') p.decoding.top_p = std::stod(v);
      if (part[0] == 'k') p.decoding.top_k = std::stoi(v);
    }
    p.seed = c.seed;
    p.logprobs = provider_supports_logprobs(spec.provider);
    if (r.plan.is_object() && r.plan.contains("json_schema") && r.plan["json_schema"].is_object())
      p.json_schema = r.plan["json_schema"];
    const HttpRequestSpec h = build_request(spec, p);
    std::string cmd = "curl -sS " + shell_quote(h.url);
    for (const auto& hd : h.headers)
      if (hd != "Expect:") cmd += " -H " + shell_quote(hd);
    cmd += spec.provider == Provider::azure ? " -H \"api-key: $AZURE_OPENAI_API_KEY\""
                                            : " -H \"Authorization: Bearer $OPENAI_API_KEY\"";
    cmd += " -d " + shell_quote(h.body);
    if (tools && spec.api == "chat")  // report.json keeps JSON objects with their keys sorted
      cmd = "# tools are recorded with their keys sorted; a template that prints them in file order needs the "
            "prompts file's own tools\n" + cmd;
    if (rec->contains("extra_body_sha256"))
      cmd = "# the run also sent --extra-body fields (only their digest is recorded): add them to the body\n" + cmd;
    return cmd;
  } catch (const std::exception&) {
    return "";  // a record this version cannot turn into a request: no reproducer rather than a wrong one
  }
}

std::string repro_command(const AuditReport& r, const Completion& c) {
  if (is_remote_completion(c)) return remote_repro_command(r, c);
  // (a batch of other contents, --isolation, has no `generate` form)
  if (!c.mate_contents.empty() || !r.environment.is_object() || !r.plan.is_object()) return "";
  auto model = r.environment.find("model");
  if (model == r.environment.end() || !model->is_object() || !model->contains("path") || !(*model)["path"].is_string())
    return "";
  auto prompt = r.prompts.find(c.prompt_id);
  if (prompt == r.prompts.end()) return "";
  std::string device = "cpu";
  if (auto e = r.environment.find("engine"); e != r.environment.end() && e->is_object())
    device = e->value("device", "cpu");
  if (!c.device.empty()) device = c.device;  // run --devices: the device the completion ran on
  const int threads = r.plan.value("threads", 1);
  const int max_tokens = r.plan.value("max_tokens", 32);
  const auto fs = r.plan.find("filler_seed");
  const uint64_t filler_seed = fs != r.plan.end() && fs->is_number_integer() && *fs >= 0 ? fs->get<uint64_t>() : 1;
  uint64_t set = 0;
  if (c.filler_set.size() > 1 && c.filler_set[0] == 'f') set = std::stoull(c.filler_set.substr(1));
  std::string cmd = "repro-audit generate --model " + shell_quote((*model)["path"].get<std::string>());
  if (model->contains("tokenizer_path") && (*model)["tokenizer_path"].is_string())
    cmd += " --tokenizer " + shell_quote((*model)["tokenizer_path"].get<std::string>());
  cmd += " --mode " + c.mode + " --precision " + (c.precision.empty() ? "f32" : c.precision) + " --device " + device +
         " --threads " + std::to_string(threads) + " --prompt " + shell_quote(prompt->second) +
         " --max-tokens " + std::to_string(max_tokens);
  // Sampled decoding ids read "t0.8-p0.95-k40-s1" (see decoding_cells): temperature, top-p, top-k, seed.
  if (c.decoding_id != "greedy") {
    for (const auto& part : split(c.decoding_id, '-')) {
      if (part.size() < 2) continue;
      const std::string v = part.substr(1);
      if (part[0] == 't') cmd += " --temperature " + v;
      if (part[0] == 'p') cmd += " --top-p " + v;
      if (part[0] == 'k') cmd += " --top-k " + v;
    }
    cmd += " --seed " + std::to_string(c.seed);
  }
  cmd += " --batch-size " + std::to_string(c.batch_size) + " --position " + std::to_string(c.position);
  if (c.tp != 1) cmd += " --tp " + std::to_string(c.tp) + (c.allreduce.empty() ? "" : " --allreduce " + c.allreduce);
  if (!c.speculative.empty() && c.speculative != "off") cmd += " --speculative " + shell_quote(c.speculative);
  if (c.batch_size > 1) {
    cmd += " --filler-seed " + std::to_string(filler_seed + set);
    if (c.mate_join_step > 0) cmd += " --mate-join-step " + std::to_string(c.mate_join_step);
    if (c.mate_prompt_delta > 0) cmd += " --mate-prompt-delta " + std::to_string(c.mate_prompt_delta);
    const int mate_tokens = r.plan.value("prompt_tokens", 0);
    if (mate_tokens > 0) cmd += " --mate-prompt-tokens " + std::to_string(mate_tokens);
  }
  return cmd + " --json";
}

}  // namespace repro
