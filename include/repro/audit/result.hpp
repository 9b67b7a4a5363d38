// The one result structure every report writer reads (JSON, Markdown, HTML, JUnit, terminal).
// The runner fills `completions`; analyze() fills `cases`, `throughput` and `summary`.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace repro {

inline constexpr const char* kReportSchema = "repro-audit/report/v1";

// One decoding configuration of the plan. id is stable and readable: "greedy", "t0.8-p0.95-k40".
struct DecodingConfig {
  std::string id;
  double temperature = 0;
  double top_p = 1;
  int top_k = 0;
  int max_tokens = 32;
};

// One completion: a probe run in one batch context (local) or at one concurrency level (remote).
struct Completion {
  std::string prompt_id;
  std::string decoding_id;
  std::string mode;               // local: "default" / "batch-invariant"; remote: endpoint label
  std::string precision;          // local: activation precision "f32" / "bf16" / "f16"; remote: empty
  // context
  int batch_size = 1;             // local: sequences in the batch at the start; remote: concurrency
  int position = 0;               // local: probe's row in the batch
  std::string filler_set;         // id of the filler draw, e.g. "f3"
  std::vector<std::string> filler_ids;
  uint64_t seed = 0;
  int repeat = 0;
  std::string cache_state;        // remote: "cold" / "warm"; empty otherwise
  // output
  bool tokens_known = true;
  std::vector<int> tokens;
  std::string text;
  std::vector<float> logprobs;    // chosen-token logprobs, empty when unknown
  std::string logits_sha256;      // local: final step's logits bits; empty when unknown
  // per step (local engine; empty when unknown): top-2 logit margin, absolute and relative, and the
  // top_k most likely tokens with their logprobs, flattened step by step (top_ids[t * top_k + j])
  std::vector<float> margins, margins_rel;
  int top_k = 0;                  // entries per step in top_ids / top_logprobs (0: none recorded)
  std::vector<int> top_ids;
  std::vector<float> top_logprobs;
  std::string finish_reason;
  double latency_s = 0;
  double ttft_s = 0;              // remote streaming: time to first token
  double tokens_per_s = 0;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // remote response metadata
  std::string system_fingerprint, response_model, response_id;
  int64_t created = 0;
  // failures are recorded, never counted as completions or divergence
  std::string error;              // non-empty: failed (cause)
  int attempts = 1;
};

// A cluster of identical outputs within one case.
struct Cluster {
  std::string hash;               // SHA-256 of token ids (int32 LE), or of the text when ids unknown
  int count = 0;
  bool majority = false;
  std::vector<int> members;       // indices into AuditReport::completions
  std::string text;               // the cluster's completion text
  std::vector<int> tokens;
  // first divergence from the majority (-1 for the majority itself)
  int first_divergence_token = -1;
  int first_divergence_char = -1;
  int majority_token = -1, cluster_token = -1;     // ids at that index (-1 = ended / unknown)
  std::optional<float> majority_logprob, cluster_logprob;
  int family = 0;                 // families by normalised token edit distance; majority's is 0
  double distance_to_majority = 0; // normalised token edit distance in [0, 1]
  int bit_variants = 1;           // distinct logits/logprob fingerprints inside this token cluster
  std::optional<std::string> answer;  // extracted answer (when an extractor is configured and it matched)
  std::string repro_command;      // divergent local cases: `repro-audit generate ...` replaying the first member
};

// Which factor a divergence follows: for each factor value, how many members fall in each cluster.
struct FactorTable {
  std::string factor;             // "batch_size", "position", "filler_set", "seed", "concurrency", "endpoint"
  std::vector<std::string> values;
  std::vector<std::vector<int>> counts;  // [value][cluster index]
  bool explains = false;          // every value maps to exactly one cluster and >1 cluster exists
};

// Across modes (or endpoints) for one (prompt, decoding): which outputs each mode produced.
struct CrossModeTable {
  std::string prompt_id, decoding_id;
  FactorTable table;              // factor "mode" (local) or "endpoint" (remote); counts[mode][output]
  std::vector<std::string> hashes;  // the table's columns: output hashes, most frequent first
};

// k of n with its Wilson score interval at 95% (see repro/audit/stats.hpp).
struct Rate {
  int k = 0;
  int n = 0;
  double lo = 0, hi = 0;
};

