// ctest-labels: unit
// run --routed-experts (docs/REMOTE.md "Routed experts"): the readers of the shapes SGLang and vLLM
// return (SGLang's sglext.routed_experts, base64 of flat int32 rows, one per position fed; vLLM's
// nested lists per choice beside prompt_routed_experts; vLLM's base64 .npy), each aligned to one
// route per generated token; the request field per provider; and end to end, `run --provider sglang
// --routed-experts` against `repro-audit serve` on a tiny synthesized qwen3moe: every completion
// carries routing of the right shape, the routing analysis runs, batch-invariant serving shows no
// flip across concurrency levels, a dense model's server gives one "routing unknown" finding, and
// the flag without --endpoint is exit 2 naming it.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/common/util.hpp"
#include "repro/model/synth.hpp"
#include "repro/openai/response.hpp"
#include "repro/openai/routed_experts.hpp"
#include "repro/remote/request.hpp"
#include "repro/report/report.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
using nlohmann::json;

namespace {

// Rows of 2 layers x top-2 for 3 prompt tokens and 2 generated ones: 4 positions fed (the last
// generated token never is); the generated tokens' routes are rows 2 and 3.
// Each row repeats an expert across its two layers, so no row reads as one layer of 4 distinct ids.
RouteRows four_rows() { return {{{0, 1}, {1, 3}}, {{4, 5}, {5, 7}}, {{1, 2}, {2, 4}}, {{5, 6}, {6, 0}}}; }

std::string int32_base64(const std::vector<int32_t>& v) {
  std::string b;
  for (int32_t x : v)
    for (int i = 0; i < 4; ++i) b += static_cast<char>(static_cast<uint32_t>(x) >> (8 * i) & 0xff);
  return base64_encode(b);
}

// A .npy (version 1.0) of int16 ids, shape (rows, layers, k).
std::string npy_int16(const RouteRows& rows) {
  const size_t layers = rows[0].size(), k = rows[0][0].size();
  std::string header = "{'descr': '<i2', 'fortran_order': False, 'shape': (" + std::to_string(rows.size()) + ", " +
                       std::to_string(layers) + ", " + std::to_string(k) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string f = "\x93NUMPY";
  f += '\x01';
  f += '\x00';
  f += static_cast<char>(header.size() & 0xff);
  f += static_cast<char>(header.size() >> 8);
  f += header;
  for (const auto& r : rows)
    for (const auto& l : r)
      for (int e : l) {
        f += static_cast<char>(e & 0xff);
        f += static_cast<char>(e >> 8 & 0xff);
      }
  return f;
}

SynthOptions tiny(bool moe) {
  SynthOptions o;
  o.arch = moe ? "qwen3moe" : "llama";
  o.seed = 11;
  o.dim = 64;
  o.hidden_dim = 64;
  o.n_layers = 2;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.vocab_size = 400;
  o.context_length = 512;
  o.type = "q8_0";
  if (moe) {
    o.n_experts = 8;
    o.n_experts_used = 2;
  }
  return o;
}

std::string write_tiny(const std::string& name, bool moe) {
  const auto dir = test::scratch_dir("routed-" + name);
  const std::string path = (dir / "model.gguf").string();
  write_file_atomic(path, synth_model(tiny(moe)));
  return path;
}

}  // namespace

