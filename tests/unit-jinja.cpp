// The chat-template interpreter (src/chat/jinja.cpp) against Jinja2 itself: every snippet below is
// rendered by the interpreter and by Debian's python3-jinja2 configured as transformers configures
// it (tests/scripts/hf_chat_template.py), and the texts must be byte-identical. Without python3 and
// jinja2 the comparison skips with a message; the error cases and the fuzz corpus always run.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "repro/chat/jinja.hpp"
#include "repro/common/error.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* tmpl;
  const char* vars;  // JSON object
};

// Each snippet exercises what Hugging Face chat templates use.
const Case kCases[] = {
    // whitespace control, trim_blocks, lstrip_blocks, comments, trailing newline
    {"a\n  {% if true %}\n    b\n  {% endif %}\nc\n", "{}"},
    {"  {%- if true -%}  x  {%- endif -%}  \n", "{}"},
    {"{% for i in range(3) %}\n{{ i }}\n{% endfor %}", "{}"},
    {"x {# note #}\n  {#- strip -#}  y\n  {# own line #}\nz", "{}"},
    {"{{ 'a' }}   {% if true %}b{% endif %}", "{}"},
    {"line\n{%+ if true %}kept{% endif +%}\nend", "{}"},
    {"{{- '  a  ' -}}\n\n{{ 'b' }}", "{}"},
    // loops and loop.*
    {"{% for m in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }}|{% endfor %}", R"({"xs": ["a", "b", "c"]})"},
    {"{% for m in xs %}{{ loop.previtem | default('-') }}{{ m }}{{ loop.nextitem | default('-') }} {% endfor %}",
     R"({"xs": [1, 2, 3]})"},
    {"{% for m in xs if m > 1 %}{{ m }}{{ loop.length }}{% else %}none{% endfor %}", R"({"xs": [1, 2, 3]})"},
    {"{% for m in xs %}x{% else %}empty{% endfor %}", R"({"xs": []})"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"a": 1, "b": [2]}})"},
    {"{% for m in xs %}{% if m == 2 %}{% continue %}{% endif %}{% if m == 4 %}{% break %}{% endif %}{{ m }}{% endfor %}",
     R"({"xs": [1, 2, 3, 4, 5]})"},
    {"{% for m in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", R"({"xs": [1, 2, 3]})"},
    {"{% for c in 'héllo' %}[{{ c }}]{% endfor %}", "{}"},
    // set, namespace, scoping
    {"{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}", R"({"xs": [5, 6]})"},
    {"{% set ns = namespace(found=false, n=0) %}{% for i in xs %}{% set ns.n = ns.n + i %}{% if i == 2 %}"
     "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", R"({"xs": [1, 2, 3]})"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}block {{ a }}{% endset %}[{{ t }}]", "{}"},
    // macros
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} "
     "{{ greet(name='C', punct='.') }}", "{}"},
    {"{% macro render(v) %}{% if v is mapping %}{{ v | tojson }}{% else %}{{ v }}{% endif %}{% endmacro %}"
     "{{ render(d) }} {{ render(3) }}", R"({"d": {"k": "v"}})"},
    // strings: methods, slicing, concatenation
    {"{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s | trim }}", R"({"s": " \u3000\u00a0 x y \n\t\u2003"})"},
    {"{{ s.split() }} {{ s.split(' ') }} {{ s.split(None, 1) }} {{ 'a,b,,c'.split(',') }} {{ s.rsplit(None, 1) }}",
     R"({"s": "  a  b c "})"},
    // case mapping as Python's (full mappings, final sigma) in methods and filters
    {"{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.swapcase() }}|{{ s | upper }}|"
     "{{ s | lower }}|{{ s | title }}|{{ s | capitalize }}|{{ [s, 'B', 'a'] | sort(case_sensitive=false) }}",
     R"({"s": "straße ﬁne ΟΔΟΣ ΣΑΣ. Σ İstanbul ǆemal ŉ ᾳ ᾲ 'ΑΣ' Α.Σ ΑΣ-ΑΣ ΑΣ΄ ΌΣΟΣ ⓐⒶ Ⅻ ﬀ-ß ǰ"})"},
    {"{{ s.startswith('<think>') }} {{ s.endswith(('x', '</think>')) }} {{ s.upper() }} {{ s.lower() }} "
     "{{ s.title() }} {{ s.capitalize() }} {{ s.replace('think', 'THINK') }}", R"({"s": "<think>Hello wORLD</think>"})"},
    {"{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[0] }} {{ s[-1] }} {{ s | length }}", R"({"s": "héllo😀"})"},
    {"{{ xs[::-1] }} {{ xs[1:] }} {{ xs[-2:] }} {{ xs[::2] }} {{ xs[5:1:-2] }}", R"({"xs": [1, 2, 3, 4, 5, 6]})"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 2.5 }} {{ 'x' + 'y' }} {{ 'ab' * 3 }}", "{}"},
    {"{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     R"({"s": "<think>\nreason\n</think>\n\nanswer"})"},
    {"{{ '%s has %d' | format('x', 3) }} {{ s.find('b') }} {{ s.count('a') }}", R"({"s": "abcab"})"},
    // values printed as Python prints them
    {"{{ xs }} {{ d }} {{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} "
     "{{ -7 % 3 }} {{ 2 ** 10 }}", R"({"xs": ["a", 1, 2.5, null, true, {"k": "it's"}], "d": {"b": 1, "a": "x"}})"},
    // tests
    {"{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ x is number }} "
     "{{ x is integer }} {{ f is float }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ s is not none }} "
     "{{ x is even }} {{ x is odd }} {{ x is divisibleby 3 }} {{ b is boolean }} {{ b is true }} {{ b is false }} "
     "{{ x is eq 4 }} {{ x is in xs }}",
     R"({"x": 4, "n": null, "s": "s", "f": 1.5, "d": {}, "xs": [4], "b": true})"},
    // filters
    {"{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }} {{ xs | reverse | list }} {{ xs | sort }} "
     "{{ xs | unique | list }} {{ xs | sum }} {{ xs | min }} {{ xs | max }}", R"({"xs": [3, 1, 2, 3]})"},
    {"{{ ms | selectattr('role', 'equalto', 'user') | list | length }} {{ ms | rejectattr('role', 'eq', 'user') | "
     "map(attribute='content') | join('/') }} {{ ms | map(attribute='role') | list }} {{ ms | selectattr('tool_calls') | "
     "list | length }} {{ ms | selectattr('tool_calls', 'defined') | list | length }}",
     R"({"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [1]},
                {"role": "user", "content": "c"}]})"},
    {"{{ y | default('dflt') }} {{ '' | default('e', true) }} {{ x | d('no') }} {{ '42' | int + 1 }} {{ 'x' | int }} "
     "{{ 3.9 | int }} {{ '2.5' | float }} {{ 7 | string }} {{ 'ab' | upper }} {{ 'AB' | lower }} {{ 'hello world' | "
     "capitalize }} {{ 'hello-world (x)' | title }} {{ 'aXa' | replace('a', 'b') }} {{ -3 | abs }}", R"({"x": 0})"},
    {"{{ d | items | list }} {{ d | dictsort }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} "
     "{{ d.get('zz', 'none') }} {{ d['b'] }} {{ d.b }}", R"({"d": {"b": 2, "a": 1, "C": 3}})"},
    {"{{ s | indent(2) }}|{{ s | indent(2, true) }}|{{ s | indent(4, first=true, blank=true) }}", R"({"s": "a\n\nb\nc"})"},
    // tojson as transformers defines it (ensure_ascii off, indent, separators, sort_keys)
    {"{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(separators=(',', ':')) }}\n{{ v | tojson(sort_keys=true) }}"
     "\n{{ 'é\"\\\\\\n\\t<>&\\u2028' | tojson }}\n{{ [] | tojson(indent=4) }} {{ {} | tojson }}",
     R"({"v": {"b": [1, 2.5, {"c": null}], "a": "x\u00e9\u4e2d", "t": true, "e": [], "f": -0.0, "g": 1e-07}})"},
    // expressions: and/or/not, in, comparisons, ternary, literals
    {"{{ 1 if x else 2 }} {{ 'y' if x is none }}! {{ x or 'alt' }} {{ x and 'both' }} {{ not x }} {{ 'a' in 'cat' }} "
     "{{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 1 < 2 < 3 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} "
     "{{ {'a': 1}['a'] }} {{ (1, 2)[1] }} {{ -x if x is number else 0 }}", R"({"x": 0})"},
    {"{{ ms[0]['role'] }} {{ ms[0].content }} {{ ms[-1].role }} {{ ms | length > 1 }} {{ ms[5] is defined }}",
     R"({"ms": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]})"},
    {"{%- if ms[0].role == 'system' %}{{ ms[0].content }}{% elif ms[0].role == 'user' %}U{% else %}?{% endif %}",
     R"({"ms": [{"role": "user", "content": "x"}]})"},
    {"{{ raise_exception is defined }} {{ strftime_now('%Y-%m-%d %d %b %Y') }}", "{}"},
    {"{% generation %}inside {{ 1 }}{% endgeneration %}", "{}"},
    {"{{ 'a\\x41\\u00e9\\U0001F600\\101' }} {{ \"q'\" }} {{ 'adj' 'acent' }}", "{}"},
};

