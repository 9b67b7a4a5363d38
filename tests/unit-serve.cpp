// ctest-labels: model
// `repro-audit serve`: the real engine on the real tiny model behind the real HTTP server on loopback,
// queried with cpp-httplib clients; plus the real binary once (popen, SIGTERM, exit 0).
#include <doctest/doctest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
using json = nlohmann::json;

namespace {

// ../shared/models/README.md: "Once upon a time", 30 greedy tokens.
const std::vector<int> kGoldenIds = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
                                     337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432};
const char* kGoldenText = ", there was a little girl named Lily. She loved to play outside in the park. One day,";

struct Served {
  std::unique_ptr<Model> model;
  std::unique_ptr<Server> server;
  explicit Served(const std::filesystem::path& dir, ServerOptions so = {}, Mode mode = Mode::BatchInvariant) {
    model = load_model((dir / "stories260K.gguf").string());
    so.host = "127.0.0.1";
    so.port = 0;
    EngineOptions eo;
    eo.mode = mode;
    server = std::make_unique<Server>(*model, eo, so);
    server->start();
  }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    c->set_read_timeout(60, 0);
    c->set_connection_timeout(5, 0);
    return c;
  }
};

struct Reply {
  int status = 0;
  std::string body;
  json j;
};

Reply post(httplib::Client& c, const std::string& path, const std::string& body, const httplib::Headers& h = {}) {
  Reply r;
  auto res = c.Post(path.c_str(), h, body, "application/json");
  REQUIRE_MESSAGE(res, "no HTTP response for POST " << path << ": " << httplib::to_string(res.error()));
  r.status = res->status;
  r.body = res->body;
  if (res->get_header_value("Content-Type").find("json") != std::string::npos) r.j = json::parse(r.body);
  return r;
}
Reply post(httplib::Client& c, const std::string& path, const json& body, const httplib::Headers& h = {}) {
  return post(c, path, body.dump(), h);
}
Reply get(httplib::Client& c, const std::string& path, const httplib::Headers& h = {}) {
  Reply r;
  auto res = c.Get(path.c_str(), h);
  REQUIRE_MESSAGE(res, "no HTTP response for GET " << path);
  r.status = res->status;
  r.body = res->body;
  r.j = json::parse(r.body);
  return r;
}

std::vector<float> floats(const json& a) {
  std::vector<float> v;
  for (const auto& x : a) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The SSE events of a streamed body: the JSON of each `data:` line, and whether [DONE] ended it.
struct Sse {
  std::vector<json> events;
  bool done = false;
  std::string text;        // concatenated text / delta.content
  std::vector<int> ids;    // concatenated token_ids
  std::vector<float> lps;  // concatenated logprobs
  std::string finish;
  json usage;
};
Sse parse_sse(const std::string& body, bool chat) {
  Sse s;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    REQUIRE_MESSAGE(end != std::string::npos, "SSE event not terminated by a blank line");
    std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    REQUIRE(ev.rfind("data: ", 0) == 0);
    std::string data = ev.substr(6);
    CHECK_FALSE(s.done);  // nothing after [DONE]
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    json j = json::parse(data);
    s.events.push_back(j);
    REQUIRE_FALSE(j.contains("error"));
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    if (j["choices"].empty()) continue;
    const json& c = j["choices"][0];
    s.text += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
    for (int id : c["token_ids"]) s.ids.push_back(id);
    if (!c["logprobs"].is_null()) {
      if (chat) {
        for (const auto& e : c["logprobs"]["content"]) s.lps.push_back(static_cast<float>(e["logprob"].get<double>()));
      } else {
        auto v = floats(c["logprobs"]["token_logprobs"]);
        s.lps.insert(s.lps.end(), v.begin(), v.end());
      }
    }
    if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"];
  }
  return s;
}

GenResult direct(const Model& m, const std::string& prompt, DecodeParams p, Mode mode = Mode::BatchInvariant) {
  EngineOptions eo;
  eo.mode = mode;
  Engine e(m, eo);
  GenRequest r;
  r.prompt = m.tokenizer->encode(prompt, true);
  r.params = p;
  return e.generate({r})[0];
}

