// Constrained decoding to a JSON Schema (see include/repro/structured/json_schema.hpp).
#include "repro/structured/json_schema.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>
#include <set>
#include <string_view>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

namespace {

// A set of byte strings as a trie whose edges lie in one array, the children of a node sorted by
// byte: a position in it is one int, a step a binary search over at most 256 edges.
struct ByteTrie {
  std::vector<uint32_t> first = {0, 0};  // node i's edges: [first[i], first[i + 1])
  std::vector<unsigned char> label;      // edge byte
  std::vector<uint32_t> to;              // edge target
  std::vector<int> word = {-1};          // node i spells words[word[i]] (the first such), or -1
  std::vector<uint64_t> below;           // with_below: bit (index % 64) of each word at or below node i

  void build(const std::vector<std::string>& words, bool with_below) {
    std::vector<std::vector<std::pair<unsigned char, uint32_t>>> next(1);
    word.assign(1, -1);
    for (size_t w = 0; w < words.size(); ++w) {
      uint32_t at = 0;
      for (char ch : words[w]) {
        const unsigned char c = static_cast<unsigned char>(ch);
        uint32_t child = 0;
        for (const auto& [b, t] : next[at])
          if (b == c) child = t;
        if (child == 0) {
          child = static_cast<uint32_t>(next.size());
          next[at].emplace_back(c, child);
          next.emplace_back();
          word.push_back(-1);
        }
        at = child;
      }
      if (word[at] < 0) word[at] = static_cast<int>(w);
    }
    const size_t n = next.size();
    first.assign(n + 1, 0);
    label.clear();
    to.clear();
    for (size_t i = 0; i < n; ++i) {
      std::sort(next[i].begin(), next[i].end());
      first[i] = static_cast<uint32_t>(label.size());
      for (const auto& [b, t] : next[i]) {
        label.push_back(b);
        to.push_back(t);
      }
    }
    first[n] = static_cast<uint32_t>(label.size());
    if (with_below) {
      below.assign(n, 0);
      // children are numbered after their parents, so one backward pass folds every subtree
      for (size_t i = n; i-- > 0;) {
        if (word[i] >= 0) below[i] |= uint64_t{1} << (word[i] % 64);
        for (uint32_t e = first[i]; e < first[i + 1]; ++e) below[i] |= below[to[e]];
      }
    }
  }
  // The child of `node` by byte c, or -1.
  int step(int node, unsigned char c) const {
    const auto b = label.begin() + first[static_cast<size_t>(node)];
    const auto e = label.begin() + first[static_cast<size_t>(node) + 1];
    const auto it = std::lower_bound(b, e, c);
    if (it == e || *it != c) return -1;
    return static_cast<int>(to[static_cast<size_t>(it - label.begin())]);
  }
  bool leaf(int node) const { return first[static_cast<size_t>(node)] == first[static_cast<size_t>(node) + 1]; }
  bool is_word(int node) const { return word[static_cast<size_t>(node)] >= 0; }
};

// The bytes a value can begin with.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void add(unsigned char c) { bits[c >> 6] |= uint64_t{1} << (c & 63); }
  bool has(unsigned char c) const { return bits[c >> 6] >> (c & 63) & 1; }
};

}  // namespace

enum class NodeKind { Any, Object, Array, String, Number, Integer, Literal, AnyOf };

struct SchemaNode {
  NodeKind kind = NodeKind::Any;
  ByteSet begins;                         // bytes a value of this node can begin with
  size_t min_bytes = 1;                   // length of its shortest document (at most the limit + 1)
  // object
  std::vector<std::string> names;         // declared properties (JSON-escaped, without quotes)
  std::vector<const SchemaNode*> props;
  ByteTrie keys;                          // the names, with the properties below each position
  uint64_t required = 0;                  // bit per declared property
  bool free_keys = false;                 // no "properties": any key, values of `additional`
  const SchemaNode* additional = nullptr; // value schema of free keys (null: none allowed)
  // array
  const SchemaNode* items = nullptr;
  int min_items = 0, max_items = -1;
  // string
  int min_length = 0, max_length = -1;
  // literal (enum, const, true/false/null): compact JSON texts as a trie, the values for validation
  ByteTrie lits;
  std::vector<nlohmann::json> values;
  std::string shortest;                   // the shortest text
  // anyOf
  std::vector<const SchemaNode*> options;
};

