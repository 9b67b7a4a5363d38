// Report writers: JSON (canonical, versioned, with digests), Markdown, self-contained HTML, JUnit XML
// and a short terminal summary. All read the one AuditReport (include/repro/result.hpp).
// The JSON schema is documented in docs/REPORT-SCHEMA.md.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "repro/audit/compare.hpp"  // Drift, compute_drift, short_hash
#include "repro/audit/result.hpp"
#include "repro/common/json.hpp"
#include "repro/report/canonical.hpp"
#include "repro/report/schema.hpp"

namespace repro {

// report.json and the signed statement are read with unique keys: a repeated key would let one
// reader see another value than the digest and the signature cover.
inline constexpr JsonLimits kReportJsonLimits{kMaxJsonDepth, true};

// ---- JSON (src/report/json.cpp; fields in src/report/schema.cpp, bytes in src/report/canonical.cpp)
// The report document in canonical file form (repro/report/canonical.hpp), with
// digests.report_sha256 = report_digest() of the same document.
std::string to_json(const AuditReport& report);
nlohmann::json to_json_value(const AuditReport& report);  // json(report): without digests.report_sha256
// Parses a report written by to_json. Throws UsageError naming `path_for_errors` on bad JSON, a wrong
// schema or a field of the wrong type (with the field's path, e.g. "cases[0].n: expected an integer").
AuditReport from_json(const std::string& text, const std::string& path_for_errors);
// read_file + from_json.
AuditReport load_report(const std::string& path);
// True when the stored digests.report_sha256 matches the content. `stored`/`actual` receive both.
bool verify_report_digest(const std::string& text, std::string* stored = nullptr, std::string* actual = nullptr);

// ---- other formats (src/report/formats.cpp: write_reports, parse_formats)
std::string to_markdown(const AuditReport& report);  // src/report/markdown.cpp
std::string to_html(const AuditReport& report);      // src/report/html.cpp: one file, no network
std::string to_junit(const AuditReport& report);     // src/report/junit.cpp: one testcase per case
// src/report/terminal.cpp: the short summary; `width`: the terminal's columns (0 = no limit): tables
// too wide drop their least important columns or become one record per row.
std::string to_terminal(const AuditReport& report, int width = 0);

// Formats accepted by write_reports / --format: json, md (or markdown), html, junit. A format may
// name its own path as FORMAT=PATH (PATH "-" is stdout); otherwise it is written to
// OUT_DIR/report.json, report.md, report.html, report.junit.xml. OUT_DIR "-" writes all to stdout.
// Creates OUT_DIR; writes each file atomically (temp + rename). Unknown format: UsageError listing
// the allowed ones. Returns the paths written.
std::vector<std::string> write_reports(const AuditReport& report, const std::string& out_dir,
                                       const std::vector<std::string>& formats);
// "json,md" -> {"json", "md"}; validates each entry (UsageError naming --format).
std::vector<std::string> parse_formats(const std::string& csv);

// ---- drift between two runs (computed in src/audit/compare.cpp), as text and JSON (src/report/terminal.cpp)
std::string drift_text(const Drift& d, const std::string& name_a = "A", const std::string& name_b = "B");
nlohmann::json drift_json(const Drift& d);
std::string baseline_text(const BaselineResult& b);  // the terminal / text form
// One line saying why the verdict is what it is (empty for "reproducible").
std::string verdict_cause(const AuditReport& report);

// ---- the verdict banner and "what to do", shared by every writer (src/report/summary_text.cpp)
// The banner: the run's verdict, the modes its gate covers, and each mode's (endpoint's) own verdict, so
// a pass of the gated modes never hides an ungated mode that diverged.
struct BannerMode {
  std::string label;              // "default (f32)"
  std::string verdict;            // the mode's verdict in capitals: "DIVERGENT", "REPRODUCIBLE", ...
  std::string detail;             // "2 of 3 cases divergent, not gated"
  bool good = false;              // reproducible (or no answer)
  bool gated = false;
};
struct VerdictBanner {
  std::string verdict;            // the run's verdict in capitals: "REPRODUCIBLE"
  std::string scope;              // "gate: batch-invariant" / "gate: every mode"
  std::string ungated;            // "default (f32) DIVERGENT": ungated modes that did not pass; "" when none
  std::string title;              // "Verdict: REPRODUCIBLE (gate: batch-invariant); not gated: default (f32) DIVERGENT"
  std::string gate;               // one sentence: which modes the gate covers, its thresholds, its result
  std::vector<BannerMode> modes;
  bool mixed = false;             // the gate passed while an ungated mode diverged
};
VerdictBanner verdict_banner(const AuditReport& r);
// One advice entry as plain text lines: the action first, then "because ...", "cost: ...",
// "limits: ... (source)"; empty parts left out.
std::vector<std::string> advice_lines(const Advice& a);
// The sentence above a case's reproducers: `generate` commands (local) or curl requests (endpoints).
std::string repro_intro(const CaseResult& c);

// ---- drift-size sections shared by the Markdown and HTML writers (src/report/drift_size_text.cpp)
struct TextTable {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
};
// ---- shards, shared by the Markdown and HTML writers (src/report/explain.cpp)
std::string shard_intro(const AuditReport& r);  // a shard's or a merged report's origin; "" for neither
TextTable shard_table(const AuditReport& r);    // merged: one row per shard report (digest, host); else empty
TextTable host_table(const AuditReport& r);     // merged --replicate-shards: each host against the first

TextTable drift_mode_table(const AuditReport& r);  // one row per mode: rates with 95% intervals, sizes
// Per mode and factor: (title "default, by batch_size", table of value, completions, differing, max |dlogprob|).
std::vector<std::pair<std::string, TextTable>> drift_factor_tables(const AuditReport& r);
// ---- structured output sections shared by the writers (src/report/structured_text.cpp)
bool has_structured(const AuditReport& r);           // the plan had a JSON Schema
TextTable structured_mode_table(const AuditReport& r);  // per mode: schema-valid, TARr, TARa on parsed JSON
TextTable retry_table(const AuditReport& r);         // --retry-invalid: before vs after, extra requests/tokens (empty without)
TextTable field_agreement_table(const AuditReport& r);  // per mode and JSON path: cases whose completions agree
std::string structured_case_text(const CaseResult& c);  // one line per case (empty without schema or paths)
// The trade-off table shared by every writer (src/report/tradeoff_text.cpp): one row per approach
// (default, batch-invariant, deterministic, controlled sampling) with its measured throughput
// relative to default, TARr@N, TARa@N, share differing from the reference, drift size, how it was
// measured; rows the run did not include say "not measured". No estimate from elsewhere is printed
// beside the measurements.
TextTable tradeoff_table(const AuditReport& r);
// How the table is measured, one paragraph (every writer prints it above the table).
std::string tradeoff_intro();
// A mode's headline throughput ratio: "0.98x ±0.03 (n 12)", or "not measured".
std::string mode_speed_text(const ModeSummary& m);
// One line per approach for the terminal and JUnit properties: "deterministic: speed 0.05x ±0.01 ...".
std::string tradeoff_line(const TradeoffRow& row);
// ---- prompt variants and response-cache signs, shared by Markdown, HTML and terminal (src/report/variants_text.cpp)
TextTable variants_table(const AuditReport& r);          // per task: one row per variant, then the task's row
std::vector<std::string> variant_findings(const AuditReport& r);  // per task: the most reproducible variant
std::string variants_intro();                            // how the table is computed and ranked
TextTable response_cache_table(const AuditReport& r);    // one row per endpoint
std::vector<std::string> response_cache_findings(const AuditReport& r);
std::string response_cache_intro();                      // the three signs and the latency threshold
// ---- remote evidence, shared by Markdown, HTML and terminal (src/report/evidence_text.cpp)
TextTable posture_table(const AuditReport& r);       // per endpoint: engine, version, deterministic mode, batch invariance
TextTable cobatch_table(const AuditReport& r);       // per endpoint and concurrency level: co-batching evidence
TextTable seed_table(const AuditReport& r);          // per endpoint and API: seed honoured / ignored / unknown
TextTable panel_table(const AuditReport& r);         // per case: which endpoints hold the panel's majority output
TextTable distribution_table(const AuditReport& r);  // sampled cases: two-sample tests against the reference
TextTable tp_table(const AuditReport& r);  // run --tp: each TP size and all-reduce order against TP 1
TextTable device_table(const AuditReport& r);  // run --devices: each device against the first
TextTable speculative_table(const AuditReport& r);  // run --speculative: each setting against off
TextTable routing_table(const AuditReport& r);  // a mixture of experts: routing against each case's reference
std::vector<std::string> evidence_findings(const AuditReport& r);  // UNVERIFIED, posture, seed and panel lines
std::string evidence_intro();
// Terms used by the reports, with their definitions.
std::vector<std::pair<std::string, std::string>> glossary(const AuditReport& r);

// ---- explanatory text shared by the Markdown and HTML writers (src/report/explain.cpp); plain text,
// each writer escapes it. Token and completion text goes through display_text() (control characters
// and bytes that are not UTF-8 escaped).
// "\" cat\" (id 423)" from report.token_text; "id 423" when its text was not recorded; "end of text" for -1.
std::string token_label(const AuditReport& r, int id);
// The first `max_chars` characters of the prompt, quoted ("\"Once upon a time\""), "…" when cut; the id
// itself when the report has no text for it.
std::string prompt_snippet(const AuditReport& r, const std::string& prompt_id, size_t max_chars = 60);
// Where cluster k first leaves the majority, as text: "token 3: \" cat\" (id 423) vs \" dog\" (id 77)",
// with logprobs when known; by characters when token ids are unknown (endpoints): "char 17: \"cat
// sat…\" vs \"dog ran…\"". Empty for the majority itself.
std::string divergence_label(const AuditReport& r, const CaseResult& c, const Cluster& k);
// TARa of a case in words: "TARa@N = no: answer missing in 5/5 (the extractor matched none)",
// "TARa@N = yes (1 answer)", "TARa@N = no (2 distinct answers; answer missing in 1/5)". Empty without
// an extractor.
std::string answer_status(const CaseResult& c);
// The environment record as (what, value) rows: tool, model, digests, engine, BLAS, CPU, GPU, OS,
// endpoints, risks. Only what the report recorded.
std::vector<std::pair<std::string, std::string>> environment_rows(const AuditReport& r);
// Per endpoint (remote modes): requests, time to first token (mean, min-max; streaming only) and the
// system_fingerprint and model values the responses carried. No rows when nothing of it was recorded.
TextTable endpoint_table(const AuditReport& r);
// Throughput per mode and batch size with the statistics of the cell's measurements; noisy cells
// (coefficient of variation above kNoisyCv) marked "*". Endpoint rows say "probe only".
TextTable throughput_table(const AuditReport& r);
// Per non-baseline mode: "batch-invariant (f32): 0.97x default, token-weighted over batch sizes (batch
// 1: 3.97x, 4: 0.94x, 16: 0.97x)".
std::vector<std::string> throughput_cost_lines(const AuditReport& r);

// ---- helpers shared by the writers (src/report/terminal.cpp)
std::string fmt_percent(double share);        // 0.5 -> "50.0%"
std::string fmt_ratio(double ratio);          // 0.625 -> "0.62x"
// "3 unique of 10: c1 x7 (majority); c2 x2 ... diverges at token 3 (423 -> 77)"; with the report, the
// divergence is shown as text with ids (divergence_label).
std::string case_summary(const CaseResult& c, const AuditReport* r = nullptr);
std::string fmt_dlogprob(const std::optional<double>& v);  // "4.1e-06", "0", "-" when unknown
// "token-divergent vs reference (batch 1, position 0, repeat 0): 3 of 11 differ bitwise, 2 in tokens; ..."
// With the report, the first divergent tokens are shown as text with ids (token_label).
std::string drift_summary(const DriftSize& d, const AuditReport* r = nullptr);

}  // namespace repro
