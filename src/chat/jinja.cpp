// The Jinja interpreter for chat templates (repro/chat/jinja.hpp): a lexer with Jinja2's whitespace
// rules, a recursive-descent parser with Jinja2's operator precedence, and a tree-walking evaluator
// with Python's value semantics. Jinja2 (jinja2/lexer.py, parser.py, filters.py, tests.py) is the
// reference; transformers' chat_template_utils.py says how it is configured.
#include "repro/chat/jinja.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"

namespace repro::jinja {

namespace {

// Limits for templates from outside: a template is a program, and a program can loop.
constexpr size_t kMaxOutput = size_t{64} << 20;  // bytes of rendered text
constexpr int64_t kMaxSteps = 2'000'000;         // statements, expressions and loop rounds evaluated
constexpr int kMaxCallDepth = 64;                // nested macro calls
constexpr int kMaxParseDepth = 200;              // nesting of expressions and blocks
constexpr int64_t kMaxRange = 1'000'000;         // items of one range()

// ============================================================================================
// Unicode: strings are UTF-8; Python's view of them is code points. A byte that is not part of
// well-formed UTF-8 becomes U+DC80 + byte (Python's surrogateescape) and is written back as that
// byte, so no text is lost.
// ============================================================================================

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                static_cast<utf8proc_ssize_t>(std::min<size_t>(4, s.size() - i)), &cp);
    if (n <= 0 || cp < 0) {
      out.push_back(0xDC80u + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(static_cast<uint32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

void encode_cp(uint32_t cp, std::string& out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {
    out.push_back(static_cast<char>(cp - 0xDC00));
    return;
  }
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string encode(const std::vector<uint32_t>& cps, size_t b = 0, size_t e = std::string::npos) {
  std::string out;
  e = std::min(e, cps.size());
  for (size_t i = b; i < e; ++i) encode_cp(cps[i], out);
  return out;
}

// Python's str.isspace() (Py_UNICODE_ISSPACE).
bool py_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's cased characters: letters of categories Lu, Ll, Lt, and the others with a case mapping
// (Other_Uppercase and Other_Lowercase: U+24B6, U+2160, U+0345).
bool is_cased(uint32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
         utf8proc_toupper(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c) ||
         utf8proc_tolower(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c);
}
uint32_t to_upper(uint32_t c) { return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
uint32_t to_lower(uint32_t c) { return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
uint32_t to_title(uint32_t c) { return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

// Python's str.upper/lower/title/capitalize/swapcase use the full case mappings (SpecialCasing.txt:
// U+00DF upper is "SS", U+FB01 upper is "FI", U+0130 lower is "i" U+0307, a word-final sigma
// U+03A3 lowers to U+03C2). libutf8proc has the simple (one code point) mappings and the full case
// folding; the full mappings follow from them: a lowercase or titlecase letter whose folding is
// several code points (U+00DF -> ss, U+FB01 -> fi, U+0149 -> U+02BC n, U+1FB3 -> U+03B1 U+03B9)
// uppercases to the uppercase of that folding, and titlecases to it with its first cased letter
// titlecased. Comments here name code points in ASCII (clang 14's diagnostics mis-measure some
// combining marks). tests/unit-jinja.cpp compares every code point below U+20000 with Python.
std::vector<uint32_t> full_fold(uint32_t c) {
  utf8proc_int32_t buf[8];
  int boundclass = 0;
  const utf8proc_ssize_t n =
      utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 8, UTF8PROC_CASEFOLD, &boundclass);
  if (n <= 0 || n > 8) return {c};
  return std::vector<uint32_t>(buf, buf + n);
}

bool lower_or_title(uint32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

void upper_full(uint32_t c, std::string& out) {
  if (lower_or_title(c)) {
    const auto f = full_fold(c);
    if (f.size() > 1) {
      for (uint32_t x : f) encode_cp(to_upper(x), out);
      return;
    }
  }
  encode_cp(to_upper(c), out);
}

void title_full(uint32_t c, std::string& out) {
  const uint32_t t = to_title(c);
  const bool titlecase_letter = utf8proc_category(static_cast<utf8proc_int32_t>(t)) == UTF8PROC_CATEGORY_LT;
  if (!titlecase_letter && lower_or_title(c)) {
    auto f = full_fold(c);
    if (f.size() > 1) {
      // A Greek iota subscript (U+0345 in the canonical decomposition: U+1FB2, U+1FB7) folds to a
      // full iota but stays a subscript in titlecase (U+1FB2 -> U+1FBA U+0345).
      utf8proc_int32_t d[8];
      int boundclass = 0;
      const utf8proc_ssize_t n =
          utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), d, 8, UTF8PROC_DECOMPOSE, &boundclass);
      if (n > 0 && n <= 8 && d[n - 1] == 0x345 && f.back() == 0x3B9) f.back() = 0x345;
      bool done = false;
      for (uint32_t x : f) {
        encode_cp(!done && is_cased(x) ? to_title(x) : x, out);
        done = done || is_cased(x);
      }
      return;
    }
  }
  encode_cp(t, out);
}

// Python's _PyUnicode_IsCaseIgnorable, from the general category (Mn, Me, Cf, Lm, Sk) and the
// word-break classes MidLetter, MidNumLet and Single_Quote.
bool case_ignorable(uint32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK: return true;
    default: break;
  }
  switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018: case 0x2019:
    case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default: return false;
  }
}

// The lowercase of cps[i] as Python writes it: U+0130 -> i U+0307, and U+03A3 -> U+03C2 at the end
// of a word (a cased letter before it, none after it, case-ignorable characters skipped), else the
// simple mapping.
void lower_full(const std::vector<uint32_t>& cps, size_t i, std::string& out) {
  const uint32_t c = cps[i];
  if (c == 0x130) {
    encode_cp('i', out);
    encode_cp(0x307, out);
    return;
  }
  if (c == 0x3A3) {
    size_t j = i;
    while (j > 0 && case_ignorable(cps[j - 1])) --j;
    bool final_sigma = j > 0 && is_cased(cps[j - 1]);
    if (final_sigma) {
      size_t k = i + 1;
      while (k < cps.size() && case_ignorable(cps[k])) ++k;
      final_sigma = k == cps.size() || !is_cased(cps[k]);
    }
    encode_cp(final_sigma ? 0x3C2 : 0x3C3, out);
    return;
  }
  encode_cp(to_lower(c), out);
}

// str.upper, lower, title, capitalize, swapcase (CPython's do_upper, ... in unicodeobject.c).
std::string py_case(std::string_view s, const std::string& how) {
  const std::vector<uint32_t> cps = decode(s);
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (how == "upper") upper_full(c, out);
    else if (how == "lower") lower_full(cps, i, out);
    else if (how == "capitalize") i == 0 ? title_full(c, out) : lower_full(cps, i, out);
    else if (how == "swapcase") {  // uppercase (Lu, Other_Uppercase) to lower, lowercase to upper
      const bool letter = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
      if (cat == UTF8PROC_CATEGORY_LU || (!letter && to_lower(c) != c)) lower_full(cps, i, out);
      else if (cat == UTF8PROC_CATEGORY_LL || (!letter && to_upper(c) != c)) upper_full(c, out);
      else encode_cp(c, out);
    } else {  // title
      prev_cased ? lower_full(cps, i, out) : title_full(c, out);
    }
    prev_cased = is_cased(c);
  }
  return out;
}

// str.strip / lstrip / rstrip: chars == nullptr strips Python whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> cps = decode(s);
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto strip_it = [&](uint32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode(cps, b, e);
}

// ============================================================================================
// Values
// ============================================================================================

struct Value;
struct Interp;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
using Native = std::function<Value(Interp&, CallArgs&)>;
struct Func {
  std::string name;
  Native fn;
};

struct Value {
  enum class K { Undef, None, Bool, Int, Float, Str, List, Dict, Ns, Func, Loop };
  K k = K::Undef;
  bool b = false;
  bool tuple = false;  // List: a Python tuple (prints as (a, b))
  int64_t i = 0;  // Int; Loop: the iteration's index; Undef: 1 for a str method that does not exist
  double f = 0;
  std::string s;  // Str; Undef: what was undefined, for errors
  std::shared_ptr<List> list;  // List; Loop: the loop's items
  std::shared_ptr<Dict> dict;  // Dict and Ns (a namespace() object)
  std::shared_ptr<Func> fn;

  static Value undef(std::string what) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() {
    Value v;
    v.k = K::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.k = K::Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.k = K::Int;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.k = K::Float;
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v;
    v.k = K::Str;
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List l) {
    Value v;
    v.k = K::List;
    v.list = std::make_shared<List>(std::move(l));
    return v;
  }
  static Value of_tuple(List l) {
    Value v = of_list(std::move(l));
    v.tuple = true;
    return v;
  }
  static Value of_dict(std::shared_ptr<Dict> d, bool ns = false) {
    Value v;
    v.k = ns ? K::Ns : K::Dict;
    v.dict = std::move(d);
    return v;
  }
  static Value func(std::string name, Native fn) {
    Value v;
    v.k = K::Func;
    v.fn = std::make_shared<Func>(Func{std::move(name), std::move(fn)});
    return v;
  }
  bool undefined() const { return k == K::Undef; }
  bool is_str() const { return k == K::Str; }
  bool is_num() const { return k == K::Int || k == K::Float || k == K::Bool; }
  bool is_int() const { return k == K::Int || k == K::Bool; }
  int64_t as_int() const { return k == K::Bool ? (b ? 1 : 0) : i; }
  double as_float() const { return k == K::Float ? f : static_cast<double>(as_int()); }
};

// A Python dict: insertion order kept (a JSON object arrives in key order, as the JSON reader
// keeps it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const {
    for (const auto& kv : items)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& kv : items)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    items.emplace_back(key, std::move(v));
  }
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
};

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return "Undefined";
    case Value::K::None: return "NoneType";
    case Value::K::Bool: return "bool";
    case Value::K::Int: return "int";
    case Value::K::Float: return "float";
    case Value::K::Str: return "str";
    case Value::K::List: return "list";
    case Value::K::Dict: return "dict";
    case Value::K::Ns: return "Namespace";
    case Value::K::Func: return "function";
    case Value::K::Loop: return "LoopContext";
  }
  return "?";
}

// Objects keep their keys in the document's order (ordered_json), as a Python dict does.
Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::real(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json(x));
      return Value::of_list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), from_json(it.value()));
      return Value::of_dict(std::move(d));
    }
    default: return Value::none();
  }
}

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undef:
    case Value::K::None: return false;
    case Value::K::Bool: return v.b;
    case Value::K::Int: return v.i != 0;
    case Value::K::Float: return v.f != 0.0;
    case Value::K::Str: return !v.s.empty();
    case Value::K::List: return !v.list->empty();
    case Value::K::Dict: return !v.dict->items.empty();
    case Value::K::Ns:
    case Value::K::Func:
    case Value::K::Loop: return true;
  }
  return false;
}