namespace {

constexpr int kMaxDepth = kSchemaMaxDepth;
constexpr int kMaxDigits = 15;     // integer and fraction parts
constexpr int kMaxExpDigits = 2;   // exponent: with 15 + 15 digits, |x| < 1e115, a finite double
constexpr int kMaxProperties = kSchemaMaxProperties;
constexpr size_t kTooLong = kSchemaMaxMinimalDocument + 1;  // min_bytes saturate here

// Frame kinds
enum : int { F_OBJ = 1, F_ARR, F_STR, F_KEYSTR, F_NUM, F_LIT };
// number phases
enum : int { N_MINUS = 1, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
bool num_terminal(int phase) { return phase == N_ZERO || phase == N_INT || phase == N_FRAC || phase == N_EXP; }
bool is_ws(unsigned char c) { return c == ' ' || c == '\n'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_value(unsigned char c) {
  return is_digit(c) ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10);
}

size_t sat_add(size_t a, size_t b) { return std::min(kTooLong, a + b); }
size_t sat_mul(size_t a, size_t b) { return std::min<size_t>(kTooLong, a * b); }  // both <= 10^6 + 1

bool can_begin(const SchemaNode* n, unsigned char c) { return n->begins.has(c); }

// begins for the kinds whose first bytes do not depend on their contents
void set_begins(SchemaNode& n) {
  auto add = [&](std::string_view s) {
    for (char c : s) n.begins.add(static_cast<unsigned char>(c));
  };
  switch (n.kind) {
    case NodeKind::Any: add("{[\"-0123456789tfn"); break;
    case NodeKind::Object: add("{"); break;
    case NodeKind::Array: add("["); break;
    case NodeKind::String: add("\""); break;
    case NodeKind::Number:
    case NodeKind::Integer: add("-0123456789"); break;
    case NodeKind::Literal:
      for (uint32_t e = n.lits.first[0]; e < n.lits.first[1]; ++e) n.begins.add(n.lits.label[e]);
      break;
    case NodeKind::AnyOf:
      for (const auto* o : n.options)
        for (size_t i = 0; i < 4; ++i) n.begins.bits[i] |= o->begins.bits[i];
      break;
  }
}

void set_literals(SchemaNode& n, std::vector<std::string> texts) {
  n.kind = NodeKind::Literal;
  n.shortest = *std::min_element(texts.begin(), texts.end(),
                                 [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  n.min_bytes = std::min(kTooLong, n.shortest.size());
  n.lits.build(texts, false);
  set_begins(n);
}

SchemaNode plain_node(NodeKind k) {
  SchemaNode x;
  x.kind = k;
  set_begins(x);
  return x;
}
SchemaNode literal_node(std::vector<nlohmann::json> values) {
  SchemaNode x;
  std::vector<std::string> texts;
  for (const auto& v : values) texts.push_back(v.dump());
  x.values = std::move(values);
  set_literals(x, std::move(texts));
  return x;
}

const SchemaNode* any_node() {
  static const SchemaNode n = plain_node(NodeKind::Any);
  return &n;
}
const SchemaNode* bool_node() {
  static const SchemaNode n = literal_node({true, false});
  return &n;
}
const SchemaNode* null_node() {
  static const SchemaNode n = literal_node({nullptr});
  return &n;
}

}  // namespace

// ============================================================================ compiling

struct SchemaCompiler {
  JsonSchema& out;
  size_t literal_bytes = 0;  // enum and const texts so far

  SchemaNode* make(const std::string& ptr) {
    if (out.nodes_.size() >= static_cast<size_t>(kSchemaMaxNodes))
      fail_limit(ptr, fmt::format("the schema has more than {} subschemas", kSchemaMaxNodes), "simplify it");
    out.nodes_.push_back(std::make_unique<SchemaNode>());
    return out.nodes_.back().get();
  }
  [[noreturn]] void fail(const std::string& ptr, const std::string& what) {
    throw UsageError(out.where_ + ": " + what + " at " + (ptr.empty() ? "/" : ptr) +
                     "; supported: type (object, array, string, number, integer, boolean, null), properties, "
                     "required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
                     "anyOf");
  }
  // A limit (include/repro/structured/json_schema.hpp): one line naming it, where, and the fix.
  [[noreturn]] void fail_limit(const std::string& ptr, const std::string& what, const std::string& fix) {
    throw UsageError(out.where_ + ": " + what + " at " + (ptr.empty() ? "/" : ptr) + "; " + fix);
  }
  int nonneg_int(const nlohmann::json& s, const char* key, const std::string& ptr) {
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kSchemaMaxCount)
      fail(ptr + "/" + key, fmt::format("'{}' must be an integer from 0 to {}", key, kSchemaMaxCount));
    return static_cast<int>(v.get<int64_t>());
  }
  // Every node's shortest document is checked as soon as it is known, innermost first, so a product
  // of minimums (minItems x minLength, nested arrays, required properties) is refused where it first
  // exceeds the limit, before anything of that size exists.
  const SchemaNode* check_size(const SchemaNode* n, const std::string& ptr) {
    if (n->min_bytes > kSchemaMaxMinimalDocument)
      throw UsageError(fmt::format("{}: the shortest document this schema admits is longer than {} bytes at {} "
                                   "(minItems, minLength and required properties multiply); lower them",
                                   out.where_, kSchemaMaxMinimalDocument, ptr.empty() ? "/" : ptr));
    return n;
  }
  void add_literal_bytes(size_t n, const std::string& ptr) {
    literal_bytes += n;
    if (literal_bytes > kSchemaMaxLiteralBytes)
      fail_limit(ptr,
                 fmt::format("enum and const values take more than {} bytes of JSON in all", kSchemaMaxLiteralBytes),
                 "give fewer or shorter values");
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
      SchemaNode* n = make(ptr);
      std::vector<std::string> texts;
      if (s.contains("const")) {
        texts.push_back(s["const"].dump());
        add_literal_bytes(texts.back().size(), ptr + "/const");
        n->values.push_back(s["const"]);
      }
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) fail(ptr + "/enum", "'enum' must be a non-empty array");
        for (const auto& v : s["enum"]) {
          texts.push_back(v.dump());
          add_literal_bytes(texts.back().size(), ptr + "/enum");
          n->values.push_back(v);
        }
      }
      set_literals(*n, std::move(texts));
      return check_size(n, ptr);
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
      for (size_t j = i + 1; j < opts.size(); ++j)
        for (int c = 0; c < 256; ++c)
          if (can_begin(opts[i], static_cast<unsigned char>(c)) && can_begin(opts[j], static_cast<unsigned char>(c)))
            fail(ptr, fmt::format("alternatives {} and {} can both begin with '{}' (only alternatives that begin "
                                  "differently, such as a string and null, are supported)",
                                  i, j, std::string(1, static_cast<char>(c))));
    SchemaNode* n = make(ptr);
    n->kind = NodeKind::AnyOf;
    n->options = opts;
    n->min_bytes = kTooLong;
    for (const auto* o : opts) n->min_bytes = std::min(n->min_bytes, o->min_bytes);
    set_begins(*n);
    return n;
  }

