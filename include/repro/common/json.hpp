// Reading JSON that comes from outside (requests, responses, schemas, reports, envelopes,
// checkpoints, prompts files, profiles): one parser with a nesting bound for all of them.
//
// nlohmann's parser itself is iterative, but copying, dumping, comparing and every walk the tool
// does over a value recurse once per level, so a value nested 100,000 deep (1 MB of `[`) would
// overflow the stack after a successful parse. Every outside JSON is therefore parsed here, and a
// value nested deeper than the limit is refused as malformed, before any of that runs.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace repro {

// The deepest nesting accepted in outside JSON (arrays and objects count; scalars do not). Real
// requests, schemas and reports stay far below it (a report is about 8 deep).
inline constexpr int kMaxJsonDepth = 256;

struct JsonLimits {
  int max_depth = kMaxJsonDepth;
  // Refuse an object that repeats a key. nlohmann keeps the last value while other readers keep
  // the first, so a signed document with a repeated key could be read two ways.
  bool unique_keys = false;
};

// Parses `text` as exactly one JSON value into `out`. On malformed JSON, a number beyond double,
// nesting deeper than `limits.max_depth`, or (with `unique_keys`) a repeated key, returns false
// and, when `error` is given, sets it to a one-line reason with the byte offset; `out` is then
// left null.
bool parse_json(std::string_view text, nlohmann::json& out, std::string* error = nullptr,
                JsonLimits limits = {});
// The same into an ordered_json, whose objects keep the document's key order (nlohmann::json sorts
// them). For what a chat template reads (messages, tools, chat_template_kwargs): Jinja2 iterates
// and `tojson` prints a dict in insertion order, so a tool's keys must reach it as the user wrote
// them.
bool parse_json(std::string_view text, nlohmann::ordered_json& out, std::string* error = nullptr,
                JsonLimits limits = {});

// The same, returning the value (null on failure, as nlohmann's discarded values are tested with
// is_discarded(); here test the bool form or use parse_json_or_throw).
// Throws UsageError("<what>: <reason>") on failure.
nlohmann::json parse_json_or_throw(std::string_view text, const std::string& what, JsonLimits limits = {});
nlohmann::ordered_json parse_ordered_json_or_throw(std::string_view text, const std::string& what,
                                                   JsonLimits limits = {});

// The nesting depth of a parsed value (0 for a scalar, 1 for [] or {}), computed without recursion.
int json_depth(const nlohmann::json& v);

}  // namespace repro
