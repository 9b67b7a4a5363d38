// Constrained decoding to a JSON Schema (see include/repro/engine/json_schema.hpp).
#include "repro/engine/json_schema.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

enum class NodeKind { Any, Object, Array, String, Number, Integer, Literal, AnyOf };

struct SchemaNode {
  NodeKind kind = NodeKind::Any;
  // object
  std::vector<std::string> names;         // declared properties (JSON-escaped, without quotes)
  std::vector<const SchemaNode*> props;
  uint64_t required = 0;                  // bit per declared property
  bool free_keys = false;                 // no "properties": any key, values of `additional`
  const SchemaNode* additional = nullptr; // value schema of free keys (null: none allowed)
  // array
  const SchemaNode* items = nullptr;
  int min_items = 0, max_items = -1;
  // string
  int min_length = 0, max_length = -1;
  // literal (enum, const, true/false/null): compact JSON texts
  std::vector<std::string> alts;
  // anyOf
  std::vector<const SchemaNode*> options;
};

namespace {

constexpr int kMaxDepth = 32;
constexpr int kMaxDigits = 15;
constexpr int kMaxProperties = 64;

// Frame kinds
enum : int { F_OBJ = 1, F_ARR, F_STR, F_KEYSTR, F_NUM, F_LIT };
// number phases
enum : int { N_MINUS = 1, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
bool num_terminal(int phase) { return phase == N_ZERO || phase == N_INT || phase == N_FRAC || phase == N_EXP; }
bool is_ws(unsigned char c) { return c == ' ' || c == '\n'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Can a value of `n` begin with byte c?
bool can_begin(const SchemaNode* n, unsigned char c) {
  switch (n->kind) {
    case NodeKind::Any: return c == '{' || c == '[' || c == '"' || c == '-' || is_digit(c) || c == 't' || c == 'f' || c == 'n';
    case NodeKind::Object: return c == '{';
    case NodeKind::Array: return c == '[';
    case NodeKind::String: return c == '"';
    case NodeKind::Number:
    case NodeKind::Integer: return c == '-' || is_digit(c);
    case NodeKind::Literal:
      for (const auto& a : n->alts)
        if (!a.empty() && static_cast<unsigned char>(a[0]) == c) return true;
      return false;
    case NodeKind::AnyOf:
      for (const auto* o : n->options)
        if (can_begin(o, c)) return true;
      return false;
  }
  return false;
}

const SchemaNode* any_node() {
  static const SchemaNode n;
  return &n;
}
const SchemaNode* bool_node() {
  static const SchemaNode n = [] {
    SchemaNode x;
    x.kind = NodeKind::Literal;
    x.alts = {"true", "false"};
    return x;
  }();
  return &n;
}
const SchemaNode* null_node() {
  static const SchemaNode n = [] {
    SchemaNode x;
    x.kind = NodeKind::Literal;
    x.alts = {"null"};
    return x;
  }();
  return &n;
}

std::string first_chars(const SchemaNode* n) {
  std::string s;
  for (int c = 0; c < 256; ++c)
    if (can_begin(n, static_cast<unsigned char>(c))) s.push_back(static_cast<char>(c));
  return s;
}

}  // namespace

// ============================================================================ compiling

struct SchemaCompiler {
  JsonSchema& out;
  SchemaNode* make() {
    out.nodes_.push_back(std::make_unique<SchemaNode>());
    return out.nodes_.back().get();
  }
  [[noreturn]] void fail(const std::string& ptr, const std::string& what) {
    throw UsageError(out.where_ + ": " + what + " at " + (ptr.empty() ? "/" : ptr) +
                     "; supported: type (object, array, string, number, integer, boolean, null), properties, "
                     "required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
                     "anyOf");
  }
  int nonneg_int(const nlohmann::json& s, const char* key, const std::string& ptr) {
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000)
      fail(ptr + "/" + key, std::string("'") + key + "' must be an integer from 0 to 1000000");
    return static_cast<int>(v.get<int64_t>());
  }