json golden_request() { return json{{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}}; }

}  // namespace

TEST_CASE("serve: health, models, golden completion, chat, streaming, stop strings") {
  REPRO_REQUIRE_MODELS(dir);
  Served s(dir);
  auto c = s.client();
  const std::string fp = server_fingerprint(REPRO_VERSION, Mode::BatchInvariant, s.model->file_sha256);
  CHECK(fp.size() == 19);
  CHECK(fp.rfind("ra-", 0) == 0);
  CHECK(fp != server_fingerprint(REPRO_VERSION, Mode::Default, s.model->file_sha256));
  CHECK(s.server->fingerprint() == fp);

  Reply h = get(*c, "/health");
  CHECK(h.status == 200);
  CHECK(h.j["status"] == "ok");
  CHECK(h.j["mode"] == "batch-invariant");
  Reply m = get(*c, "/v1/models");
  CHECK(m.status == 200);
  CHECK(m.j["object"] == "list");
  REQUIRE(m.j["data"].size() == 1);
  CHECK(m.j["data"][0]["id"] == "stories260K");
  CHECK(m.j["data"][0]["model_sha256"] == s.model->file_sha256);

  DecodeParams dp;
  dp.max_tokens = 30;
  GenResult ref = direct(*s.model, "Once upon a time", dp);
  REQUIRE(ref.tokens == kGoldenIds);

  // Completions, greedy: the golden text and ids, logprobs equal to Engine::generate bit for bit.
  json req = golden_request();
  req["logprobs"] = 1;
  req["model"] = "stories260K";
  Reply r = post(*c, "/v1/completions", req);
  REQUIRE(r.status == 200);
  CHECK(r.j["object"] == "text_completion");
  CHECK(r.j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  CHECK(r.j["model"] == "stories260K");
  CHECK(r.j["system_fingerprint"] == fp);
  CHECK(r.j["created"].is_number_integer());
  const json& ch = r.j["choices"][0];
  CHECK(ch["text"] == kGoldenText);
  CHECK(ch["token_ids"].get<std::vector<int>>() == kGoldenIds);
  CHECK(ch["finish_reason"] == "length");
  CHECK(r.j["usage"] == json({{"prompt_tokens", 5}, {"completion_tokens", 30}, {"total_tokens", 35}}));
  REQUIRE(ch["logprobs"]["tokens"].size() == 30);
  std::string joined;
  for (const auto& t : ch["logprobs"]["tokens"]) joined += t.get<std::string>();
  CHECK(joined == kGoldenText);
  CHECK(same_bits(floats(ch["logprobs"]["token_logprobs"]), ref.logprobs));

  // Without logprobs: null; the prompt as [string] and as token ids gives the same ids.
  for (json prompt : {json("Once upon a time"), json::array({"Once upon a time"}), json({1, 403, 407, 261, 378})}) {
    json q = golden_request();
    q["prompt"] = prompt;
    Reply x = post(*c, "/v1/completions", q);
    REQUIRE(x.status == 200);
    CHECK(x.j["choices"][0]["logprobs"].is_null());
    CHECK(x.j["choices"][0]["token_ids"].get<std::vector<int>>() == kGoldenIds);
  }

  // Default max_tokens of completions is 16.
  Reply d16 = post(*c, "/v1/completions", json{{"prompt", "Once upon a time"}});
  REQUIRE(d16.status == 200);
  CHECK(d16.j["usage"]["completion_tokens"] == 16);

  // Chat with one user message == completions.
  json creq = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
               {"max_tokens", 30}, {"temperature", 0}, {"logprobs", true}};
  Reply cr = post(*c, "/v1/chat/completions", creq);
  REQUIRE(cr.status == 200);
  CHECK(cr.j["object"] == "chat.completion");
  CHECK(cr.j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(cr.j["system_fingerprint"] == fp);
  CHECK(cr.j["choices"][0]["message"]["role"] == "assistant");
  CHECK(cr.j["choices"][0]["message"]["content"] == kGoldenText);
  CHECK(cr.j["choices"][0]["token_ids"].get<std::vector<int>>() == kGoldenIds);
  REQUIRE(cr.j["choices"][0]["logprobs"]["content"].size() == 30);
  std::vector<float> clp;
  for (const auto& e : cr.j["choices"][0]["logprobs"]["content"]) clp.push_back(e["logprob"].get<float>());
  CHECK(same_bits(clp, ref.logprobs));
  CHECK(cr.j["usage"]["total_tokens"] == 35);

  // Streaming gives the same text, ids and logprobs as non-streaming, one chunk per token.
  {
    json q = req;
    q["stream"] = true;
    q["stream_options"] = {{"include_usage", true}};
    auto res = c->Post("/v1/completions", q.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->get_header_value("Content-Type").find("text/event-stream") == 0);
    Sse sse = parse_sse(res->body, false);
    CHECK(sse.done);
    CHECK(sse.text == kGoldenText);
    CHECK(sse.ids == kGoldenIds);
    CHECK(same_bits(sse.lps, ref.logprobs));
    CHECK(sse.finish == "length");
    CHECK(sse.events.size() >= 31);
    CHECK(sse.usage["completion_tokens"] == 30);
    for (const auto& e : sse.events) {
      CHECK(e["object"] == "text_completion");
      CHECK(e["system_fingerprint"] == fp);
    }
  }
  {
    json q = creq;
    q["stream"] = true;
    auto res = c->Post("/v1/chat/completions", q.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    Sse sse = parse_sse(res->body, true);
    CHECK(sse.done);
    CHECK(sse.text == kGoldenText);
    CHECK(sse.ids == kGoldenIds);
    CHECK(same_bits(sse.lps, ref.logprobs));
    CHECK(sse.finish == "length");
    REQUIRE(!sse.events.empty());
    CHECK(sse.events[0]["object"] == "chat.completion.chunk");
    CHECK(sse.events[0]["choices"][0]["delta"]["role"] == "assistant");
  }

  // Stop strings: cut from the text, finish_reason "stop", the same streamed and not.
  for (json stop : {json("Lily"), json::array({"park", "Lily"})}) {
    json q = golden_request();
    q["stop"] = stop;
    Reply x = post(*c, "/v1/completions", q);
    REQUIRE(x.status == 200);
    CHECK(x.j["choices"][0]["text"] == ", there was a little girl named ");
    CHECK(x.j["choices"][0]["finish_reason"] == "stop");
    q["stream"] = true;
    auto res = c->Post("/v1/completions", q.dump(), "application/json");
    REQUIRE(res);
    Sse sse = parse_sse(res->body, false);
    CHECK(sse.text == ", there was a little girl named ");
    CHECK(sse.finish == "stop");
    CHECK(sse.ids == x.j["choices"][0]["token_ids"].get<std::vector<int>>());
  }

  // Sampling with a seed: the same request twice gives the same output, equal to the engine's.
  {
    json q = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0.9}, {"top_p", 0.95},
              {"top_k", 40}, {"seed", 1234}, {"logprobs", 0}};
    Reply a = post(*c, "/v1/completions", q);
    Reply b = post(*c, "/v1/completions", q);
    REQUIRE(a.status == 200);
    REQUIRE(b.status == 200);
    CHECK(a.j["choices"][0]["token_ids"] == b.j["choices"][0]["token_ids"]);
    DecodeParams sp;
    sp.max_tokens = 40;
    sp.temperature = 0.9f;
    sp.top_p = 0.95f;
    sp.top_k = 40;
    sp.seed = 1234;
    GenResult sref = direct(*s.model, "Once upon a time", sp);
    CHECK(a.j["choices"][0]["token_ids"].get<std::vector<int>>() == sref.tokens);
    CHECK(a.j["choices"][0]["text"] == sref.text);
  }
  s.server->stop();
}