  const SchemaNode* typed(const nlohmann::json& s, const std::string& t, const std::string& ptr, int depth) {
    if (t == "boolean") return bool_node();
    if (t == "null") return null_node();
    SchemaNode* n = make(ptr);
    if (t == "string") {
      n->kind = NodeKind::String;
      if (s.contains("minLength")) n->min_length = nonneg_int(s, "minLength", ptr);
      if (s.contains("maxLength")) n->max_length = nonneg_int(s, "maxLength", ptr);
      if (n->max_length >= 0 && n->max_length < n->min_length) fail(ptr, "maxLength is below minLength");
      n->min_bytes = sat_add(2, static_cast<size_t>(n->min_length));
    } else if (t == "number" || t == "integer") {
      n->kind = t == "number" ? NodeKind::Number : NodeKind::Integer;
    } else if (t == "array") {
      n->kind = NodeKind::Array;
      n->items = s.contains("items") ? compile(s["items"], ptr + "/items", depth + 1) : any_node();
      if (s.contains("minItems")) n->min_items = nonneg_int(s, "minItems", ptr);
      if (s.contains("maxItems")) n->max_items = nonneg_int(s, "maxItems", ptr);
      if (n->max_items >= 0 && n->max_items < n->min_items) fail(ptr, "maxItems is below minItems");
      const size_t k = static_cast<size_t>(n->min_items);
      n->min_bytes = sat_add(2, sat_add(sat_mul(k, n->items->min_bytes), k > 0 ? k - 1 : 0));
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
        n->keys.build(n->names, true);
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
        // {"name":value,...}: per required property its quoted name, a colon and its shortest value
        size_t bytes = 2, count = 0;
        for (size_t i = 0; i < n->names.size(); ++i)
          if (n->required >> i & 1) {
            bytes = sat_add(bytes, sat_add(n->names[i].size() + 3, n->props[i]->min_bytes));
            ++count;
          }
        n->min_bytes = sat_add(bytes, count > 0 ? count - 1 : 0);
      } else {
        if (s.contains("required")) fail(ptr + "/required", "'required' without 'properties'");
        n->free_keys = true;
        if (!add || (add->is_boolean() && add->get<bool>()))
          n->additional = any_node();
        else if (add->is_boolean())
          n->additional = nullptr;  // only {}
        else
          n->additional = compile(*add, ptr + "/additionalProperties", depth + 1);
        n->min_bytes = 2;
      }
    } else {
      fail(ptr + "/type", "type '" + t + "' is not supported");
    }
    set_begins(*n);
    return check_size(n, ptr);
  }
};