// Python's repr(float) (and json.dumps' float): the shortest round-trip digits, positional for
// exponents -4..15, else scientific with at least two exponent digits.
std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + epos + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      while (ip.size() < static_cast<size_t>(exp) + 1) ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp) + 1 ? digits.substr(static_cast<size_t>(exp) + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return sign + out;
}

std::string py_repr_str(const std::string& s) {
  const bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  const char q = has_sq && !has_dq ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t c : decode(s)) {
    char buf[16];
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<uint32_t>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c >= 0xDC80 && c <= 0xDCFF) std::snprintf(buf, sizeof buf, "\\udc%02x", c - 0xDC00), out += buf;
    else if (c < 0x20 || c == 0x7F) std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
    else if (c < 0x80 || c == ' ') encode_cp(c, out);
    else {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      const bool printable = !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                               cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
                               cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                               cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
      if (printable) encode_cp(c, out);
      else if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", c), out += buf;
      else std::snprintf(buf, sizeof buf, "\\U%08x", c), out += buf;
    }
  }
  out += q;
  return out;
}

std::string py_str(const Value& v);

std::string py_repr(const Value& v) {
  switch (v.k) {
    case Value::K::Str: return py_repr_str(v.s);
    case Value::K::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + py_repr((*v.list)[i]);
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::K::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + py_repr_str(k) + ": " + py_repr(x);
        first = false;
      }
      return out + "}";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return "";
    case Value::K::None: return "None";
    case Value::K::Bool: return v.b ? "True" : "False";
    case Value::K::Int: return std::to_string(v.i);
    case Value::K::Float: return py_float(v.f);
    case Value::K::Str: return v.s;
    case Value::K::List:
    case Value::K::Dict: return py_repr(v);
    case Value::K::Ns: return "<Namespace>";
    case Value::K::Func: return "<function " + v.fn->name + ">";
    case Value::K::Loop: return "<LoopContext " + std::to_string(v.i + 1) + "/" + std::to_string(v.list->size()) + ">";
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case Value::K::Undef:
    case Value::K::None: return true;
    case Value::K::Str: return a.s == b.s;
    case Value::K::List: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    }
    case Value::K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    }
    case Value::K::Ns: return a.dict == b.dict;
    case Value::K::Func: return a.fn == b.fn;
    default: return false;
  }
}

// ============================================================================================
// Lexer: the template's text and its tags, with Jinja2's whitespace control (trim_blocks,
// lstrip_blocks, '-' and '+' markers, one trailing newline of the source removed).
// ============================================================================================

enum class TK { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };

struct Tok {
  TK k;
  std::string s;
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

struct Fail {
  std::string origin;
  [[noreturn]] void operator()(int line, const std::string& msg) const {
    throw UsageError(origin + " line " + std::to_string(line) + ": " + msg);
  }
};

std::string py_lstrip_ws(std::string_view s) { return py_strip(s, nullptr, true, false); }
std::string py_rstrip_ws(std::string_view s) { return py_strip(s, nullptr, false, true); }

// A Python string literal's body with its escapes resolved (Jinja2 decodes them with
// "unicode-escape"; an unknown escape keeps its backslash).
std::string unescape(std::string_view body, int line, const Fail& fail) {
  std::string out;
  auto hex = [&](size_t at, size_t n) -> uint32_t {
    if (at + n > body.size()) fail(line, "truncated \\x, \\u or \\U escape in a string literal");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = body[at + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail(line, "bad hexadecimal digit in a \\x, \\u or \\U escape of a string literal");
    }
    return v;
  };
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // line continuation
      case 'x': encode_cp(hex(i + 1, 2), out), i += 2; break;
      case 'u': encode_cp(hex(i + 1, 4), out), i += 4; break;
      case 'U': {
        const uint32_t cp = hex(i + 1, 8);
        if (cp > 0x10FFFF) fail(line, "\\U escape beyond U+10FFFF in a string literal");
        encode_cp(cp, out);
        i += 8;
        break;
      }
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        uint32_t v = 0;
        size_t n = 0;
        while (n < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7') v = v * 8 + static_cast<uint32_t>(body[i++] - '0'), ++n;
        --i;
        encode_cp(v, out);
        break;
      }
      default: out += '\\', out += c;
    }
  }
  return out;
}

std::vector<Tok> lex(std::string src, const Fail& fail) {
  // Newlines normalized to \n, as Jinja2 does to template data.
  std::string norm;
  norm.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      norm += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      norm += src[i];
    }
  }
  src = std::move(norm);
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline = False

  std::vector<Tok> toks;
  size_t pos = 0;
  int line = 1;
  bool lstrip_next = false;      // the tag before ended with '-'
  bool line_starting = true;     // the text starts a line (template start, or a tag ate its newline)
  auto count_lines = [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) line += src[k] == '\n';
  };
  while (pos <= src.size()) {
    size_t tag = pos;
    while (true) {
      tag = src.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src.size()) {
        tag = std::string::npos;
        break;
      }
      const char c = src[tag + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++tag;
    }
    const size_t text_end = tag == std::string::npos ? src.size() : tag;
    std::string text = src.substr(pos, text_end - pos);
    const int text_line = line;
    count_lines(pos, text_end);
    if (lstrip_next) text = py_lstrip_ws(text);
    char kind = 0, sign = 0;
    if (tag != std::string::npos) {
      kind = src[tag + 1];
      if (tag + 2 < src.size() && (src[tag + 2] == '-' || src[tag + 2] == '+')) sign = src[tag + 2];
      if (sign == '-') {
        text = py_rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.erase(l_pos);
      }
    }
    if (!text.empty()) toks.push_back({TK::Text, text, 0, 0, text_line});
    if (tag == std::string::npos) break;
    pos = tag + 2 + (sign ? 1 : 0);
    lstrip_next = false;
    line_starting = false;
    if (kind == '#') {
      const size_t end = src.find("#}", pos);
      if (end == std::string::npos) fail(line, "a comment {# is never closed with #}");
      count_lines(pos, end);
      const char esign = end > pos && (src[end - 1] == '-' || src[end - 1] == '+') ? src[end - 1] : 0;
      pos = end + 2;
      if (esign == '-') lstrip_next = true;
      else if (esign != '+' && pos < src.size() && src[pos] == '\n') ++pos, ++line, line_starting = true;
      continue;
    }
    const bool block = kind == '%';
    toks.push_back({block ? TK::BlockBegin : TK::VarBegin, "", 0, 0, line});
    int depth = 0;
    while (true) {
      while (pos < src.size() && (src[pos] == ' ' || src[pos] == '\t' || src[pos] == '\n')) line += src[pos++] == '\n';
      if (pos >= src.size()) fail(line, std::string("a tag ") + (block ? "{%" : "{{") + " is never closed");
      // The closer, with an optional '-' or '+' before it.
      const char* closer = block ? "%}" : "}}";
      size_t at = pos;
      char esign = 0;
      if ((src[at] == '-' || src[at] == '+') && src.compare(at + 1, 2, closer) == 0) esign = src[at++];
      if (src.compare(at, 2, closer) == 0 && (block || depth == 0)) {
        toks.push_back({block ? TK::BlockEnd : TK::VarEnd, "", 0, 0, line});
        pos = at + 2;
        if (esign == '-') lstrip_next = true;
        else if (block && esign != '+' && pos < src.size() && src[pos] == '\n') ++pos, ++line, line_starting = true;
        break;
      }
      const char c = src[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        toks.push_back({TK::Name, src.substr(pos, e - pos), 0, 0, line});
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos;
        bool is_float = false;
        auto digits = [&] {
          while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        };
        digits();
        if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
          is_float = true;
          ++e;
          digits();
        }
        if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
          size_t x = e + 1;
          if (x < src.size() && (src[x] == '+' || src[x] == '-')) ++x;
          if (x < src.size() && std::isdigit(static_cast<unsigned char>(src[x]))) {
            is_float = true;
            e = x;
            digits();
          }
        }
        std::string num = src.substr(pos, e - pos);
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        Tok t{is_float ? TK::Float : TK::Int, num, 0, 0, line};
        if (is_float) {
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          const auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (r.ec != std::errc()) fail(line, "the integer literal " + num + " is beyond 64 bits");
        }
        toks.push_back(t);
        pos = e;
      } else if (c == '\'' || c == '"') {
        size_t e = pos + 1;
        while (e < src.size() && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= src.size()) fail(line, "a string literal is never closed");
        const int l0 = line;
        count_lines(pos, e);
        toks.push_back({TK::Str, unescape(std::string_view(src).substr(pos + 1, e - pos - 1), l0, fail), 0, 0, l0});
        pos = e + 1;
      } else {
        static const char* const kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : kOps2)
          if (src.compare(pos, 2, o) == 0) op = o;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{}.,:|").find(c) == std::string_view::npos)
            fail(line, std::string("unexpected character '") + c + "' in a tag");
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') ++depth;
          if (c == ')' || c == ']' || c == '}') --depth;
        }
        toks.push_back({TK::Op, op, 0, 0, line});
        pos += op.size();
      }
    }
  }
  toks.push_back({TK::Eof, "", 0, 0, line});
  return toks;
}

// ============================================================================================
// Syntax tree
// ============================================================================================

enum class EK { Lit, Name, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, And, Or, Bin, Cmp, Cond, List, Tuple, Dict };

struct Expr {
  EK k;
  int line = 0;
  Value lit;
  std::string name;                      // Name, Attr, Filter, Test; Bin: the operator
  std::vector<std::unique_ptr<Expr>> a;  // children (null: an absent slice bound)
  std::vector<std::string> kw;           // Call/Filter/Test: names of the trailing keyword arguments
  std::vector<std::string> ops;          // Cmp: operators between a[i] and a[i+1]
  bool negate = false;                   // Test: is not
};
using ExprP = std::unique_ptr<Expr>;

enum class SK { Text, Out, If, For, Set, SetBlock, Macro, Break, Continue, Block };

struct Node {
  Node(SK kind, int at) : k(kind), line(at) {}
  SK k;
  int line = 0;
  std::string text;               // Text
  std::vector<ExprP> exprs;       // Out: [e]; If: conditions; For: [iter, filter?]; Set: [value]
  std::vector<std::vector<Node>> bodies;  // If: one per condition (+ else); For: body, else; blocks: body
  std::vector<std::string> targets;       // For / Set: names; Set with attr: {namespace, attribute}
  bool attr_target = false;
  std::vector<ExprP> defaults;    // Macro: one per parameter (null: none)
};

// ============================================================================================
// Parser (Jinja2's precedence: condexpr < or < and < not < compare < + - < ~ < * / // % < ** <
// unary < postfix/filters/tests)
// ============================================================================================

class Parser {
 public:
  Parser(std::vector<Tok> toks, const Fail& fail) : t_(std::move(toks)), fail_(fail) {}

  std::vector<Node> parse_all() {
    std::string end;
    std::vector<Node> body = parse_body({}, end);
    return body;
  }

 private:
  std::vector<Tok> t_;
  size_t p_ = 0;
  const Fail& fail_;
  int depth_ = 0;