  const SchemaNode* compile(const nlohmann::json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) fail(ptr, fmt::format("the schema nests deeper than {} levels", kMaxDepth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_node();
      fail(ptr, "the schema 'false' admits no value");
    }
    if (!s.is_object()) fail(ptr, "a schema must be an object");
    static const std::set<std::string> annotations = {"title", "description", "$schema", "$id", "$comment", "default",
                                                      "examples", "strict", "name"};
    static const std::set<std::string> known = {"type", "properties", "required", "additionalProperties", "items",
                                                "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
                                                "anyOf"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotations.count(it.key()) && !known.count(it.key()))
        fail(ptr + "/" + it.key(), "keyword '" + it.key() + "' is not supported");
    if (s.contains("enum") || s.contains("const")) {
      SchemaNode* n = make();
      n->kind = NodeKind::Literal;
      if (s.contains("const")) n->alts.push_back(s["const"].dump());
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) fail(ptr + "/enum", "'enum' must be a non-empty array");
        for (const auto& v : s["enum"]) n->alts.push_back(v.dump());
      }
      return n;
    }
    if (s.contains("anyOf")) {
      if (!s["anyOf"].is_array() || s["anyOf"].empty()) fail(ptr + "/anyOf", "'anyOf' must be a non-empty array");
      std::vector<const SchemaNode*> opts;
      for (size_t i = 0; i < s["anyOf"].size(); ++i)
        opts.push_back(compile(s["anyOf"][i], ptr + "/anyOf/" + std::to_string(i), depth + 1));
      return any_of(opts, ptr + "/anyOf");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const auto& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) fail(ptr + "/type", "'type' must be a string or a list of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(ptr + "/type", "'type' must be a string or a list of strings");
      }
    } else if (s.contains("properties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return any_node();
    }
    std::vector<const SchemaNode*> opts;
    for (const auto& t : types) opts.push_back(typed(s, t, ptr, depth));
    return opts.size() == 1 ? opts[0] : any_of(opts, ptr + "/type");
  }

  const SchemaNode* any_of(const std::vector<const SchemaNode*>& opts, const std::string& ptr) {
    for (size_t i = 0; i < opts.size(); ++i)
      for (size_t j = i + 1; j < opts.size(); ++j) {
        std::string a = first_chars(opts[i]), b = first_chars(opts[j]);
        for (char c : a)
          if (b.find(c) != std::string::npos)
            fail(ptr, fmt::format("alternatives {} and {} can both begin with '{}' (only alternatives that begin "
                                  "differently, such as a string and null, are supported)", i, j, std::string(1, c)));
      }
    SchemaNode* n = make();
    n->kind = NodeKind::AnyOf;
    n->options = opts;
    return n;
  }

  const SchemaNode* typed(const nlohmann::json& s, const std::string& t, const std::string& ptr, int depth) {
    if (t == "boolean") return bool_node();
    if (t == "null") return null_node();
    SchemaNode* n = make();
    if (t == "string") {
      n->kind = NodeKind::String;
      if (s.contains("minLength")) n->min_length = nonneg_int(s, "minLength", ptr);
      if (s.contains("maxLength")) n->max_length = nonneg_int(s, "maxLength", ptr);
      if (n->max_length >= 0 && n->max_length < n->min_length) fail(ptr, "maxLength is below minLength");
    } else if (t == "number" || t == "integer") {
      n->kind = t == "number" ? NodeKind::Number : NodeKind::Integer;
    } else if (t == "array") {
      n->kind = NodeKind::Array;
      n->items = s.contains("items") ? compile(s["items"], ptr + "/items", depth + 1) : any_node();
      if (s.contains("minItems")) n->min_items = nonneg_int(s, "minItems", ptr);
      if (s.contains("maxItems")) n->max_items = nonneg_int(s, "maxItems", ptr);
      if (n->max_items >= 0 && n->max_items < n->min_items) fail(ptr, "maxItems is below minItems");
    } else if (t == "object") {
      n->kind = NodeKind::Object;
      const nlohmann::json* add = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (s.contains("properties")) {
        const auto& p = s["properties"];
        if (!p.is_object()) fail(ptr + "/properties", "'properties' must be an object");
        if (static_cast<int>(p.size()) > kMaxProperties)
          fail(ptr + "/properties", fmt::format("more than {} properties", kMaxProperties));
        if (add && !(add->is_boolean() && !add->get<bool>()))
          fail(ptr + "/additionalProperties", "only 'additionalProperties': false is supported next to 'properties'");
        for (auto it = p.begin(); it != p.end(); ++it) {
          std::string quoted = nlohmann::json(it.key()).dump();
          if (quoted.substr(1, quoted.size() - 2) != it.key() || it.key().empty())
            fail(ptr + "/properties", "property name '" + it.key() + "' is empty or needs escaping in JSON");
          n->names.push_back(it.key());
          n->props.push_back(compile(it.value(), ptr + "/properties/" + it.key(), depth + 1));
        }
        if (s.contains("required")) {
          if (!s["required"].is_array()) fail(ptr + "/required", "'required' must be an array of property names");
          for (const auto& r : s["required"]) {
            if (!r.is_string()) fail(ptr + "/required", "'required' must be an array of property names");
            std::string quoted = nlohmann::json(r.get<std::string>()).dump();
            auto at = std::find(n->names.begin(), n->names.end(), quoted.substr(1, quoted.size() - 2));
            if (at == n->names.end())
              fail(ptr + "/required", "required property '" + r.get<std::string>() + "' is not in 'properties'");
            n->required |= uint64_t{1} << (at - n->names.begin());
          }
        }
      } else {
        if (s.contains("required")) fail(ptr + "/required", "'required' without 'properties'");
        n->free_keys = true;
        if (!add || (add->is_boolean() && add->get<bool>()))
          n->additional = any_node();
        else if (add->is_boolean())
          n->additional = nullptr;  // only {}
        else
          n->additional = compile(*add, ptr + "/additionalProperties", depth + 1);
      }
    } else {
      fail(ptr + "/type", "type '" + t + "' is not supported");
    }
    return n;
  }
};