JsonSchema::JsonSchema(const nlohmann::json& schema, std::string where) : schema_(schema), where_(std::move(where)) {
  SchemaCompiler c{*this};
  try {
    root_ = c.compile(schema_, "", 0);
  } catch (const nlohmann::json::exception& e) {  // a value built in code with invalid UTF-8 (dump)
    throw UsageError(where_ + ": the schema cannot be read: " + e.what());
  }
}
JsonSchema::~JsonSchema() = default;

JsonState JsonSchema::start() const { return JsonState{}; }

// ============================================================================ the automaton

namespace {

using Frame = JsonState::Frame;

// Pushes the frame that reads a value of `n` beginning with c, and feeds c to it. False when a value
// of `n` cannot begin with c.
bool begin_value(JsonState& s, const SchemaNode* n, unsigned char c);

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

// A literal moved to trie position f.at: it ends here when no value continues it.
void literal_moved(JsonState& s, const Frame& f) {
  if (f.node->lits.is_word(f.at) && f.node->lits.leaf(f.at)) value_done(s);
}

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
        SchemaNode x = plain_node(NodeKind::Object);
        x.free_keys = true;
        x.additional = any_node();
        return x;
      }();
      f.node = &obj;
      k = NodeKind::Object;
    } else if (c == '[') {
      static const SchemaNode arr = [] {
        SchemaNode x = plain_node(NodeKind::Array);
        x.items = any_node();
        return x;
      }();
      f.node = &arr;
      k = NodeKind::Array;
    } else if (c == '"') {
      static const SchemaNode str = plain_node(NodeKind::String);
      f.node = &str;
      k = NodeKind::String;
    } else if (c == '-' || is_digit(c)) {
      static const SchemaNode num = plain_node(NodeKind::Number);
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
      f.at = f.node->lits.step(0, c);  // exists: c begins a value
      s.stack.push_back(f);
      literal_moved(s, f);
      return true;
    default: return false;
  }
}

