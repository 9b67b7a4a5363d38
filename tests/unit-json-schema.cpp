// Structured output: the JSON Schema automaton (prefixes, completion, validation, errors that name
// the keyword), the vocabulary check, and constrained decoding on the real engine (embedded
// stories260K): every output conforms, in both modes, greedy and sampled, and batch-invariant mode
// keeps the same bits in any batch. The schema bounds its strings: a story model left to an
// unbounded string writes a story into it and runs out of tokens, which the schema-valid rate shows.
// ctest-labels: unit
#include <doctest/doctest.h>
#include <fmt/core.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <type_traits>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/common/util.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/synth.hpp"
#include "repro/serve/api.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

using namespace repro;
using nlohmann::json;

namespace {
const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
    "pet": {"type": ["string", "null"], "maxLength": 8}
  },
  "required": ["name", "age", "mood"],
  "additionalProperties": false
})");

// Feeds text byte by byte; the number of bytes accepted.
size_t accepted(const JsonSchema& js, const std::string& text, JsonState* out = nullptr) {
  JsonState s = js.start();
  size_t i = 0;
  for (; i < text.size(); ++i)
    if (!js.feed(s, static_cast<unsigned char>(text[i]))) break;
  if (out) *out = s;
  return i;
}
bool complete_doc(const JsonSchema& js, const std::string& text) {
  JsonState s;
  return accepted(js, text, &s) == text.size() && js.complete(s);
}
}  // namespace

TEST_CASE("json schema automaton: conforming documents pass byte by byte, others stop at the first bad byte") {
  JsonSchema js(kPerson, "test");
  for (const char* ok : {R"({"name":"Lily","age":3,"mood":"happy"})",
                         R"({ "mood": "sad", "age": -12, "name": "Tom", "tags": ["a","b"], "pet": null })",
                         R"({"name":"x\"y\u00e9","age":0,"mood":"sad","pet":"cat"})"}) {
    CAPTURE(ok);
    CHECK(complete_doc(js, ok));
    CHECK(js.validate(ok));
  }
  // the first byte that cannot continue a conforming document
  CHECK(accepted(js, R"({"nam")") == 5);
  CHECK(accepted(js, R"({"colour":1})") == 2);               // undeclared property
  CHECK(accepted(js, R"({"name":"a","name")") == 13);        // a property twice
  CHECK(accepted(js, R"({"name":"a"})") == 11);              // required age and mood missing
  CHECK(accepted(js, R"({"age":1.5)") == 8);                 // integer
  CHECK(accepted(js, R"({"age":01)") == 8);                  // no leading zeros
  CHECK(accepted(js, R"({"mood":"angry")") == 9);            // enum
  CHECK(accepted(js, R"({"name":"abcdefghijklm")") == 21);   // maxLength 12
  CHECK(accepted(js, R"({"tags":["a","b","c"])") == 16);     // maxItems 2
  CHECK(accepted(js, "{  \"name\"") == 2);                   // at most one whitespace byte in a row
  CHECK(accepted(js, "{\"name\":\"a\nb\"") == 10);           // control bytes only escaped in strings
  CHECK_FALSE(complete_doc(js, R"({"name":"Lily","age":3)"));
  // after a complete document nothing more
  CHECK(accepted(js, R"({"name":"a","age":1,"mood":"sad"} )") == 33);
  // a top-level number is complete once it has digits, and ends where another byte begins
  JsonSchema num(json::parse(R"({"type":"number"})"), "test");
  CHECK(complete_doc(num, "-12.5e+3"));
  CHECK_FALSE(complete_doc(num, "-12."));
  CHECK_FALSE(complete_doc(num, "-"));
  // validation is independent of the automaton
  CHECK_FALSE(js.validate(R"({"name":"a","age":1})"));
  CHECK_FALSE(js.validate(R"({"name":"a","age":1,"mood":"sad","x":1})"));
  CHECK_FALSE(js.validate("{\"name\":\"a\",\"age\":1,\"mood\":\"sad\""));
}

