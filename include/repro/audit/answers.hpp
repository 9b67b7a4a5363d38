// Answers: the extractor behind TARa (a PCRE2 regex or JSON paths over the completion's text) and the
// canonical form parsed answers are compared in. Used per cluster by the case analysis
// (src/audit/cases.cpp) and per field by the structured-output analysis (src/audit/structured.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace repro {

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

}  // namespace repro