// Bytes inside a string (value or free key); returns false on a byte a string cannot take here:
// anything but well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing over
// U+10FFFF, no sequence cut short) and well-formed escapes (a \u escape of a high surrogate
// followed by one of a low surrogate, no lone low surrogate). On the closing quote the frame ends.
bool feed_string(JsonState& s, Frame& f, unsigned char c) {
  const SchemaNode* n = f.node;
  const int max_len = f.kind == F_STR ? n->max_length : -1;
  const int min_len = f.kind == F_STR ? n->min_length : 0;
  if (f.need > 0) {  // inside a multi-byte character
    if (c < f.lo || c > f.hi) return false;
    --f.need;
    f.lo = 0x80;
    f.hi = 0xBF;
    return true;
  }
  if (f.phase == 1) {  // after a backslash
    if (c == 'u') {
      f.phase = 2;
      f.code = 0;
      return true;
    }
    if (f.low_next || std::string_view("\"\\/bfnrt").find(static_cast<char>(c)) == std::string_view::npos) return false;
    f.phase = 0;
    return true;
  }
  if (f.phase >= 2) {  // \uXXXX: phase 2..5 = hex digits read so far + 2
    if (!is_hex(c)) return false;
    const int digit = f.phase - 2;
    f.code = f.code * 16 + hex_value(c);
    if (digit == 0 && f.low_next && f.code != 0xD) return false;
    if (digit == 1 && f.low_next != (f.code >= 0xDC && f.code <= 0xDF)) return false;  // low surrogates only in pairs
    if (digit < 3) {
      f.phase++;
      return true;
    }
    f.phase = 0;
    f.low_next = !f.low_next && f.code >= 0xD800 && f.code <= 0xDBFF;
    return true;
  }
  if (f.low_next) {  // the low half of a surrogate pair: not a character of its own
    if (c != '\\') return false;
    f.phase = 1;
    return true;
  }
  if (c == '"') {
    if (f.count < min_len) return false;
    value_done(s);
    return true;
  }
  if (c < 0x20) return false;
  uint8_t need = 0, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;  // no overlong forms
    if (c == 0xF4) hi = 0x8F;  // nothing over U+10FFFF
  } else if (c >= 0x80) {
    return false;  // a continuation byte without a lead, C0/C1 (overlong) or F5..FF
  }
  if (max_len >= 0 && f.count >= max_len) return false;
  f.count++;
  f.need = need;
  f.lo = lo;
  f.hi = hi;
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
      f.at = 0;
      return true;
    case 1: {  // inside a declared key: f.at is the position in the names' trie (names hold no '"')
      if (c == '"') {
        const int i = n->keys.word[static_cast<size_t>(f.at)];
        if (i < 0 || (f.used >> i & 1)) return false;
        f.key = i;
        f.phase = 2;
        return true;
      }
      const int next = n->keys.step(f.at, c);
      if (next < 0 || !(n->keys.below[static_cast<size_t>(next)] & ~f.used)) return false;  // no unused name
      f.at = next;
      return true;
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
    if (f.count >= (phase == N_EXP ? kMaxExpDigits : kMaxDigits)) return false;
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
  value_done(s);          // the number is complete;
  return feed_top(s, c);  // the byte belongs to what follows it
}

