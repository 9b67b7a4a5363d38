// Analysis of an audit: clusters, unique counts, TARr/TARa, first divergence, families, the bitwise
// tier, factor tables, throughput ratios, per-mode summaries and the verdict.
//
// The runner fills AuditReport::completions (and plan, prompts, environment, thresholds, profile,
// answer_regex / answer_json_path, optionally throughput rows with measured wall time and
// summary.interrupted), then calls analyze(); the report writers read the result.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/audit/answers.hpp"  // the answer extractor
#include "repro/audit/cases.hpp"    // clusters, families, the building blocks
#include "repro/audit/compare.hpp"  // GoldenReport
#include "repro/audit/result.hpp"
#include "repro/audit/verdict.hpp"  // exit_code_for, the gate

namespace repro {

// Fills cases, cross_mode, throughput (ratios; rows computed from completions when the runner gave
// none) and summary. With a golden report (`run --baseline`), also report.baseline: the drift from it
// (compute_drift, include/repro/audit/compare.hpp), which is part of the verdict. Idempotent: running
// it twice gives the same report.
// Throws UsageError when --answer-regex or --answer-json-path is malformed.
void analyze(AuditReport& report, const GoldenReport* golden = nullptr);

// The `repro-audit generate` command that replays completion `c` of a local run alone: the model
// file, mode, precision, device, threads, prompt, decoding (temperature, top-p, top-k, seed), max
// tokens, batch size, position and filler seed, with --json (token ids, logprobs, final-logits
// hash). For a completion of an endpoint: the request again as a curl command (the endpoint's recorded
// URL, the body the run sent, without streaming; the key as "$OPENAI_API_KEY" or, for Azure,
// "$AZURE_OPENAI_API_KEY", never its value). Empty when the report lacks the model, plan or endpoint
// record.
std::string repro_command(const AuditReport& r, const Completion& c);

// Adds one measurement (`tokens` generated in `seconds`) to a throughput cell: the totals, tokens_per_s
// (total tokens / total seconds) and the per-measurement statistics (runs, mean, sample standard
// deviation, min, max of tokens/s). Measurements without time or tokens only add to the totals.
void add_throughput_run(ThroughputRow& row, int64_t tokens, double seconds);

// Text of a token or completion snippet as reports show it: valid UTF-8 is kept; control characters
// become \n, \t, \r or \xNN, a backslash becomes \\, bytes that are not valid UTF-8 become \xNN.
std::string display_text(const std::string& bytes);

// Fills report.token_text for every token id at a first divergence (clusters and drift sizes), with
// `piece(id)` (the tokenizer's bytes for one token) shown by display_text(). Call after analyze().
void record_token_text(AuditReport& report, const std::function<std::string(int)>& piece);
// The same for endpoints, from the token pieces their logprobs named (Completion::token_pieces): the ids
// at first divergences that some completion carries a piece for and token_text lacks. analyze() calls it.
void record_endpoint_token_text(AuditReport& report);

// Per mode and batch size (concurrency for remote): the mean over cases of the number of distinct
// outputs among the completions at that batch size, and the share of those completions outside the
// case's majority cluster. For the HTML charts; computed from cases + completions.
struct BatchPoint {
  std::string mode;
  int batch_size = 1;
  double mean_unique = 0;
  double off_majority_share = 0;
  int completions = 0;
};
std::vector<BatchPoint> unique_by_batch(const AuditReport& report);

}  // namespace repro
