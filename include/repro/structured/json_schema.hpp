// Structured output: constrained decoding to a JSON Schema.
//
// A schema (the subset that structured-output APIs support) compiles to a byte-level pushdown
// automaton. At every step the engine allows only the tokens whose bytes keep the output a prefix of
// a JSON document that conforms to the schema: a DFS over a trie of the vocabulary's token bytes,
// feeding the automaton byte by byte and pruning at the first byte that cannot continue. Once the
// document is complete only the end-of-sequence token is allowed. The mask is row-local (it depends
// on the sequence's own output only), so batch invariance is untouched.
//
// Supported: "type" object / array / string / number / integer / boolean / null (or a list of those),
// "properties", "required", "additionalProperties": false (the default here: only declared
// properties, each at most once, in any order), "items", "minItems", "maxItems", "enum", "const",
// "maxLength" (strings), "anyOf" whose alternatives start with different characters (e.g. a string
// or null). Annotations (title, description, $schema, default, examples, $id, $comment) are ignored;
// any other keyword ("pattern", "$ref", "oneOf", "allOf", "format", "minimum", ...) is an error that
// names it, never silently dropped. Generated JSON has no whitespace except inside strings, at most
// one space or newline where JSON allows whitespace, numbers of at most 15 digits in the integer and
// fraction parts and 2 in the exponent (so every number is a finite double), and strings of
// well-formed UTF-8 only (no overlong forms, surrogates or code points over U+10FFFF; a \u escape
// of a high surrogate must be followed by one of a low surrogate).
//
// Cost: compiling is linear in the schema; enum and const values become one byte trie per subschema,
// so the automaton's state holds positions, never copies of what was read, and a byte costs the same
// whatever the values' number or length. A mask walks the vocabulary trie once (iteratively: a token
// may be very long), a constant amount of work per trie node it visits. The limits below keep
// compiling and the check that the vocabulary can spell the schema bounded whatever a request sends
// (docs/RELIABILITY.md, "Structured output (JSON schema)").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace repro {

// Limits of a schema, checked while compiling, before anything is built (fixed; each is refused with
// a UsageError naming it, which `serve` answers with 400 and the CLI with exit 2).
inline constexpr int kSchemaMaxDepth = 32;         // nesting of subschemas, and of a generated document
inline constexpr int kSchemaMaxNodes = 10000;      // subschemas in all
inline constexpr int kSchemaMaxProperties = 64;    // declared properties of one object
inline constexpr int kSchemaMaxCount = 1000000;    // minItems, maxItems, minLength, maxLength
inline constexpr size_t kSchemaMaxLiteralBytes = 262144;     // enum and const values in all, as compact JSON
inline constexpr size_t kSchemaMaxMinimalDocument = 65536;   // bytes of the shortest conforming document
                                                             // (of the schema and of each subschema)

class Tokenizer;

struct SchemaNode;  // compiled schema (opaque)

// The automaton's state for one sequence: a stack of frames, each a few plain fields (no copy of the
// bytes read), so a copy costs the stack's depth, at most kSchemaMaxDepth frames.
struct JsonState {
  struct Frame {
    int kind = 0;            // see json_schema.cpp
    const SchemaNode* node = nullptr;
    int phase = 0;
    int count = 0;           // array items / string length / number digits
    uint64_t used = 0;       // object: properties present (bit per property)
    int key = -1;            // object: the property whose value is being read
    int at = 0;              // object: position in the declared names' trie; literal: in the values' trie
    uint32_t code = 0;       // string: the hex digits of a \u escape so far
    uint8_t need = 0;        // string: UTF-8 continuation bytes still to come
    uint8_t lo = 0x80, hi = 0xBF;  // string: the range the next continuation byte must be in
    bool low_next = false;   // string: a high surrogate escape was read, a low one must follow
  };
  std::vector<Frame> stack;
  int spaces = 0;            // consecutive whitespace bytes
  bool done = false;         // a complete document was read
};