// f.at is the position in the values' trie: one step per byte, whatever the values' number or length.
bool feed_literal(JsonState& s, Frame& f, unsigned char c) {
  const ByteTrie& t = f.node->lits;
  const int next = t.step(f.at, c);
  if (next >= 0) {
    f.at = next;
    literal_moved(s, f);
    return true;
  }
  if (!t.is_word(f.at)) return false;
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

bool JsonSchema::advance(JsonState& s, unsigned char c) const {
  if (s.done) return false;
  const bool in_string = !s.stack.empty() && (s.stack.back().kind == F_STR || s.stack.back().kind == F_KEYSTR);
  const bool ws = !in_string && is_ws(c);
  if (ws && s.spaces >= 1) return false;  // at most one whitespace byte in a row
  const bool ok = s.stack.empty() ? ws || begin_value(s, root_, c) : feed_top(s, c);
  if (!ok) return false;
  s.spaces = ws ? s.spaces + 1 : 0;
  return true;
}

bool JsonSchema::feed(JsonState& s, unsigned char c) const {
  JsonState t = s;
  if (!advance(t, c)) return false;
  s = std::move(t);
  return true;
}

bool JsonSchema::feed(JsonState& s, const std::string& bytes) const {
  JsonState t = s;
  for (char ch : bytes)
    if (!advance(t, static_cast<unsigned char>(ch))) return false;
  s = std::move(t);
  return true;
}

bool JsonSchema::complete(const JsonState& s) const {
  if (s.done) return true;
  if (s.stack.size() != 1) return false;
  const Frame& f = s.stack.back();
  if (f.kind == F_NUM) return num_terminal(f.phase);
  if (f.kind == F_LIT) return f.node->lits.is_word(f.at);
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
      return std::find(n->values.begin(), n->values.end(), v) != n->values.end();
    case NodeKind::AnyOf:
      for (const auto* o : n->options)
        if (conforms(v, o)) return true;
      return false;
    case NodeKind::String: {
      if (!v.is_string()) return false;
      size_t len = utf8_chars(v.get_ref<const std::string&>());
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
  nlohmann::json v;
  if (!parse_json(text, v)) return false;
  return conforms(v, root_);
}

// ============================================================================ the vocabulary trie

TokenTrie::TokenTrie(const Tokenizer& tok) : vocab_(tok.vocab_size()) {
  nodes_.emplace_back();
  for (int id = 0; id < vocab_; ++id) {
    if (id == tok.bos() || tok.is_eog(id)) continue;  // they end the text, never spell it
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

std::shared_ptr<const TokenTrie> TokenTrie::of(const Tokenizer& tok) {
  static std::mutex mu;
  static std::vector<std::pair<uint64_t, std::shared_ptr<const TokenTrie>>> kept;  // most recent last
  constexpr size_t kKeep = 4;
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < kept.size(); ++i)
    if (kept[i].first == tok.instance()) {
      std::rotate(kept.begin() + i, kept.begin() + i + 1, kept.end());
      return kept.back().second;
    }
  auto t = std::make_shared<const TokenTrie>(tok);
  if (kept.size() == kKeep) kept.erase(kept.begin());
  kept.emplace_back(tok.instance(), t);
  return t;
}

int TokenTrie::allowed(const JsonSchema& schema, const JsonState& s, std::vector<char>& allowed) const {
  allowed.assign(static_cast<size_t>(vocab_), 0);
  int n = 0;
  // Depth first with an explicit stack (a token may be 100,000 bytes long): path[d] is the trie node
  // at depth d with the next of its edges to try, states[d] the automaton after the path's first d
  // bytes, reused for every branch at that depth (assigning keeps its capacity).
  struct Step {
    int node;
    size_t edge;
  };
  std::vector<Step> path = {{0, 0}};
  std::vector<JsonState> states = {s};
  while (!path.empty()) {
    Step& top = path.back();
    const Node& nd = nodes_[static_cast<size_t>(top.node)];
    if (top.edge == nd.next.size()) {
      path.pop_back();
      continue;
    }
    const auto [b, child] = nd.next[top.edge++];
    const size_t d = path.size();
    if (states.size() <= d) states.emplace_back();
    states[d] = states[d - 1];
    if (!schema.advance(states[d], b)) continue;
    for (int id : nodes_[static_cast<size_t>(child)].ids) {
      allowed[static_cast<size_t>(id)] = 1;
      ++n;
    }
    path.push_back({child, 0});
  }
  return n;
}

namespace {
// A shortest conforming document: required properties only, minItems items, minLength strings, 0, the
// shortest literal, the alternative with the shortest document. Its length is SchemaNode::min_bytes,
// bounded when compiling.
void minimal_document(const SchemaNode* n, std::string& out) {
  switch (n->kind) {
    case NodeKind::Any:
    case NodeKind::Number:
    case NodeKind::Integer: out += '0'; return;
    case NodeKind::Literal: out += n->shortest; return;
    case NodeKind::AnyOf: {
      auto shorter = [](const SchemaNode* a, const SchemaNode* b) { return a->min_bytes < b->min_bytes; };
      minimal_document(*std::min_element(n->options.begin(), n->options.end(), shorter), out);
      return;
    }
    case NodeKind::String:
      out += '"';
      out.append(static_cast<size_t>(n->min_length), 'a');
      out += '"';
      return;
    case NodeKind::Array:
      out += '[';
      for (int i = 0; i < n->min_items; ++i) {
        if (i) out += ',';
        minimal_document(n->items, out);
      }
      out += ']';
      return;
    case NodeKind::Object: {
      out += '{';
      bool first = true;
      for (size_t i = 0; i < n->names.size(); ++i)
        if (n->required >> i & 1) {
          out += first ? "\"" : ",\"";
          out += n->names[i];
          out += "\":";
          minimal_document(n->props[i], out);
          first = false;
        }
      out += '}';
      return;
    }
  }
}
}  // namespace

JsonConstraint::JsonConstraint(const nlohmann::json& s, std::string where, const Tokenizer& tok)
    : schema(s, std::move(where)), trie(TokenTrie::of(tok)) {
  // Can the vocabulary spell a conforming document? The shortest one must be spellable: by the
  // tokenizer's own encoding, or else byte by byte with single-byte tokens.
  std::string doc;
  doc.reserve(schema.root()->min_bytes);
  minimal_document(schema.root(), doc);
  JsonState st = schema.start();
  bool ok = true;
  for (int id : tok.encode(doc, false)) ok = ok && schema.feed(st, tok.piece(id));
  if (ok && schema.complete(st)) return;
  std::set<unsigned char> single;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    std::string p = tok.piece(id);
    if (p.size() == 1 && id != tok.bos() && !tok.is_eog(id)) single.insert(static_cast<unsigned char>(p[0]));
  }
  for (char ch : doc)
    if (!single.count(static_cast<unsigned char>(ch)))
      throw UsageError(schema.where() + ": the model's vocabulary cannot spell a document of this schema (no token for " +
                       printable(std::string(1, ch)) + " in " + printable(doc.substr(0, 200)) +
                       (doc.size() > 200 ? "..." : "") +
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
  nlohmann::json v;
  std::string err;
  if (!parse_json(text, v, &err))
    throw UsageError(flag + " '" + path + "': not valid JSON (" + err +
                     "); give a JSON Schema object (e.g. {\"type\":\"object\",...})");
  return schema_of(v);
}

// ============================================================================ fuzz entry

namespace {

// A vocabulary of given pieces (token 0 is the end of sequence, never in the trie).
class PieceTokenizer final : public Tokenizer {
 public:
  explicit PieceTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  std::vector<int> encode_text(std::string_view) const override { return {}; }
  std::string piece(int id) const override { return pieces_[static_cast<size_t>(id)]; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos() const override { return -1; }
  int eos() const override { return 0; }
  std::string kind() const override { return "fuzz"; }

 private:
  std::vector<std::string> pieces_;
};

}  // namespace

int json_schema_fuzz_one_input(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul);
  const std::string_view doc = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1, 1024);
  nlohmann::json v;
  if (!parse_json(schema_text, v)) return 0;
  std::unique_ptr<JsonSchema> js;
  try {
    js = std::make_unique<JsonSchema>(schema_of(v), "fuzz");
  } catch (const UsageError&) {
    return 0;
  }
  std::vector<std::string> pieces = {""};
  for (int c = 1; c < 256; ++c) pieces.emplace_back(1, static_cast<char>(c));
  pieces.emplace_back(1, '\0');
  for (const char* p : {"{\"", "\":", "\",\"", "\"}", "[\"", "\"]", "true", "false", "null", "\\u",
                        "\\uD83D\\uDE00", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xED\xA0\x80", "\xC0\x80",
                        "12", "-0.5e+3", "1e99", " \"", "\n}", "],"})
    pieces.emplace_back(p);
  for (size_t i = 0; i + 1 < doc.size() && i < 256; i += 3) pieces.emplace_back(doc.substr(i, 2 + i % 7));
  PieceTokenizer tok(pieces);
  TokenTrie trie(tok);
  std::vector<char> allowed;
  JsonState s = js->start();
  std::string kept;
  for (size_t i = 0; i <= doc.size(); ++i) {
    if (i < 16 || i % 64 == 0) {  // the mask agrees with feeding each token on its own
      const int n = trie.allowed(*js, s, allowed);
      int count = 0;
      for (int id = 1; id < tok.vocab_size(); ++id) {
        JsonState t = s;
        const bool ok = js->feed(t, pieces[static_cast<size_t>(id)]);
        if (ok != static_cast<bool>(allowed[static_cast<size_t>(id)])) __builtin_trap();
        count += ok;
      }
      if (count != n || allowed[0]) __builtin_trap();
    }
    if (i == doc.size()) break;
    if (js->feed(s, static_cast<unsigned char>(doc[i]))) kept.push_back(doc[i]);
  }
  // what the automaton takes as a complete document conforms
  if (js->complete(s) && !js->validate(kept)) __builtin_trap();
  return 0;
}

}  // namespace repro
