// ctest-labels: model
// `serve` under hostile clients, on loopback with the real engine and the real tiny model: slow
// senders, clients that leave mid-request, shutdown with streams open, odd numbers and logprobs.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/serve/api.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Served {
  std::unique_ptr<Model> model;
  std::unique_ptr<Server> server;
  explicit Served(const std::filesystem::path& dir, ServerOptions so = {}) {
    model = load_model((dir / "stories260K.gguf").string());
    so.host = "127.0.0.1";
    so.port = 0;
    server = std::make_unique<Server>(*model, EngineOptions{}, so);
    server->start();
  }
};

// A raw client socket on loopback (from `source`, any 127.x address), with bounded I/O.
struct Sock {
  int fd = -1;
  Sock(int port, const char* source = "127.0.0.1") {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &src.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~Sock() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool send(const std::string& s) { return fd >= 0 && ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
  // Reads what arrives within `secs` (stops early at EOF or once `until` was seen).
  std::string read(double secs, const std::string& until = "", bool* eof = nullptr) {
    std::string out;
    auto t0 = Clock::now();
    while (fd >= 0 && since(t0) < secs) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        if (eof) *eof = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
      if (!until.empty() && out.find(until) != std::string::npos) break;
    }
    return out;
  }
};

std::string http_post(const std::string& path, const json& body) {
  std::string b = body.dump();
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(b.size()) + "\r\n\r\n" + b;
}

int health_active(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get("/health");
  REQUIRE(r);
  return json::parse(r->body)["active"].get<int>();
}

}  // namespace