nlohmann::json python_render(const nlohmann::ordered_json& cases, const fs::path& dir) {
  const fs::path in = dir / "cases.json", out = dir / "out.json";
  std::ofstream(in) << cases.dump();
  const auto r = test::run_shell("SOURCE_DATE_EPOCH=1700000000 python3 '" + std::string(REPRO_SOURCE_DIR) +
                                 "/tests/scripts/hf_chat_template.py' '" + in.string() + "' > '" + out.string() + "'");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  return nlohmann::json::parse(test::slurp(out));
}

bool have_jinja2() { return test::run_shell("python3 -c 'import jinja2'").code == 0; }

std::string ours(const std::string& tmpl, const nlohmann::ordered_json& vars) {
  return jinja::Template(tmpl, "test").render(vars);
}

}  // namespace

TEST_CASE("the interpreter renders every snippet exactly as Jinja2 does under transformers' settings") {
  if (!have_jinja2()) {
    MESSAGE("SKIPPED: python3 with jinja2 not found; install python3-jinja2 (scripts/deps.sh --test)");
    return;
  }
  setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  // Variables keep the key order they are written in (a dict iterates so in Jinja2).
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const Case& c : kCases)
    cases.push_back({{"template", c.tmpl}, {"variables", nlohmann::ordered_json::parse(c.vars)}});
  const nlohmann::json want = python_render(cases, test::scratch_dir("jinja-oracle"));
  REQUIRE(want.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    CAPTURE(kCases[i].tmpl);
    REQUIRE_MESSAGE(want[i].contains("text"), want[i].dump());
    CHECK(ours(kCases[i].tmpl, cases[i]["variables"]) == want[i]["text"].get<std::string>());
  }
  unsetenv("SOURCE_DATE_EPOCH");
}

