// The answer extractor (TARa) and the canonical form of parsed answers: see include/repro/audit/answers.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "repro/audit/answers.hpp"

#include <pcre2.h>

#include <cmath>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"

namespace repro {

// ---------------------------------------------------------------------------- answer extractor

AnswerExtractor::AnswerExtractor(const std::string& regex, const std::string& json_path) {
  if (!regex.empty()) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(), PCRE2_UTF, &err,
                                   &off, nullptr);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UsageError("--answer-regex '" + regex + "': " + reinterpret_cast<char*>(msg) + " at offset " +
                       std::to_string(off) + "; fix the PCRE2 pattern");
    }
    re_ = re;
  }
  if (!json_path.empty()) {
    for (const auto& text : split_json_paths(json_path)) {
      path_texts_.push_back(text);
      paths_.push_back(parse_json_path(text));
    }
  }
}

std::vector<std::string> split_json_paths(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  int depth = 0;
  for (char c : list) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      if (depth > 0) quote = c;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']') {
      depth = std::max(0, depth - 1);
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  for (const auto& p : out)
    if (p.empty())
      throw UsageError("--answer-json-path '" + list + "': empty path in the list; give paths like $.a.b or a.b, "
                       "comma-separated");
  return out;
}

std::vector<AnswerExtractor::Step> AnswerExtractor::parse_json_path(const std::string& given) {
  auto bad = [&](const std::string& why) {
    return UsageError("--answer-json-path '" + given + "': " + why +
                      "; use a simple path like $.answer, $.choices[0].text or answer.value");
  };
  // "a.b" is "$.a.b"; "[0]" is "$[0]"
  const std::string path = given[0] == '$' ? given : given[0] == '[' ? "$" + given : "$." + given;
  std::vector<Step> steps;
  size_t i = 1;
  while (i < path.size()) {
    char c = path[i];
    if (c == '.') {
      size_t j = i + 1;
      while (j < path.size() && path[j] != '.' && path[j] != '[') ++j;
      if (j == i + 1) throw bad("empty key after '.' at offset " + std::to_string(i));
      steps.push_back({false, path.substr(i + 1, j - i - 1), 0});
      i = j;
    } else if (c == '[') {
      size_t j = path.find(']', i);
      if (j == std::string::npos) throw bad("missing ']' after offset " + std::to_string(i));
      std::string inner = path.substr(i + 1, j - i - 1);
      if (inner.size() >= 2 && (inner.front() == '"' || inner.front() == '\'') && inner.back() == inner.front()) {
        steps.push_back({false, inner.substr(1, inner.size() - 2), 0});
      } else {
        if (inner.empty() || inner.find_first_not_of("0123456789") != std::string::npos)
          throw bad("index '" + inner + "' is not a non-negative integer");
        steps.push_back({true, "", static_cast<size_t>(std::stoull(inner))});
      }
      i = j + 1;
    } else {
      throw bad(std::string("unexpected '") + c + "' at offset " + std::to_string(i));
    }
  }
  return steps;
}

namespace {
nlohmann::json normalized_numbers(const nlohmann::json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
    return v;
  }
  if (v.is_array()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : v) a.push_back(normalized_numbers(e));
    return a;
  }
  if (v.is_object()) {
    nlohmann::json o = nlohmann::json::object();
    for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = normalized_numbers(it.value());
    return o;
  }
  return v;
}
}  // namespace

std::string canonical_answer(const nlohmann::json& v) {
  // nlohmann::json keeps object keys sorted; numbers with an integral value print as integers.
  return normalized_numbers(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

AnswerExtractor::~AnswerExtractor() {
  if (re_) pcre2_code_free(static_cast<pcre2_code*>(re_));
}

std::optional<std::string> AnswerExtractor::extract(const std::string& text) const {
  if (re_) {
    auto* re = static_cast<pcre2_code*>(re_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, nullptr);
    std::optional<std::string> out;
    if (rc > 0) {
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      int group = (rc > 1 && ov[2] != PCRE2_UNSET) ? 1 : 0;
      out = text.substr(ov[2 * group], ov[2 * group + 1] - ov[2 * group]);
    }
    pcre2_match_data_free(md);
    return out;
  }
  if (!paths_.empty()) {
    nlohmann::json j;
    if (!parse_json(text, j)) return std::nullopt;  // not JSON, or nested past the limit: no answer
    if (paths_.size() == 1) {
      const nlohmann::json* v = lookup(j, paths_[0]);
      if (!v) return std::nullopt;
      return v->is_string() ? v->get<std::string>() : canonical_answer(*v);
    }
    nlohmann::json all = nlohmann::json::array();  // several paths: the answer is all their values
    for (const auto& p : paths_) {
      const nlohmann::json* v = lookup(j, p);
      if (!v) return std::nullopt;
      all.push_back(*v);
    }
    return canonical_answer(all);
  }
  return std::nullopt;
}

const nlohmann::json* AnswerExtractor::lookup(const nlohmann::json& j, const std::vector<Step>& path) {
  const nlohmann::json* cur = &j;
  for (const auto& s : path) {
    if (s.index) {
      if (!cur->is_array() || s.pos >= cur->size()) return nullptr;
      cur = &(*cur)[s.pos];
    } else {
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(s.key);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    }
  }
  return cur;
}

std::vector<std::optional<std::string>> AnswerExtractor::fields(const std::string& text) const {
  std::vector<std::optional<std::string>> out(paths_.size());
  if (paths_.empty()) return out;
  nlohmann::json j;
  if (!parse_json(text, j)) return out;
  for (size_t i = 0; i < paths_.size(); ++i)
    if (const nlohmann::json* v = lookup(j, paths_[i])) out[i] = canonical_answer(*v);
  return out;
}

}  // namespace repro