JsonSchema::JsonSchema(const nlohmann::json& schema, std::string where) : schema_(schema), where_(std::move(where)) {
  SchemaCompiler c{*this};
  root_ = c.compile(schema_, "", 0);
}
JsonSchema::~JsonSchema() = default;

JsonState JsonSchema::start() const { return JsonState{}; }

// ============================================================================ the automaton

namespace {

using Frame = JsonState::Frame;

// Pushes the frame that reads a value of `n` beginning with c, and feeds c to it. False when a value
// of `n` cannot begin with c.
bool begin_value(JsonState& s, const SchemaNode* n, unsigned char c);

bool literal_extends(const SchemaNode* n, const std::string& buf, unsigned char c) {
  for (const auto& a : n->alts)
    if (a.size() > buf.size() && a.compare(0, buf.size(), buf) == 0 && static_cast<unsigned char>(a[buf.size()]) == c)
      return true;
  return false;
}
bool literal_is(const SchemaNode* n, const std::string& buf) {
  return std::find(n->alts.begin(), n->alts.end(), buf) != n->alts.end();
}
bool literal_prefix_of_longer(const SchemaNode* n, const std::string& buf) {
  for (const auto& a : n->alts)
    if (a.size() > buf.size() && a.compare(0, buf.size(), buf) == 0) return true;
  return false;
}

// A value just ended: pop its frame and move the parent on.
void value_done(JsonState& s) {
  const int kind = s.stack.back().kind;
  s.stack.pop_back();
  if (s.stack.empty()) {
    s.done = true;
    return;
  }
  Frame& p = s.stack.back();
  if (p.kind == F_OBJ) {
    if (kind == F_KEYSTR) {
      p.phase = 2;  // expect ':'
    } else {
      if (p.key >= 0) p.used |= uint64_t{1} << p.key;
      p.key = -1;
      p.count++;
      p.phase = 4;  // expect ',' or '}'
    }
  } else if (p.kind == F_ARR) {
    p.count++;
    p.phase = 1;
  }
}

bool feed_top(JsonState& s, unsigned char c);

bool begin_value(JsonState& s, const SchemaNode* n, unsigned char c) {
  if (!can_begin(n, c)) return false;
  if (s.stack.size() >= static_cast<size_t>(kMaxDepth)) return false;
  if (n->kind == NodeKind::AnyOf) {
    for (const auto* o : n->options)
      if (can_begin(o, c)) return begin_value(s, o, c);
    return false;
  }
  Frame f;
  f.node = n;
  NodeKind k = n->kind;
  if (k == NodeKind::Any) {  // the first byte picks the type
    if (c == '{') {
      static const SchemaNode obj = [] {
        SchemaNode x;
        x.kind = NodeKind::Object;
        x.free_keys = true;
        x.additional = any_node();
        return x;
      }();
      f.node = &obj;
      k = NodeKind::Object;
    } else if (c == '[') {
      static const SchemaNode arr = [] {
        SchemaNode x;
        x.kind = NodeKind::Array;
        x.items = any_node();
        return x;
      }();
      f.node = &arr;
      k = NodeKind::Array;
    } else if (c == '"') {
      static const SchemaNode str = [] {
        SchemaNode x;
        x.kind = NodeKind::String;
        return x;
      }();
      f.node = &str;
      k = NodeKind::String;
    } else if (c == '-' || is_digit(c)) {
      static const SchemaNode num = [] {
        SchemaNode x;
        x.kind = NodeKind::Number;
        return x;
      }();
      f.node = &num;
      k = NodeKind::Number;
    } else {
      f.node = c == 'n' ? null_node() : bool_node();
      k = NodeKind::Literal;
    }
  }
  switch (k) {
    case NodeKind::Object: f.kind = F_OBJ; f.phase = 0; s.stack.push_back(f); return true;
    case NodeKind::Array: f.kind = F_ARR; f.phase = 0; s.stack.push_back(f); return true;
    case NodeKind::String: f.kind = F_STR; f.phase = 0; s.stack.push_back(f); return true;
    case NodeKind::Number:
    case NodeKind::Integer:
      f.kind = F_NUM;
      f.phase = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
      f.count = c == '-' ? 0 : 1;
      s.stack.push_back(f);
      return true;
    case NodeKind::Literal:
      f.kind = F_LIT;
      f.buf.assign(1, static_cast<char>(c));
      s.stack.push_back(f);
      if (literal_is(f.node, f.buf) && !literal_prefix_of_longer(f.node, f.buf)) value_done(s);
      return true;
    default: return false;
  }
}

// Bytes inside a string (value or free key); returns false on a byte a string cannot take here.
// On the closing quote the frame ends.
bool feed_string(JsonState& s, Frame& f, unsigned char c) {
  const SchemaNode* n = f.node;
  const int max_len = f.kind == F_STR ? n->max_length : -1;
  const int min_len = f.kind == F_STR ? n->min_length : 0;
  if (f.phase == 1) {  // after a backslash
    if (c == 'u') {
      f.phase = 2;
      return true;
    }
    if (std::string("\"\\/bfnrt").find(static_cast<char>(c)) == std::string::npos) return false;
    f.phase = 0;
    return true;
  }
  if (f.phase >= 2) {  // \uXXXX: phase 2..5 = hex digits read so far + 2
    if (!is_hex(c)) return false;
    f.phase = f.phase == 5 ? 0 : f.phase + 1;
    return true;
  }
  if (c == '"') {
    if (f.count < min_len) return false;
    value_done(s);
    return true;
  }
  if (c < 0x20) return false;
  const bool starts_char = (c & 0xC0) != 0x80;  // a UTF-8 continuation byte is part of the previous character
  if (starts_char && max_len >= 0 && f.count >= max_len) return false;
  if (starts_char) f.count++;
  if (c == '\\') f.phase = 1;
  return true;
}

bool feed_object(JsonState& s, Frame& f, unsigned char c) {
  const SchemaNode* n = f.node;
  const int np = static_cast<int>(n->names.size());
  const uint64_t all = np == 64 ? ~uint64_t{0} : (uint64_t{1} << np) - 1;
  const bool more_keys = n->free_keys ? n->additional != nullptr : (f.used & all) != all;
  const bool can_close = n->free_keys || (f.used & n->required) == n->required;
  switch (f.phase) {
    case 0:  // after '{'
    case 5:  // after ','
      if (is_ws(c)) return true;
      if (c == '}' && f.phase == 0 && can_close) {
        value_done(s);
        return true;
      }
      if (c != '"' || !more_keys) return false;
      if (n->free_keys) {
        f.phase = 1;
        Frame k;
        k.kind = F_KEYSTR;
        k.node = n;
        s.stack.push_back(k);
        return true;
      }
      f.phase = 1;
      f.buf.clear();
      return true;
    case 1: {  // inside a declared key
      if (c == '"') {
        for (int i = 0; i < np; ++i)
          if (!(f.used >> i & 1) && n->names[i] == f.buf) {
            f.key = i;
            f.phase = 2;
            return true;
          }
        return false;
      }
      std::string next = f.buf + static_cast<char>(c);
      for (int i = 0; i < np; ++i)
        if (!(f.used >> i & 1) && n->names[i].compare(0, next.size(), next) == 0 && n->names[i].size() >= next.size()) {
          f.buf = std::move(next);
          return true;
        }
      return false;
    }
    case 2:  // after the key
      if (is_ws(c)) return true;
      if (c != ':') return false;
      f.phase = 3;
      return true;
    case 3: {  // before the value
      if (is_ws(c)) return true;
      const SchemaNode* vn = n->free_keys ? n->additional : n->props[static_cast<size_t>(f.key)];
      return begin_value(s, vn, c);
    }
    case 4:  // after a value
      if (is_ws(c)) return true;
      if (c == '}' && can_close) {
        value_done(s);
        return true;
      }
      if (c == ',' && more_keys) {
        f.phase = 5;
        return true;
      }
      return false;
  }
  return false;
}

bool feed_array(JsonState& s, Frame& f, unsigned char c) {
  const SchemaNode* n = f.node;
  const bool more = n->max_items < 0 || f.count < n->max_items;
  const bool can_close = f.count >= n->min_items;
  switch (f.phase) {
    case 0:  // after '['
    case 2:  // after ','
      if (is_ws(c)) return true;
      if (c == ']' && f.phase == 0 && can_close) {
        value_done(s);
        return true;
      }
      if (!more) return false;
      return begin_value(s, n->items, c);
    case 1:  // after an item
      if (is_ws(c)) return true;
      if (c == ']' && can_close) {
        value_done(s);
        return true;
      }
      if (c == ',' && more) {
        f.phase = 2;
        return true;
      }
      return false;
  }
  return false;
}

// Numbers end on the first byte that cannot continue them; that byte then goes to the parent.
bool feed_number(JsonState& s, Frame& f, unsigned char c) {
  const bool integer = f.node->kind == NodeKind::Integer;
  auto digit = [&](int phase) {
    if (f.count >= kMaxDigits) return false;
    f.count++;
    f.phase = phase;
    return true;
  };
  switch (f.phase) {
    case N_MINUS:
      if (c == '0') return digit(N_ZERO);
      if (is_digit(c)) return digit(N_INT);
      return false;
    case N_ZERO:
    case N_INT:
      if (f.phase == N_INT && is_digit(c)) return digit(N_INT);
      if (!integer && c == '.') {
        f.phase = N_DOT;
        f.count = 0;
        return true;
      }
      if (!integer && (c == 'e' || c == 'E')) {
        f.phase = N_E;
        f.count = 0;
        return true;
      }
      break;
    case N_DOT:
      return is_digit(c) && digit(N_FRAC);
    case N_FRAC:
      if (is_digit(c)) return digit(N_FRAC);
      if (c == 'e' || c == 'E') {
        f.phase = N_E;
        f.count = 0;
        return true;
      }
      break;
    case N_E:
      if (c == '+' || c == '-') {
        f.phase = N_ESIGN;
        return true;
      }
      return is_digit(c) && digit(N_EXP);
    case N_ESIGN:
      return is_digit(c) && digit(N_EXP);
    case N_EXP:
      if (is_digit(c)) return digit(N_EXP);
      break;
  }
  if (!num_terminal(f.phase)) return false;
  value_done(s);       // the number is complete;
  return feed_top(s, c);  // the byte belongs to what follows it
}

bool feed_literal(JsonState& s, Frame& f, unsigned char c) {
  if (literal_extends(f.node, f.buf, c)) {
    f.buf.push_back(static_cast<char>(c));
    if (literal_is(f.node, f.buf) && !literal_prefix_of_longer(f.node, f.buf)) value_done(s);
    return true;
  }
  if (!literal_is(f.node, f.buf)) return false;
  value_done(s);
  return feed_top(s, c);
}

bool feed_top(JsonState& s, unsigned char c) {
  if (s.done) return false;
  if (s.stack.empty()) return false;  // handled by JsonSchema::feed
  Frame& f = s.stack.back();
  switch (f.kind) {
    case F_OBJ: return feed_object(s, f, c);
    case F_ARR: return feed_array(s, f, c);
    case F_STR:
    case F_KEYSTR: return feed_string(s, f, c);
    case F_NUM: return feed_number(s, f, c);
    case F_LIT: return feed_literal(s, f, c);
  }
  return false;
}

}  // namespace

