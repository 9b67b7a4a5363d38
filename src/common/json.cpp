// One bounded JSON reader for everything that comes from outside (include/repro/common/json.hpp).
#include "repro/common/json.hpp"

#include <fmt/core.h>

#include <unordered_set>
#include <utility>
#include <vector>

#include "repro/common/error.hpp"

namespace repro {

namespace {


// A SAX handler that builds the value with nlohmann's own DOM builder and stops the parse at the
// first container past the depth limit or the first repeated key. The parser never recursed; this
// keeps everything after it from recursing too deep. `json` is nlohmann::json (keys sorted) or
// nlohmann::ordered_json (keys in the document's order).
template <class json>
class BoundedSax {
  using number_integer_t = typename json::number_integer_t;
  using number_unsigned_t = typename json::number_unsigned_t;
  using number_float_t = typename json::number_float_t;
  using string_t = typename json::string_t;
  using binary_t = typename json::binary_t;

 public:
  BoundedSax(json& out, JsonLimits limits) : dom_(out, false), limits_(limits) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }

  bool start_object(std::size_t n) {
    if (!enter()) return false;
    if (limits_.unique_keys) keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (limits_.unique_keys && !keys_.back().insert(k).second) {
      error_ = fmt::format("the key \"{}\" appears twice in one object", printable(k));
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    if (limits_.unique_keys) keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }

  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's text already says "syntax error while parsing value - ... at line 1, column 3".
    std::string what = e.what();
    const auto cut = what.find("] ");
    error_ = cut == std::string::npos ? what : what.substr(cut + 2);
    if (error_.find("byte") == std::string::npos && error_.find("column") == std::string::npos)
      error_ += fmt::format(" (at byte {})", pos);
    return false;
  }

  // Set when the handler stopped the parse; empty when the parser stopped for its own reason.
  const std::string& error() const { return error_; }
  std::size_t depth() const { return static_cast<std::size_t>(depth_); }

 private:
  bool enter() {
    if (++depth_ > limits_.max_depth) {
      error_ = fmt::format("nested deeper than {} levels of arrays and objects, the limit for JSON input",
                           limits_.max_depth);
      return false;
    }
    return true;
  }
  // Keys quoted in a one-line error: control bytes escaped, at most 64 bytes.
  static std::string printable(const std::string& k) {
    std::string s;
    for (unsigned char c : k.substr(0, 64)) {
      if (c < 0x20 || c == 0x7f) s += fmt::format("\\x{:02x}", c);
      else s += static_cast<char>(c);
    }
    return k.size() > 64 ? s + "..." : s;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  JsonLimits limits_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string error_;
};


template <class json>
bool parse_any(std::string_view text, json& out, std::string* error, JsonLimits limits) {
  json value;
  BoundedSax<json> sax(value, limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true);
  } catch (const typename json::exception& e) {
    // The DOM builder never throws with exceptions off; keep the promise of no throw anyway.
    if (error) *error = e.what();
    out = nullptr;
    return false;
  }
  if (!ok) {
    if (error) *error = sax.error().empty() ? "not valid JSON" : sax.error();
    out = nullptr;
    return false;
  }
  out = std::move(value);
  return true;
}

}  // namespace

bool parse_json(std::string_view text, nlohmann::json& out, std::string* error, JsonLimits limits) {
  return parse_any(text, out, error, limits);
}

bool parse_json(std::string_view text, nlohmann::ordered_json& out, std::string* error, JsonLimits limits) {
  return parse_any(text, out, error, limits);
}

nlohmann::json parse_json_or_throw(std::string_view text, const std::string& what, JsonLimits limits) {
  nlohmann::json v;
  std::string err;
  if (!parse_json(text, v, &err, limits)) throw UsageError(what + ": " + err);
  return v;
}

nlohmann::ordered_json parse_ordered_json_or_throw(std::string_view text, const std::string& what,
                                                   JsonLimits limits) {
  nlohmann::ordered_json v;
  std::string err;
  if (!parse_json(text, v, &err, limits)) throw UsageError(what + ": " + err);
  return v;
}

int json_depth(const nlohmann::json& v) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&v, 0}};
  while (!todo.empty()) {
    auto [p, d] = todo.back();
    todo.pop_back();
    if (!p->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *p) todo.emplace_back(&child, d + 1);
  }
  return deepest;
}

}  // namespace repro