TEST_CASE("what the interpreter does not have is an error naming it and the template's line") {
  auto err = [](const std::string& tmpl, const nlohmann::json& vars = nlohmann::json::object()) {
    try {
      jinja::Template t(tmpl, "T");
      (void)t.render(vars);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("a\n{% include 'x.j2' %}") == "T line 2: the statement {% include %} is not supported by this interpreter");
  CHECK(err("{{ x | wordwrap }}") == "T line 1: the filter 'wordwrap' is not supported by this interpreter");
  CHECK(err("\n\n{{ x is future }}") == "T line 3: the test 'future' is not supported by this interpreter");
  CHECK(err("{{ 'a'.zfill(3) }}") == "T line 1: the string method 'zfill' is not supported by this interpreter");
  CHECK(err("{% for x in y recursive %}{% endfor %}") ==
        "T line 1: recursive for loops are not supported by this interpreter");
  CHECK(err("{% if x %}") == "T line 1: the template ends inside a block: {% endif %} is missing");
  CHECK(err("{{ raise_exception('Conversation roles must alternate') }}") ==
        "T line 1: the template raised an exception: Conversation roles must alternate");
  CHECK(err("{{ x.y }}") == "T line 1: 'x' is undefined (reading its attribute 'y')");
  CHECK(err("{{ 1 + none }}") == "T line 1: unsupported operand types for +: 'int' and 'NoneType'");
  CHECK(err("{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}") ==
        "T line 1: the template runs more than 2000000 steps; it is refused as a runaway program");
  CHECK(err("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").find("calls nest deeper than") != std::string::npos);
  CHECK(err("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}") ==
        "T line 1: the template nests deeper than 200 levels");
}

TEST_CASE("fuzz corpus: every input of fuzz/corpus/jinja renders or fails with a usage error") {
  const auto files = test::corpus_files("jinja");
  REQUIRE(!files.empty());
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(jinja::fuzz_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
}

TEST_CASE("case mapping: upper, lower, title, capitalize, swapcase of every code point below U+20000 equal Python's") {
  if (!have_jinja2()) {
    MESSAGE("SKIPPED: python3 with jinja2 not found; install python3-jinja2 (scripts/deps.sh --test)");
    return;
  }
  // One template per 16384 code points (the step limit bounds one rendering), each character through
  // the string methods and the filters; tojson keeps line breaks and bars unambiguous.
  const std::string tmpl =
      "{% for c in cs %}{{ [c.upper(), c.lower(), c.title(), c.capitalize(), c.swapcase(), c | upper, c | lower, "
      "c | title, c | capitalize] | tojson }}\n{% endfor %}";
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (uint32_t from = 0; from < 0x20000; from += 0x4000) {
    nlohmann::ordered_json cs = nlohmann::ordered_json::array();
    for (uint32_t c = std::max<uint32_t>(from, 1); c < from + 0x4000; ++c) {
      if (c >= 0xD800 && c < 0xE000) continue;  // surrogates are not text
      std::string u;
      if (c < 0x80) {
        u += static_cast<char>(c);
      } else if (c < 0x800) {
        u += static_cast<char>(0xC0 | (c >> 6)), u += static_cast<char>(0x80 | (c & 63));
      } else if (c < 0x10000) {
        u += static_cast<char>(0xE0 | (c >> 12)), u += static_cast<char>(0x80 | ((c >> 6) & 63));
        u += static_cast<char>(0x80 | (c & 63));
      } else {
        u += static_cast<char>(0xF0 | (c >> 18)), u += static_cast<char>(0x80 | ((c >> 12) & 63));
        u += static_cast<char>(0x80 | ((c >> 6) & 63)), u += static_cast<char>(0x80 | (c & 63));
      }
      cs.push_back(u);
    }
    cases.push_back({{"template", tmpl}, {"variables", {{"cs", cs}}}});
  }
  const nlohmann::json want = python_render(cases, test::scratch_dir("jinja-case-mapping"));
  REQUIRE(want.size() == cases.size());
  int differ = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    REQUIRE_MESSAGE(want[i].contains("text"), want[i].dump().substr(0, 500));
    const std::string got = ours(tmpl, cases[i]["variables"]);
    const std::string exp = want[i]["text"].get<std::string>();
    if (got == exp) continue;
    // Name the first character that differs.
    std::istringstream a(got), b(exp);
    std::string la, lb;
    size_t k = 0;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++k;
    ++differ;
    FAIL_CHECK("character " << cases[i]["variables"]["cs"][k].get<std::string>() << ": ours " << la << ", Python "
                            << lb);
  }
  CHECK(differ == 0);
}

TEST_CASE("strftime_now reads the real clock in local time, as Python's datetime.now().strftime") {
  if (!have_jinja2()) {
    MESSAGE("SKIPPED: python3 with jinja2 not found; install python3-jinja2 (scripts/deps.sh --test)");
    return;
  }
  unsetenv("SOURCE_DATE_EPOCH");
  const std::string tmpl = "{{ strftime_now('%Y-%m-%d %A %d %B %Y %j') }}";
  // Ours before and after Python's: when both agree, the date did not turn while Python ran.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string before = ours(tmpl, nlohmann::ordered_json::object());
    const auto r = test::run_shell("python3 -c \"import datetime; print(datetime.datetime.now().strftime('%Y-%m-%d %A %d "
                                   "%B %Y %j'), end='')\"");
    REQUIRE(r.code == 0);
    const std::string after = ours(tmpl, nlohmann::ordered_json::object());
    if (before != after) continue;
    CHECK(before == r.output);
    CHECK(before.size() >= 10);
    return;
  }
  FAIL("the date changed during every attempt");
}