// Drift against the reference context, per value of one factor: how many completions differ from the
// reference bitwise (logits hash, logprob bits or tokens) and in tokens, and the largest per-step
// |delta logprob| of chosen tokens over the common prefix.
struct DriftFactor {
  std::string factor;             // "batch_size", "position", "filler_set", "seed", "repeat", "cache_state", "precision"
  std::vector<std::string> values;
  std::vector<int> n, bit_differ, token_differ;     // per value
  std::vector<double> max_dlogprob;                 // per value (0 when nothing was comparable)
};

// Size of the drift of one case against its reference completion: the reference context (batch 1,
// position 0, first filler draw, first repeat; remote: concurrency 1), or the nearest context run.
struct DriftSize {
  int reference = -1;             // index into AuditReport::completions; -1: no completions
  std::string reference_context;  // "batch 1, position 0, repeat 0" / "concurrency 1, repeat 0"
  int compared = 0;               // completions compared with the reference (itself excluded)
  int bit_differ = 0;             // differing bitwise: tokens, final logits hash or logprob bits
  int token_differ = 0;           // differing in tokens
  int steps_compared = 0;         // chosen-token logprob pairs over the common prefixes
  std::optional<double> max_dlogprob, mean_dlogprob;   // per-step |delta logprob|; unset without logprobs
  // first token divergence from the reference (the earliest over all completions)
  int first_divergence = -1;      // step; -1 when no completion's tokens differ
  int first_divergence_completion = -1;               // index into AuditReport::completions
  int reference_token = -1, divergent_token = -1;     // ids at that step (-1 = ended)
  std::optional<double> topk_kl;  // largest top-k KL(reference || other) at the first divergent step
  std::optional<int> fragile;     // reference steps with relative top-2 margin < fragile_margin
  std::optional<double> min_margin_rel;               // smallest relative top-2 margin of the reference
  std::string status;             // "reproducible", "bit-divergent", "reproducible here, fragile", "token-divergent"
  std::vector<DriftFactor> factors;  // factors that vary inside the case
};

struct CaseResult {
  std::string prompt_id;
  std::string prompt_text;
  std::string decoding_id;
  std::string mode;
  std::string precision;          // local: activation precision; remote: empty
  int n = 0;                      // completions (errors excluded)
  int errors = 0;
  int unique = 0;                 // token-level unique outputs
  bool tarr = false;              // all N raw outputs identical
  std::optional<bool> tara;       // identical after the answer extractor (when configured)
  int answer_unique = 0;
  bool bit_divergent = false;     // identical tokens but differing logprobs / logits hashes
  int bit_unique = 0;             // unique (tokens, logits hash, logprobs) fingerprints
  std::vector<Cluster> clusters;  // majority first, then by count desc, hash asc
  std::vector<FactorTable> factors;
  bool failed = false;            // counts against the thresholds
  bool divergent = false;         // unique > 1, or TARa false when an extractor is configured
  int answer_missing = 0;         // completions where the extractor found no answer
  DriftSize drift_size;              // size of the drift against the reference context
};

struct ThroughputRow {
  std::string mode;
  std::string precision;          // local: activation precision; remote: empty
  int batch_size = 1;             // or concurrency for remote
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;         // tokens / seconds over all the cell's measurements
  std::optional<double> ratio_vs_default;  // tokens_per_s / the baseline mode's at the same batch size
  // The cell's measurements one by one (local: each batched run; remote: each concurrency level's
  // probe stream): how many, and the mean, sample standard deviation and range of their tokens/s.
  int runs = 0;                   // 0: not recorded (a report written before these fields existed)
  double mean_tokens_per_s = 0, stddev_tokens_per_s = 0, min_tokens_per_s = 0, max_tokens_per_s = 0;
};

// A cell is noisy when its measurements' coefficient of variation (stddev / mean) is above this.
inline constexpr double kNoisyCv = 0.10;