TEST_CASE("SGLang's sglext.routed_experts: flat int32 rows, prompt rows dropped, layers and top-k recovered") {
  const RouteRows rows = four_rows();
  std::vector<int32_t> flat;
  for (const auto& r : rows)
    for (const auto& l : r)
      for (int e : l) flat.push_back(e);
  const json body = {{"id", "x"}, {"object", "text_completion"}, {"model", "m"},
                     {"choices", {{{"index", 0}, {"text", "ab"}, {"finish_reason", "length"}}}},
                     {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}},
                     {"sglext", {{"routed_experts", int32_base64(flat)}}}};
  ParsedResponse r = parse_response_json(body.dump(), false);
  REQUIRE(r.routed_experts.contains("sglext"));
  RoutedDecode d = decode_routed_experts(r.routed_experts, r.prompt_tokens, r.completion_tokens);
  CHECK(d.form == "sglang int32");
  CHECK(d.error.empty());
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[0] == rows[2]);
  CHECK(d.steps[1] == rows[3]);
  // The writer serve uses gives the same bytes.
  CHECK(encode_routed_experts_sglang(rows) == int32_base64(flat));

  // A dense first layer is a row of zeros; top-k is still 2.
  const RouteRows dense_first = {{{0, 0}, {2, 3}}, {{0, 0}, {6, 1}}, {{0, 0}, {3, 4}}, {{0, 0}, {7, 5}}};
  json raw = {{"sglext", encode_routed_experts_sglang(dense_first)}};
  d = decode_routed_experts(raw, 3, 2);
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[1] == dense_first[3]);

  // Rows that do not fit the usage: unknown, said why.
  d = decode_routed_experts(raw, 4, 2);
  CHECK(d.steps.empty());
  CHECK(d.error.find("rows of one width") != std::string::npos);
  d = decode_routed_experts(json{{"sglext", "not base64!"}}, 3, 2);
  CHECK(d.steps.empty());
  CHECK(!d.error.empty());

  // Streamed: SGLang sends it in a chunk of its own, with no choices.
  StreamAccumulator acc(true);
  acc.add_event(json{{"id", "x"}, {"object", "chat.completion.chunk"},
                     {"choices", {{{"index", 0}, {"delta", {{"content", "ab"}}}, {"finish_reason", "length"}}}}}
                    .dump());
  acc.add_event(json{{"id", "x"}, {"object", "chat.completion.chunk"}, {"choices", json::array()},
                     {"sglext", {{"routed_experts", int32_base64(flat)}}}}
                    .dump());
  acc.add_event(json{{"id", "x"}, {"choices", json::array()},
                     {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}}}
                    .dump());
  acc.add_event("[DONE]");
  acc.finish();
  d = decode_routed_experts(acc.result().routed_experts, acc.result().prompt_tokens, acc.result().completion_tokens);
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[0] == rows[2]);
}

TEST_CASE("vLLM's routed experts: nested lists beside prompt_routed_experts, and base64 .npy") {
  const RouteRows rows = four_rows();
  // Nested lists: prompt rows (3) at the response, generated positions on the choice.
  const json prompt = json(RouteRows(rows.begin(), rows.begin() + 3));
  const json gen = json(RouteRows(rows.begin() + 3, rows.end()));
  const json body = {{"id", "x"}, {"object", "chat.completion"}, {"model", "m"},
                     {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "ab"}}},
                                   {"finish_reason", "length"}, {"routed_experts", gen}}}},
                     {"prompt_routed_experts", prompt},
                     {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}}};
  ParsedResponse r = parse_response_json(body.dump(), true);
  RoutedDecode d = decode_routed_experts(r.routed_experts, r.prompt_tokens, r.completion_tokens);
  CHECK(d.form == "vllm lists");
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[0] == rows[2]);  // the last prompt row chose the first generated token
  CHECK(d.steps[1] == rows[3]);
  // Without the prompt rows the first step is unknown: no routing, said why.
  json no_prompt = r.routed_experts;
  no_prompt.erase("prompt");
  d = decode_routed_experts(no_prompt, 3, 2);
  CHECK(d.steps.empty());
  CHECK(d.error.find("prompt_routed_experts") != std::string::npos);

  // base64 .npy on the choice: every position fed (prompt + generated - 1 rows).
  const json npy = {{"choice", base64_encode(npy_int16(rows))}};
  d = decode_routed_experts(npy, 3, 2);
  CHECK(d.form == "vllm npy");
  CHECK(d.error.empty());
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[1] == rows[3]);

  // A response without any of them: nothing, no error.
  ParsedResponse plain = parse_response_json(json{{"choices", {{{"index", 0}, {"text", "a"}}}}}.dump(), false);
  CHECK(plain.routed_experts.is_null());
  d = decode_routed_experts(plain.routed_experts, 3, 1);
  CHECK(d.form.empty());
  CHECK(d.error.empty());
}

TEST_CASE("the routed-experts request field per provider: sglang asks, vllm needs only its server flag") {
  RequestParams p;
  p.prompt = "hi";
  p.routed_experts = true;
  EndpointSpec spec;
  spec.api = "completions";
  spec.api_model = "m";
  spec.provider = Provider::sglang;
  CHECK(build_request_body(spec, p).value("return_routed_experts", false));
  spec.provider = Provider::vllm;
  CHECK_FALSE(build_request_body(spec, p).contains("return_routed_experts"));
  spec.provider = Provider::openai;
  CHECK_FALSE(build_request_body(spec, p).contains("return_routed_experts"));
  p.routed_experts = false;
  spec.provider = Provider::sglang;
  CHECK_FALSE(build_request_body(spec, p).contains("return_routed_experts"));
}