TEST_CASE("serve: concurrent requests share batches and match Engine::generate bit for bit") {
  REPRO_REQUIRE_MODELS(dir);
  std::atomic<int> steps_with_batch_gt1{0};
  ServerOptions so;
  so.max_batch = 32;
  std::atomic<int> step_sleep_us{0};
  so.on_step = [&](int batch) {
    if (batch > 1) steps_with_batch_gt1++;
    if (int us = step_sleep_us.load()) std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
  Served s(dir, so);

  DecodeParams dp;
  dp.max_tokens = 30;
  GenResult ref = direct(*s.model, "Once upon a time", dp);
  REQUIRE(ref.tokens == kGoldenIds);

  // Starts n client threads (joined by the caller); each thread owns a copy of `make`.
  auto fire = [&s](int n, std::function<json(int)> make, std::vector<Reply>& out) {
    out.assign(static_cast<size_t>(n), Reply{});
    std::vector<std::thread> th;
    const int port = s.server->port();
    for (int i = 0; i < n; ++i)
      th.emplace_back([make, port, &out, i] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        auto res = c.Post("/v1/completions", make(i).dump(), "application/json");
        if (res) {
          out[static_cast<size_t>(i)].status = res->status;
          out[static_cast<size_t>(i)].j = json::parse(res->body, nullptr, false);
        } else {
          out[static_cast<size_t>(i)].body = httplib::to_string(res.error());
        }
      });
    return th;
  };
  auto wait_queued = [&](int n) {
    for (int i = 0; i < 2000 && s.server->stats().queued < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return s.server->stats().queued;
  };
  auto check_probe = [&](const Reply& r) {
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    const json& ch = r.j["choices"][0];
    CHECK(ch["token_ids"].get<std::vector<int>>() == ref.tokens);
    CHECK(same_bits(floats(ch["logprobs"]["token_logprobs"]), ref.logprobs));
    CHECK(ch["text"] == ref.text);
  };
  json probe = golden_request();
  probe["logprobs"] = 1;

  SUBCASE("32 identical requests released into one batch") {
    s.server->pause();
    std::vector<Reply> out;
    auto th = fire(32, [&](int) { return probe; }, out);
    CHECK(wait_queued(32) == 32);
    s.server->resume();
    for (auto& t : th) t.join();
    for (const auto& r : out) check_probe(r);
    ServerStats st = s.server->stats();
    CHECK(st.max_batch_seen == 32);
    CHECK(st.completed >= 32);
    CHECK(steps_with_batch_gt1.load() > 0);
  }

  SUBCASE("32 requests fired at once, then mixed with filler requests of other lengths") {
    std::vector<Reply> out;
    auto th = fire(32, [&](int) { return probe; }, out);
    for (auto& t : th) t.join();
    for (const auto& r : out) check_probe(r);
    // Probes at even indices, fillers (other prompts, lengths, sampling) at odd ones: the probe
    // sees changing batch mates and positions, and the batch shrinks as fillers finish.
    const char* fillers[] = {"Lily", "The cat sat", "One day, a big dog", "Tom and Sue went to the park"};
    auto th2 = fire(
        32,
        [&](int i) {
          if (i % 2 == 0) return probe;
          return json{{"prompt", fillers[(i / 2) % 4]}, {"max_tokens", 5 + 7 * (i % 9)}, {"temperature", 0.7},
                      {"seed", i}, {"ignore_eos", true}};
        },
        out);
    for (auto& t : th2) t.join();
    for (size_t i = 0; i < out.size(); ++i) {
      if (i % 2 == 0) check_probe(out[i]);
      else CHECK(out[i].status == 200);
    }
    MESSAGE("largest batch seen without pausing: " << s.server->stats().max_batch_seen);
  }

  SUBCASE("a request arriving while another decodes joins the running batch") {
    step_sleep_us = 2000;  // slow the steps so the long request is still decoding
    std::vector<Reply> long_out, probe_out;
    auto th = fire(1, [&](int) { return json{{"prompt", "Lily"}, {"max_tokens", 300}, {"ignore_eos", true}}; },
                   long_out);
    for (int i = 0; i < 2000 && s.server->stats().steps < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(s.server->stats().active == 1);
    auto th2 = fire(4, [&](int) { return probe; }, probe_out);
    for (auto& t : th2) t.join();
    for (auto& t : th) t.join();
    for (const auto& r : probe_out) check_probe(r);
    REQUIRE(long_out[0].status == 200);
    CHECK(long_out[0].j["usage"]["completion_tokens"] == 300);
    ServerStats st = s.server->stats();
    CHECK(st.joined_running >= 1);
    CHECK(st.max_batch_seen >= 2);
  }
  s.server->stop();
}

TEST_CASE("serve --mode deterministic: requests released together decode one at a time, equal to batch-invariant") {
  REPRO_REQUIRE_MODELS(dir);
  std::atomic<int> steps_with_batch_gt1{0};
  ServerOptions so;
  so.max_batch = 32;  // asked for, but the deterministic table decodes every request alone
  so.on_step = [&](int batch) {
    if (batch > 1) steps_with_batch_gt1++;
  };
  Served s(dir, so, Mode::Deterministic);
  DecodeParams dp;
  dp.max_tokens = 30;
  GenResult ref = direct(*s.model, "Once upon a time", dp, Mode::BatchInvariant);
  REQUIRE(ref.tokens == kGoldenIds);
  json probe = golden_request();
  probe["logprobs"] = 1;

  s.server->pause();
  constexpr int kRequests = 6;
  std::vector<Reply> out(kRequests);
  std::vector<std::thread> th;
  const int port = s.server->port();
  for (int i = 0; i < kRequests; ++i)
    th.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      auto res = c.Post("/v1/completions", probe.dump(), "application/json");
      if (res) {
        out[static_cast<size_t>(i)].status = res->status;
        out[static_cast<size_t>(i)].j = json::parse(res->body, nullptr, false);
      }
    });
  for (int i = 0; i < 2000 && s.server->stats().queued < kRequests; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(s.server->stats().queued == kRequests);
  s.server->resume();
  for (auto& t : th) t.join();
  for (const auto& r : out) {
    REQUIRE(r.status == 200);
    const json& ch = r.j["choices"][0];
    CHECK(ch["token_ids"].get<std::vector<int>>() == ref.tokens);
    CHECK(same_bits(floats(ch["logprobs"]["token_logprobs"]), ref.logprobs));
  }
  CHECK(s.server->stats().max_batch_seen == 1);
  CHECK(steps_with_batch_gt1.load() == 0);
  s.server->stop();
}

TEST_CASE("serve: malformed requests get OpenAI-style JSON errors with 4xx codes") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_tokens_limit = 4000;
  Served s(dir, so);
  auto c = s.client();
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;    // expected "param" ("" = null)
    const char* message;  // a fragment of the message
  };
  const char* C = "/v1/completions";
  const char* CH = "/v1/chat/completions";
  const std::vector<Case> cases = {
      {C, "{", 400, "", "not valid JSON"},
      {C, "[1,2]", 400, "", "JSON object"},
      {C, R"({"max_tokens":5})", 400, "prompt", "'prompt' is required"},
      {C, R"({"prompt":5})", 400, "prompt", "'prompt' must be"},
      {C, R"({"prompt":["a","b"]})", 400, "prompt", "one prompt per request"},
      {C, R"({"prompt":[1, 99999]})", 400, "prompt", "outside the vocabulary"},
      {C, R"({"prompt":"a","max_tokens":"ten"})", 400, "max_tokens", "must be an integer"},
      {C, R"({"prompt":"a","max_tokens":0})", 400, "max_tokens", "at least 1"},
      {C, R"({"prompt":"a","max_tokens":5000})", 400, "max_tokens", "--max-tokens-limit"},
      {C, R"({"prompt":"Once upon a time","max_tokens":2045})", 400, "max_tokens", "context length of 2048"},
      {C, R"({"prompt":"a","temperature":"hot"})", 400, "temperature", "must be a number"},
      {C, R"({"prompt":"a","temperature":3})", 400, "temperature", "between 0 and 2"},
      {C, R"({"prompt":"a","top_p":0})", 400, "top_p", "top_p"},
      {C, R"({"prompt":"a","top_k":-5})", 400, "top_k", "top_k"},
      {C, R"({"prompt":"a","seed":"x"})", 400, "seed", "must be an integer"},
      {C, R"({"prompt":"a","n":2})", 400, "n", "'n' must be 1"},
      {C, R"({"prompt":"a","stop":5})", 400, "stop", "'stop' must be"},
      {C, R"({"prompt":"a","stop":["ok", 3]})", 400, "stop", "non-empty strings"},
      {C, R"({"prompt":"a","logprobs":10})", 400, "logprobs", "between 0 and 5"},
      {C, R"({"prompt":"a","stream":"yes"})", 400, "stream", "must be a boolean"},
      {C, R"({"prompt":"a","presence_penalty":1})", 400, "presence_penalty", "not supported"},
      {C, R"({"prompt":"a","echo":true})", 400, "echo", "not supported"},
      {C, R"({"prompt":"a","model":"gpt-4"})", 404, "model", "does not exist"},
      {C, R"({"prompt":"a","model":7})", 400, "model", "must be a string"},
      {CH, R"({"max_tokens":5})", 400, "messages", "'messages' is required"},
      {CH, R"({"messages":"hi"})", 400, "messages", "non-empty array"},
      {CH, R"({"messages":[{"role":"user"}]})", 400, "messages", "\"content\""},
      {CH, R"({"messages":[{"role":"user","content":"hi"}],"logprobs":1})", 400, "logprobs", "must be a boolean"},
      {CH, R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":50})", 400, "top_logprobs", "between"},
      {CH, R"({"messages":[{"role":"user","content":"hi"}],"n":3})", 400, "n", "'n' must be 1"},
      {"/v1/nothing", "{}", 404, "", "unknown endpoint"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.path);
    CAPTURE(k.body);
    Reply r = post(*c, k.path, k.body);
    CHECK(r.status == k.status);
    REQUIRE(r.j.is_object());
    REQUIRE(r.j.contains("error"));
    const json& e = r.j["error"];
    CHECK(e["type"] == "invalid_request_error");
    REQUIRE(e["message"].is_string());
    CHECK(e["message"].get<std::string>().find(k.message) != std::string::npos);
    if (*k.param) CHECK(e["param"] == k.param);
    else CHECK(e["param"].is_null());
    CHECK(e.contains("code"));
  }
  auto g = c->Get("/v1/completions");
  REQUIRE(g);
  CHECK(g->status == 405);
  CHECK(json::parse(g->body)["error"]["type"] == "invalid_request_error");
  // The server still answers normally after all that.
  CHECK(post(*c, C, golden_request()).status == 200);
  s.server->stop();
}

