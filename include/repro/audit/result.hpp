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

struct CaseResult {
  std::string prompt_id;
  std::string prompt_text;
  std::string decoding_id;
  std::string mode;
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
};

struct ThroughputRow {
  std::string mode;
  int batch_size = 1;             // or concurrency for remote
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  std::optional<double> ratio_vs_default;  // tokens_per_s / the baseline mode's at the same batch size
};

// Per mode/endpoint headline: reproducibility next to throughput relative to default.
struct ModeSummary {
  std::string mode;
  int cases = 0;
  int divergent_cases = 0;
  double tarr_rate = 0;           // share of cases with TARr = true
  double mean_unique = 0;
  double bit_divergent_share = 0;
  std::optional<double> throughput_ratio;  // mean over batch sizes of ratio_vs_default
  int errors = 0;
  bool gated = true;              // the thresholds apply to this mode
  std::string verdict;            // "reproducible" / "divergent" / "errors"
};

struct Thresholds {
  int max_divergent = 0;          // cases allowed to diverge (per mode)
  double min_tarr = 1.0;          // minimum share of cases with TARr (per mode)
  std::vector<std::string> modes; // modes the gate applies to; empty = all
  double max_error_rate = 0.0;    // remote: share of failed requests tolerated
};

struct Summary {
  int cases = 0;
  int divergent_cases = 0;
  int max_unique = 0;
  int completions = 0;
  int errors = 0;
  std::string verdict;            // "reproducible" / "divergent" / "errors" / "interrupted"
  bool interrupted = false;
  std::vector<ModeSummary> modes;
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
  std::vector<CrossModeTable> cross_mode;      // filled by analyze() when >1 mode ran
};

}  // namespace repro