TEST_CASE("serve: 73 slow-header clients cannot starve /health; they get 408 at the request deadline") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.request_timeout_s = 3;
  Served s(dir, so);
  const int port = s.server->port();
  // 73 connections that each send a request line, then one header line every 0.5 s (each line is
  // well within any per-read timeout; only a total deadline ends them).
  std::vector<std::unique_ptr<Sock>> slow;
  for (int i = 0; i < 73; ++i) {
    slow.push_back(std::make_unique<Sock>(port));
    REQUIRE(slow.back()->fd >= 0);
    slow.back()->send("POST /v1/completions HTTP/1.1\r\n");
  }
  std::atomic<bool> quit{false};
  std::thread trickle([&] {
    while (!quit) {
      for (auto& k : slow) k->send("X-Slow: 1\r\n");
      for (int i = 0; i < 10 && !quit; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));

  // /health answers while they trickle, from the same address and from another one.
  for (const char* from : {"127.0.0.1", "127.0.0.2"}) {
    CAPTURE(from);
    Sock h(port, from);
    REQUIRE(h.fd >= 0);
    auto t0 = Clock::now();
    h.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string r = h.read(4, "\"status\"");
    CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(since(t0) < 2.5);
  }
  // The deadline: every slow connection is closed by about request_timeout_s; the last ones got 408.
  int closed = 0, got408 = 0;
  auto t0 = Clock::now();
  for (auto& k : slow) {
    bool eof = false;
    std::string r = k->read(std::max(0.1, 5.0 - since(t0)), "", &eof);
    if (eof) ++closed;
    if (r.find("HTTP/1.1 408") != std::string::npos) ++got408;
  }
  CHECK(closed == 73);
  CHECK(got408 >= 1);
  ServerStats st = s.server->stats();
  CHECK(st.timed_out >= 1);
  CHECK(st.evicted + st.rejected >= 73 - so.max_client_conns);

  // Stop is prompt with slow senders still connecting.
  std::vector<std::unique_ptr<Sock>> more;
  for (int i = 0; i < 20; ++i) {
    more.push_back(std::make_unique<Sock>(port));
    more.back()->send("POST /v1/completions HTTP/1.1\r\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto ts = Clock::now();
  s.server->stop();
  CHECK(since(ts) < 2.0);
  quit = true;
  trickle.join();
}

TEST_CASE("serve: a client that leaves cancels its sequence at the next step") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  // Each step takes at least 2 ms, so 1000 tokens would keep a sequence busy for 2 s or more.
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  Served s(dir, so);
  const int port = s.server->port();
  json q = {{"prompt", "Lily"}, {"max_tokens", 1000}, {"ignore_eos", true}};

  SUBCASE("32 streams dropped after their first event") {
    q["stream"] = true;
    std::vector<std::unique_ptr<Sock>> socks;
    for (int i = 0; i < 32; ++i) {
      socks.push_back(std::make_unique<Sock>(port));
      REQUIRE(socks.back()->send(http_post("/v1/completions", q)));
    }
    for (auto& k : socks) CHECK(k->read(10, "data: ").find("data: ") != std::string::npos);
    CHECK(health_active(port) > 0);
    for (auto& k : socks) k->close();
  }
  SUBCASE("8 non-streamed requests whose sockets close") {
    std::vector<std::unique_ptr<Sock>> socks;
    for (int i = 0; i < 8; ++i) {
      socks.push_back(std::make_unique<Sock>(port));
      REQUIRE(socks.back()->send(http_post("/v1/completions", q)));
    }
    for (int i = 0; i < 500 && s.server->stats().active < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(s.server->stats().active == 8);
    for (auto& k : socks) k->close();
  }
  auto t0 = Clock::now();
  while (health_active(port) > 0 && since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  double drained = since(t0);
  CHECK(drained < 0.8);
  CHECK(s.server->stats().cancelled >= 8);
  // A short request is served at once, not after the abandoned ones.
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto t1 = Clock::now();
  auto r = c.Post("/v1/completions", json{{"prompt", "Lily"}, {"max_tokens", 8}}.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(since(t1) < 0.5);
  s.server->stop();
}

TEST_CASE("serve: stop() finishes what it can within the grace period and ends every stream with [DONE]") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.shutdown_grace_s = 1;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  Served s(dir, so);
  const int port = s.server->port();
  json longq = {{"prompt", "Lily"}, {"max_tokens", 1500}, {"ignore_eos", true}};
  json shortq = {{"prompt", "Lily"}, {"max_tokens", 60}, {"ignore_eos", true}};
  auto stream_of = [](json q) {
    q["stream"] = true;
    return q;
  };
  Sock long_stream(port), short_stream(port), long_plain(port);
  REQUIRE(long_stream.send(http_post("/v1/completions", stream_of(longq))));
  REQUIRE(long_plain.send(http_post("/v1/completions", longq)));
  for (int i = 0; i < 1000 && s.server->stats().active < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(short_stream.send(http_post("/v1/completions", stream_of(shortq))));
  CHECK(long_stream.read(5, "data: ").find("data: ") != std::string::npos);
  CHECK(short_stream.read(5, "data: ").find("data: ") != std::string::npos);

  auto t0 = Clock::now();
  std::thread stopper([&] { s.server->stop(); });
  std::string ls = long_stream.read(6, "data: [DONE]");
  std::string ss = short_stream.read(6, "data: [DONE]");
  std::string lp = long_plain.read(6, "}}");
  stopper.join();
  const double took = since(t0);
  CAPTURE(took);
  CHECK(took < 3.0);
  // The short stream finished normally within the grace period.
  CHECK(ss.find("\"finish_reason\":\"length\"") != std::string::npos);
  CHECK(ss.find("data: [DONE]") != std::string::npos);
  // The long one was cut: a final error event naming the shutdown, then [DONE].
  CHECK(ls.find("server_shutting_down") != std::string::npos);
  CHECK(ls.find("data: [DONE]") != std::string::npos);
  // The non-streamed one got a 503 with the same code.
  CHECK(lp.find("HTTP/1.1 503") != std::string::npos);
  CHECK(lp.find("server_shutting_down") != std::string::npos);
}

TEST_CASE("serve: the real binary exits promptly on SIGTERM with a slow client and an open stream") {
  REPRO_REQUIRE_MODELS(dir);
  const std::string model = (dir / "stories260K.gguf").string();
  std::string cmd = "sh -c 'echo $$; exec \"" + test::binary() + "\" serve --model \"" + model +
                    "\" --port 0 --shutdown-grace 1' 2>&1";
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
  REQUIRE(first.rfind("listening on http://127.0.0.1:", 0) == 0);
  const int port = std::atoi(first.c_str() + std::strlen("listening on http://127.0.0.1:"));
  Sock slow(port);
  slow.send("POST /v1/completions HTTP/1.1\r\n");
  Sock stream(port);
  stream.send(http_post("/v1/completions", json{{"prompt", "Lily"}, {"max_tokens", 2000}, {"ignore_eos", true},
                                                {"stream", true}}));
  CHECK(stream.read(5, "data: ").find("data: ") != std::string::npos);
  auto t0 = Clock::now();
  REQUIRE(kill(pid, SIGTERM) == 0);
  std::string tail = stream.read(8, "data: [DONE]");
  std::string rest;
  while (std::fgets(line, sizeof line, f)) rest += line;
  int st = pclose(f);
  CAPTURE(rest);
  CHECK(since(t0) < 4.0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(tail.find("data: [DONE]") != std::string::npos);
}

TEST_CASE("serve: numbers beyond double or int64 get 400 naming the field; top-N logprobs are returned") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_tokens_limit = 4000;
  Served s(dir, so);
  httplib::Client c("127.0.0.1", s.server->port());
  c.set_read_timeout(30, 0);
  struct Case {
    std::string body;
    const char* fragment;
  };
  for (const Case& k : std::vector<Case>{
           {R"({"prompt":"a","temperature":1e309})", "not valid JSON"},
           {R"({"prompt":"a","max_tokens":1e20})", "'max_tokens' is 1e+20, over this server's limit of 4000 (--max-tokens-limit)"},
           {R"({"prompt":"a","max_tokens":18446744073709551615})",
            "'max_tokens' is 18446744073709551615, over this server's limit of 4000"},
           {R"({"prompt":"a","max_tokens":99999999999999999999999})", "over this server's limit of 4000"},
           {R"({"prompt":"a","max_tokens":4001})", "'max_tokens' is 4001, over this server's limit of 4000"},
           {R"({"prompt":"a","seed":18446744073709551615})", "'seed' is 18446744073709551615, too large"},
           {R"({"prompt":"a","top_k":1e300})", "'top_k' is"},
       }) {
    CAPTURE(k.body);
    auto r = c.Post("/v1/completions", k.body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find(k.fragment) != std::string::npos);
  }
  auto chat_bad = c.Post("/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":3})", "application/json");
  REQUIRE(chat_bad);
  CHECK(chat_bad->status == 400);
  CHECK(chat_bad->body.find("needs 'logprobs': true") != std::string::npos);

  // Chat: top_logprobs = 3 gives 3 alternatives per token, most likely first; greedy picks the first.
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    json q = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}, {"max_tokens", 12},
              {"logprobs", true}, {"top_logprobs", 3}, {"stream", stream}};
    auto r = c.Post("/v1/chat/completions", q.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    std::vector<json> entries;
    if (!stream) {
      const json body = json::parse(r->body);
      for (const auto& e : body["choices"][0]["logprobs"]["content"]) entries.push_back(e);
    } else {
      size_t pos = 0;
      while ((pos = r->body.find("data: {", pos)) != std::string::npos) {
        size_t end = r->body.find("\n\n", pos);
        json ev = json::parse(r->body.substr(pos + 6, end - pos - 6));
        pos = end;
        const json& lp = ev["choices"][0]["logprobs"];
        if (!lp.is_null())
          for (const auto& e : lp["content"]) entries.push_back(e);
      }
    }
    REQUIRE(entries.size() == 12);
    for (const auto& e : entries) {
      REQUIRE(e["top_logprobs"].size() == 3);
      CHECK(e["top_logprobs"][0]["token"] == e["token"]);
      CHECK(e["top_logprobs"][0]["logprob"].get<double>() == e["logprob"].get<double>());
      CHECK(e["top_logprobs"][0]["logprob"].get<double>() >= e["top_logprobs"][1]["logprob"].get<double>());
      CHECK(e["top_logprobs"][1]["logprob"].get<double>() >= e["top_logprobs"][2]["logprob"].get<double>());
      CHECK(e["top_logprobs"][2]["bytes"].is_array());
    }
  }
  // Completions: logprobs = 2 gives one {token: logprob} object per token with up to 2 entries.
  auto r = c.Post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"logprobs", 2}}.dump(),
                  "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json lp = json::parse(r->body)["choices"][0]["logprobs"];
  REQUIRE(lp["top_logprobs"].size() == 10);
  for (size_t i = 0; i < 10; ++i) {
    const json& m = lp["top_logprobs"][i];
    CHECK(m.is_object());
    CHECK((m.size() == 2 || m.size() == 1));
    REQUIRE(m.contains(lp["tokens"][i].get<std::string>()));
    CHECK(m[lp["tokens"][i].get<std::string>()].get<double>() == lp["token_logprobs"][i].get<double>());
  }
  s.server->stop();
}