bool JsonSchema::feed(JsonState& s, unsigned char c) const {
  if (s.done) return false;
  const bool in_string = !s.stack.empty() && (s.stack.back().kind == F_STR || s.stack.back().kind == F_KEYSTR);
  const bool ws = !in_string && is_ws(c);
  if (ws && s.spaces >= 1) return false;  // at most one whitespace byte in a row
  JsonState t = s;
  bool ok;
  if (t.stack.empty())
    ok = ws || begin_value(t, root_, c);
  else
    ok = feed_top(t, c);
  if (!ok) return false;
  t.spaces = ws ? s.spaces + 1 : 0;
  s = std::move(t);
  return true;
}

bool JsonSchema::feed(JsonState& s, const std::string& bytes) const {
  JsonState t = s;
  for (char ch : bytes)
    if (!feed(t, static_cast<unsigned char>(ch))) return false;
  s = std::move(t);
  return true;
}

bool JsonSchema::complete(const JsonState& s) const {
  if (s.done) return true;
  if (s.stack.size() != 1) return false;
  const Frame& f = s.stack.back();
  if (f.kind == F_NUM) return num_terminal(f.phase);
  if (f.kind == F_LIT) return literal_is(f.node, f.buf);
  return false;
}

// ============================================================================ post-hoc validation