  const Tok& cur() const { return t_[p_]; }
  const Tok& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().k == TK::Op && cur().s == op; }
  bool is_name(const char* n) const { return cur().k == TK::Name && cur().s == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  std::string describe(const Tok& t) const {
    switch (t.k) {
      case TK::Text: return "text";
      case TK::VarBegin: return "'{{'";
      case TK::VarEnd: return "'}}'";
      case TK::BlockBegin: return "'{%'";
      case TK::BlockEnd: return "'%}'";
      case TK::Eof: return "the end of the template";
      case TK::Str: return "a string";
      case TK::Int:
      case TK::Float: return "the number " + t.s;
      default: return "'" + t.s + "'";
    }
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    fail_(cur().line, "expected " + wanted + ", found " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  std::string expect_name() {
    if (cur().k != TK::Name) unexpected("a name");
    return t_[p_++].s;
  }
  void expect_block_end() {
    if (cur().k != TK::BlockEnd) unexpected("'%}'");
    ++p_;
  }
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth)
        p.fail_(p.cur().line, "the template nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~Deeper() { --p.depth_; }
  };
  ExprP make(EK k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }

  // ---- statements ----
  std::vector<Node> parse_body(const std::vector<std::string>& ends, std::string& end_found) {
    Deeper d(*this);
    std::vector<Node> out;
    while (true) {
      const Tok& t = cur();
      if (t.k == TK::Eof) {
        if (!ends.empty()) fail_(t.line, "the template ends inside a block: {% " + ends.back() + " %} is missing");
        return out;
      }
      if (t.k == TK::Text) {
        Node n{SK::Text, t.line};
        n.text = t.s;
        out.push_back(std::move(n));
        ++p_;
        continue;
      }
      if (t.k == TK::VarBegin) {
        Node n{SK::Out, t.line};
        ++p_;
        n.exprs.push_back(parse_tuple(true));
        if (cur().k != TK::VarEnd) unexpected("'}}'");
        ++p_;
        out.push_back(std::move(n));
        continue;
      }
      if (t.k != TK::BlockBegin) unexpected("text or a tag");
      const Tok& kw = peek();
      if (kw.k != TK::Name) {
        ++p_;
        unexpected("a statement name");
      }
      if (std::find(ends.begin(), ends.end(), kw.s) != ends.end()) {
        p_ += 2;
        end_found = kw.s;
        return out;
      }
      p_ += 2;
      out.push_back(parse_statement(kw.s, kw.line));
    }
  }

  Node parse_statement(const std::string& kw, int line) {
    Node n{SK::Text, line};
    std::string end;
    if (kw == "if") {
      n.k = SK::If;
      n.exprs.push_back(parse_expression(true));
      expect_block_end();
      while (true) {
        n.bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          n.exprs.push_back(parse_expression(true));
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          n.bodies.push_back(parse_body({"endif"}, end));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      n.k = SK::For;
      n.targets.push_back(expect_name());
      while (skip_op(",")) n.targets.push_back(expect_name());
      if (!skip_name("in")) unexpected("'in'");
      n.exprs.push_back(parse_tuple(false));
      if (skip_name("if")) n.exprs.push_back(parse_expression(true));
      if (is_name("recursive")) fail_(cur().line, "recursive for loops are not supported by this interpreter");
      expect_block_end();
      n.bodies.push_back(parse_body({"else", "endfor"}, end));
      if (end == "else") {
        expect_block_end();
        n.bodies.push_back(parse_body({"endfor"}, end));
      }
      expect_block_end();
    } else if (kw == "set") {
      n.targets.push_back(expect_name());
      if (skip_op(".")) {
        n.targets.push_back(expect_name());
        n.attr_target = true;
      } else {
        while (skip_op(",")) n.targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        n.k = SK::Set;
        n.exprs.push_back(parse_tuple(true));
        expect_block_end();
      } else {
        if (n.attr_target || n.targets.size() != 1) unexpected("'='");
        if (is_op("|")) fail_(cur().line, "filters on a {% set %} block are not supported by this interpreter");
        n.k = SK::SetBlock;
        expect_block_end();
        n.bodies.push_back(parse_body({"endset"}, end));
        expect_block_end();
      }
    } else if (kw == "macro") {
      n.k = SK::Macro;
      n.text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        n.targets.push_back(expect_name());
        n.defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
        if (!skip_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      n.bodies.push_back(parse_body({"endmacro"}, end));
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      n.k = kw == "break" ? SK::Break : SK::Continue;
      expect_block_end();
    } else if (kw == "generation") {  // transformers' AssistantTracker: renders its body
      n.k = SK::Block;
      expect_block_end();
      n.bodies.push_back(parse_body({"endgeneration"}, end));
      expect_block_end();
    } else {
      static const char* const kKnown[] = {"call",   "filter", "include", "import", "from", "extends", "block",
                                           "with",   "raw",    "do",      "autoescape", "trans", "pluralize"};
      for (const char* k : kKnown)
        if (kw == k) fail_(line, "the statement {% " + kw + " %} is not supported by this interpreter");
      fail_(line, "unknown statement {% " + kw + " %}");
    }
    return n;
  }

  // ---- expressions ----
  // An expression, or several separated by commas (a tuple), as Jinja2's parse_tuple.
  ExprP parse_tuple(bool condexpr) {
    const int line = cur().line;
    ExprP first = parse_expression(condexpr);
    if (!is_op(",")) return first;
    ExprP t = make(EK::Tuple, line);
    t->a.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().k == TK::BlockEnd || cur().k == TK::VarEnd || is_op(")")) break;
      t->a.push_back(parse_expression(condexpr));
    }
    return t;
  }

  ExprP parse_expression(bool condexpr) {
    Deeper d(*this);
    ExprP e = parse_or();
    if (!condexpr) return e;
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      ExprP c = make(EK::Cond, line);
      ExprP cond = parse_or();
      ExprP other = skip_name("else") ? parse_expression(true) : nullptr;
      c->a.push_back(std::move(cond));
      c->a.push_back(std::move(e));
      c->a.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) {
      ExprP o = make(EK::Or, cur().line);
      ++p_;
      o->a.push_back(std::move(e));
      o->a.push_back(parse_and());
      e = std::move(o);
    }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
      ExprP o = make(EK::And, cur().line);
      ++p_;
      o->a.push_back(std::move(e));
      o->a.push_back(parse_not());
      e = std::move(o);
    }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      Deeper d(*this);
      ExprP n = make(EK::Not, cur().line);
      ++p_;
      n->a.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const int line = cur().line;
    ExprP first = parse_math1();
    ExprP c;
    while (true) {
      std::string op;
      if (cur().k == TK::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == ">" ||
                                cur().s == "<=" || cur().s == ">=")) {
        op = cur().s;
        ++p_;
      } else if (is_name("in")) {
        op = "in";
        ++p_;
      } else if (is_name("not") && peek().k == TK::Name && peek().s == "in") {
        op = "notin";
        p_ += 2;
      } else {
        break;
      }
      if (!c) {
        c = make(EK::Cmp, line);
        c->a.push_back(std::move(first));
      }
      c->ops.push_back(op);
      c->a.push_back(parse_math1());
    }
    return c ? std::move(c) : std::move(first);
  }
  ExprP binary(ExprP l, const std::string& op, ExprP r, int line) {
    ExprP b = make(EK::Bin, line);
    b->name = op;
    b->a.push_back(std::move(l));
    b->a.push_back(std::move(r));
    return b;
  }
  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().s;
      const int line = cur().line;
      ++p_;
      e = binary(std::move(e), op, parse_concat(), line);
    }
    return e;
  }
  ExprP parse_concat() {
    ExprP e = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      ++p_;
      e = binary(std::move(e), "~", parse_math2(), line);
    }
    return e;
  }
  ExprP parse_math2() {
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().s;
      const int line = cur().line;
      ++p_;
      e = binary(std::move(e), op, parse_pow(), line);
    }
    return e;
  }
  ExprP parse_pow() {
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      ++p_;
      e = binary(std::move(e), "**", parse_unary(true), line);
    }
    return e;
  }
  ExprP parse_unary(bool with_filter) {
    Deeper d(*this);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      e = make(is_op("-") ? EK::Neg : EK::Pos, cur().line);
      ++p_;
      e->a.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }
  ExprP parse_primary() {
    const Tok& t = cur();
    ExprP e = make(EK::Lit, t.line);
    switch (t.k) {
      case TK::Name:
        ++p_;
        if (t.s == "true" || t.s == "True") e->lit = Value::boolean(true);
        else if (t.s == "false" || t.s == "False") e->lit = Value::boolean(false);
        else if (t.s == "none" || t.s == "None") e->lit = Value::none();
        else e->k = EK::Name, e->name = t.s;
        return e;
      case TK::Str: {
        std::string s;
        while (cur().k == TK::Str) s += t_[p_++].s;  // adjacent literals join
        e->lit = Value::str(std::move(s));
        return e;
      }
      case TK::Int: e->lit = Value::integer(t.i), ++p_; return e;
      case TK::Float: e->lit = Value::real(t.f), ++p_; return e;
      case TK::Op:
        if (t.s == "(") {
          ++p_;
          if (skip_op(")")) {
            e->k = EK::Tuple;
            return e;
          }
          ExprP inner = parse_expression(true);
          if (is_op(",")) {
            ExprP tup = make(EK::Tuple, t.line);
            tup->a.push_back(std::move(inner));
            while (skip_op(",")) {
              if (is_op(")")) break;
              tup->a.push_back(parse_expression(true));
            }
            inner = std::move(tup);
          }
          expect_op(")");
          return inner;
        }
        if (t.s == "[") {
          ++p_;
          e->k = EK::List;
          while (!is_op("]")) {
            e->a.push_back(parse_expression(true));
            if (!skip_op(",")) break;
          }
          expect_op("]");
          return e;
        }
        if (t.s == "{") {
          ++p_;
          e->k = EK::Dict;
          while (!is_op("}")) {
            e->a.push_back(parse_expression(true));
            expect_op(":");
            e->a.push_back(parse_expression(true));
            if (!skip_op(",")) break;
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    unexpected("an expression");
  }
  ExprP parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        const int line = cur().line;
        ++p_;
        ExprP a = make(EK::Attr, line);
        if (cur().k == TK::Int) {  // x.0 is x[0]
          a->k = EK::Item;
          a->a.push_back(std::move(e));
          ExprP idx = make(EK::Lit, line);
          idx->lit = Value::integer(cur().i);
          ++p_;
          a->a.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->a.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprP parse_subscript(ExprP obj) {
    const int line = cur().line;
    ++p_;  // [
    ExprP bounds[3];
    bool slice = false;
    if (!is_op(":")) bounds[0] = parse_expression(true);
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) bounds[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) bounds[2] = parse_expression(true);
    }
    if (is_op(",")) fail_(cur().line, "tuple subscripts (x[a, b]) are not supported by this interpreter");
    expect_op("]");
    if (!slice) {
      ExprP it = make(EK::Item, line);
      it->a.push_back(std::move(obj));
      it->a.push_back(std::move(bounds[0]));
      return it;
    }
    ExprP s = make(EK::Slice, line);
    s->a.push_back(std::move(obj));
    for (auto& b : bounds) s->a.push_back(std::move(b));
    return s;
  }
  void parse_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail_(cur().line, "*args and **kwargs in calls are not supported by this interpreter");
      if (cur().k == TK::Name && peek().k == TK::Op && peek().s == "=") {
        call.kw.push_back(cur().s);
        p_ += 2;
        call.a.push_back(parse_expression(true));
      } else {
        if (!call.kw.empty()) fail_(cur().line, "a positional argument follows a keyword argument");
        call.a.push_back(parse_expression(true));
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }
  ExprP parse_call(ExprP fn) {
    ExprP c = make(EK::Call, cur().line);
    c->a.push_back(std::move(fn));
    parse_args(*c);
    return c;
  }
  ExprP parse_filter_expr(ExprP e) {
    while (true) {
      if (is_op("|")) {
        const int line = cur().line;
        ++p_;
        ExprP f = make(EK::Filter, line);
        f->name = expect_name();
        while (skip_op(".")) f->name += "." + expect_name();
        f->a.push_back(std::move(e));
        if (is_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = cur().line;
        ++p_;
        ExprP t = make(EK::Test, line);
        t->negate = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name += "." + expect_name();
        t->a.push_back(std::move(e));
        if (is_op("(")) {
          parse_args(*t);
        } else if ((cur().k == TK::Name || cur().k == TK::Str || cur().k == TK::Int || cur().k == TK::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail_(cur().line, "tests cannot be chained with 'is'");
          t->a.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

struct Program {
  std::vector<Node> body;
};

namespace {

// ============================================================================================
// Evaluation
// ============================================================================================

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
  const Value* find(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { Normal, Break, Continue };

using FilterFn = Value (*)(Interp&, Value&, CallArgs&);
using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

struct Interp {
  Fail fail;
  std::string* out = nullptr;
  int64_t steps = 0;
  int call_depth = 0;
  Scope* root = nullptr;
  int line = 0;  // the line being evaluated, for errors raised inside filters and methods

  [[noreturn]] void error(const std::string& msg) const { fail(line, msg); }
  void step() {
    if (++steps > kMaxSteps)
      error("the template runs more than " + std::to_string(kMaxSteps) + " steps; it is refused as a runaway program");
  }
  void emit(const std::string& s) {
    if (out->size() + s.size() > kMaxOutput)
      error("the rendered text exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
    *out += s;
  }
  [[noreturn]] void undefined_error(const Value& v) const {
    error("'" + v.s + "' is undefined");
  }

  Value eval(const Expr& e, Scope& sc);
  Flow exec(const std::vector<Node>& body, Scope& sc);
  Value getattr(const Value& obj, const std::string& name, const std::string& what);
  Value getitem(const Value& obj, const Value& key, const std::string& what);
  Value call(const Value& fn, CallArgs& args, const std::string& what);
  std::vector<Value> iterate(const Value& v);
};

// ---- argument helpers ----
const Value* arg(const CallArgs& a, size_t index, const char* name) {
  if (index < a.pos.size()) return &a.pos[index];
  for (const auto& [k, v] : a.kw)
    if (k == name) return &v;
  return nullptr;
}
void check_args(Interp& in, const CallArgs& a, const char* what, size_t max_pos, std::initializer_list<const char*> names) {
  if (a.pos.size() > max_pos)
    in.error(std::string(what) + " takes at most " + std::to_string(max_pos) + " positional arguments, " +
             std::to_string(a.pos.size()) + " given");
  for (const auto& kv : a.kw) {
    const std::string& k = kv.first;  // a plain reference: clang 14 cannot capture a structured binding
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; }) == names.end())
      in.error(std::string(what) + " has no argument '" + k + "'");
  }
}
std::string str_arg(Interp& in, const Value* v, const char* what) {
  if (!v || !v->is_str()) in.error(std::string(what) + " needs a string argument");
  return v->s;
}
int64_t int_arg(Interp& in, const Value* v, const char* what) {
  if (!v || !v->is_int()) in.error(std::string(what) + " needs an integer argument");
  return v->as_int();
}

std::vector<Value> Interp::iterate(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return {};
    case Value::K::List: return *v.list;
    case Value::K::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::str(kv.first));
      return keys;
    }
    case Value::K::Str: {
      std::vector<Value> chars;
      for (uint32_t c : decode(v.s)) {
        std::string s;
        encode_cp(c, s);
        chars.push_back(Value::str(std::move(s)));
      }
      return chars;
    }
    default: error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

// Integer arithmetic beyond 64 bits is an error (Python's integers have no bound; these do).
int64_t checked_op(Interp& in, char op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool over = op == '+' ? __builtin_add_overflow(x, y, &r)
                    : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                : __builtin_mul_overflow(x, y, &r);
  if (over) in.error("integer overflow (beyond 64 bits)");
  return r;
}

Value arith(Interp& in, const std::string& op, const Value& a, const Value& b) {
  if (a.undefined()) in.undefined_error(a);
  if (b.undefined()) in.undefined_error(b);
  if (a.is_num() && b.is_num()) {
    const bool ints = a.is_int() && b.is_int();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_float(), fy = b.as_float();
    if (op == "+") return ints ? Value::integer(checked_op(in, '+', x, y)) : Value::real(fx + fy);
    if (op == "-") return ints ? Value::integer(checked_op(in, '-', x, y)) : Value::real(fx - fy);
    if (op == "*") return ints ? Value::integer(checked_op(in, '*', x, y)) : Value::real(fx * fy);
    if (op == "/") {
      if (fy == 0) in.error("division by zero");
      return Value::real(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) in.error("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) in.error("integer overflow (beyond 64 bits)");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
        return Value::integer(op == "//" ? q : r);
      }
      if (fy == 0) in.error("float division or modulo by zero");
      const double q = std::floor(fx / fy);
      if (op == "//") return Value::real(q);
      double r = std::fmod(fx, fy);
      if (r != 0 && ((r < 0) != (fy < 0))) r += fy;
      return Value::real(r);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        if (x == 0) return Value::integer(y == 0 ? 1 : 0);
        if (x == 1) return Value::integer(1);
        if (x == -1) return Value::integer(y % 2 ? -1 : 1);
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r = checked_op(in, '*', r, x);  // |x| >= 2: at most 63 rounds
        return Value::integer(r);
      }
      return Value::real(std::pow(fx, fy));
    }
  }
  if (op == "+" && a.is_str() && b.is_str()) return Value::str(a.s + b.s);
  if (op == "+" && a.k == Value::K::List && b.k == Value::K::List) {
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value::of_list(std::move(l));
  }
  if (op == "*" && ((a.is_str() && b.is_int()) || (a.is_int() && b.is_str()))) {
    const std::string& s = a.is_str() ? a.s : b.s;
    const int64_t n = a.is_str() ? b.as_int() : a.as_int();
    if (n > 0 && s.size() * static_cast<size_t>(n) > kMaxOutput) in.error("a repeated string exceeds the output limit");
    std::string r;
    for (int64_t k = 0; k < n; ++k) r += s;
    return Value::str(std::move(r));
  }
  in.error(std::string("unsupported operand types for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool less(Interp& in, const Value& a, const Value& b) {
  if (a.undefined()) in.undefined_error(a);
  if (b.undefined()) in.undefined_error(b);
  if (a.is_num() && b.is_num()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_str() && b.is_str()) return decode(a.s) < decode(b.s);
  if (a.k == Value::K::List && b.k == Value::K::List) {
    const List &x = *a.list, &y = *b.list;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(in, x[i], y[i]);
    }
    return x.size() < y.size();
  }
  in.error(std::string("'<' is not supported between '") + type_name(a) + "' and '" + type_name(b) + "'");
}

bool contains(Interp& in, const Value& hay, const Value& needle) {
  switch (hay.k) {
    case Value::K::Undef: return false;
    case Value::K::Str:
      if (!needle.is_str()) in.error(std::string("'in <string>' requires a string on the left, not '") + type_name(needle) + "'");
      return hay.s.find(needle.s) != std::string::npos;
    case Value::K::List:
      for (const Value& x : *hay.list)
        if (equal(x, needle)) return true;
      return false;
    case Value::K::Dict: return needle.is_str() && hay.dict->find(needle.s) != nullptr;
    default: in.error(std::string("argument of type '") + type_name(hay) + "' is not iterable");
  }
}

// Python slice semantics (negative indices and steps) on a length-n sequence.
std::vector<size_t> slice_indices(Interp& in, int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto bound = [&](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.k == Value::K::None || v.undefined()) return std::nullopt;
    if (!v.is_int()) in.error(std::string("slice ") + what + " must be an integer or none");
    return v.as_int();
  };
  const int64_t st = bound(step, "step").value_or(1);
  if (st == 0) in.error("slice step cannot be zero");
  auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = norm(bound(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = norm(bound(stop, "stop"), st > 0 ? n : -1);
  std::vector<size_t> idx;
  if (st > 0)
    for (int64_t i = b; i < e; i += st) idx.push_back(static_cast<size_t>(i));
  else
    for (int64_t i = b; i > e; i += st) idx.push_back(static_cast<size_t>(i));
  return idx;
}

// ---- tojson: Python's json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), as
// transformers defines the filter ----
void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

struct JsonStyle {
  bool indent = false;
  std::string indent_str;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

void to_json(Interp& in, const Value& v, const JsonStyle& st, int level, std::string& out) {
  in.step();
  if (level > kMaxParseDepth) in.error("tojson: the value nests too deeply");
  auto newline = [&](int l) {
    if (!st.indent) return;
    out += '\n';
    for (int k = 0; k < l; ++k) out += st.indent_str;
  };
  switch (v.k) {
    case Value::K::None: out += "null"; return;
    case Value::K::Bool: out += v.b ? "true" : "false"; return;
    case Value::K::Int: out += std::to_string(v.i); return;
    case Value::K::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : py_float(v.f);
      return;
    case Value::K::Str: json_string(v.s, out); return;
    case Value::K::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      newline(level + 1);
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) {
          out += st.item_sep;
          newline(level + 1);
        }
        to_json(in, (*v.list)[i], st, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::K::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return decode(a->first) < decode(b->first); });
      out += '{';
      newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += st.item_sep;
          newline(level + 1);
        }
        json_string(items[i]->first, out);
        out += st.key_sep;
        to_json(in, items[i]->second, st, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default: in.error(std::string("tojson: Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

// ---- methods of str and dict (Python's, as a sandboxed template may call them) ----
Value str_method(Interp& in, const std::string& s, const std::string& name, CallArgs& a) {
  const std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_args(in, a, what.c_str(), 1, {});
    const Value* c = arg(a, 0, "chars");
    std::string chars;
    const bool has = c && c->k != Value::K::None;
    if (has) chars = str_arg(in, c, what.c_str());
    return Value::str(py_strip(s, has ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    check_args(in, a, what.c_str(), 0, {});
    return Value::str(py_case(s, name));
  }
  if (name == "startswith" || name == "endswith") {
    check_args(in, a, what.c_str(), 1, {});
    const Value* p = arg(a, 0, "prefix");
    std::vector<std::string> cands;
    if (p && p->k == Value::K::List) {
      for (const Value& x : *p->list) cands.push_back(str_arg(in, &x, what.c_str()));
    } else {
      cands.push_back(str_arg(in, p, what.c_str()));
    }
    for (const auto& c : cands) {
      if (c.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, c.size(), c) == 0 : s.compare(s.size() - c.size(), c.size(), c) == 0)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "split" || name == "rsplit") {
    check_args(in, a, what.c_str(), 2, {"sep", "maxsplit"});
    const Value* sepv = arg(a, 0, "sep");
    const Value* maxv = arg(a, 1, "maxsplit");
    int64_t maxsplit = maxv ? int_arg(in, maxv, what.c_str()) : -1;
    List parts;
    if (!sepv || sepv->k == Value::K::None) {
      const std::vector<uint32_t> cps = decode(s);
      std::vector<std::pair<size_t, size_t>> words;
      size_t i = 0;
      while (i < cps.size()) {
        while (i < cps.size() && py_space(cps[i])) ++i;
        if (i == cps.size()) break;
        size_t j = i;
        while (j < cps.size() && !py_space(cps[j])) ++j;
        words.emplace_back(i, j);
        i = j;
      }
      if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
        // Python keeps the rest as it is: split's last piece keeps its trailing whitespace, rsplit's
        // first piece its leading whitespace.
        const auto m = static_cast<size_t>(maxsplit);
        if (name == "split") {
          for (size_t k = 0; k < m; ++k) parts.push_back(Value::str(encode(cps, words[k].first, words[k].second)));
          parts.push_back(Value::str(encode(cps, words[m].first, cps.size())));
        } else {
          const size_t first = words.size() - m - 1;
          parts.push_back(Value::str(encode(cps, 0, words[first].second)));
          for (size_t k = first + 1; k < words.size(); ++k)
            parts.push_back(Value::str(encode(cps, words[k].first, words[k].second)));
        }
      } else {
        for (const auto& [b, e] : words) parts.push_back(Value::str(encode(cps, b, e)));
      }
      return Value::of_list(std::move(parts));
    }
    const std::string sep = str_arg(in, sepv, what.c_str());
    if (sep.empty()) in.error(what + ": empty separator");
    std::vector<std::string> pieces;
    if (name == "split") {
      size_t from = 0;
      while (true) {
        const size_t at = s.find(sep, from);
        if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) == maxsplit)) break;
        pieces.push_back(s.substr(from, at - from));
        from = at + sep.size();
      }
      pieces.push_back(s.substr(from));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (true) {
        if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) break;
        if (end < sep.size()) break;
        const size_t at = s.rfind(sep, end - sep.size());
        if (at == std::string::npos) break;
        rev.push_back(s.substr(at + sep.size(), end - at - sep.size()));
        end = at;
      }
      rev.push_back(s.substr(0, end));
      pieces.assign(rev.rbegin(), rev.rend());
    }
    for (auto& p : pieces) parts.push_back(Value::str(std::move(p)));
    return Value::of_list(std::move(parts));
  }
  if (name == "splitlines") {
    check_args(in, a, what.c_str(), 1, {"keepends"});
    const Value* k = arg(a, 0, "keepends");
    const bool keep = k && truthy(*k);
    const std::vector<uint32_t> cps = decode(s);
    List parts;
    size_t b = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      const uint32_t c = cps[i];
      const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                      c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!br) continue;
      size_t e = i + 1;
      if (c == '\r' && e < cps.size() && cps[e] == '\n') ++e;
      parts.push_back(Value::str(encode(cps, b, keep ? e : i)));
      b = e;
      i = e - 1;
    }
    if (b < cps.size()) parts.push_back(Value::str(encode(cps, b, cps.size())));
    return Value::of_list(std::move(parts));
  }
  if (name == "replace") {
    check_args(in, a, what.c_str(), 3, {});
    const std::string from = str_arg(in, arg(a, 0, ""), what.c_str()), to = str_arg(in, arg(a, 1, ""), what.c_str());
    const Value* cv = arg(a, 2, "count");
    int64_t count = cv ? int_arg(in, cv, what.c_str()) : -1;
    std::string out;
    if (from.empty()) {  // Python inserts `to` around every code point
      const std::vector<uint32_t> cps = decode(s);
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (count < 0 || static_cast<int64_t>(i) < count) out += to;
        if (i < cps.size()) encode_cp(cps[i], out);
      }
      return Value::str(std::move(out));
    }
    size_t from_pos = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
      const size_t at = s.find(from, from_pos);
      if (at == std::string::npos) break;
      out += s.substr(from_pos, at - from_pos) + to;
      from_pos = at + from.size();
      if (out.size() > kMaxOutput) in.error(what + ": the result exceeds the output limit");
    }
    return Value::str(out + s.substr(from_pos));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    check_args(in, a, what.c_str(), 1, {});
    const std::string sub = str_arg(in, arg(a, 0, "sub"), what.c_str());
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(decode(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") in.error(what + ": substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(decode(std::string_view(s).substr(0, at)).size()));
  }
  if (name == "join") {
    check_args(in, a, what.c_str(), 1, {});
    const Value* it = arg(a, 0, "iterable");
    if (!it) in.error(what + " needs an iterable");
    std::string out;
    bool first = true;
    for (const Value& x : in.iterate(*it)) {
      if (!x.is_str()) in.error(what + ": sequence item is '" + type_name(x) + "', not a string");
      out += (first ? "" : s) + x.s;
      first = false;
    }
    return Value::str(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower" || name == "isnumeric" || name == "isdecimal") {
    check_args(in, a, what.c_str(), 0, {});
    const std::vector<uint32_t> cps = decode(s);
    if (cps.empty()) return Value::boolean(false);
    if (name == "isupper" || name == "islower") {
      bool any = false;
      for (uint32_t c : cps) {
        if (!is_cased(c)) continue;
        any = true;
        if (name == "isupper" ? to_lower(c) == c && to_upper(c) != c : to_upper(c) == c && to_lower(c) != c)
          return Value::boolean(false);
      }
      return Value::boolean(any);
    }
    for (uint32_t c : cps) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      const bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
      const bool digit = cat == UTF8PROC_CATEGORY_ND;
      const bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
      bool ok = false;
      if (name == "isdigit" || name == "isdecimal") ok = digit;
      else if (name == "isnumeric") ok = numeric;
      else if (name == "isalpha") ok = letter;
      else if (name == "isalnum") ok = letter || numeric;
      else ok = py_space(c);
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  in.error("the string method '" + name + "' is not supported by this interpreter");
}

Value dict_method(Interp& in, const Value& d, const std::string& name, CallArgs& a) {
  const std::string what = "dict." + name + "()";
  if (name == "items" || name == "keys" || name == "values") {
    check_args(in, a, what.c_str(), 0, {});
    List l;
    for (const auto& [k, v] : d.dict->items) {
      if (name == "items") l.push_back(Value::of_tuple({Value::str(k), v}));
      else if (name == "keys") l.push_back(Value::str(k));
      else l.push_back(v);
    }
    return Value::of_list(std::move(l));
  }
  if (name == "get") {
    check_args(in, a, what.c_str(), 2, {});
    const Value* k = arg(a, 0, "key");
    if (!k) in.error(what + " needs a key");
    const Value* dflt = arg(a, 1, "default");
    if (k->is_str())
      if (const Value* v = d.dict->find(k->s)) return *v;
    return dflt ? *dflt : Value::none();
  }
  in.error("the dict method '" + name + "' is not supported by this interpreter");
}

bool is_str_method(const std::string& n) {
  static const char* const k[] = {"strip",  "lstrip",  "rstrip",  "upper",     "lower",   "title",   "capitalize",
                                  "swapcase", "startswith", "endswith", "split", "rsplit", "splitlines", "replace",
                                  "find",   "rfind",   "count",   "index",     "rindex",  "join",    "isdigit",
                                  "isalpha", "isalnum", "isspace", "isupper",   "islower", "isnumeric", "isdecimal"};
  return std::any_of(std::begin(k), std::end(k), [&](const char* x) { return n == x; });
}

Value Interp::getattr(const Value& obj, const std::string& name, const std::string& what) {
  switch (obj.k) {
    case Value::K::Undef: error("'" + obj.s + "' is undefined (reading its attribute '" + name + "')");
    case Value::K::Dict:
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        const Value self = obj;
        return Value::func("dict." + name, [self, name](Interp& in, CallArgs& a) { return dict_method(in, self, name, a); });
      }
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undef(what);
    case Value::K::Ns:
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undef(what);
    case Value::K::Str: {
      if (is_str_method(name)) {
        const std::string self = obj.s;
        return Value::func("str." + name, [self, name](Interp& in, CallArgs& a) { return str_method(in, self, name, a); });
      }
      Value u = Value::undef(name);
      u.i = 1;  // calling it names the missing method
      return u;
    }
    case Value::K::Loop: {
      const List& items = *obj.list;
      const auto n = static_cast<int64_t>(items.size()), k = obj.i;
      if (name == "index") return Value::integer(k + 1);
      if (name == "index0") return Value::integer(k);
      if (name == "revindex") return Value::integer(n - k);
      if (name == "revindex0") return Value::integer(n - k - 1);
      if (name == "first") return Value::boolean(k == 0);
      if (name == "last") return Value::boolean(k == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(1);
      if (name == "depth0") return Value::integer(0);
      if (name == "previtem") return k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undef("loop.previtem");
      if (name == "nextitem") return k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undef("loop.nextitem");
      if (name == "cycle")
        return Value::func("loop.cycle", [k](Interp& in, CallArgs& a) {
          if (a.pos.empty()) in.error("loop.cycle needs at least one argument");
          return a.pos[static_cast<size_t>(k) % a.pos.size()];
        });
      error("loop." + name + " is not supported by this interpreter");
    }
    default: return Value::undef(what);
  }
}

Value Interp::getitem(const Value& obj, const Value& key, const std::string& what) {
  switch (obj.k) {
    case Value::K::Undef: error("'" + obj.s + "' is undefined (reading an item of it)");
    case Value::K::Dict:
    case Value::K::Ns:
      if (key.is_str()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return getattr(obj, key.s, what);
      }
      return Value::undef(what);
    case Value::K::List:
    case Value::K::Str: {
      if (!key.is_int()) {
        if (key.is_str()) return getattr(obj, key.s, what);
        return Value::undef(what);
      }
      if (obj.k == Value::K::List) {
        const int64_t n = static_cast<int64_t>(obj.list->size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undef(what);
        return (*obj.list)[static_cast<size_t>(i)];
      }
      const std::vector<uint32_t> cps = decode(obj.s);
      const int64_t n = static_cast<int64_t>(cps.size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undef(what);
      return Value::str(encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
    default:
      if (key.is_str()) return getattr(obj, key.s, what);
      return Value::undef(what);
  }
}

Value Interp::call(const Value& fn, CallArgs& args, const std::string& what) {
  if (fn.undefined() && fn.i == 1) error("the string method '" + fn.s + "' is not supported by this interpreter");
  if (fn.undefined()) error("'" + fn.s + "' is undefined (called as a function)");
  if (fn.k != Value::K::Func) error("'" + what + "' is a " + type_name(fn) + ", not a function");
  return fn.fn->fn(*this, args);
}

// A short description of an expression, for undefined values and errors: "message.content".
std::string describe(const Expr& e) {
  switch (e.k) {
    case EK::Name: return e.name;
    case EK::Attr: return describe(*e.a[0]) + "." + e.name;
    case EK::Item:
      return describe(*e.a[0]) + "[" + (e.a[1]->k == EK::Lit ? py_repr(e.a[1]->lit) : describe(*e.a[1])) + "]";
    case EK::Call: return describe(*e.a[0]) + "(...)";
    case EK::Lit: return py_repr(e.lit);
    default: return "expression";
  }
}

// ---- filters ----
Value f_list_of(Interp& in, const Value& v) { return Value::of_list(in.iterate(v)); }

Value attribute_of(Interp& in, const Value& v, const std::string& path) {
  Value cur = v;
  size_t b = 0;
  while (true) {
    const size_t dot = path.find('.', b);
    const std::string part = path.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.undefined()) return cur;
    cur = digits ? in.getitem(cur, Value::integer(std::atoll(part.c_str())), part) : in.getitem(cur, Value::str(part), part);
    if (dot == std::string::npos) return cur;
    b = dot + 1;
  }
}

bool run_test(Interp& in, const std::string& name, const Value& v, CallArgs& a);
Value run_filter(Interp& in, const std::string& name, Value& v, CallArgs& a);

// select / reject / selectattr / rejectattr
Value select_like(Interp& in, Value& v, CallArgs& a, bool attr, bool keep) {
  size_t i = 0;
  std::string attribute;
  if (attr) attribute = str_arg(in, arg(a, i++, "attribute"), "selectattr/rejectattr");
  std::string test;
  CallArgs targs;
  targs.line = a.line;
  if (i < a.pos.size()) {
    test = str_arg(in, &a.pos[i++], "select/reject test");
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(i), a.pos.end());
  }
  List out;
  for (const Value& x : in.iterate(v)) {
    const Value subject = attr ? attribute_of(in, x, attribute) : x;
    const bool t = test.empty() ? truthy(subject) : run_test(in, test, subject, targs);
    if (t == keep) out.push_back(x);
  }
  return Value::of_list(std::move(out));
}

std::string sort_key_str(const Value& v, bool case_sensitive) {
  if (!v.is_str() || case_sensitive) return v.s;
  return py_case(v.s, "lower");
}

bool sort_less(Interp& in, const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_str() && b.is_str() && !case_sensitive) return decode(sort_key_str(a, false)) < decode(sort_key_str(b, false));
  return less(in, a, b);
}

Value run_filter(Interp& in, const std::string& name, Value& v, CallArgs& a) {
  const char* n = name.c_str();
  auto no_args = [&] { check_args(in, a, n, 0, {}); };
  if (name == "trim") {
    check_args(in, a, n, 1, {"chars"});
    const Value* c = arg(a, 0, "chars");
    std::string chars;
    const bool has = c && c->k != Value::K::None;
    if (has) chars = str_arg(in, c, n);
    return Value::str(py_strip(py_str(v), has ? &chars : nullptr, true, true));
  }
  if (name == "tojson") {
    check_args(in, a, n, 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle st;
    if (const Value* ea = arg(a, 0, "ensure_ascii"); ea && truthy(*ea))
      in.error("tojson(ensure_ascii=true) is not supported by this interpreter");
    if (const Value* ind = arg(a, 1, "indent"); ind && ind->k != Value::K::None) {
      st.indent = true;
      if (ind->is_int()) st.indent_str = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(ind->as_int(), 64))), ' ');
      else if (ind->is_str()) st.indent_str = ind->s;
      else in.error("tojson: indent must be an integer or a string");
      st.item_sep = ",";
    }
    if (const Value* sep = arg(a, 2, "separators"); sep && sep->k != Value::K::None) {
      if (sep->k != Value::K::List || sep->list->size() != 2 || !(*sep->list)[0].is_str() || !(*sep->list)[1].is_str())
        in.error("tojson: separators must be a pair of strings");
      st.item_sep = (*sep->list)[0].s;
      st.key_sep = (*sep->list)[1].s;
    }
    if (const Value* sk = arg(a, 3, "sort_keys")) st.sort_keys = truthy(*sk);
    std::string out;
    to_json(in, v, st, 0, out);
    return Value::str(std::move(out));
  }
  if (name == "length" || name == "count") {
    no_args();
    switch (v.k) {
      case Value::K::Undef: return Value::integer(0);
      case Value::K::Str: return Value::integer(static_cast<int64_t>(decode(v.s).size()));
      case Value::K::List: return Value::integer(static_cast<int64_t>(v.list->size()));
      case Value::K::Dict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
      default: in.error(std::string("length: object of type '") + type_name(v) + "' has no len()");
    }
  }
  if (name == "default" || name == "d") {
    check_args(in, a, n, 2, {"default_value", "boolean"});
    const Value* dv = arg(a, 0, "default_value");
    const Value* bo = arg(a, 1, "boolean");
    const bool use = v.undefined() || (bo && truthy(*bo) && !truthy(v));
    if (use) return dv ? *dv : Value::str("");
    return v;
  }
  if (name == "string") {
    no_args();
    return Value::str(py_str(v));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    no_args();
    CallArgs none;
    return str_method(in, py_str(v), name, none);
  }
  if (name == "title") {  // Jinja2's: words begin after '-', whitespace, or an opening bracket
    no_args();
    // Each word: its first character upper (the full mapping), the rest lowered as a string of its own.
    const std::vector<uint32_t> cps = decode(py_str(v));
    std::string out;
    size_t i = 0;
    while (i < cps.size()) {
      auto sep = [](uint32_t c) { return c == '-' || py_space(c) || c == '(' || c == '{' || c == '[' || c == '<'; };
      size_t j = i;
      while (j < cps.size() && sep(cps[j]) == sep(cps[i])) ++j;
      if (sep(cps[i])) {
        out += encode(cps, i, j);
      } else {
        upper_full(cps[i], out);
        out += py_case(encode(cps, i + 1, j), "lower");
      }
      i = j;
    }
    return Value::str(std::move(out));
  }
  if (name == "replace") {
    check_args(in, a, n, 3, {"old", "new", "count"});
    if (!arg(a, 0, "old") || !arg(a, 1, "new")) in.error("replace needs old and new");
    CallArgs ra;
    ra.pos = {Value::str(py_str(*arg(a, 0, "old"))), Value::str(py_str(*arg(a, 1, "new")))};
    if (const Value* c = arg(a, 2, "count"); c && c->k != Value::K::None) ra.pos.push_back(*c);
    return str_method(in, py_str(v), "replace", ra);
  }
  if (name == "first" || name == "last") {
    no_args();
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undef(name + " of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    check_args(in, a, n, 2, {"d", "attribute"});
    const Value* d = arg(a, 0, "d");
    const std::string sep = d ? py_str(*d) : "";
    const Value* at = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& x : in.iterate(v)) {
      out += (first ? "" : sep) + py_str(at ? attribute_of(in, x, py_str(*at)) : x);
      first = false;
    }
    return Value::str(std::move(out));
  }
  if (name == "list") {
    no_args();
    return f_list_of(in, v);
  }
  if (name == "items") {
    no_args();
    if (v.undefined()) return Value::of_list({});
    if (v.k != Value::K::Dict) in.error(std::string("items: can only get item pairs from a mapping, not '") + type_name(v) + "'");
    CallArgs none;
    return dict_method(in, v, "items", none);
  }
  if (name == "dictsort") {
    check_args(in, a, n, 3, {"case_sensitive", "by", "reverse"});
    if (v.k != Value::K::Dict) in.error("dictsort needs a mapping");
    const Value* cs = arg(a, 0, "case_sensitive");
    const Value* by = arg(a, 1, "by");
    const Value* rv = arg(a, 2, "reverse");
    const bool case_sensitive = cs && truthy(*cs), by_value = by && by->is_str() && by->s == "value";
    auto items = v.dict->items;
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
      return by_value ? sort_less(in, x.second, y.second, case_sensitive)
                      : sort_less(in, Value::str(x.first), Value::str(y.first), case_sensitive);
    });
    if (rv && truthy(*rv)) std::reverse(items.begin(), items.end());
    List l;
    for (auto& [k, x] : items) l.push_back(Value::of_tuple({Value::str(k), x}));
    return Value::of_list(std::move(l));
  }
  if (name == "selectattr") return select_like(in, v, a, true, true);
  if (name == "rejectattr") return select_like(in, v, a, true, false);
  if (name == "select") return select_like(in, v, a, false, true);
  if (name == "reject") return select_like(in, v, a, false, false);
  if (name == "map") {
    List out;
    const Value* at = nullptr;
    for (const auto& [k, x] : a.kw)
      if (k == "attribute") at = &x;
    if (at) {
      const Value* dflt = nullptr;
      for (const auto& [k, x] : a.kw)
        if (k == "default") dflt = &x;
        else if (k != "attribute") in.error("map has no argument '" + k + "'");
      for (const Value& x : in.iterate(v)) {
        Value r = attribute_of(in, x, py_str(*at));
        out.push_back(r.undefined() && dflt ? *dflt : r);
      }
      return Value::of_list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_str()) in.error("map needs a filter name or attribute=");
    const std::string f = a.pos[0].s;
    CallArgs fa;
    fa.line = a.line;
    fa.pos.assign(a.pos.begin() + 1, a.pos.end());
    fa.kw = a.kw;
    for (Value x : in.iterate(v)) out.push_back(run_filter(in, f, x, fa));
    return Value::of_list(std::move(out));
  }
  if (name == "int") {
    check_args(in, a, n, 2, {"default", "base"});
    const Value* dv = arg(a, 0, "default");
    const Value dflt = dv ? *dv : Value::integer(0);
    const Value* bv = arg(a, 1, "base");
    const int base = bv ? static_cast<int>(int_arg(in, bv, n)) : 10;
    if (v.is_int()) return Value::integer(v.as_int());
    if (v.k == Value::K::Float) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_str()) {
      std::string s = py_strip(v.s, nullptr, true, true);
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      int64_t x = 0;
      const char* b = s.data();
      if (!s.empty() && s[0] == '+') ++b;
      const auto r = std::from_chars(b, s.data() + s.size(), x, base);
      if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return Value::integer(x);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
    }
    return dflt;
  }
  if (name == "float") {
    check_args(in, a, n, 1, {"default"});
    const Value* dv = arg(a, 0, "default");
    if (v.is_num()) return Value::real(v.as_float());
    if (v.is_str()) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::real(d);
    }
    return dv ? *dv : Value::real(0.0);
  }
  if (name == "abs") {
    no_args();
    if (v.is_int()) return Value::integer(v.as_int() < 0 ? checked_op(in, '-', 0, v.as_int()) : v.as_int());
    if (v.k == Value::K::Float) return Value::real(std::fabs(v.f));
    in.error(std::string("abs: bad operand type '") + type_name(v) + "'");
  }
  if (name == "round") {
    check_args(in, a, n, 2, {"precision", "method"});
    const Value* pv = arg(a, 0, "precision");
    const int64_t prec = pv ? int_arg(in, pv, n) : 0;
    const Value* mv = arg(a, 1, "method");
    const std::string method = mv ? py_str(*mv) : "common";
    if (!v.is_num()) in.error("round needs a number");
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = v.as_float() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value::real(r / scale);
  }
  if (name == "reverse") {
    no_args();
    if (v.is_str()) {
      std::vector<uint32_t> cps = decode(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::str(encode(cps));
    }
    std::vector<Value> items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::of_list(std::move(items));
  }
  if (name == "sort") {
    check_args(in, a, n, 3, {"reverse", "case_sensitive", "attribute"});
    const Value* rv = arg(a, 0, "reverse");
    const Value* cs = arg(a, 1, "case_sensitive");
    const Value* at = arg(a, 2, "attribute");
    std::vector<Value> items = in.iterate(v);
    const bool case_sensitive = cs && truthy(*cs);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return at ? sort_less(in, attribute_of(in, x, py_str(*at)), attribute_of(in, y, py_str(*at)), case_sensitive)
                : sort_less(in, x, y, case_sensitive);
    });
    if (rv && truthy(*rv)) std::reverse(items.begin(), items.end());
    return Value::of_list(std::move(items));
  }
  if (name == "unique") {
    check_args(in, a, n, 2, {"case_sensitive", "attribute"});
    const Value* cs = arg(a, 0, "case_sensitive");
    const Value* at = arg(a, 1, "attribute");
    const bool case_sensitive = cs && truthy(*cs);
    List out;
    std::vector<Value> seen;
    for (const Value& x : in.iterate(v)) {
      Value key = at ? attribute_of(in, x, py_str(*at)) : x;
      if (key.is_str() && !case_sensitive) key = Value::str(sort_key_str(key, false));
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(key);
        out.push_back(x);
      }
    }
    return Value::of_list(std::move(out));
  }
  if (name == "sum") {
    check_args(in, a, n, 2, {"attribute", "start"});
    const Value* at = arg(a, 0, "attribute");
    const Value* st = arg(a, 1, "start");
    Value total = st ? *st : Value::integer(0);
    for (const Value& x : in.iterate(v)) total = arith(in, "+", total, at ? attribute_of(in, x, py_str(*at)) : x);
    return total;
  }
  if (name == "min" || name == "max") {
    check_args(in, a, n, 2, {"case_sensitive", "attribute"});
    const Value* cs = arg(a, 0, "case_sensitive");
    const Value* at = arg(a, 1, "attribute");
    const bool case_sensitive = cs && truthy(*cs);
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undef(name + " of an empty sequence");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      const Value x = at ? attribute_of(in, items[i], py_str(*at)) : items[i];
      const Value y = at ? attribute_of(in, items[best], py_str(*at)) : items[best];
      if (name == "min" ? sort_less(in, x, y, case_sensitive) : sort_less(in, y, x, case_sensitive)) best = i;
    }
    return items[best];
  }
  if (name == "indent") {
    check_args(in, a, n, 3, {"width", "first", "blank"});
    const Value* wv = arg(a, 0, "width");
    const Value* fv = arg(a, 1, "first");
    const Value* bv = arg(a, 2, "blank");
    const std::string pad = !wv ? "    " : wv->is_str() ? wv->s : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(in, wv, n), 0, 256)), ' ');
    const bool first = fv && truthy(*fv), blank = bv && truthy(*bv);
    const std::string s = py_str(v);
    if (s.empty()) return Value::str("");
    // Jinja2's do_indent: lines after the first get the padding (blank ones only with blank=true),
    // the first one with first=true.
    std::vector<std::string> lines;
    CallArgs none;
    for (const Value& l : *str_method(in, s + "\n", "splitlines", none).list) lines.push_back(l.s);
    std::string out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + ((blank || !lines[i].empty()) ? pad : "") + lines[i];
    if (first) out = pad + out;
    return Value::str(std::move(out));
  }
  if (name == "safe") {
    no_args();
    return v;
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    no_args();
    std::string out;
    for (char c : py_str(v)) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::str(std::move(out));
  }
  if (name == "attr") {
    check_args(in, a, n, 1, {});
    return in.getattr(v, str_arg(in, arg(a, 0, "name"), n), "attribute");
  }
  if (name == "wordcount") {
    no_args();
    int64_t words = 0;
    bool in_word = false;
    for (uint32_t c : decode(py_str(v))) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      const bool w = (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO) || c == '_';
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value::integer(words);
  }
  if (name == "format") {  // Python's "%s" % args, for %s, %d, %i, %r and %%
    const std::string fmtstr = py_str(v);
    std::string out;
    size_t next = 0;
    for (size_t i = 0; i < fmtstr.size(); ++i) {
      if (fmtstr[i] != '%') {
        out += fmtstr[i];
        continue;
      }
      if (++i >= fmtstr.size()) in.error("format: incomplete format");
      const char c = fmtstr[i];
      if (c == '%') {
        out += '%';
        continue;
      }
      if (next >= a.pos.size()) in.error("format: not enough arguments for format string");
      const Value& x = a.pos[next++];
      if (c == 's') out += py_str(x);
      else if (c == 'r') out += py_repr(x);
      else if ((c == 'd' || c == 'i') && x.is_num()) out += std::to_string(x.is_int() ? x.as_int() : static_cast<int64_t>(x.as_float()));
      else in.error(std::string("format: the conversion %") + c + " is not supported by this interpreter");
    }
    return Value::str(std::move(out));
  }
  in.error("the filter '" + name + "' is not supported by this interpreter");
}