TEST_CASE("serve: a body nested 100,000 or 400,000 deep gets 400 naming the nesting limit; the server lives on") {
  REPRO_REQUIRE_MODELS(dir);
  Served s(dir);
  httplib::Client c("127.0.0.1", s.server->port());
  c.set_read_timeout(30, 0);
  auto nested = [](const std::string& open, const std::string& close, int depth) {
    std::string v;
    v.reserve((open.size() + close.size()) * static_cast<size_t>(depth) + 2);
    for (int i = 0; i < depth; ++i) v += open;
    v += "1";
    for (int i = 0; i < depth; ++i) v += close;
    return v;
  };
  struct Case {
    const char* path;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" +
                              nested("{\"a\":", "}", 100000) + "}}}"},
      {"/v1/completions", R"({"prompt":"a","stop":)" + nested("[", "]", 400000) + "}"},
      {"/v1/completions", R"({"prompt":)" + nested("[", "]", 400000) + "}"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":)" + nested("[", "]", 400000) + "}]}"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.path);
    CAPTURE(k.body.substr(0, 80));
    REQUIRE(k.body.size() < (1u << 20));
    auto r = c.Post(k.path, k.body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    const json e = json::parse(r->body)["error"];
    CHECK(e["code"] == "invalid_json");
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["message"].get<std::string>().find("nested deeper than 256 levels") != std::string::npos);
  }
  // 256 levels are still accepted as JSON (then refused, or not, for what they mean).
  auto ok = c.Post("/v1/completions", R"({"prompt":"a","stop":)" + nested("[", "]", 254) + "}", "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 400);
  CHECK(ok->body.find("'stop' must hold non-empty strings") != std::string::npos);
  auto r = c.Post("/v1/completions", json{{"prompt", "Lily"}, {"max_tokens", 4}}.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  s.server->stop();
}

TEST_CASE("serve: /health and /v1/models answer within a second while every HTTP worker holds a stream") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.http_threads = 4;
  so.shutdown_grace_s = 0;
  // Each step takes at least 5 ms: 2000 tokens keep a stream open for 10 s or more.
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(5)); };
  Served s(dir, so);
  const int port = s.server->port();
  json q = {{"prompt", "Lily"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}};
  std::vector<std::unique_ptr<Sock>> streams;
  for (int i = 0; i < so.http_threads; ++i) {
    streams.push_back(std::make_unique<Sock>(port));
    REQUIRE(streams.back()->send(http_post("/v1/completions", q)));
  }
  for (auto& k : streams) REQUIRE(k->read(10, "data: ").find("data: ") != std::string::npos);
  // One more generation request waits for a worker; it is not refused.
  Sock waiting(port);
  REQUIRE(waiting.send(http_post("/v1/completions", json{{"prompt", "Lily"}, {"max_tokens", 4}})));
  for (int round = 0; round < 3; ++round) {
    for (const char* path : {"/health", "/v1/models"}) {
      CAPTURE(round);
      CAPTURE(path);
      Sock h(port);
      REQUIRE(h.fd >= 0);
      auto t0 = Clock::now();
      h.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
      std::string r = h.read(3, "}");
      CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
      CHECK(since(t0) < 1.0);
    }
  }
  // The generation request still waits for a worker of its own: neither refused nor answered early.
  CHECK(waiting.read(0.2).empty());
  for (auto& k : streams) k->close();
  std::string w = waiting.read(10, "}}");
  CHECK(w.rfind("HTTP/1.1 200", 0) == 0);
  s.server->stop();
}

