// A Jinja interpreter for chat templates: the subset of Jinja2 that Hugging Face chat templates
// use, rendered as transformers renders them (ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, the loopcontrols extension, its own tojson filter,
// raise_exception and strftime_now as globals). No C++ Jinja library is packaged in Debian, so the
// project carries its own; docs/CHAT-TEMPLATES.md lists what it interprets.
//
// What it does not interpret is an error naming the construct and the template's line, never a
// fallback: a template is rendered the way Jinja2 renders it, or refused.
//
//   statements   if / elif / else, for (tuple targets, `if` filter, else, loop.*), set (names,
//                tuples, namespace attributes, blocks), macro (defaults, keyword arguments),
//                break / continue, generation (transformers' assistant-mask tag), comments,
//                whitespace control {%- -%} {{- -}} {%+ +%}
//   expressions  literals (strings with Python escapes, ints, floats, lists, tuples, dicts, true /
//                false / none), attribute and item access, slices [a:b:c], calls with keyword
//                arguments, filters, tests (is / is not), not / and / or, in / not in, comparisons,
//                + - * / // % ** ~, unary - +, `x if c else y`
//   values       messages, tools and template arguments arrive as JSON; Python's str() and repr()
//                print them ('True', 'None', "['a', 1]"); strings are Unicode (length, slices and
//                indexing count code points)
// Filters, tests, globals and methods are listed in src/chat/jinja.cpp (kFilters, kTests, ...).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace repro::jinja {

struct Program;  // a parsed template (src/chat/jinja.cpp)

class Template {
 public:
  // Parses `source`. `origin` names the template in errors ("GGUF tokenizer.chat_template",
  // "--chat-template FILE"). Throws UsageError("<origin> line N: ...") on a syntax error or a
  // statement, filter or test the interpreter does not have.
  Template(const std::string& source, const std::string& origin);
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with `variables` (a JSON object: name -> value; objects keep their key order, which
  // dict iteration and tojson follow) beside the globals (range, namespace,
  // dict, raise_exception, strftime_now). Throws UsageError("<origin> line N: ...") when the
  // template raises (raise_exception), uses something undefined in a way Jinja2 refuses, calls
  // what it does not have, or exceeds a limit (output size, steps, recursion).
  std::string render(const nlohmann::ordered_json& variables) const;

  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::unique_ptr<Program> program_;
};

// The fuzz target's body (fuzz/fuzz_jinja.cpp; the suite replays fuzz/corpus/jinja through it):
// the bytes before the first NUL are a template, the rest a JSON object of variables (messages
// and tools of a chat when it is not one). Parses and renders; an error must be a UsageError.
int fuzz_one(const uint8_t* data, size_t size);

// Python's str.strip(): leading and trailing Unicode whitespace removed (Jinja's trim filter).
std::string strip_whitespace(const std::string& s);

// The instant strftime_now formats: SOURCE_DATE_EPOCH (seconds since 1970, UTC) when it is set
// to a number, else the current time; formatted in local time, as transformers' datetime.now().
int64_t now_seconds();

}  // namespace repro::jinja
