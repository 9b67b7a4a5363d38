// The wire format in both directions, without a socket: the request body the remote client sends
// (build_request_body, as RemoteClient::submit builds it) read by the server's parser
// (serve::parse_request over parse_completion_request), the real engine's result on the embedded
// model, and the server's response and stream chunks (full_response, stream_chunk, usage_chunk)
// read by the client's parsers (parse_response_json, SseParser + StreamAccumulator).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/default_model.hpp"
#include "repro/openai/protocol.hpp"
#include "repro/remote/endpoint.hpp"
#include "repro/remote/request.hpp"
#include "repro/serve/api.hpp"
#include "repro/serve/server.hpp"
#include "repro/tokenizer/tokenizer.hpp"

using namespace repro;
using nlohmann::json;

namespace {

struct Side {
  std::unique_ptr<Model> model = load_model(default_model_path());
  serve::ApiContext cx;
  Side() {
    cx.model = model.get();
    cx.name = "stories260K";
    cx.fingerprint = server_fingerprint(REPRO_VERSION, Mode::BatchInvariant, model->file_sha256);
  }
  GenResult generate(const GenRequest& req) const {
    Engine e(*model, EngineOptions{});
    return e.generate({req})[0];
  }
};

// As `--endpoint local=http://127.0.0.1:8000/v1 --api-model stories260K` sets it up.
EndpointSpec endpoint(const std::string& api, Provider provider = Provider::openai) {
  EndpointSpec spec = parse_endpoint_arg("local=http://127.0.0.1:8000/v1");
  spec.api_model = "stories260K";
  spec.api = api;
  spec.provider = provider;
  return spec;
}

RequestParams sampled(const std::string& prompt) {
  RequestParams rp;
  rp.prompt = prompt;
  rp.decoding.id = "sampled";
  rp.decoding.temperature = 0.8;
  rp.decoding.top_p = 0.95;
  rp.decoding.top_k = 40;
  rp.decoding.max_tokens = 12;
  rp.seed = 1234;
  rp.stop = {"\n\n", "The end"};
  rp.logprobs = true;
  return rp;
}

// The body as the client sends it: the bytes of build_request (what RemoteClient::submit posts).
json client_body(const EndpointSpec& spec, const RequestParams& rp) {
  const HttpRequestSpec http = build_request(spec, rp);
  CHECK(http.body == build_request_body(spec, rp).dump());
  return parse_request_body(http.body, 1 << 20);
}

// The server's answer to a body it refuses.
// The wire format's parser alone: the served name, no model checks.
CompletionRequest wire_parse(const json& body, bool chat) {
  RequestRules rules;
  rules.model = "stories260K";
  return parse_completion_request(body, chat, rules);
}

ApiError refusal(const serve::ApiContext& cx, const json& body, bool chat) {
  try {
    serve::parse_request(cx, body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("the server's parser accepted " << body.dump());
  return ApiError(0, "");
}

}  // namespace

TEST_CASE("openai round trip: the client's completions request, as the server reads it") {
  Side s;
  RequestParams rp = sampled("Once upon a time");
  rp.json_schema = {{"title", "answer"}, {"type", "object"},
                    {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}};
  const json body = client_body(endpoint("completions"), rp);

  // The wire fields, by the wire format's own parser.
  const CompletionRequest w = wire_parse(body, false);
  CHECK_FALSE(w.chat);
  REQUIRE(w.model.has_value());
  CHECK(*w.model == "stories260K");
  CHECK(w.prompt == "Once upon a time");
  CHECK(w.prompt_ids.empty());
  CHECK(w.max_tokens == 12);
  CHECK(w.temperature == 0.8);
  CHECK(w.top_p == 0.95);
  CHECK(w.top_k == 40);
  CHECK(w.seed == 1234u);
  CHECK(w.stop == std::vector<std::string>{"\n\n", "The end"});
  CHECK(w.logprobs);
  CHECK(w.top_logprobs == 1);  // completions: "logprobs": 1
  CHECK(w.response_format.type == "json_schema");
  CHECK(w.response_format.name == "answer");
  CHECK(w.response_format.strict);
  CHECK(w.response_format.schema["additionalProperties"] == false);  // closed by the client
  CHECK(w.response_format.schema["required"] == json{"n"});
  CHECK_FALSE(w.stream);
  // Written again, the parsed request is the body the client sent.
  CHECK(request_json(w) == body);

  // The engine request the server makes of it.
  const serve::Parsed p = serve::parse_request(s.cx, body, false);
  const DecodeParams& d = p.gen.params;
  CHECK(p.gen.prompt == s.model->tokenizer->encode("Once upon a time", true));
  CHECK(p.prompt_text == "Once upon a time");
  CHECK(d.max_tokens == 12);
  CHECK(d.temperature == 0.8f);
  CHECK(d.top_p == 0.95f);
  CHECK(d.top_k == 40);
  CHECK(d.seed == 1234u);
  CHECK(d.stop == rp.stop);
  CHECK(p.want_logprobs);
  CHECK(p.top_logprobs == 1);
  CHECK(d.json_schema != nullptr);
  CHECK_FALSE(p.stream);
}

TEST_CASE("openai round trip: the client's streamed chat request, as the server reads it") {
  Side s;
  RequestParams rp = sampled("");
  rp.messages = json::array({{{"role", "system"}, {"content", "You tell short stories."}},
                             {{"role", "user"}, {"content", "Tell me about Lily."}}});
  EndpointSpec spec = endpoint("chat", Provider::vllm);
  spec.stream = true;
  const json body = client_body(spec, rp);
  CHECK(body["return_token_ids"] == true);  // vLLM's field: the server ignores it

  const CompletionRequest w = wire_parse(body, true);
  CHECK(w.chat);
  CHECK(w.messages == rp.messages);
  CHECK(w.logprobs);
  CHECK(w.top_logprobs == 0);  // chat: "logprobs": true
  CHECK(w.stream);
  CHECK(w.include_usage);
  CHECK(w.response_format.type.empty());

  const serve::Parsed p = serve::parse_request(s.cx, body, true);
  CHECK(p.chat);
  CHECK(p.stream);
  CHECK(p.include_usage);
  CHECK(p.want_logprobs);
  CHECK(p.gen.params.seed == 1234u);
  CHECK(p.gen.params.top_k == 40);
  CHECK(p.gen.prompt.size() > 4);
}

TEST_CASE("openai round trip: what the server refuses of a client's request") {
  Side s;
  // Another model name: 404 naming the served one.
  EndpointSpec spec = endpoint("completions");
  spec.api_model = "gpt-4o";
  ApiError e = refusal(s.cx, client_body(spec, sampled("Once")), false);
  CHECK(e.status == 404);
  CHECK(e.param == "model");
  CHECK(e.code == "model_not_found");
  CHECK(std::string(e.what()) ==
        "the model 'gpt-4o' does not exist on this server; it serves 'stories260K' (GET /v1/models)");

  // max_tokens over --max-tokens-limit.
  RequestParams rp = sampled("Once");
  rp.decoding.max_tokens = 100000;
  e = refusal(s.cx, client_body(endpoint("completions"), rp), false);
  CHECK(e.status == 400);
  CHECK(e.param == "max_tokens");
  CHECK(std::string(e.what()) == "'max_tokens' is 100000, over this server's limit of 4096 (--max-tokens-limit)");

  // The client's seed is unsigned; the server reads a signed 64-bit integer.
  rp = sampled("Once");
  rp.seed = 9223372036854775813ull;
  e = refusal(s.cx, client_body(endpoint("completions"), rp), false);
  CHECK(e.status == 400);
  CHECK(e.param == "seed");
  CHECK(std::string(e.what()) == "'seed' is 9223372036854775813, too large (at most 9223372036854775807)");

  // An --extra-body field the server does not take.
  spec = endpoint("chat");
  spec.extra_body = {{"n", 2}};
  e = refusal(s.cx, client_body(spec, sampled("Once")), true);
  CHECK(e.status == 400);
  CHECK(e.param == "n");

  // The refusal's body, as the client reads it.
  const std::string answer = dump(error_json(e.what(), e.type, e.param, e.code));
  CHECK(error_message_from_body(answer) == "'n' must be 1: this server returns one choice per request");
  const ParsedResponse pr = parse_response_json(answer, true);
  CHECK(pr.cause == FailCause::server_error);
  CHECK(pr.error == "server error: 'n' must be 1: this server returns one choice per request");
}

TEST_CASE("openai round trip: the server's responses and stream chunks, as the client reads them") {
  Side s;
  for (const bool chat : {false, true}) {
    CAPTURE(chat);
    RequestParams rp = sampled("Once upon a time");
    rp.stop.clear();
    const json body = client_body(endpoint(chat ? "chat" : "completions"), rp);
    const serve::Parsed p = serve::parse_request(s.cx, body, chat);
    const GenResult r = s.generate(p.gen);
    REQUIRE(!r.tokens.empty());
    REQUIRE(r.logprobs.size() == r.tokens.size());
    const std::string id = chat ? "chatcmpl-0000000100000001" : "cmpl-0000000100000001";
    const int64_t created = 1700000000;

    // Not streamed.
    const std::string full = dump(serve::full_response(s.cx, p, r, id, created));
    const ParsedResponse got = parse_response_json(full, chat);
    CHECK(got.cause == FailCause::none);
    CHECK(got.text == r.text);
    CHECK(got.tokens_known);
    CHECK(got.tokens == r.tokens);
    CHECK(got.logprobs == r.logprobs);
    // the token strings the logprobs carry, one per id: what the reports show instead of bare ids
    REQUIRE(got.token_pieces.size() == r.tokens.size());
    for (size_t i = 0; i < r.tokens.size(); ++i) CHECK(got.token_pieces[i] == s.model->tokenizer->piece(r.tokens[i]));
    CHECK(got.finish_reason == r.finish_reason);
    CHECK(got.id == id);
    CHECK(got.model == "stories260K");
    CHECK(got.system_fingerprint == s.cx.fingerprint);
    CHECK(got.created == created);
    CHECK(got.prompt_tokens == static_cast<int>(p.gen.prompt.size()));
    CHECK(got.completion_tokens == static_cast<int>(r.tokens.size()));

    // Streamed: one chunk per token, the last with the finish reason, the usage chunk, [DONE]; the
    // bytes reach the parser in 7-byte pieces.
    std::string wire, sent;
    const Tokenizer& tok = *s.model->tokenizer;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const std::string piece = tok.piece(r.tokens[i]);
      wire += sse_event(serve::stream_chunk(s.cx, p, id, created, piece, i == 0, r.tokens, r.logprobs, r.top_logprobs,
                                            i, i + 1, sent.size(), std::nullopt));
      sent += piece;
    }
    wire += sse_event(serve::stream_chunk(s.cx, p, id, created, "", false, r.tokens, r.logprobs, r.top_logprobs,
                                          r.tokens.size(), r.tokens.size(), sent.size(), r.finish_reason));
    wire += sse_event(serve::usage_chunk(s.cx, p, id, created, static_cast<int>(r.tokens.size())));
    wire += kSseDone;
    SseParser sse;
    StreamAccumulator acc(chat);
    std::vector<std::string> events;
    for (size_t off = 0; off < wire.size(); off += 7) sse.feed(std::string_view(wire).substr(off, 7), events);
    CHECK(sse.error().empty());
    REQUIRE(events.size() == r.tokens.size() + 3);
    if (chat) CHECK(json::parse(events[0])["choices"][0]["delta"]["role"] == "assistant");
    if (chat) CHECK_FALSE(json::parse(events[1])["choices"][0]["delta"].contains("role"));
    for (const auto& e : events) acc.add_event(e);
    acc.finish();
    const ParsedResponse& st = acc.result();
    CHECK(st.cause == FailCause::none);
    CHECK(st.saw_done);
    CHECK(st.text == sent);
    CHECK(st.tokens == r.tokens);
    CHECK(st.logprobs == r.logprobs);
    CHECK(st.token_pieces == got.token_pieces);
    CHECK(st.finish_reason == r.finish_reason);
    CHECK(st.id == id);
    CHECK(st.system_fingerprint == s.cx.fingerprint);
    CHECK(st.prompt_tokens == static_cast<int>(p.gen.prompt.size()));
    CHECK(st.completion_tokens == static_cast<int>(r.tokens.size()));

    // A stream cut before its last chunk is not a response.
    StreamAccumulator cut(chat);
    for (size_t i = 0; i + 3 < events.size(); ++i) cut.add_event(events[i]);
    cut.finish();
    CHECK(cut.result().cause == FailCause::stream_cut);
  }
}