class JsonSchema {
 public:
  // Compiles `schema`; `where` names its source in errors (e.g. "--json-schema 'x.json'"). Throws
  // UsageError naming the keyword and its JSON pointer for anything unsupported.
  JsonSchema(const nlohmann::json& schema, std::string where);
  ~JsonSchema();
  JsonSchema(const JsonSchema&) = delete;
  JsonSchema& operator=(const JsonSchema&) = delete;

  JsonState start() const;
  // Feeds one byte; false (state unchanged) when it cannot continue a conforming document.
  bool feed(JsonState& s, unsigned char c) const;
  bool feed(JsonState& s, const std::string& bytes) const;  // all or nothing
  // As feed(s, c), but on false `s` is left in an unspecified state: for callers that feed a scratch
  // copy anyway (the mask), saving a copy per byte.
  bool advance(JsonState& s, unsigned char c) const;
  // The document read so far is complete (a number at the top level is complete once it has digits).
  bool complete(const JsonState& s) const;

  // Post-hoc check of a whole text: parses as JSON (repro::parse_json: nesting bounded) and conforms
  // to the schema (independent of the automaton: used for the schema-valid rate).
  bool validate(const std::string& text) const;

  const nlohmann::json& schema() const { return schema_; }
  const SchemaNode* root() const { return root_; }
  const std::string& where() const { return where_; }

 private:
  nlohmann::json schema_;
  std::string where_;
  std::vector<std::unique_ptr<SchemaNode>> nodes_;
  const SchemaNode* root_ = nullptr;
  friend struct SchemaCompiler;
};

// The vocabulary as a trie of token bytes, for masking. Control and empty tokens are never allowed.
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tok);
  // The trie of `tok`, built once and shared: every request of a server that decodes under a schema
  // reads the same trie (building one walks the whole vocabulary). The last few tokenizers' tries
  // are kept.
  static std::shared_ptr<const TokenTrie> of(const Tokenizer& tok);
  // Sets allowed[id] for every token whose bytes `schema` accepts from `s`; allowed has vocab entries
  // (cleared first). End of sequence is the caller's business (JsonSchema::complete).
  // Returns the number of tokens allowed.
  int allowed(const JsonSchema& schema, const JsonState& s, std::vector<char>& allowed) const;
  int vocab_size() const { return vocab_; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;  // byte -> child
    std::vector<int> ids;                              // tokens ending here
  };
  std::vector<Node> nodes_;
  int vocab_ = 0;
};

// A compiled schema with its vocabulary trie, shared by every sequence that decodes under it (the
// trie by every constraint on the same tokenizer).
struct JsonConstraint {
  JsonConstraint(const nlohmann::json& schema, std::string where, const Tokenizer& tok);
  JsonSchema schema;
  std::shared_ptr<const TokenTrie> trie;
};

// Reads and compiles a schema file (`flag` names the flag in errors). An OpenAI `response_format`
// object ({"type":"json_schema","json_schema":{"schema":...}}) or its inner json_schema object is
// accepted too; {"type":"json_object"} means any JSON object.
nlohmann::json read_json_schema_file(const std::string& path, const std::string& flag);
// The schema inside an OpenAI-style response_format value, or the value itself when it is a schema.
nlohmann::json schema_of(const nlohmann::json& v);

// The fuzz entry (fuzz/fuzz_json_schema.cpp; tests/unit-json-schema.cpp replays
// fuzz/corpus/json_schema/ through it). Input: a schema's JSON text, a NUL byte, then document bytes.
// The schema is compiled; the bytes are fed one by one (a byte the automaton refuses is skipped);
// at the first 16 positions and every 64th after, the mask of a small vocabulary (every byte, JSON
// fragments, pieces of the input) is checked token by token against feed. When the bytes kept make
// a complete document, it must validate. Any disagreement traps. Returns 0.
int json_schema_fuzz_one_input(const uint8_t* data, size_t size);

}  // namespace repro
