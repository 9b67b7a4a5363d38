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

#include "repro/audit/result.hpp"
#include "repro/audit/verdict.hpp"  // exit_code_for, the gate

namespace repro {

// Fills cases, cross_mode, throughput (ratios; rows computed from completions when the runner gave
// none) and summary. Idempotent: running it twice gives the same report.
// Throws UsageError when --answer-regex or --answer-json-path is malformed.
void analyze(AuditReport& report);

// The `repro-audit generate` command that replays completion `c` of a local run alone: the model
// file, mode, precision, device, threads, prompt, decoding (temperature, top-p, top-k, seed), max
// tokens, batch size, position and filler seed, with --json (token ids, logprobs, final-logits
// hash). Empty for completions of endpoints and when the report lacks the model or plan record.
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


// Family linkage threshold: two clusters belong to the same family when their normalised token edit
// distance (Levenshtein / max(len)) is <= this value (single linkage).
inline constexpr double kFamilyThreshold = 0.2;

// ---- building blocks (exposed for tests and the writers) ----

// SHA-256 of token ids as int32 little-endian.
std::string tokens_sha256(const std::vector<int>& tokens);

// Levenshtein distance between a and b if it is <= max_dist, otherwise max_dist + 1. Banded, with
// early exit; common prefix and suffix are stripped first.
int edit_distance_bounded(const std::vector<int>& a, const std::vector<int>& b, int max_dist);
// Exact Levenshtein / max(len) in [0, 1] (0 for two empty sequences).
double normalized_edit_distance(const std::vector<int>& a, const std::vector<int>& b);

// Compiled answer extractor: a PCRE2 regex (first capture group, or the whole match) or JSON paths
// over the completion parsed as JSON. --answer-json-path takes one path or several, comma-separated;
// a path is `$.a.b[0]`, `$['a b']`, or the same without the leading `$` (`a.b[0]`). With one path the
// answer is the value (a string as is, anything else as canonical JSON); with several, the canonical
// JSON array of all their values (absent when any is). Throws UsageError naming the flag.
class AnswerExtractor {
 public:
  AnswerExtractor(const std::string& regex, const std::string& json_path);
  ~AnswerExtractor();
  AnswerExtractor(const AnswerExtractor&) = delete;
  AnswerExtractor& operator=(const AnswerExtractor&) = delete;
  bool configured() const { return re_ != nullptr || !paths_.empty(); }
  // The answer, or nullopt when the pattern does not match / the text is not JSON / a path is absent.
  std::optional<std::string> extract(const std::string& text) const;
  // The JSON paths as given, and each one's value in `text` as canonical JSON (nullopt: absent).
  const std::vector<std::string>& field_paths() const { return path_texts_; }
  std::vector<std::optional<std::string>> fields(const std::string& text) const;

 private:
  void* re_ = nullptr;  // pcre2_code_8*
  struct Step {
    bool index;
    std::string key;
    size_t pos;
  };
  std::vector<std::vector<Step>> paths_;
  std::vector<std::string> path_texts_;
  static std::vector<Step> parse_json_path(const std::string& path);
  static const nlohmann::json* lookup(const nlohmann::json& j, const std::vector<Step>& path);
};

// --answer-json-path's list: split at commas outside brackets; UsageError on an empty entry.
std::vector<std::string> split_json_paths(const std::string& list);
// Canonical form of a parsed answer: keys sorted, no whitespace, numbers with an integral value as
// integers (1.0 and 1 and 1e0 are one answer), other numbers in nlohmann's shortest round-trip form.
std::string canonical_answer(const nlohmann::json& v);

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
