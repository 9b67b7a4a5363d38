#include <doctest/doctest.h>

#include <string>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"

using namespace repro;
using nlohmann::json;

namespace {
std::string nested(int depth, char open = '[', char close = ']', const std::string& core = "") {
  return std::string(depth, open) + core + std::string(depth, close);
}
}  // namespace

TEST_CASE("outside JSON: nesting is bounded before anything walks the value") {
  json v;
  std::string err;
  CHECK(parse_json(nested(kMaxJsonDepth), v, &err));
  CHECK(json_depth(v) == kMaxJsonDepth);
  CHECK_FALSE(parse_json(nested(kMaxJsonDepth + 1), v, &err));
  CHECK(err == "nested deeper than 256 levels of arrays and objects, the limit for JSON input");
  CHECK(v.is_null());
  // 400,000 deep, the size of a hostile request: refused, no recursion anywhere.
  CHECK_FALSE(parse_json(nested(400000), v, &err));
  CHECK(err.find("nested deeper than 256") != std::string::npos);
  // Objects count like arrays, and a deep value inside a normal one is still found.
  std::string objs;
  for (int i = 0; i < 300; ++i) objs += "{\"a\":";
  objs += "1" + std::string(300, '}');
  CHECK_FALSE(parse_json(objs, v, &err));
  CHECK_FALSE(parse_json("{\"stop\":" + nested(100000) + "}", v, &err));
  CHECK(parse_json(std::string("{\"a\":") + nested(10) + "}", v, &err));
  CHECK(json_depth(v) == 11);
  // A lower limit for one reader.
  CHECK_FALSE(parse_json(nested(5), v, &err, {4, false}));
  CHECK(err.find("deeper than 4 levels") != std::string::npos);
}

TEST_CASE("outside JSON: malformed input, numbers beyond double and trailing bytes are errors") {
  json v;
  std::string err;
  CHECK_FALSE(parse_json("", v, &err));
  CHECK(err.find("parse error") != std::string::npos);
  CHECK_FALSE(parse_json("{\"a\":1} x", v, &err));
  CHECK_FALSE(parse_json("[1e309]", v, &err));
  CHECK(err.find("number overflow") != std::string::npos);
  CHECK_FALSE(parse_json(nested(3, '[', ']', "1,"), v, &err));
  CHECK(parse_json("  {\"a\": [1, 2.5, \"x\", null, true]}\n", v, &err));
  CHECK(v["a"][1] == 2.5);
  CHECK_THROWS_WITH_AS(parse_json_or_throw(nested(1000), "--json-schema file s.json"),
                       "--json-schema file s.json: nested deeper than 256 levels of arrays and objects, the "
                       "limit for JSON input",
                       UsageError);
  CHECK(parse_json_or_throw("[1]", "x") == json::array({1}));
}

TEST_CASE("outside JSON: a repeated key is refused where the reader asks for unique keys") {
  json v;
  std::string err;
  const std::string forged = R"({"verdict":"FORGED","x":{"k":1},"verdict":"REPRODUCIBLE"})";
  CHECK(parse_json(forged, v, &err));  // nlohmann's rule (the last wins) for ordinary input
  CHECK(v["verdict"] == "REPRODUCIBLE");
  CHECK_FALSE(parse_json(forged, v, &err, {kMaxJsonDepth, true}));
  CHECK(err == "the key \"verdict\" appears twice in one object");
  // The same key in two different objects is fine; a nested object's repeat is found.
  CHECK(parse_json(R"({"a":{"k":1},"b":{"k":2},"k":[{"k":3}]})", v, &err, {kMaxJsonDepth, true}));
  CHECK_FALSE(parse_json(R"({"a":[{"k":1,"k":2}]})", v, &err, {kMaxJsonDepth, true}));
  CHECK(err == "the key \"k\" appears twice in one object");
  CHECK_FALSE(parse_json("{\"\\u001b[31m\":1,\"\\u001b[31m\":2}", v, &err, {kMaxJsonDepth, true}));
  CHECK(err == "the key \"\\x1b[31m\" appears twice in one object");
}