TEST_CASE("run --provider sglang --routed-experts against serve on a tiny qwen3moe") {
  auto model = load_model(write_tiny("moe", true));
  ServerOptions so;
  so.port = 0;
  so.max_batch = 16;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto out = test::scratch_dir("routed-run");
  auto res = test::run_cli("run --quiet --endpoint a=" + server.url() + " --provider sglang --api-model " +
                           server.model_name() +
                           " --api completions --routed-experts --concurrency 1,4 --repeats 2 --max-tokens 12"
                           " --no-cache-probe --prompt 'once upon a time' --format json --out '" +
                           out.string() + "'");
  // A stream as well: the routed experts come in a chunk of their own.
  auto out_stream = test::scratch_dir("routed-run-stream");
  auto res_stream = test::run_cli("run --quiet --endpoint a=" + server.url() + " --provider sglang --api-model " +
                                  server.model_name() +
                                  " --api completions --stream --routed-experts --concurrency 1,4 --repeats 2 --max-tokens 8"
                                  " --no-cache-probe --prompt 'once upon a time' --format json --out '" +
                                  out_stream.string() + "'");
  server.stop();
  CAPTURE(res.output);
  CHECK(res.output.find("routing unknown") == std::string::npos);
  AuditReport r = load_report((out / "report.json").string());
  int probes = 0;
  for (const auto& c : r.completions) {
    if (!c.error.empty()) continue;
    ++probes;
    REQUIRE(c.tokens_known);
    CHECK(c.routing.size() == c.tokens.size());
    for (const auto& step : c.routing) {
      REQUIRE(step.size() == 2);
      for (const auto& layer : step) {
        CHECK(layer.size() == 2);
        for (int e : layer) CHECK((e >= 0 && e < 8));
      }
    }
    CHECK(c.routing_margins.empty());
  }
  CHECK(probes >= 4);
  REQUIRE(r.summary.modes.size() == 1);
  REQUIRE(r.summary.modes[0].routing.has_value());
  const RoutingSummary& s = *r.summary.modes[0].routing;
  CHECK(s.completions > 0);
  CHECK(s.flips.n > 0);
  CHECK(s.flips.k == 0);  // batch-invariant serving: no flip at concurrency 4
  CHECK_FALSE(s.fragile.has_value());
  CHECK(r.summary.modes[0].routing_finding.find("margins unavailable") != std::string::npos);

  CAPTURE(res_stream.output);
  AuditReport rs = load_report((out_stream / "report.json").string());
  bool any = false;
  for (const auto& c : rs.completions)
    if (c.error.empty()) {
      CHECK(c.routing.size() == c.tokens.size());
      any = any || !c.routing.empty();
    }
  CHECK(any);
}

TEST_CASE("run --routed-experts: a dense model's server gives routing unknown once; no --endpoint is exit 2") {
  auto model = load_model(write_tiny("dense", false));
  ServerOptions so;
  so.port = 0;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto out = test::scratch_dir("routed-dense");
  auto res = test::run_cli("run --quiet --endpoint d=" + server.url() + " --provider sglang --api-model " +
                           server.model_name() +
                           " --api completions --routed-experts --concurrency 1,2 --repeats 2 --max-tokens 6"
                           " --no-cache-probe --prompt 'once upon a time' --format json --out '" +
                           out.string() + "'");
  server.stop();
  CAPTURE(res.output);
  size_t first = res.output.find("routing unknown");
  REQUIRE(first != std::string::npos);
  CHECK(res.output.find("routing unknown", first + 1) == std::string::npos);  // once, not per request
  AuditReport r = load_report((out / "report.json").string());
  REQUIRE(r.evidence.size() == 1);
  int lines = 0;
  for (const auto& f : r.evidence[0].posture.findings) lines += f.find("routing unknown") != std::string::npos;
  CHECK(lines == 1);
  for (const auto& c : r.completions) CHECK(c.routing.empty());
  CHECK_FALSE(r.summary.modes[0].routing.has_value());

  auto local = test::run_cli("run --quiet --model '" + write_tiny("local", true) +
                             "' --routed-experts --prompt hi --max-tokens 2 --format json --out '" +
                             test::scratch_dir("routed-local").string() + "'");
  CHECK(local.code == 2);
  CHECK(local.output.find("--routed-experts") != std::string::npos);
  CHECK(local.output.find("--endpoint") != std::string::npos);
}
