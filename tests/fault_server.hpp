// A fault-injecting OpenAI-compatible test server (cpp-httplib) on 127.0.0.1 with an ephemeral port.
// Answers /v1/chat/completions, /v1/completions and Azure's /openai/deployments/<d>/... with a
// deterministic text derived from the prompt (and the seed when temperature > 0), token ids and
// chosen-token logprobs, streamed (SSE) or not; or injects a fault: 429 + Retry-After, 500, 400,
// slow responses, hangs, cut streams, streams without end, garbage JSON, empty choices, resets; or
// replays cached responses (same id, X-Cache / Age headers) like a caching gateway.
// Records what it received (path, query, auth headers, body) and counts concurrent requests.
// Started and stopped by the test that owns it; every wait inside is bounded.
#pragma once
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace repro::test {

enum class Fault {
  none,
  http429,        // 429 with Retry-After: retry_after_s
  http500,        // 500 with an OpenAI-style error body
  http400,        // 400 (not retryable)
  slow,           // answers normally after slow_s
  hang,           // sends nothing for hang_s (client read timeout)
  cut_stream,     // stream: half the events, then the connection is dropped (non-stream: reset)
  no_done,        // stream: events without finish_reason and without [DONE], clean end
  garbage_json,   // 200 with a body (or an SSE event) that is not JSON
  empty_choices,  // 200 with "choices": []
  reset,          // TCP reset before any response byte
  stream_error,   // stream: an {"error": ...} event mid-stream
  endless,        // stream: chunks without end, as fast as the client reads, until it leaves
  drip            // 200, then one byte every 0.5 s, never finishing
};

struct FaultServerOptions {
  int threads = 64;
  double slow_s = 0.2;
  double hang_s = 5;
  int retry_after_s = 1;
  std::string expected_key;      // non-empty: require Bearer (or api-key for Azure paths), else 401
  bool echo_auth_in_errors = false;  // put the received auth header value into error bodies
  int error_pad = 0;                 // that many 'x' before an error message (moves the echoed key)
  bool token_ids = true;         // include choices[].token_ids
  bool crlf = false;             // SSE line ends \r\n
  bool vary_with_load = false;   // text depends on the number of requests in flight (nondeterminism)
  int token_delay_ms = 0;        // stream: pause between chunks
  std::string cert_file, key_file;  // both set: HTTPS (httplib::SSLServer)
  // ---- misbehaving endpoints (run gate and preflight tests)
  std::vector<std::string> models;  // non-empty: GET /v1/models lists these, and other model names get 404
  std::string redirect_to;          // non-empty: every request gets 302 with this Location
  bool html_login = false;          // every request gets 200 text/html (a login page)
  bool empty_content = false;       // 200 with an empty completion text and no tokens
  std::string fixed_text;           // non-empty: every non-streamed completion's text is this (hostile output)
  bool vary_per_request = false;    // every request gets a different text (nondeterminism, no load needed)
  // Non-empty: leakage between requests. A request's text changes while another request in flight
  // carries a prompt outside this set (its output depends on another request's contents).
  std::set<std::string> leak_known;
  int fail_of_5 = 0;                // POST n (from 0) with n % 5 >= 5 - fail_of_5 gets a 500 (the first ones pass)
  // Echo the received API key in "id", "model" and "system_fingerprint" with every character
  // written as a JSON \u escape: the raw body never contains the key, the parsed strings do.
  bool echo_key_escaped = false;
  // ---- a response cache in front of the model (non-streamed requests): an identical request body
  // gets the first response again, id included, at once
  bool response_cache = false;
  double cache_miss_s = 0;          // a miss waits this long first (the generation a hit skips)
  bool cache_headers = true;        // hits carry "X-Cache: HIT" and "Age: 1"; misses "X-Cache: MISS"
  // ---- an engine's own routes (info, metrics): GET path -> (content type, body), answered as given
  std::map<std::string, std::pair<std::string, std::string>> get_routes;
  std::string server_header;        // non-empty: every response carries "Server: <this>"
  // ---- what a server exposes beside its API (the server-metrics sampler's tests)
  std::string metrics_body;         // non-empty: GET /metrics answers it (text/plain), "{running}" replaced
                                    // by the completions in flight now; empty: 404
  std::string slots_body;           // the same for GET /slots (application/json); empty: 404
  int metrics_repeat = 1;           // the body is sent this many times over (a huge body)
  double metrics_delay_s = 0;       // /metrics and /slots start answering after this long
  double metrics_drip_s = 0;        // > 0: the body goes out one byte per this many seconds
};

struct SeenRequest {
  std::string path, api_version, authorization, api_key;
  nlohmann::json body;
};

class FaultServer {
 public:
  explicit FaultServer(FaultServerOptions o = {}) : opt_(std::move(o)) {
    ::signal(SIGPIPE, SIG_IGN);  // writes to a reset socket must not kill the test
    const int n = opt_.threads;
    if (!opt_.cert_file.empty())
      svr_ = std::make_unique<httplib::SSLServer>(opt_.cert_file.c_str(), opt_.key_file.c_str());
    else
      svr_ = std::make_unique<httplib::Server>();
    httplib::Server& svr = *svr_;
    svr.new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    svr.set_keep_alive_max_count(1000);
    auto h = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (misbehave(req, res)) return;
      if (opt_.models.empty()) return error_body(res, 404, "Not found", req);
      nlohmann::json data = nlohmann::json::array();
      for (const auto& m : opt_.models) data.push_back({{"id", m}, {"object", "model"}});
      res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    for (const auto& [path, route] : opt_.get_routes)
      svr.Get(path, [route = route](const httplib::Request&, httplib::Response& res) {
        res.set_content(route.second, route.first);
      });
    if (!opt_.server_header.empty())
      svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
        res.set_header("Server", opt_.server_header);
      });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      exposed(req, res, opt_.metrics_body, "text/plain; version=0.0.4");
    });
    svr.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
      exposed(req, res, opt_.slots_body, "application/json");
    });
    svr.Post("/v1/chat/completions", h);
    svr.Post("/v1/completions", h);
    svr.Post(R"(/openai/deployments/([^/]+)/chat/completions)", h);
    svr.Post(R"(/openai/deployments/([^/]+)/completions)", h);
    port_ = svr.bind_to_any_port("127.0.0.1");
    widen_backlog();
    thread_ = std::thread([this] { svr_->listen_after_bind(); });
    for (int i = 0; i < 500 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~FaultServer() { stop(); }
  FaultServer(const FaultServer&) = delete;
  FaultServer& operator=(const FaultServer&) = delete;

  void stop() {
    stopping_ = true;
    if (thread_.joinable()) {
      svr_->stop();
      thread_.join();
    }
  }

  int port() const { return port_; }
  std::string url() const {
    return (opt_.cert_file.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") + std::to_string(port_);
  }

  // The next requests, in arrival order, get these faults (before the default).
  void push_faults(std::vector<Fault> f) {
    std::lock_guard<std::mutex> l(mu_);
    for (Fault x : f) queue_.push_back(x);
  }
  // Requests whose prompt contains `marker` get `fault` (`times` < 0: always).
  void add_rule(std::string marker, Fault fault, int times = -1) {
    std::lock_guard<std::mutex> l(mu_);
    rules_.push_back({std::move(marker), fault, times});
  }
  void set_default(Fault f) { default_ = f; }

  std::vector<SeenRequest> seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }
  std::vector<double> arrivals() {
    std::lock_guard<std::mutex> l(mu_);
    return arrivals_;
  }
  // Every request on any route (GET /v1/models included), in arrival order: method, path, auth header.
  struct Received {
    std::string method, path, authorization;
  };
  std::vector<Received> received() {
    std::lock_guard<std::mutex> l(mu_);
    return received_;
  }
  SeenRequest last() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_.empty() ? SeenRequest{} : seen_.back();
  }

  std::atomic<int> requests{0}, current{0}, max_concurrent{0};

  // The deterministic reply the server gives for a prompt (what a test expects back).
  static std::vector<int> reply_ids(const std::string& prompt, uint64_t seed, bool sampled, int max_tokens,
                                    int load = 0) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : prompt) h = (h ^ c) * 1099511628211ull;
    if (sampled) h ^= seed * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(load) * 0xC2B2AE3D27D4EB4Full;
    std::vector<int> ids;
    for (int i = 0; i < max_tokens; ++i) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(static_cast<int>((h >> 33) % 16));
    }
    return ids;
  }
  static std::string word(int id) {
    static const char* w[16] = {"the", "cat", "sat", "on", "a", "mat", "and", "saw", "one", "red",
                                "bird", "fly", "over", "tall", "green", "trees"};
    return w[id % 16];
  }
  static std::string reply_text(const std::vector<int>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + word(ids[i]);
    return s;
  }
  static float logprob_of(int id, size_t pos) { return -0.125f * static_cast<float>(id) - 0.5f * static_cast<float>(pos % 3); }

 private:
  struct Rule {
    std::string marker;
    Fault fault;
    int times;
  };

  static std::string prompt_of(const nlohmann::json& b) {
    if (b.contains("prompt") && b["prompt"].is_string()) return b["prompt"].get<std::string>();
    std::string s;
    if (b.contains("messages") && b["messages"].is_array())
      for (auto& m : b["messages"])
        if (m.is_object() && m.contains("content") && m["content"].is_string()) s += m["content"].get<std::string>();
    return s;
  }

  Fault pick(const std::string& prompt) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& r : rules_)
      if (r.times != 0 && prompt.find(r.marker) != std::string::npos) {
        if (r.times > 0) --r.times;
        return r.fault;
      }
    if (!queue_.empty()) {
      Fault f = queue_.front();
      queue_.pop_front();
      return f;
    }
    return default_.load();
  }

  // Bounded sleep that ends early when the server stops.
  // GET /metrics or /slots: `body` ("{running}" = completions in flight), repeated, delayed or dripped.
  void exposed(const httplib::Request& req, httplib::Response& res, const std::string& body, const char* type) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (received_.size() < 20000) received_.push_back({req.method, req.path, req.get_header_value("Authorization")});
    }
    if (body.empty()) return error_body(res, 404, "Not found", req);
    nap(opt_.metrics_delay_s);
    std::string one = body;
    for (size_t at; (at = one.find("{running}")) != std::string::npos;)
      one.replace(at, 9, std::to_string(current.load()));
    std::string all;
    all.reserve(one.size() * static_cast<size_t>(std::max(1, opt_.metrics_repeat)));
    for (int i = 0; i < std::max(1, opt_.metrics_repeat); ++i) all += one;
    if (opt_.metrics_drip_s <= 0) return res.set_content(all, type);
    const double drip = opt_.metrics_drip_s;
    res.set_chunked_content_provider(type, [this, all, drip](size_t off, httplib::DataSink& sink) {
      if (stopping_ || off >= all.size()) {
        sink.done();
        return true;
      }
      nap(drip);
      return sink.write(all.data() + off, 1);
    });
  }

  void nap(double s) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
    while (!stopping_ && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  static std::vector<int> open_fds() {
    std::vector<int> fds;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const std::string n = e.path().filename().string();
      if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) fds.push_back(std::stoi(n));
    }
    return fds;
  }

  // httplib listens with a backlog of 5; SYNs beyond it wait for a 1 s retransmit. Find the
  // listening socket by its port and listen() again with a deep backlog (Linux updates it).
  void widen_backlog() {
    for (int fd : open_fds()) {
      int acc = 0;
      socklen_t al = sizeof acc;
      if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc) continue;
      sockaddr_in self{};
      socklen_t sl = sizeof self;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) == 0 && self.sin_family == AF_INET &&
          ntohs(self.sin_port) == port_)
        ::listen(fd, 4096);
    }
  }

  // TCP RST on the connection of this request: find its socket by the peer port and disconnect it.
  static void reset_connection(const httplib::Request& req) {
    for (int fd : open_fds()) {
      sockaddr_in peer{}, self{};
      socklen_t pl = sizeof peer, sl = sizeof self;
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 || peer.sin_family != AF_INET) continue;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
      if (ntohs(peer.sin_port) == req.remote_port && ntohs(self.sin_port) == req.local_port) {
        linger lg{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        sockaddr unspec{};
        unspec.sa_family = AF_UNSPEC;
        ::connect(fd, &unspec, sizeof unspec);  // Linux: disconnects an established socket with RST
        return;
      }
    }
  }

  // The usage block's prompt token count: the prompt's words (at least 1), as a word-level tokenizer counts.
  static size_t words_of(const std::string& prompt) {
    size_t n = 0;
    bool in_word = false;
    for (char ch : prompt) {
      const bool space = ch == ' ' || ch == '\n' || ch == '\t';
      n += !space && !in_word;
      in_word = !space;
    }
    return std::max<size_t>(n, 1);
  }

  // 1 when a request with a prompt outside opt_.leak_known was in flight at some moment of this one's.
  int leaked(uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = inflight_.find(id);
    return it != inflight_.end() && it->second.leaked ? 1 : 0;
  }

  void enter() {
    int c = ++current;
    int m = max_concurrent.load();
    while (c > m && !max_concurrent.compare_exchange_weak(m, c)) {
    }
  }

  void error_body(httplib::Response& res, int status, const std::string& msg, const httplib::Request& req) {
    std::string m = std::string(static_cast<size_t>(opt_.error_pad), 'x') + msg;
    if (opt_.echo_auth_in_errors)
      m += " (received authorization '" + req.get_header_value("Authorization") + "', api-key '" +
           req.get_header_value("api-key") + "')";
    res.status = status;
    res.set_content(nlohmann::json{{"error", {{"message", m}, {"type", "fault"}}}}.dump(), "application/json");
  }

  // Redirects, login pages and bad keys answer every path alike.
  bool misbehave(const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (received_.size() < 20000) received_.push_back({req.method, req.path, req.get_header_value("Authorization")});
    }
    if (!opt_.redirect_to.empty()) {
      res.status = 302;
      res.set_header("Location", opt_.redirect_to);
      return true;
    }
    if (opt_.html_login) {
      res.set_content("<!DOCTYPE html><html><body><form>Sign in</form></body></html>", "text/html");
      return true;
    }
    if (req.method == "GET" && !opt_.expected_key.empty() && req.get_header_value("Authorization") != "Bearer " + opt_.expected_key &&
        req.get_header_value("api-key") != opt_.expected_key) {
      error_body(res, 401, "Incorrect API key provided", req);
      return true;
    }
    return false;
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    const int nth = requests++;
    if (misbehave(req, res)) return;
    enter();
    struct Leave {
      FaultServer* s;
      bool armed = true;
      ~Leave() {
        if (armed) --s->current;
      }
    } leave{this};
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    const bool azure = req.path.rfind("/openai/deployments/", 0) == 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      arrivals_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
      if (seen_.size() < 20000)
        seen_.push_back({req.path, req.get_param_value("api-version"), req.get_header_value("Authorization"),
                         req.get_header_value("api-key"), body});
    }
    if (!opt_.expected_key.empty()) {
      bool ok = azure ? req.get_header_value("api-key") == opt_.expected_key
                      : req.get_header_value("Authorization") == "Bearer " + opt_.expected_key;
      if (!ok) return error_body(res, 401, "Incorrect API key provided", req);
    }
    if (body.is_discarded() || !body.is_object()) return error_body(res, 400, "body is not JSON", req);
    if (!opt_.models.empty() &&
        std::find(opt_.models.begin(), opt_.models.end(), body.value("model", std::string())) == opt_.models.end())
      return error_body(res, 404, "The model '" + body.value("model", std::string()) + "' does not exist", req);
    if (opt_.fail_of_5 > 0 && nth % 5 >= 5 - opt_.fail_of_5) return error_body(res, 500, "injected fault", req);
    const bool chat = req.path.find("chat/completions") != std::string::npos;
    const std::string prompt = prompt_of(body);
    struct InFlight {  // the requests in flight and whether an unknown prompt overlapped each (leak_known)
      FaultServer* s;
      uint64_t id;
      ~InFlight() {
        std::lock_guard<std::mutex> l(s->mu_);
        s->inflight_.erase(id);
      }
    };
    const uint64_t flight_id = static_cast<uint64_t>(nth);
    if (!opt_.leak_known.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      Flight me{prompt, false};
      for (auto& [other_id, other] : inflight_) {
        me.leaked = me.leaked || !opt_.leak_known.count(other.prompt);
        other.leaked = other.leaked || !opt_.leak_known.count(prompt);
      }
      inflight_[flight_id] = me;
    }
    const InFlight in_flight{this, flight_id};  // (no temporary: its destructor would erase it at once)
    const bool stream = body.value("stream", false);
    const std::string cache_key = req.path + " " + body.dump();
    if (opt_.response_cache && !stream) {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = cache_.find(cache_key); it != cache_.end()) {
        if (opt_.cache_headers) {
          res.set_header("X-Cache", "HIT");
          res.set_header("Age", "1");
        }
        return res.set_content(it->second, "application/json");
      }
    }
    const Fault f = pick(prompt);
    switch (f) {
      case Fault::http429:
        res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
        return error_body(res, 429, "Rate limit reached", req);
      case Fault::http500: return error_body(res, 500, "The server had an error", req);
      case Fault::http400: return error_body(res, 400, "Invalid parameter", req);
      case Fault::slow: nap(opt_.slow_s); break;
      case Fault::hang: nap(opt_.hang_s); break;
      case Fault::reset: reset_connection(req); return;
      case Fault::garbage_json:
        if (!stream) return res.set_content("{\"id\": \"x\", \"choices\": [ {oops", "application/json");
        break;
      case Fault::empty_choices:
        if (!stream)
          return res.set_content(R"({"id":"e","object":"chat.completion","created":1,"model":"m","choices":[]})",
                                 "application/json");
        break;
      case Fault::endless:
      case Fault::drip: {
        leave.armed = false;
        const std::string chunk =
            f == Fault::drip ? std::string(" ")
                             : "data: " + nlohmann::json{{"id", "x"}, {"choices", {{{"index", 0}, {"text", std::string(4000, 'a')}, {"finish_reason", nullptr}}}}}.dump() + "\n\n";
        res.set_chunked_content_provider(
            f == Fault::drip ? "application/json" : "text/event-stream",
            [this, chunk, f](size_t, httplib::DataSink& sink) {
              auto t0 = std::chrono::steady_clock::now();
              while (!stopping_ && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
                if (!sink.write(chunk.data(), chunk.size())) return false;
                if (f == Fault::drip) nap(0.5);
              }
              return false;
            },
            [this](bool) { --current; });
        return;
      }
      case Fault::cut_stream:
        if (!stream) {
          reset_connection(req);
          return;
        }
        break;
      default: break;
    }

    const double temperature = body.value("temperature", 0.0);
    const uint64_t seed = body.contains("seed") && body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>() : 0;
    const int max_tokens = std::max(1, std::min(body.value("max_tokens", 16), 4096));
    const bool want_lp = body.contains("logprobs") && !body["logprobs"].is_null() && body["logprobs"] != false;
    const int load = opt_.vary_with_load      ? current.load()
                     : opt_.vary_per_request  ? nth + 1
                     : opt_.leak_known.empty() ? 0
                                               : leaked(flight_id);
    std::vector<int> ids = reply_ids(prompt, seed, temperature > 0, max_tokens, load);
    if (opt_.empty_content) ids.clear();
    const bool echo = opt_.echo_key_escaped;
    const std::string model = echo ? kEcho : body.value("model", std::string("fault-model"));
    const std::string id = echo ? "cmpl-" + kEcho : "cmpl-" + std::to_string(requests.load());
    const int64_t created = 1700000000;
    const std::string fp = echo ? "fp_" + kEcho : "fp_fault_" + std::to_string(load);
    std::string key = req.get_header_value("Authorization");
    if (key.rfind("Bearer ", 0) == 0) key = key.substr(7);
    std::string escaped;
    for (unsigned char c : key) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      escaped += b;
    }
    auto echoed = [echo, escaped](std::string text) {
      if (!echo) return text;
      for (size_t p = 0; (p = text.find(kEcho, p)) != std::string::npos; p += escaped.size())
        text.replace(p, kEcho.size(), escaped);
      return text;
    };

    if (!stream) {
      nlohmann::json choice = {{"index", 0}, {"finish_reason", "length"}};
      const std::string text = opt_.fixed_text.empty() ? reply_text(ids) : opt_.fixed_text;
      if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
      else choice["text"] = text;
      if (opt_.token_ids) choice["token_ids"] = ids;
      if (want_lp) {
        if (chat) {
          nlohmann::json content = nlohmann::json::array();
          for (size_t i = 0; i < ids.size(); ++i)
            content.push_back({{"token", word(ids[i])}, {"logprob", logprob_of(ids[i], i)}, {"top_logprobs", nlohmann::json::array()}});
          choice["logprobs"] = {{"content", content}};
        } else {
          nlohmann::json toks = nlohmann::json::array(), lps = nlohmann::json::array();
          for (size_t i = 0; i < ids.size(); ++i) {
            toks.push_back(word(ids[i]));
            lps.push_back(logprob_of(ids[i], i));
          }
          choice["logprobs"] = {{"tokens", toks}, {"token_logprobs", lps}};
        }
      }
      nlohmann::json r = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"},
                          {"created", created}, {"model", model}, {"system_fingerprint", fp},
                          {"choices", nlohmann::json::array({choice})},
                          {"usage", {{"prompt_tokens", words_of(prompt)}, {"completion_tokens", ids.size()},
                                     {"total_tokens", words_of(prompt) + ids.size()}}}};
      if (opt_.response_cache) {
        nap(opt_.cache_miss_s);
        if (opt_.cache_headers) res.set_header("X-Cache", "MISS");
        std::lock_guard<std::mutex> l(mu_);
        cache_.emplace(cache_key, echoed(r.dump()));
      }
      res.set_content(echoed(r.dump()), "application/json");
      return;
    }

    // ---- streaming: build all events, then write them (a fault may cut or corrupt them)
    const std::string nl = opt_.crlf ? "\r\n" : "\n";
    std::vector<std::string> events;
    for (size_t i = 0; i < ids.size(); ++i) {
      nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
      std::string piece = (i ? " " : "") + word(ids[i]);
      if (chat) choice["delta"] = i == 0 ? nlohmann::json{{"role", "assistant"}, {"content", piece}} : nlohmann::json{{"content", piece}};
      else choice["text"] = piece;
      if (opt_.token_ids) choice["token_ids"] = {ids[i]};
      if (want_lp) {
        if (chat) choice["logprobs"] = {{"content", {{{"token", word(ids[i])}, {"logprob", logprob_of(ids[i], i)}}}}};
        else choice["logprobs"] = {{"tokens", {word(ids[i])}}, {"token_logprobs", {logprob_of(ids[i], i)}}};
      }
      if (i + 1 == ids.size() && f != Fault::no_done) choice["finish_reason"] = "length";
      nlohmann::json ev = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                           {"created", created}, {"model", model}, {"system_fingerprint", fp},
                           {"choices", nlohmann::json::array({choice})}};
      events.push_back("data: " + echoed(ev.dump()) + nl + nl);
      if (i == 0) events.push_back(": keep-alive comment" + nl + nl);
    }
    if (f == Fault::stream_error)
      events.insert(events.begin() + static_cast<long>(events.size() / 2),
                    "data: {\"error\":{\"message\":\"engine overloaded\",\"code\":503}}" + nl + nl);
    if (f == Fault::garbage_json) events.insert(events.begin() + static_cast<long>(events.size() / 2), "data: {\"choices\": [{garbage" + nl + nl);
    if (f == Fault::empty_choices) {
      events.clear();
      events.push_back("data: {\"id\":\"e\",\"choices\":[]}" + nl + nl);
    }
    if (f != Fault::no_done) {
      if (body.contains("stream_options"))
        events.push_back("data: " + nlohmann::json{{"id", id}, {"choices", nlohmann::json::array()},
                                                   {"usage", {{"prompt_tokens", words_of(prompt)}, {"completion_tokens", ids.size()}}}}.dump() + nl + nl);
      events.push_back("data: [DONE]" + nl + nl);
    }
    size_t stop_after = f == Fault::cut_stream ? events.size() / 2 : events.size();
    if (f == Fault::cut_stream && stop_after == 0) stop_after = 1;
    leave.armed = false;  // the stream outlives the handler: the releaser decrements
    const int delay = opt_.token_delay_ms;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, events, stop_after, f, delay](size_t, httplib::DataSink& sink) {
          for (size_t i = 0; i < stop_after; ++i) {
            const std::string& e = events[i];
            size_t half = e.size() / 2;  // two writes per event: the client sees split lines
            if (!sink.write(e.data(), half) || !sink.write(e.data() + half, e.size() - half)) return false;
            if (delay > 0) nap(delay / 1000.0);
          }
          if (f == Fault::cut_stream) return false;  // drop the connection mid-stream
          sink.done();
          return true;
        },
        [this](bool) { --current; });
  }

  static inline const std::string kEcho = "@ECHO-KEY@";
  FaultServerOptions opt_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<Fault> default_{Fault::none};
  std::mutex mu_;
  std::deque<Fault> queue_;
  std::vector<Rule> rules_;
  std::vector<SeenRequest> seen_;
  std::vector<Received> received_;
  std::vector<double> arrivals_;
  struct Flight {
    std::string prompt;
    bool leaked = false;
  };
  std::map<uint64_t, Flight> inflight_;
  std::map<std::string, std::string> cache_;  // response_cache: request -> first response body
};

}  // namespace repro::test