TEST_CASE("serve: bearer check and body limit") {
  REPRO_REQUIRE_MODELS(dir);
  const std::string key = "sk-test-SECRET-4f1e9a";
  ServerOptions so;
  so.api_key = key;
  so.max_body_bytes = 4096;
  Served s(dir, so);
  auto c = s.client();
  const httplib::Headers good = {{"Authorization", "Bearer " + key}};

  Reply none = post(*c, "/v1/completions", golden_request());
  CHECK(none.status == 401);
  CHECK(none.j["error"]["code"] == "invalid_api_key");
  CHECK(none.j["error"]["type"] == "invalid_request_error");
  CHECK(none.body.find(key) == std::string::npos);
  Reply wrong = post(*c, "/v1/completions", golden_request(), {{"Authorization", "Bearer " + key + "x"}});
  CHECK(wrong.status == 401);
  CHECK(wrong.body.find(key) == std::string::npos);
  CHECK(post(*c, "/v1/completions", golden_request(), {{"Authorization", key}}).status == 401);
  CHECK(get(*c, "/v1/models").status == 401);
  CHECK(get(*c, "/v1/models", good).status == 200);
  CHECK(get(*c, "/health").status == 200);  // health needs no key
  Reply ok = post(*c, "/v1/completions", golden_request(), good);
  REQUIRE(ok.status == 200);
  CHECK(ok.j["choices"][0]["token_ids"].get<std::vector<int>>() == kGoldenIds);

  // Body limit: just under passes, over gets 413 with a JSON error naming the flag.
  json small = golden_request();
  small["user"] = std::string(3800, 'x');
  CHECK(small.dump().size() < 4096);
  CHECK(post(*c, "/v1/completions", small, good).status == 200);
  json big = golden_request();
  big["user"] = std::string(10000, 'x');
  auto c2 = s.client();
  Reply too_big = post(*c2, "/v1/completions", big, good);
  CHECK(too_big.status == 413);
  REQUIRE(too_big.j.contains("error"));
  CHECK(too_big.j["error"]["message"].get<std::string>().find("--max-body-bytes") != std::string::npos);
  auto c3 = s.client();
  CHECK(post(*c3, "/v1/completions", golden_request(), good).status == 200);
  s.server->stop();
}

