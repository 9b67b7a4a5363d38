// A reader of the Prometheus text exposition format (version 0.0.4, what vLLM, SGLang, llama.cpp and
// `repro-audit serve` answer on GET /metrics): metric families with their `# HELP` and `# TYPE`
// lines, samples with labels, values and optional timestamps, and the _bucket/_sum/_count (and
// _total/_created) samples of histograms, summaries and counters grouped under their family.
//
// The input comes from a server the audit does not control, so it is read as hostile: a bounded
// size, one pass over the bytes (no regular expressions, no recursion), and any malformed line
// rejects the whole body with one error naming the line. Fuzzed by fuzz/fuzz_prometheus.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace repro::prom {

enum class MetricType { untyped, counter, gauge, histogram, summary, info, stateset, gaugehistogram };
const char* type_name(MetricType t);

struct Sample {
  std::string name;  // as written: vllm:prompt_tokens_total, x_bucket, ...
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, unescaped
  double value = 0;
  std::optional<int64_t> timestamp_ms;
  // The value of label `key`, or nullptr.
  const std::string* label(std::string_view key) const;
};

struct Family {
  std::string name;
  std::string help;  // unescaped
  MetricType type = MetricType::untyped;
  std::vector<Sample> samples;
};

struct Exposition {
  std::vector<Family> families;  // in order of first appearance
  // The family named `name` (the TYPE/HELP name, e.g. "vllm:prompt_tokens_total" or a histogram's
  // base name), or nullptr.
  const Family* find(std::string_view name) const;
  // Sum of the values of the samples named exactly `sample_name` over every label set (e.g. vLLM's
  // per-engine running gauges); nullopt when there is no such sample.
  std::optional<double> sum(std::string_view sample_name) const;
  size_t sample_count() const;
};

struct ParseLimits {
  size_t max_bytes = 16u << 20;      // larger bodies are refused before any parsing
  size_t max_samples = 1u << 20;
  size_t max_labels = 64;            // per sample
  size_t max_families = 1u << 16;
};

// Parses `text` into `out`. On failure returns false, leaves `out` empty and sets *error to one line:
// "line N: <what was expected>, found '<excerpt>'" (control bytes shown as escapes), or the limit
// that was exceeded. Never throws on any input (only std::bad_alloc).
bool parse_prometheus_text(std::string_view text, Exposition& out, std::string* error,
                           const ParseLimits& limits = {});

// The fuzz entry of fuzz/fuzz_prometheus.cpp, here so that the test suite replays
// fuzz/corpus/prometheus/ without clang. Parses the input; an accepted body must hold only valid
// names, label names and histogram `le` / summary `quantile` values that parse, and must parse again
// to the same families after being written back out in canonical text (write_prometheus_text);
// anything else traps. Returns 0.
int fuzz_prometheus_one(const uint8_t* data, size_t size);

// The exposition written back in canonical text (HELP and TYPE lines, then the samples; label
// values and help escaped; values as the shortest round-trip decimal, NaN, +Inf, -Inf).
std::string write_prometheus_text(const Exposition& e);

}  // namespace repro::prom