// Drift of one mode (or endpoint) over its cases.
struct ModeDriftSize {
  Rate bit_differ;                // completions differing bitwise from their case's reference
  Rate token_differ;              // completions differing in tokens
  Rate token_divergent_cases;     // cases where some completion's tokens differ from the reference
  std::optional<double> max_dlogprob, mean_dlogprob;  // per-step |delta logprob| of chosen tokens
  std::optional<double> max_topk_kl;                  // largest top-k KL at a first divergent step
  int fragile = 0;                // fragile steps over the cases' references
  int fragile_cases = 0;          // cases "reproducible here, fragile"
  std::vector<DriftFactor> factors;   // summed over the mode's cases
  std::string finding;            // one line, plain language
};

// Per mode/endpoint headline: reproducibility next to throughput relative to default.
struct ModeSummary {
  std::string mode;
  std::string precision;          // local: one row per (mode, precision); remote: empty
  int cases = 0;
  int divergent_cases = 0;
  double tarr_rate = 0;           // share of cases with TARr = true
  double mean_unique = 0;
  double bit_divergent_share = 0;
  std::optional<double> throughput_ratio;  // mean over batch sizes of ratio_vs_default
  int errors = 0;
  bool gated = true;              // the thresholds apply to this mode
  ModeDriftSize drift_size;              // drift against the reference context, over the mode's cases
  std::string verdict;            // "reproducible" / "divergent" / "errors" / "not run" (same rule for every mode)
  // ---- request accounting and the gate (see include/repro/audit/verdict.hpp)
  std::string gate;               // "pass" / "fail" / "not gated"
  int64_t requests = 0;           // requests finished: probes (+ fillers for remote endpoints)
  int64_t failed_requests = 0;    // of those, failed after retries
  double error_rate = 0;          // failed_requests / requests (0 when none)
};

// How reports name a mode run at a precision: "default (bf16)"; the mode alone without a precision.
inline std::string mode_label(const std::string& mode, const std::string& precision) {
  return precision.empty() ? mode : mode + " (" + precision + ")";
}

// Default --max-error-rate: 5% of an endpoint's requests (probes and fillers) may fail after retries.
inline constexpr double kDefaultMaxErrorRate = 0.05;

struct Thresholds {
  int max_divergent = 0;          // cases allowed to diverge (per mode)
  double min_tarr = 1.0;          // minimum share of cases with TARr (per mode)
  std::vector<std::string> modes; // modes the gate applies to; empty = all
  double max_error_rate = kDefaultMaxErrorRate;  // share of failed requests (probes + fillers) tolerated per mode
};

struct Summary {
  int cases = 0;
  int divergent_cases = 0;
  int max_unique = 0;
  int completions = 0;
  int errors = 0;
  std::string verdict;            // "reproducible" / "divergent" / "errors" / "drift" / "interrupted"
  bool interrupted = false;
  std::vector<ModeSummary> modes;
};

// `run --baseline FILE`: the golden report this run was compared with, and what changed.
struct BaselineResult {
  std::string file;
  std::string report_sha256;      // the golden report's recorded digest
  bool digest_ok = false;         // its content matches that digest
  bool drifted = false;
  std::vector<std::string> config_changes;  // model / profile digests, plan fields that differ
  std::vector<std::string> changes;         // one line per changed, added or removed case, verdict change
};

struct AuditReport {
  std::string schema = kReportSchema;
  std::string created;            // ISO-8601 UTC
  std::string profile;
  nlohmann::json plan;            // the expanded plan's parameters, as run
  Thresholds thresholds;
  std::string answer_regex, answer_json_path;
  Summary summary;
  std::vector<CaseResult> cases;
  std::vector<ThroughputRow> throughput;
  std::vector<Completion> completions;
  nlohmann::json environment;     // tool version, commit, OS, CPU, threads, BLAS, model path/sha256, digests
  std::map<std::string, std::string> prompts;  // prompt_id -> text
  // Token id (decimal) -> the token's text as reports show it (display_text()), for the token ids at
  // first divergences; filled from the model's tokenizer by record_token_text() (local runs only).
  std::map<std::string, std::string> token_text;
  std::vector<CrossModeTable> cross_mode;      // filled by analyze() when >1 mode ran
  double fragile_margin = 1e-3;   // a step is fragile when its relative top-2 logit margin is below this
  std::optional<BaselineResult> baseline;      // set by `run --baseline`; drift makes the verdict "drift"
};

}  // namespace repro