namespace {
size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
bool conforms(const nlohmann::json& v, const SchemaNode* n) {
  switch (n->kind) {
    case NodeKind::Any: return true;
    case NodeKind::Literal:
      for (const auto& a : n->alts)
        if (nlohmann::json::parse(a) == v) return true;
      return false;
    case NodeKind::AnyOf:
      for (const auto* o : n->options)
        if (conforms(v, o)) return true;
      return false;
    case NodeKind::String: {
      if (!v.is_string()) return false;
      size_t len = utf8_chars(v.get<std::string>());
      return len >= static_cast<size_t>(n->min_length) && (n->max_length < 0 || len <= static_cast<size_t>(n->max_length));
    }
    case NodeKind::Number: return v.is_number();
    case NodeKind::Integer:
      if (v.is_number_integer()) return true;
      return v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>());
    case NodeKind::Array: {
      if (!v.is_array()) return false;
      if (v.size() < static_cast<size_t>(n->min_items)) return false;
      if (n->max_items >= 0 && v.size() > static_cast<size_t>(n->max_items)) return false;
      for (const auto& x : v)
        if (!conforms(x, n->items)) return false;
      return true;
    }
    case NodeKind::Object: {
      if (!v.is_object()) return false;
      if (n->free_keys) {
        if (!n->additional) return v.empty();
        for (auto it = v.begin(); it != v.end(); ++it)
          if (!conforms(it.value(), n->additional)) return false;
        return true;
      }
      uint64_t seen = 0;
      for (auto it = v.begin(); it != v.end(); ++it) {
        std::string quoted = nlohmann::json(it.key()).dump();
        auto at = std::find(n->names.begin(), n->names.end(), quoted.substr(1, quoted.size() - 2));
        if (at == n->names.end()) return false;
        size_t i = static_cast<size_t>(at - n->names.begin());
        if (!conforms(it.value(), n->props[i])) return false;
        seen |= uint64_t{1} << i;
      }
      return (seen & n->required) == n->required;
    }
  }
  return false;
}
}  // namespace