TEST_CASE("json schema: json_object, free keys, response_format wrappers") {
  JsonSchema obj(schema_of(json::parse(R"({"type":"json_object"})")), "test");
  CHECK(complete_doc(obj, R"({"a":[1,true,null,{"b":"c"}],"d":-0.5})"));
  CHECK(accepted(obj, "[1]") == 0);
  json wrapped = json::parse(R"({"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"integer"}}})");
  CHECK(schema_of(wrapped) == json::parse(R"({"type":"integer"})"));
  JsonSchema empty(json::parse(R"({"type":"object","additionalProperties":false})"), "test");
  CHECK(complete_doc(empty, "{}"));
  CHECK(accepted(empty, R"({"a")") == 1);
}

TEST_CASE("json schema: unsupported keywords and contradictions are errors naming where") {
  auto err = [](const char* schema) {
    try {
      JsonSchema js(json::parse(schema), "--json-schema 's.json'");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err(R"({"type":"string","pattern":"^a"})").find("--json-schema 's.json': keyword 'pattern' is not supported at /pattern") == 0);
  CHECK(err(R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})").find("keyword '$ref' is not supported at /properties/a/$ref") != std::string::npos);
  CHECK(err(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("required property 'b' is not in 'properties'") != std::string::npos);
  CHECK(err(R"({"anyOf":[{"type":"string"},{"enum":["x"]}]})").find("can both begin with '\"'") != std::string::npos);
  CHECK(err(R"({"type":"date"})").find("type 'date' is not supported") != std::string::npos);
  CHECK(err(R"({"type":"string","minLength":3,"maxLength":2})").find("maxLength is below minLength") != std::string::npos);
  CHECK(err(R"({"type":"object","properties":{"a":{}},"additionalProperties":true})").find("additionalProperties") != std::string::npos);
  CHECK(err(R"({"type":"string","description":"ignored","title":"t"})").empty());
}

TEST_CASE("json schema: a vocabulary that cannot spell the schema is a clear error") {
  TokenizerData d;
  d.tokens = {"<unk>", "<s>", "</s>", "{", "}", "\"", "a", ":"};
  d.scores.assign(d.tokens.size(), 0.0f);
  d.types = {2, 3, 3, 1, 1, 1, 1, 1};  // unknown, control, control, normal...
  d.bos_id = 1;
  d.eos_id = 2;
  d.unk_id = 0;
  d.add_space_prefix = false;
  auto tok = make_tokenizer(d);
  JsonConstraint fine(json::parse(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})"), "s", *tok);
  CHECK(fine.trie->vocab_size() == 8);
  // One trie per tokenizer: a second constraint (a second request of a server) reuses it, another
  // tokenizer with the same vocabulary gets its own.
  JsonConstraint again(json::parse(R"({"type":"object"})"), "s2", *tok);
  CHECK(again.trie == fine.trie);
  auto other = make_tokenizer(d);
  JsonConstraint elsewhere(json::parse(R"({"type":"object"})"), "s3", *other);
  CHECK(elsewhere.trie != fine.trie);
  CHECK(other->instance() != tok->instance());
  try {
    JsonConstraint bad(json::parse(R"({"type":"integer"})"), "--json-schema 'n.json'", *tok);
    FAIL("expected an error");
  } catch (const UsageError& e) {
    INFO(std::string(e.what()));
    CHECK(std::string(e.what()) ==
          "--json-schema 'n.json': the model's vocabulary cannot spell a document of this schema (no token for 0 in 0); "
          "use a model whose vocabulary has byte tokens, or another schema");
  }
  try {
    JsonConstraint bad(json::parse(R"({"type":"object","properties":{"b":{"type":"string"}},"required":["b"]})"), "s", *tok);
    FAIL("expected an error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("cannot spell a document of this schema (no token for b") != std::string::npos);
  }
}

TEST_CASE("constrained decoding on stories260K: every output conforms, both modes; batch-invariant keeps its bits") {
  auto dir = test::scratch_dir("json-schema-engine");
  setenv("REPRO_AUDIT_CACHE", (dir / "cache").c_str(), 1);
  auto model = load_model(default_model_path());
  auto constraint = std::make_shared<JsonConstraint>(kPerson, "test", *model->tokenizer);
  for (Mode mode : {Mode::BatchInvariant, Mode::Default}) {
    Engine engine(*model, {mode, 1});
    int n = 0;
    for (const char* prompt : {"Once upon a time", "Lily and Tom", "The dog"})
      for (float temperature : {0.0f, 0.9f}) {
        GenRequest req;
        req.prompt = model->tokenizer->encode(prompt, true);
        req.params.max_tokens = 300;
        req.params.temperature = temperature;
        req.params.seed = 7;
        req.params.json_schema = constraint;
        GenResult r = run_in_batch(engine, req, BatchContext{1, 0, 1}).probe;
        CAPTURE(prompt);
        CAPTURE(r.text);
        CHECK(r.finish_reason == "stop");
        CHECK(constraint->schema.validate(r.text));
        ++n;
        if (mode == Mode::BatchInvariant) {  // the same bits inside a batch of 8 at row 5
          GenResult b = run_in_batch(engine, req, BatchContext{8, 5, 3}).probe;
          CHECK(b.tokens == r.tokens);
          REQUIRE(b.logprobs.size() == r.logprobs.size());
          CHECK(std::memcmp(b.logprobs.data(), r.logprobs.data(), sizeof(float) * r.logprobs.size()) == 0);
          CHECK(b.logits_sha256 == r.logits_sha256);
        }
      }
    CHECK(n == 6);
  }
}

// ============================================================================ hostile schemas

namespace {
std::string schema_error(const json& schema) {
  try {
    JsonSchema js(schema, "--json-schema 'h.json'");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TEST_CASE("json schema: a schema whose shortest document is huge is refused before anything is built, naming the limit") {
  // 89 bytes asking for a document of 10^12 characters: refused at compile time, in no time
  const json bomb = json::parse(R"({"type":"array","items":{"type":"string","minLength":1000000},"minItems":1000000})");
  auto t0 = std::chrono::steady_clock::now();
  CHECK(schema_error(bomb) ==
        "--json-schema 'h.json': the shortest document this schema admits is longer than 65536 bytes at /items "
        "(minItems, minLength and required properties multiply); lower them");
  auto tok = make_tokenizer(synth_tokenizer(synth_min_vocab()));
  CHECK_THROWS_WITH_AS(JsonConstraint(bomb, "'response_format'", *tok),
                       doctest::Contains("'response_format': the shortest document this schema admits is longer than 65536"),
                       UsageError);
  // nested products: 300 x 300 one-character strings
  CHECK(schema_error(json::parse(R"({"type":"array","minItems":300,"items":{"type":"array","minItems":300,
        "items":{"type":"string","minLength":1}}})"))
            .find("longer than 65536 bytes at / (") != std::string::npos);
  // required properties multiply too
  CHECK(schema_error(json::parse(R"({"type":"array","minItems":100000,"items":{"type":"object",
        "properties":{"a":{"type":"integer"}},"required":["a"]}})"))
            .find("longer than 65536 bytes at /") != std::string::npos);
  // each bound on its own stays 0..1000000, even where it multiplies to nothing
  CHECK(schema_error(json::parse(R"({"type":"array","minItems":2000000})")).find("'minItems' must be an integer from 0 to 1000000") !=
        std::string::npos);
  CHECK(schema_error(json::parse(R"({"type":"array","items":{"type":"string","minLength":1000000},"maxItems":1000000})")) ==
        "--json-schema 'h.json': the shortest document this schema admits is longer than 65536 bytes at /items "
        "(minItems, minLength and required properties multiply); lower them");
  CHECK(seconds_since(t0) < 2.0);
  // just under the limit compiles, and the constraint checks it can be spelt
  const json fine = json::parse(R"({"type":"array","minItems":1000,"items":{"type":"string","minLength":30}})");
  CHECK(schema_error(fine).empty());
  JsonConstraint ok(fine, "s", *tok);
  CHECK(ok.schema.validate("[" + [] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += (i ? ",\"" : "\"") + std::string(30, 'x') + "\"";
    return s;
  }() + "]"));
}

TEST_CASE("json schema: nesting, subschema count and literal size are bounded when compiling, naming the limit") {
  json deep = {{"type", "string"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  CHECK(schema_error(deep).find("the schema nests deeper than 32 levels at /items/items") != std::string::npos);
  json deep_any = {{"type", "string"}};
  for (int i = 0; i < 40; ++i) deep_any = {{"anyOf", json::array({deep_any})}};
  CHECK(schema_error(deep_any).find("the schema nests deeper than 32 levels at /anyOf/0/anyOf/0") != std::string::npos);
  json wide = {{"anyOf", json::array()}};
  for (int i = 0; i < 20000; ++i) wide["anyOf"].push_back({{"type", "string"}});
  CHECK(schema_error(wide) == "--json-schema 'h.json': the schema has more than 10000 subschemas at /anyOf/10000; simplify it");
  // a 1 MB enum of 100,000 strings, a 300 KB const: over the 262144 bytes all literals may take
  json big_enum = json::array();
  for (int i = 0; i < 100000; ++i) big_enum.push_back(fmt::format("value-{:04d}", i));
  CHECK(schema_error({{"enum", big_enum}}) ==
        "--json-schema 'h.json': enum and const values take more than 262144 bytes of JSON in all at /enum; give fewer "
        "or shorter values");
  CHECK(schema_error({{"const", std::string(300000, 'x')}}).find("more than 262144 bytes of JSON in all at /const") !=
        std::string::npos);
  json two = {{"type", "object"},
              {"properties", {{"a", {{"enum", json::array({"a", std::string(140000, 'a')})}}},
                              {"b", {{"enum", json::array({"b", std::string(140000, 'b')})}}}}}};
  CHECK(schema_error(two).find("more than 262144 bytes of JSON in all at /properties/b/enum") != std::string::npos);
}

TEST_CASE("json schema: per-byte cost does not grow with the literal's length or the enum's size") {
  // The automaton's state holds no copy of the literal read so far (a position in the schema's
  // precomputed trie), so copying it per byte and per vocabulary branch is cheap.
  CHECK(std::is_trivially_copyable_v<JsonState::Frame>);
  // A 100,000-character enum value costs about what a 100,000-character string does, not its square.
  const std::string long_value(100000, 'q');
  JsonSchema lit({{"enum", json::array({"x", long_value})}}, "t");
  JsonSchema str({{"type", "string"}}, "t");
  const std::string doc = json(long_value).dump();
  auto best_of = [](int n, const std::function<void()>& f) {
    double best = 1e9;
    for (int i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, seconds_since(t0));
    }
    return best;
  };
  const double t_str = best_of(3, [&] { CHECK(complete_doc(str, doc)); });
  const double t_lit = best_of(3, [&] { CHECK(complete_doc(lit, doc)); });
  MESSAGE("100,000-byte string ", t_str * 1e3, " ms, enum value ", t_lit * 1e3, " ms");
  CHECK(t_lit < 10 * t_str + 0.05);
  // The mask of a 10,000-value enum costs about what a 2-value enum's does (before: every byte of
  // every branch compared against every value, which stalled every sequence of the batch).
  auto model = load_model(default_model_path());
  TokenTrie trie(*model->tokenizer);
  json values = json::array();
  for (int i = 0; i < 10000; ++i) values.push_back(fmt::format("value-{:05d}", i));
  JsonSchema big({{"enum", values}}, "t");
  JsonSchema small({{"enum", json::array({"value-00000", "value-00001"})}}, "t");
  std::vector<char> allowed;
  auto mask_cost = [&](const JsonSchema& js) {
    return best_of(5, [&] {
      for (const char* prefix : {"", "\"", "\"value-0000"}) {
        JsonState s = js.start();
        REQUIRE(js.feed(s, std::string(prefix)));
        CHECK(trie.allowed(js, s, allowed) > 0);
      }
    });
  };
  const double t_small = mask_cost(small), t_big = mask_cost(big);
  MESSAGE("masks: 2-value enum ", t_small * 1e3, " ms, 10,000-value enum ", t_big * 1e3, " ms");
  CHECK(t_big < 10 * t_small + 0.005);
}

TEST_CASE("json schema: strings accept only well-formed UTF-8 and well-formed \\u escapes") {
  JsonSchema js({{"type", "string"}}, "t");
  for (const char* ok : {"\"\xC3\xA9\"", "\"\xE2\x82\xAC\"", "\"\xF0\x9D\x84\x9E\"", "\"\xF4\x8F\xBF\xBF\"",
                         "\"\xED\x9F\xBF\"", "\"\xEF\xBF\xBF\"", "\"\x7F\"", "\"\\uD83D\\uDE00\"", "\"\\u00e9\\u0000\""}) {
    CAPTURE(ok);
    CHECK(complete_doc(js, ok));
    CHECK(js.validate(ok));
  }
  // (text, bytes accepted): the first byte that cannot continue well-formed UTF-8 is refused
  const std::pair<const char*, size_t> bad[] = {
      {"\"\xC0\x80\"", 1},          // overlong lead
      {"\"\xC1\xBF\"", 1},          // overlong lead
      {"\"\xE0\x80\x80\"", 2},      // overlong three-byte form
      {"\"\xE0\x9F\xBF\"", 2},      // overlong three-byte form
      {"\"\xED\xA0\x80\"", 2},      // a surrogate, U+D800
      {"\"\xED\xBF\xBF\"", 2},      // a surrogate, U+DFFF
      {"\"\xF0\x80\x80\x80\"", 2},  // overlong four-byte form
      {"\"\xF4\x90\x80\x80\"", 2},  // over U+10FFFF
      {"\"\xF5\x80\x80\x80\"", 1},  // no such lead
      {"\"\xFF\"", 1},
      {"\"\x80\"", 1},              // a continuation byte with no lead
      {"\"\xC3\"", 2},              // truncated at the string's end
      {"\"\xE2\x82\"", 3},
      {"\"\xF0\x9D\x84\"", 4},
      {"\"\xC3" "a\"", 2},          // truncated by an ASCII byte
      {"\"\xE2\\n\"", 2},           // truncated by an escape
      {"\"\\uDC00\"", 4},           // a lone low surrogate
      {"\"\\uD83D\"", 7},           // a high surrogate not followed by a low one
      {"\"\\uD83Dx\"", 7},
      {"\"\\uD83D\\n\"", 8},
      {"\"\\uD83D\\uD83D\"", 10},
      {"\"\\uD83D\\u0041\"", 9},
  };
  for (const auto& [text, n] : bad) {
    CAPTURE(printable(text));
    CHECK(accepted(js, text) == n);
    CHECK_FALSE(js.validate(text));
  }
  // a surrogate pair is one character; keys without declared names are checked too
  JsonSchema one({{"type", "string"}, {"minLength", 1}, {"maxLength", 1}}, "t");
  CHECK(complete_doc(one, "\"\\uD83D\\uDE00\""));
  CHECK(one.validate("\"\\uD83D\\uDE00\""));
  CHECK(complete_doc(one, "\"\xF0\x9D\x84\x9E\""));
  CHECK(accepted(one, "\"ab\"") == 2);
  JsonSchema obj(schema_of({{"type", "json_object"}}), "t");
  CHECK(accepted(obj, "{\"\xED\xA0\x80\":1}") == 3);
  // number exponents stay within double (1e999 is not JSON a reader accepts)
  JsonSchema num({{"type", "number"}}, "t");
  CHECK(complete_doc(num, "-999999999999999.999999999999999e99"));
  CHECK(num.validate("-999999999999999.999999999999999e99"));
  CHECK(accepted(num, "1e999") == 4);
}

TEST_CASE("constrained decoding on stories260K at T>0: every output that stops is schema-valid (byte tokens included)") {
  auto dir = test::scratch_dir("json-schema-utf8");
  setenv("REPRO_AUDIT_CACHE", (dir / "cache").c_str(), 1);
  auto model = load_model(default_model_path());
  auto constraint = std::make_shared<JsonConstraint>(json{{"type", "string"}, {"maxLength", 12}}, "test", *model->tokenizer);
  Engine engine(*model, {Mode::Default, 1});
  int stopped = 0, invalid = 0, with_bytes = 0;
  for (int seed = 0; seed < 150; ++seed) {
    GenRequest req;
    req.prompt = model->tokenizer->encode("Once upon a time", true);
    req.params.max_tokens = 48;
    req.params.temperature = 1.5f;
    req.params.seed = static_cast<uint64_t>(seed);
    req.params.json_schema = constraint;
    GenResult r = run_in_batch(engine, req, BatchContext{1, 0, 1}).probe;
    if (r.finish_reason != "stop") continue;
    ++stopped;
    for (unsigned char c : r.text) with_bytes += c >= 0x80;
    if (!constraint->schema.validate(r.text)) {
      ++invalid;
      CAPTURE(printable(r.text));
      CHECK(constraint->schema.validate(r.text));
    }
  }
  MESSAGE(stopped, " of 150 stopped, ", invalid, " invalid, ", with_bytes, " non-ASCII bytes");
  CHECK(stopped > 50);
  CHECK(invalid == 0);
}

TEST_CASE("json schema: a GGUF with a 100,000-byte token masks without deep recursion") {
  // A synthetic model whose last token is 100,000 'a' bytes: inside an unbounded string every byte of
  // it continues the document, so the mask walks the whole token.
  SynthOptions o;
  o.dim = 16, o.hidden_dim = 24, o.n_layers = 1, o.n_heads = 4, o.n_kv_heads = 2, o.vocab_size = 340;
  const std::string bytes = synth_model(o);
  gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "synth.gguf");
  std::vector<std::string> tokens = synth_tokenizer(o.vocab_size).tokens;
  const std::string long_token(100000, 'a');
  tokens.back() = long_token;
  gguf::Writer w;
  for (const auto& [k, v] : f.kv)
    w.add(k, k == "tokenizer.ggml.tokens" ? gguf::Value::string_array(tokens) : v);
  for (const auto& t : f.tensors)
    w.add_tensor(t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), t.n_bytes));
  auto dir = test::scratch_dir("json-schema-long-token");
  const std::string path = (dir / "long-token.gguf").string();
  write_file_atomic(path, w.serialize());
  auto model = load_model(path);
  const int id = o.vocab_size - 1;
  REQUIRE(model->tokenizer->piece(id) == long_token);
  JsonConstraint c(json{{"type", "string"}}, "t", *model->tokenizer);
  JsonState s = c.schema.start();
  REQUIRE(c.schema.feed(s, '"'));
  std::vector<char> allowed;
  CHECK(c.trie->allowed(c.schema, s, allowed) > 1);
  CHECK(allowed[static_cast<size_t>(id)]);
  // a string of at most 1000 characters prunes it at the 1001st byte
  JsonConstraint short_strings(json{{"type", "string"}, {"maxLength", 1000}}, "t", *model->tokenizer);
  s = short_strings.schema.start();
  REQUIRE(short_strings.schema.feed(s, '"'));
  CHECK(short_strings.trie->allowed(short_strings.schema, s, allowed) > 1);
  CHECK_FALSE(allowed[static_cast<size_t>(id)]);
}

TEST_CASE("hostile schemas: serve answers 400 and generate exits 2, naming the limit") {
  const json bomb = json::parse(R"({"type":"array","items":{"type":"string","minLength":1000000},"minItems":1000000})");
  auto model = load_model(default_model_path());
  serve::ApiContext cx;
  cx.model = model.get();
  cx.name = "m";
  json body = {{"prompt", "Once"}, {"max_tokens", 8}};
  body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "b"}, {"schema", bomb}}}};
  try {
    serve::parse_request(cx, body, false);
    FAIL("expected a 400");
  } catch (const serve::ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.param == "response_format");
    CHECK(std::string(e.what()) ==
          "'response_format': the shortest document this schema admits is longer than 65536 bytes at /items "
          "(minItems, minLength and required properties multiply); lower them");
  }
  auto dir = test::scratch_dir("json-schema-hostile-cli");
  const std::string path = (dir / "bomb.json").string();
  write_file_atomic(path, bomb.dump());
  auto r = test::run_cli("generate --max-tokens 4 --json-schema '" + path + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --json-schema '" + path + "': the shortest document this schema admits is longer than 65536") !=
        std::string::npos);
}

TEST_CASE("json schema: every file of fuzz/corpus/json_schema replays through the fuzz entry without a trap") {
  const auto files = test::corpus_files("json_schema");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(json_schema_fuzz_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  MESSAGE("replayed ", files.size(), " corpus files");
  CHECK(files.size() >= 10);
}