bool run_test(Interp& in, const std::string& name, const Value& v, CallArgs& a) {
  auto other = [&]() -> const Value& {
    if (a.pos.empty()) in.error("the test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.undefined();
  if (name == "undefined") return v.undefined();
  if (name == "none") return v.k == Value::K::None;
  if (name == "string") return v.is_str();
  if (name == "number") return v.is_num();
  if (name == "integer") return v.k == Value::K::Int;
  if (name == "float") return v.k == Value::K::Float;
  if (name == "boolean") return v.k == Value::K::Bool;
  if (name == "true") return v.k == Value::K::Bool && v.b;
  if (name == "false") return v.k == Value::K::Bool && !v.b;
  if (name == "mapping") return v.k == Value::K::Dict;
  if (name == "iterable") return v.k == Value::K::List || v.k == Value::K::Dict || v.is_str() || v.undefined();
  if (name == "sequence") return v.k == Value::K::List || v.k == Value::K::Dict || v.is_str() || v.undefined();
  if (name == "callable") return v.k == Value::K::Func;
  if (name == "even" || name == "odd") {
    if (!v.is_int()) in.error("the test '" + name + "' needs an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value& d = other();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) in.error("divisibleby needs integers and a non-zero divisor");
    return v.as_int() % d.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(in, v, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(in, other(), v);
  if (name == "le" || name == "<=") return !less(in, other(), v);
  if (name == "ge" || name == ">=") return !less(in, v, other());
  if (name == "in") return contains(in, other(), v);
  if (name == "sameas") {
    const Value& o = other();
    if (v.k != o.k) return false;
    switch (v.k) {
      case Value::K::None:
      case Value::K::Undef: return true;
      case Value::K::Bool: return v.b == o.b;
      case Value::K::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
      case Value::K::List: return v.list == o.list;
      case Value::K::Dict:
      case Value::K::Ns: return v.dict == o.dict;
      case Value::K::Func: return v.fn == o.fn;
      default: return false;
    }
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_str()) return false;
    CallArgs none;
    return truthy(str_method(in, v.s, name == "lower" ? "islower" : "isupper", none));
  }
  if (name == "escaped") return false;
  in.error("the test '" + name + "' is not supported by this interpreter");
}

// ---- globals ----
Value g_range(Interp& in, CallArgs& a) {
  check_args(in, a, "range", 3, {});
  if (a.pos.empty()) in.error("range expects at least 1 argument");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = int_arg(in, &a.pos[0], "range");
  } else {
    start = int_arg(in, &a.pos[0], "range");
    stop = int_arg(in, &a.pos[1], "range");
    if (a.pos.size() == 3) step = int_arg(in, &a.pos[2], "range");
  }
  if (step == 0) in.error("range() arg 3 must not be zero");
  List l;
  for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) {
    if (static_cast<int64_t>(l.size()) >= kMaxRange) in.error("range() of more than " + std::to_string(kMaxRange) + " items");
    l.push_back(Value::integer(x));
  }
  return Value::of_list(std::move(l));
}

Value g_dict(Interp& in, CallArgs& a, bool ns) {
  auto d = std::make_shared<Dict>();
  if (a.pos.size() > 1) in.error(std::string(ns ? "namespace" : "dict") + " takes at most one positional argument");
  if (!a.pos.empty()) {
    if (a.pos[0].k != Value::K::Dict) in.error(std::string(ns ? "namespace" : "dict") + ": the positional argument must be a mapping");
    d->items = a.pos[0].dict->items;
  }
  for (auto& [k, v] : a.kw) d->set(k, v);
  return Value::of_dict(std::move(d), ns);
}

Value g_raise(Interp& in, CallArgs& a) {
  const std::string msg = a.pos.empty() ? "" : py_str(a.pos[0]);
  in.error("the template raised an exception: " + msg);
}

Value g_strftime_now(Interp& in, CallArgs& a) {
  check_args(in, a, "strftime_now", 1, {});
  const std::string fmt = str_arg(in, arg(a, 0, "format"), "strftime_now");
  const std::time_t t = static_cast<std::time_t>(now_seconds());
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) in.error("strftime_now: the format '" + fmt + "' gives nothing or more than 511 bytes");
  return Value::str(std::string(buf, n));
}

// ---- expressions ----
Value Interp::eval(const Expr& e, Scope& sc) {
  step();
  line = e.line;
  switch (e.k) {
    case EK::Lit: return e.lit;
    case EK::Name: {
      if (const Value* v = sc.find(e.name)) return *v;
      if (e.name == "range") return Value::func("range", g_range);
      if (e.name == "namespace") return Value::func("namespace", [](Interp& in, CallArgs& a) { return g_dict(in, a, true); });
      if (e.name == "dict") return Value::func("dict", [](Interp& in, CallArgs& a) { return g_dict(in, a, false); });
      if (e.name == "raise_exception") return Value::func("raise_exception", g_raise);
      if (e.name == "strftime_now") return Value::func("strftime_now", g_strftime_now);
      return Value::undef(e.name);
    }
    case EK::Attr: {
      const Value obj = eval(*e.a[0], sc);
      line = e.line;
      return getattr(obj, e.name, describe(e));
    }
    case EK::Item: {
      const Value obj = eval(*e.a[0], sc);
      const Value key = eval(*e.a[1], sc);
      line = e.line;
      return getitem(obj, key, describe(e));
    }
    case EK::Slice: {
      const Value obj = eval(*e.a[0], sc);
      Value b[3];
      for (int k = 0; k < 3; ++k)
        if (e.a[static_cast<size_t>(k) + 1]) b[k] = eval(*e.a[static_cast<size_t>(k) + 1], sc);
      line = e.line;
      if (obj.undefined()) undefined_error(obj);
      if (obj.k == Value::K::List) {
        List out;
        for (size_t i : slice_indices(*this, static_cast<int64_t>(obj.list->size()), b[0], b[1], b[2])) out.push_back((*obj.list)[i]);
        return Value::of_list(std::move(out));
      }
      if (obj.is_str()) {
        const std::vector<uint32_t> cps = decode(obj.s);
        std::string out;
        for (size_t i : slice_indices(*this, static_cast<int64_t>(cps.size()), b[0], b[1], b[2])) encode_cp(cps[i], out);
        return Value::str(std::move(out));
      }
      error(std::string("'") + type_name(obj) + "' object cannot be sliced");
    }
    case EK::Call:
    case EK::Filter:
    case EK::Test: {
      Value subject = eval(*e.a[0], sc);
      CallArgs args;
      const size_t n_kw = e.kw.size(), n_args = e.a.size() - 1;
      for (size_t i = 0; i < n_args; ++i) {
        Value v = eval(*e.a[i + 1], sc);
        if (i >= n_args - n_kw) args.kw.emplace_back(e.kw[i - (n_args - n_kw)], std::move(v));
        else args.pos.push_back(std::move(v));
      }
      line = e.line;
      args.line = e.line;
      if (e.k == EK::Call) {
        if (++call_depth > kMaxCallDepth) error("calls nest deeper than " + std::to_string(kMaxCallDepth) + " levels");
        Value r = call(subject, args, describe(*e.a[0]));
        --call_depth;
        return r;
      }
      if (e.k == EK::Filter) return run_filter(*this, e.name, subject, args);
      return Value::boolean(run_test(*this, e.name, subject, args) != e.negate);
    }
    case EK::Neg:
    case EK::Pos: {
      const Value v = eval(*e.a[0], sc);
      line = e.line;
      if (v.undefined()) undefined_error(v);
      if (!v.is_num()) error(std::string("bad operand type for unary ") + (e.k == EK::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.k == EK::Pos) return v.k == Value::K::Bool ? Value::integer(v.as_int()) : v;
      if (v.k == Value::K::Float) return Value::real(-v.f);
      return Value::integer(checked_op(*this, '-', 0, v.as_int()));
    }
    case EK::Not: return Value::boolean(!truthy(eval(*e.a[0], sc)));
    case EK::And: {
      Value l = eval(*e.a[0], sc);
      if (!truthy(l)) return l;
      return eval(*e.a[1], sc);
    }
    case EK::Or: {
      Value l = eval(*e.a[0], sc);
      if (truthy(l)) return l;
      return eval(*e.a[1], sc);
    }
    case EK::Bin: {
      const Value l = eval(*e.a[0], sc);
      const Value r = eval(*e.a[1], sc);
      line = e.line;
      if (e.name == "~") return Value::str(py_str(l) + py_str(r));
      return arith(*this, e.name, l, r);
    }
    case EK::Cmp: {
      Value l = eval(*e.a[0], sc);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value r = eval(*e.a[i + 1], sc);
        line = e.line;
        const std::string& op = e.ops[i];
        bool ok;
        if (op == "==") ok = equal(l, r);
        else if (op == "!=") ok = !equal(l, r);
        else if (op == "<") ok = less(*this, l, r);
        else if (op == ">") ok = less(*this, r, l);
        else if (op == "<=") ok = !less(*this, r, l);
        else if (op == ">=") ok = !less(*this, l, r);
        else if (op == "in") ok = contains(*this, r, l);
        else ok = !contains(*this, r, l);
        if (!ok) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case EK::Cond: {
      if (truthy(eval(*e.a[0], sc))) return eval(*e.a[1], sc);
      if (e.a[2]) return eval(*e.a[2], sc);
      return Value::undef("the else branch of an inline if");
    }
    case EK::List:
    case EK::Tuple: {
      List l;
      for (const auto& x : e.a) l.push_back(eval(*x, sc));
      return e.k == EK::Tuple ? Value::of_tuple(std::move(l)) : Value::of_list(std::move(l));
    }
    case EK::Dict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.a.size(); i += 2) {
        const Value k = eval(*e.a[i], sc);
        line = e.line;
        if (!k.is_str()) error("dict literal keys must be strings in this interpreter");
        d->set(k.s, eval(*e.a[i + 1], sc));
      }
      return Value::of_dict(std::move(d));
    }
  }
  return Value();
}

void assign(Interp& in, Scope& sc, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    sc.vars[targets[0]] = v;
    return;
  }
  std::vector<Value> items = in.iterate(v);
  if (items.size() != targets.size())
    in.error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
  for (size_t i = 0; i < targets.size(); ++i) sc.vars[targets[i]] = items[i];
}