bool JsonSchema::validate(const std::string& text) const {
  nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  if (v.is_discarded()) return false;
  return conforms(v, root_);
}

// ============================================================================ the vocabulary trie

TokenTrie::TokenTrie(const Tokenizer& tok) : vocab_(tok.vocab_size()) {
  nodes_.emplace_back();
  for (int id = 0; id < vocab_; ++id) {
    if (id == tok.bos() || id == tok.eos()) continue;
    const std::string p = tok.piece(id);
    if (p.empty()) continue;
    int at = 0;
    for (char ch : p) {
      const unsigned char c = static_cast<unsigned char>(ch);
      int child = -1;
      for (const auto& [b, idx] : nodes_[static_cast<size_t>(at)].next)
        if (b == c) child = idx;
      if (child < 0) {
        child = static_cast<int>(nodes_.size());
        nodes_[static_cast<size_t>(at)].next.emplace_back(c, child);
        nodes_.emplace_back();
      }
      at = child;
    }
    nodes_[static_cast<size_t>(at)].ids.push_back(id);
  }
}

void TokenTrie::walk(const JsonSchema& schema, int node, const JsonState& s, std::vector<char>& allowed, int& n) const {
  const Node& nd = nodes_[static_cast<size_t>(node)];
  for (int id : nd.ids) {
    allowed[static_cast<size_t>(id)] = 1;
    ++n;
  }
  for (const auto& [b, child] : nd.next) {
    JsonState t = s;
    if (schema.feed(t, b)) walk(schema, child, t, allowed, n);
  }
}