TEST_CASE("serve: graceful stop with requests in flight") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
  Served s(dir, so);
  const int port = s.server->port();
  std::vector<int> status(6, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < 6; ++i)
    th.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      json q = {{"prompt", "Lily"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", i % 2 == 1}};
      auto res = c.Post("/v1/completions", q.dump(), "application/json");
      status[static_cast<size_t>(i)] = res ? res->status : -1;
    });
  for (int i = 0; i < 2000 && s.server->stats().active < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto t0 = std::chrono::steady_clock::now();
  s.server->stop();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& t : th) t.join();
  CHECK(secs < 10.0);
  // Non-streaming requests in flight were finished, not dropped.
  for (int i = 0; i < 6; i += 2) CHECK(status[static_cast<size_t>(i)] == 200);
  s.server->stop();  // idempotent
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  CHECK_FALSE(c.Get("/health"));  // no longer listening
}

TEST_CASE("serve: the real binary starts on --port 0, answers, and exits 0 on SIGTERM") {
  REPRO_REQUIRE_MODELS(dir);
  const std::string model = (dir / "stories260K.gguf").string();
  // The shell prints its pid, then execs the server (same pid), so the test can signal it.
  std::string cmd = "REPRO_TEST_SERVE_KEY=sk-cli-SECRET-77 sh -c 'echo $$; exec \"" + test::binary() +
                    "\" serve --model \"" + model +
                    "\" --port 0 --max-batch 8 --api-key-env REPRO_TEST_SERVE_KEY' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f);
  char line[512];
  REQUIRE(std::fgets(line, sizeof line, f));
  const int pid = std::atoi(line);
  REQUIRE(pid > 0);
  std::string first;
  for (int i = 0; i < 50 && first.rfind("listening on", 0) != 0; ++i) {
    REQUIRE(std::fgets(line, sizeof line, f));
    first = line;
  }
  CAPTURE(first);
  REQUIRE(first.rfind("listening on http://127.0.0.1:", 0) == 0);
  CHECK(first.find("(mode batch-invariant, model stories260K)") != std::string::npos);
  const int port = std::atoi(first.c_str() + std::strlen("listening on http://127.0.0.1:"));
  REQUIRE(port > 0);

  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  Reply r = post(c, "/v1/completions", golden_request(), {{"Authorization", "Bearer sk-cli-SECRET-77"}});
  CHECK(r.status == 200);
  CHECK(r.j["choices"][0]["token_ids"].get<std::vector<int>>() == kGoldenIds);
  CHECK(post(c, "/v1/completions", golden_request()).status == 401);

  REQUIRE(kill(pid, SIGTERM) == 0);
  std::string rest;
  while (std::fgets(line, sizeof line, f)) rest += line;
  int st = pclose(f);
  CAPTURE(rest);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(rest.find("SIGTERM") != std::string::npos);
  CHECK(rest.find("sk-cli-SECRET-77") == std::string::npos);
  CHECK(first.find("sk-cli-SECRET-77") == std::string::npos);

  // Usage errors exit 2 and name the flag.
  std::string bad = "sh -c 'unset REPRO_NOPE_KEY; \"" + test::binary() + "\" serve --model \"" + model +
                    "\" --port 0 --api-key-env REPRO_NOPE_KEY' 2>&1";
  FILE* g = popen(bad.c_str(), "r");
  REQUIRE(g);
  std::string out;
  while (std::fgets(line, sizeof line, g)) out += line;
  int gs = pclose(g);
  CAPTURE(out);
  REQUIRE(WIFEXITED(gs));
  CHECK(WEXITSTATUS(gs) == 2);
  CHECK(out.find("--api-key-env REPRO_NOPE_KEY") != std::string::npos);
}