Flow Interp::exec(const std::vector<Node>& body, Scope& sc) {
  for (const Node& n : body) {
    step();
    line = n.line;
    switch (n.k) {
      case SK::Text: emit(n.text); break;
      case SK::Out: emit(py_str(eval(*n.exprs[0], sc))); break;
      case SK::If: {
        bool done = false;
        for (size_t i = 0; i < n.exprs.size(); ++i)
          if (truthy(eval(*n.exprs[i], sc))) {
            const Flow f = exec(n.bodies[i], sc);
            if (f != Flow::Normal) return f;
            done = true;
            break;
          }
        if (!done && n.bodies.size() > n.exprs.size()) {
          const Flow f = exec(n.bodies.back(), sc);
          if (f != Flow::Normal) return f;
        }
        break;
      }
      case SK::For: {
        const Value iter = eval(*n.exprs[0], sc);
        line = n.line;
        std::vector<Value> all = iterate(iter), items;
        Scope loop_scope;
        loop_scope.parent = &sc;
        if (n.exprs.size() > 1) {  // {% for x in xs if cond %}: filtered before loop.* counts
          for (const Value& x : all) {
            assign(*this, loop_scope, n.targets, x);
            if (truthy(eval(*n.exprs[1], loop_scope))) items.push_back(x);
          }
        } else {
          items = std::move(all);
        }
        auto shared = std::make_shared<List>(std::move(items));
        for (size_t i = 0; i < shared->size(); ++i) {
          step();
          Value loop;
          loop.k = Value::K::Loop;
          loop.list = shared;
          loop.i = static_cast<int64_t>(i);
          loop_scope.vars["loop"] = std::move(loop);
          assign(*this, loop_scope, n.targets, (*shared)[i]);
          if (exec(n.bodies[0], loop_scope) == Flow::Break) break;
        }
        if (shared->empty() && n.bodies.size() > 1) {
          const Flow f = exec(n.bodies[1], sc);
          if (f != Flow::Normal) return f;
        }
        break;
      }
      case SK::Set: {
        Value v = eval(*n.exprs[0], sc);
        line = n.line;
        if (n.attr_target) {
          const Value* ns = sc.find(n.targets[0]);
          if (!ns || ns->k != Value::K::Ns)
            error("cannot assign attribute '" + n.targets[1] + "' of '" + n.targets[0] + "': it is not a namespace()");
          ns->dict->set(n.targets[1], std::move(v));
        } else {
          assign(*this, sc, n.targets, v);
        }
        break;
      }
      case SK::SetBlock: {
        std::string captured, *saved = out;
        out = &captured;
        const Flow f = exec(n.bodies[0], sc);
        out = saved;
        if (f != Flow::Normal) return f;
        sc.vars[n.targets[0]] = Value::str(std::move(captured));
        break;
      }
      case SK::Macro: {
        const Node* def = &n;
        Scope* home = root;
        sc.vars[n.text] = Value::func(n.text, [def, home](Interp& in, CallArgs& a) {
          const size_t np = def->targets.size();
          if (a.pos.size() > np) in.error("macro '" + def->text + "' takes " + std::to_string(np) + " arguments, " + std::to_string(a.pos.size()) + " given");
          Scope local;
          local.parent = home;
          for (size_t i = 0; i < np; ++i) {
            if (i < a.pos.size()) local.vars[def->targets[i]] = a.pos[i];
            else if (def->defaults[i]) local.vars[def->targets[i]] = in.eval(*def->defaults[i], *home);
            else local.vars[def->targets[i]] = Value::undef(def->targets[i]);
          }
          for (const auto& [k, v] : a.kw) {
            if (std::find(def->targets.begin(), def->targets.end(), k) == def->targets.end())
              in.error("macro '" + def->text + "' has no argument '" + k + "'");
            local.vars[k] = v;
          }
          std::string captured, *saved = in.out;
          in.out = &captured;
          in.exec(def->bodies[0], local);
          in.out = saved;
          return Value::str(std::move(captured));
        });
        break;
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
      case SK::Block: {
        const Flow f = exec(n.bodies[0], sc);
        if (f != Flow::Normal) return f;
        break;
      }
    }
  }
  return Flow::Normal;
}

}  // namespace