int TokenTrie::allowed(const JsonSchema& schema, const JsonState& s, std::vector<char>& allowed) const {
  allowed.assign(static_cast<size_t>(vocab_), 0);
  int n = 0;
  walk(schema, 0, s, allowed, n);
  return n;
}

namespace {
// A shortest conforming document: required properties only, minItems items, minLength strings, 0.
std::string minimal_document(const SchemaNode* n) {
  switch (n->kind) {
    case NodeKind::Any:
    case NodeKind::Number:
    case NodeKind::Integer: return "0";
    case NodeKind::Literal: return n->alts[0];
    case NodeKind::AnyOf: return minimal_document(n->options[0]);
    case NodeKind::String: return "\"" + std::string(static_cast<size_t>(n->min_length), 'a') + "\"";
    case NodeKind::Array: {
      std::string s = "[";
      for (int i = 0; i < n->min_items; ++i) s += (i ? "," : "") + minimal_document(n->items);
      return s + "]";
    }
    case NodeKind::Object: {
      std::string s = "{";
      bool first = true;
      for (size_t i = 0; i < n->names.size(); ++i)
        if (n->required >> i & 1) {
          s += (first ? "\"" : ",\"") + n->names[i] + "\":" + minimal_document(n->props[i]);
          first = false;
        }
      return s + "}";
    }
  }
  return "0";
}
}  // namespace

JsonConstraint::JsonConstraint(const nlohmann::json& s, std::string where, const Tokenizer& tok)
    : schema(s, std::move(where)), trie(tok) {
  // Can the vocabulary spell a conforming document? The shortest one must be spellable: by the
  // tokenizer's own encoding, or else byte by byte with single-byte tokens.
  const std::string doc = minimal_document(schema.root());
  JsonState st = schema.start();
  bool ok = true;
  for (int id : tok.encode(doc, false)) ok = ok && schema.feed(st, tok.piece(id));
  if (ok && schema.complete(st)) return;
  std::set<unsigned char> single;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    std::string p = tok.piece(id);
    if (p.size() == 1 && id != tok.bos() && id != tok.eos()) single.insert(static_cast<unsigned char>(p[0]));
  }
  for (char ch : doc)
    if (!single.count(static_cast<unsigned char>(ch)))
      throw UsageError(schema.where() + ": the model's vocabulary cannot spell a document of this schema (no token for " +
                       printable(std::string(1, ch)) + " in " + printable(doc) +
                       "); use a model whose vocabulary has byte tokens, or another schema");
}

// ============================================================================ reading

nlohmann::json schema_of(const nlohmann::json& v) {
  if (v.is_object() && v.contains("type") && v["type"] == "json_object") return {{"type", "object"}};
  if (v.is_object() && v.contains("type") && v["type"] == "json_schema" && v.contains("json_schema"))
    return schema_of(v["json_schema"]);
  if (v.is_object() && v.contains("schema") && v["schema"].is_object() && !v.contains("type")) return v["schema"];
  return v;
}

nlohmann::json read_json_schema_file(const std::string& path, const std::string& flag) {
  std::string text = read_file(path, (flag + " schema").c_str());
  nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  if (v.is_discarded())
    throw UsageError(flag + " '" + path + "': not valid JSON; give a JSON Schema object (e.g. {\"type\":\"object\",...})");
  return schema_of(v);
}

}  // namespace repro
