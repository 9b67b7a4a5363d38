// Structured output: the JSON Schema automaton (prefixes, completion, validation, errors that name
// the keyword), the vocabulary check, and constrained decoding on the real engine (embedded
// stories260K): every output conforms, in both modes, greedy and sampled, and batch-invariant mode
// keeps the same bits in any batch. The schema bounds its strings: a story model left to an
// unbounded string writes a story into it and runs out of tokens, which the schema-valid rate shows.
// ctest-labels: unit
#include <doctest/doctest.h>

#include <cstring>

#include "repro/audit/batch_context.hpp"
#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"
#include "repro/engine/json_schema.hpp"
#include "repro/model/default_model.hpp"
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
  CHECK(fine.trie.vocab_size() == 8);
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