Template::Template(const std::string& source, const std::string& origin) : origin_(origin) {
  const Fail fail{origin};
  Parser p(lex(source, fail), fail);
  program_ = std::make_unique<Program>();
  program_->body = p.parse_all();
}

Template::~Template() = default;

std::string Template::render(const nlohmann::ordered_json& variables) const {
  Interp in{Fail{origin_}};
  std::string out;
  in.out = &out;
  Scope root;
  if (variables.is_object())
    for (auto it = variables.begin(); it != variables.end(); ++it) root.vars[it.key()] = from_json(it.value());
  in.root = &root;
  in.exec(program_->body, root);
  return out;
}

int fuzz_one(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source = in.substr(0, nul);
  nlohmann::ordered_json vars;
  if (nul != std::string::npos) {
    if (!parse_json(in.substr(nul + 1), vars) || !vars.is_object()) vars = nullptr;
  }
  if (vars.is_null())
    vars = {{"messages",
             {{{"role", "system"}, {"content", "Be brief."}},
              {{"role", "user"}, {"content", "Hi \u00e9\u3000"}},
              {{"role", "assistant"}, {"content", "Hello"}, {"reasoning_content", "think"},
               {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", {{"x", 1}}}}}}}}},
              {{"role", "tool"}, {"content", "42"}}}},
            {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}},
            {"add_generation_prompt", true},
            {"bos_token", "<s>"},
            {"eos_token", "</s>"}};
  try {
    const Template t(source, "fuzz");
    (void)t.render(vars);
  } catch (const UsageError&) {
  }
  return 0;
}

std::string strip_whitespace(const std::string& s) { return py_strip(s, nullptr, true, true); }

int64_t now_seconds() {
  if (const char* e = std::getenv("SOURCE_DATE_EPOCH")) {
    int64_t v = 0;
    const char* end = e + std::strlen(e);
    const auto r = std::from_chars(e, end, v);
    if (r.ec == std::errc() && r.ptr == end) return v;
  }
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace repro::jinja