TEST_CASE("serve: a Content-Length over --max-body-bytes gets 413 at once, without waiting for the body") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_body_bytes = 4096;
  Served s(dir, so);
  const int port = s.server->port();
  for (const char* len : {"10000000000", "4097", "99999999999999999999999999"}) {
    CAPTURE(len);
    Sock k(port);
    auto t0 = Clock::now();
    REQUIRE(k.send(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               "Content-Length: ") + len + "\r\n\r\n{\"prompt\":"));
    bool eof = false;
    std::string r = k.read(5, "", &eof);
    CHECK(since(t0) < 1.0);
    CHECK(eof);
    CHECK(r.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(r.find("larger than this server's limit of 4096 bytes (--max-body-bytes)") != std::string::npos);
    CHECK(r.find("Connection: close") != std::string::npos);
  }
  // At the limit the body is read as usual.
  httplib::Client c("127.0.0.1", port);
  std::string body = json{{"prompt", "Lily"}, {"max_tokens", 2}}.dump();
  body += std::string(4096 - body.size(), ' ');
  auto r = c.Post("/v1/completions", body, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  s.server->stop();
}

TEST_CASE("fuzz corpus fuzz/corpus/request replays through the fuzz entry without a trap (regression)") {
  const auto files = test::corpus_files("request");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(serve::fuzz_request_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  CHECK(files.size() >= 30);
}

TEST_CASE("serve: a NUL inside a prompt or a chat message is kept: it is one more prompt token, not the end") {
  REPRO_REQUIRE_MODELS(dir);
  Served s(dir);
  httplib::Client c("127.0.0.1", s.server->port());
  c.set_read_timeout(30, 0);
  auto prompt_tokens = [&](const char* path, const json& q) {
    auto r = c.Post(path, q.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return json::parse(r->body)["usage"]["prompt_tokens"].get<int>();
  };
  const std::string plain = "Lily went to the park", with_nul = std::string("Lily\0 went to the park", 22);
  const int base = prompt_tokens("/v1/completions", {{"prompt", plain}, {"max_tokens", 1}});
  CHECK(prompt_tokens("/v1/completions", {{"prompt", with_nul}, {"max_tokens", 1}}) == base + 1);
  auto chat = [](const std::string& text) {
    return json{{"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 1}};
  };
  CHECK(prompt_tokens("/v1/chat/completions", chat(with_nul)) == prompt_tokens("/v1/chat/completions", chat(plain)) + 1);
  // The text offsets of the answer count the prompt's bytes, the NUL included.
  auto r = c.Post("/v1/completions", json{{"prompt", with_nul}, {"max_tokens", 1}, {"logprobs", 0}}.dump(),
                  "application/json");
  REQUIRE(r);
  CHECK(json::parse(r->body)["choices"][0]["logprobs"]["text_offset"][0] == 22);
  s.server->stop();
}

TEST_CASE("serve: a chunked body growing past --max-body-bytes gets 413 once it is over, not at the deadline") {
  REPRO_REQUIRE_MODELS(dir);
  ServerOptions so;
  so.max_body_bytes = 4096;
  Served s(dir, so);
  Sock k(s.server->port());
  REQUIRE(k.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "4000\r\n" + std::string(0x4000, ' ') + "\r\n";  // 16 KiB per chunk, never the last
  size_t sent = 0;
  std::string r;
  bool eof = false;
  auto t0 = Clock::now();
  while (since(t0) < 3 && r.empty() && !eof) {
    pollfd p{k.fd, POLLOUT, 0};
    if (::poll(&p, 1, 10) > 0 && (p.revents & POLLOUT)) {
      ssize_t n = ::send(k.fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    r += k.read(0.01, "", &eof);
  }
  r += k.read(2, "}}", &eof);
  CAPTURE(sent);
  CHECK(since(t0) < 1.5);
  CHECK(r.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(r.find("larger than this server's limit of 4096 bytes (--max-body-bytes)") != std::string::npos);
  // A chunked body within the limit is read as usual.
  Sock ok(s.server->port());
  const std::string body = json{{"prompt", "Lily"}, {"max_tokens", 2}}.dump();
  char len[16];
  std::snprintf(len, sizeof len, "%zx", body.size());
  REQUIRE(ok.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + std::string(len) + "\r\n" + body +
                  "\r\n0\r\n\r\n"));
  CHECK(ok.read(10, "}}").rfind("HTTP/1.1 200", 0) == 0);
  s.server->stop();
}
