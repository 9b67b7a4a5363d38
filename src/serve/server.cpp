// `repro-audit serve`: OpenAI-compatible HTTP server over the local Engine (cpp-httplib).
//
// Threads: this file's accept thread and worker pool run the connections (httplib parses and
// routes each request); ONE engine thread
// (scheduler.cpp) owns the Engine. A handler validates the request (api.cpp, over the wire format
// of repro/openai/protocol.hpp), puts a Job on the
// scheduler's queue and waits on it; the engine thread routes tokens and results back.
//
// Hostile clients (docs/RELIABILITY.md). Each connection is served by this file's own loop over its
// own socket stream (GuardedHttp::process_and_close_socket), so that:
//   - a request's headers and body must arrive within request_timeout_s in total (else 408 and
//     close), however slowly the bytes trickle in;
//   - one client address holds at most max_client_conns connections that are idle or still sending
//     a request; over that, its longest-waiting one is closed, or the new one refused with 503;
//   - when every worker is busy and connections wait, the connection that has been idle or sending
//     its request the longest (1 s at least) is closed, so real requests get a worker within about
//     a second; GET requests (/health, /v1/models) are then answered by two reserve workers, even
//     while every worker holds a stream;
//   - a Content-Length over max_body_bytes gets 413 at once, without reading the body; a chunked
//     body gets 413 as soon as the request has taken more than its byte budget;
//   - a client that goes away (closed socket, failed stream write) cancels its sequence before the
//     engine's next step;
//   - stop() lets in-flight requests finish for shutdown_grace_s, ends every stream with a final
//     event and [DONE], and closes idle and slow connections at once.
#include "repro/serve/server.hpp"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/serve/api.hpp"
#include "repro/serve/scheduler.hpp"

namespace repro {

using json = nlohmann::json;
using namespace serve;

std::string server_fingerprint(const std::string& version, Mode mode, const std::string& model_sha256) {
  return "ra-" + sha256_hex(version + "|" + mode_name(mode) + "|" + model_sha256).substr(0, 16);
}

namespace {

using Clock = std::chrono::steady_clock;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e.what(), e.type, e.param, e.code)), "application/json");
}

// A complete HTTP response written straight to a socket (for connections refused or timed out
// before httplib parsed a request). Best effort: never blocks.
void send_raw(int fd, int status, const char* reason, const std::string& message, const std::string& code,
              const char* extra_header = "") {
  std::string body = dump(error_json(message, "invalid_request_error", "", code));
  std::string r = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{}",
      status, reason, body.size(), extra_header, body);
  (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// ---------------------------------------------------------------------------------------------
// Connections: who is connected, in which phase, since when.
// ---------------------------------------------------------------------------------------------

enum class Phase { Idle, Reading, Handling };

struct Conn {
  int fd = -1;
  std::string addr;
  int port = 0;
  Phase phase = Phase::Idle;  // guarded by ConnTable::mu
  Clock::time_point since;    // start of the phase (guarded by ConnTable::mu)
  Clock::time_point deadline; // while Reading: the request must be complete by then (owner thread only)
  bool deadline_hit = false;  // owner thread only
  size_t read_bytes = 0;      // bytes of the current request read so far (owner thread only)
  bool too_large = false;     // the current request went past its byte budget (owner thread only)
  bool evicted = false;       // guarded by ConnTable::mu
  bool close_after = false;   // the response refused the request's body: close once it is sent (owner thread only)
};

thread_local Conn* t_conn = nullptr;  // the connection this worker thread serves

struct ConnTable {
  std::mutex mu;
  std::list<Conn*> conns;
  std::atomic<bool> closing_waiting{false};  // shutdown: idle and reading connections end now
  std::atomic<bool> closing_all{false};      // shutdown, flush time over: every connection ends
  std::atomic<int64_t> evicted{0}, rejected{0}, timed_out{0};
  int max_client_conns = 32;
  static constexpr double kMinAgeS = 1.0;  // a connection sending its request is never closed sooner

  bool evictable(const Conn* c, Clock::time_point now) const {
    if (c->evicted) return false;
    if (c->phase == Phase::Idle) return true;
    return c->phase == Phase::Reading && now - c->since >= std::chrono::duration<double>(kMinAgeS);
  }
  void evict_locked(Conn* c) {
    c->evicted = true;
    ::shutdown(c->fd, SHUT_RDWR);  // its worker's poll/recv returns at once; the worker closes it
    ++evicted;
  }
  // Registers a new connection; false when its address is over the cap and nothing can be evicted.
  bool open(Conn* c) {
    std::lock_guard<std::mutex> lk(mu);
    const auto now = Clock::now();
    int waiting = 0;
    Conn* oldest = nullptr;
    for (Conn* o : conns) {
      if (o->addr != c->addr || o->phase == Phase::Handling || o->evicted) continue;
      ++waiting;
      if (evictable(o, now) && (!oldest || o->since < oldest->since)) oldest = o;
    }
    if (waiting >= max_client_conns) {
      if (!oldest) {
        ++rejected;
        return false;
      }
      evict_locked(oldest);
    }
    c->phase = Phase::Idle;
    c->since = now;
    conns.push_back(c);
    return true;
  }
  void close(Conn* c) {
    std::lock_guard<std::mutex> lk(mu);
    conns.remove(c);
  }
  void set_phase(Conn* c, Phase p) {
    std::lock_guard<std::mutex> lk(mu);
    c->phase = p;
    c->since = Clock::now();
  }
  // Makes room for a waiting connection: closes the one idle or sending its request the longest.
  bool evict_oldest() {
    std::lock_guard<std::mutex> lk(mu);
    const auto now = Clock::now();
    Conn* oldest = nullptr;
    for (Conn* o : conns)
      if (evictable(o, now) && (!oldest || o->since < oldest->since)) oldest = o;
    if (oldest) evict_locked(oldest);
    return oldest != nullptr;
  }
  void shutdown_where(bool all) {
    std::lock_guard<std::mutex> lk(mu);
    for (Conn* o : conns)
      if (all || o->phase != Phase::Handling) ::shutdown(o->fd, SHUT_RDWR);
  }
  int handling() {
    std::lock_guard<std::mutex> lk(mu);
    return static_cast<int>(std::count_if(conns.begin(), conns.end(), [](Conn* o) { return o->phase == Phase::Handling; }));
  }
  size_t size() {
    std::lock_guard<std::mutex> lk(mu);
    return conns.size();
  }
};

// The socket stream httplib reads requests from and writes responses to. Every wait is sliced
// (100 ms) so deadlines and shutdown are seen promptly.
class GuardStream : public httplib::Stream {
 public:
  // `budget`: the most bytes one request (headers, body and chunk framing) may take: a chunked
  // body has no Content-Length to refuse up front, and httplib would read any amount of it.
  GuardStream(Conn& c, ConnTable& t, double read_timeout_s, double write_timeout_s, size_t budget)
      : c_(c), t_(t), read_timeout_s_(read_timeout_s), write_timeout_s_(write_timeout_s), budget_(budget) {}

  bool buffered() const { return off_ < len_; }

  // Waits for `events`; false on timeout, on the request deadline, or on shutdown.
  bool wait(short events, double timeout_s) const {
    auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    const bool reading = c_.phase == Phase::Reading;
    if (reading) end = std::min(end, c_.deadline);
    for (;;) {
      if (t_.closing_all || (c_.phase != Phase::Handling && t_.closing_waiting)) return false;
      auto now = Clock::now();
      if (now >= end) {
        if (reading && now >= c_.deadline) c_.deadline_hit = true;
        return false;
      }
      int ms = static_cast<int>(std::min<int64_t>(
          100, std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count() + 1));
      pollfd p{c_.fd, events, 0};
      int r = ::poll(&p, 1, ms);
      if (r > 0) return true;  // ready, or hung up / error: the next recv/send says which
      if (r < 0 && errno != EINTR) return false;
    }
  }

  bool is_readable() const override { return buffered() || wait(POLLIN, read_timeout_s_); }
  bool is_writable() const override {
    return !c_.deadline_hit && !c_.too_large && wait(POLLOUT, write_timeout_s_) && !peer_gone();
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!wait(POLLIN, read_timeout_s_)) return -1;
      ssize_t n;
      do n = ::recv(c_.fd, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    if (c_.phase == Phase::Reading && (c_.read_bytes += std::min(size, len_ - off_)) > budget_) {
      c_.too_large = true;  // the 413 is sent by the connection loop
      return -1;
    }
    size_t k = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, k);
    off_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (c_.deadline_hit || c_.too_large) return -1;  // the 408 / 413 is sent by the connection loop instead
    // Non-blocking: POLLOUT means some room, not room for `size` bytes, so a blocking send to a
    // client that reads nothing would hang past the write timeout. A partial count is fine (the
    // caller writes the rest); no room yet waits again, within the write timeout.
    for (;;) {
      if (!wait(POLLOUT, write_timeout_s_)) return -1;
      const ssize_t n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.addr;
    port = c_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ip.clear();
    port = 0;
    if (::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

  // The peer closed its end (or the socket failed): nothing more can be delivered.
  bool peer_gone() const { return gone(c_.fd); }
  static bool gone(int fd) {
    pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
  }
  static void address_of(const sockaddr_storage& ss, std::string& ip, int& port) {
    char buf[INET6_ADDRSTRLEN] = {0};
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
      port = ntohs(a->sin6_port);
    }
    ip = buf;
  }

 private:
  Conn& c_;
  ConnTable& t_;
  double read_timeout_s_, write_timeout_s_;
  size_t budget_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// The worker pool. Each accepted connection waits in one queue; `workers` threads take them in
// order. When every worker is busy (streams hold theirs for as long as they run), `reserve` more
// threads serve only connections whose first request is a GET (/health, /v1/models: answers that
// never wait on the engine), one request each, so a liveness probe is answered within about 50 ms
// however long the streams run. Generation requests keep waiting in order for a worker; they are
// never refused for being queued.
class Pool {
 public:
  using Serve = std::function<void(int fd, bool reserve)>;
  Pool(size_t workers, size_t reserve, Serve serve) : n_(workers), serve_(std::move(serve)) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    for (size_t i = 0; i < reserve; ++i) threads_.emplace_back([this] { work_reserve(); });
  }
  void enqueue(int fd) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.push_back({fd});
    }
    cv_.notify_one();
  }
  // Workers finish the connections already queued (shutdown closes them quickly), then exit.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      down_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  // Connections waiting for a worker while none is free.
  bool starved() {
    std::lock_guard<std::mutex> lk(mu_);
    return !jobs_.empty() && busy_ >= n_;
  }

 private:
  struct Waiting {
    int fd;
    bool not_get = false;  // its first bytes are there and do not start a GET
  };

  void work() {
    for (;;) {
      int fd;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return down_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        fd = jobs_.front().fd;
        jobs_.pop_front();
        ++busy_;
      }
      serve_(fd, false);
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
    }
  }

  // The first request's bytes, peeked without reading them: "GET " (true), anything else or
  // nothing yet (false; `not_get` once it is known).
  static bool starts_get(Waiting& w) {
    char b[4];
    ssize_t n = ::recv(w.fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) w.not_get = true;
    if (n <= 0) return false;
    if (std::memcmp(b, "GET ", static_cast<size_t>(n)) != 0) w.not_get = true;
    return n == 4 && !w.not_get;
  }

  void work_reserve() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!down_) {
      cv_reserve_.wait_for(lk, std::chrono::milliseconds(50));
      if (down_ || busy_ < n_) continue;
      auto it = std::find_if(jobs_.begin(), jobs_.end(), [](Waiting& w) { return !w.not_get && starts_get(w); });
      if (it == jobs_.end()) continue;
      const int fd = it->fd;
      jobs_.erase(it);
      lk.unlock();
      serve_(fd, true);
      lk.lock();
    }
  }

  const size_t n_;
  Serve serve_;
  std::vector<std::thread> threads_;
  std::deque<Waiting> jobs_;
  std::mutex mu_;
  std::condition_variable cv_, cv_reserve_;
  size_t busy_ = 0;  // regular workers serving a connection
  bool down_ = false;
};

// httplib's Server with this file's accept loop and connection loop (keep-alive, deadlines, caps,
// shutdown). httplib only parses requests and routes them; listen_after_bind() is never called.
class GuardedHttp : public httplib::Server {
 public:
  ConnTable table;
  double request_timeout_s = 10, write_timeout_s = 5, keep_alive_s = 2;
  size_t keep_alive_max = 100;
  size_t max_body_bytes = 1 << 20;
  std::string body_limit_message;  // the 413's text
  // Headers and chunk framing beside the body: httplib takes 8 KiB per header line.
  static constexpr size_t kHeaderBudget = 256 * 1024;

  // One connection, on the calling worker; a reserve worker serves one request, then closes.
  void serve(int fd, bool reserve) { process_connection(fd, reserve ? 1 : keep_alive_max); }

  // Accepts connections on the bound socket until `quit`, handing each to the pool.
  void accept_loop(Pool& pool, const std::atomic<bool>& quit) {
    while (!quit) {
      const socket_t ls = svr_sock_;
      if (ls == INVALID_SOCKET) break;
      pollfd p{ls, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: wait a little (the connection stays in the backlog); else retry.
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      pool.enqueue(fd);
    }
  }
  // Closes the listening socket (after the accept loop ended).
  void close_listener() {
    socket_t ls = svr_sock_.exchange(INVALID_SOCKET);
    if (ls != INVALID_SOCKET) ::close(ls);
  }

 private:
  bool process_and_close_socket(socket_t sock) override { return process_connection(sock, keep_alive_max); }

  bool process_connection(socket_t sock, size_t max_requests) {
    Conn c;
    c.fd = sock;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getpeername(sock, reinterpret_cast<sockaddr*>(&ss), &len) == 0) GuardStream::address_of(ss, c.addr, c.port);
    bool ret = false;
    if (!table.open(&c)) {
      send_raw(sock, 503, "Service Unavailable",
               fmt::format("too many connections from {} that are idle or still sending a request (this server "
                           "allows {}: --max-client-conns); retry later",
                           c.addr, table.max_client_conns),
               "too_many_connections", "Retry-After: 1\r\n");
    } else {
      t_conn = &c;
      GuardStream strm(c, table, request_timeout_s, write_timeout_s,
                       max_body_bytes + max_body_bytes / 8 + kHeaderBudget);
      for (size_t n = 0; n < max_requests && svr_sock_ != INVALID_SOCKET && !table.closing_waiting; ++n) {
        // Idle (keep-alive) until the first byte of the next request, then its deadline runs.
        if (!strm.buffered() && !strm.wait(POLLIN, keep_alive_s)) break;
        c.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(request_timeout_s));
        table.set_phase(&c, Phase::Reading);
        c.read_bytes = 0;
        bool closed = false;
        ret = process_request(strm, n + 1 == max_requests || table.closing_waiting.load(), closed, nullptr);
        if (c.deadline_hit) {
          ++table.timed_out;
          send_raw(sock, 408, "Request Timeout",
                   fmt::format("the request's headers and body did not arrive within {} s (--request-timeout)",
                               request_timeout_s),
                   "request_timeout");
          ret = false;
        } else if (c.too_large) {
          send_raw(sock, 413, "Payload Too Large", body_limit_message, "request_too_large");
          ret = false;
        }
        if (!ret || closed || c.close_after) break;
        table.set_phase(&c, Phase::Idle);
      }
      t_conn = nullptr;
      table.close(&c);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }
};

// Threads beside --http-threads that answer GET requests (health and model probes) when every
// worker is busy.
constexpr size_t kReserveWorkers = 2;

// The calling handler's connection is gone (the client closed it).
bool client_gone() { return t_conn && GuardStream::gone(t_conn->fd); }

}  // namespace

// =============================================================================================
// Impl
// =============================================================================================

struct Server::Impl {
  const Model& model;
  EngineOptions eopts;
  ServerOptions opts;
  ApiContext cx;
  int64_t created_at = 0;

  std::unique_ptr<Scheduler> sched;
  GuardedHttp http;
  std::unique_ptr<Pool> workers;
  std::thread http_thread, watchdog;
  std::atomic<bool> accept_quit{false};
  int bound_port = -1;
  int listen_fd = -1;  // the listening socket (set by the socket-options hook)
  std::atomic<bool> stopping{false}, watchdog_quit{false};
  std::mutex life_mu;
  bool started = false, stopped = false;
  std::atomic<uint64_t> next_id{1};

  Impl(const Model& m, EngineOptions e, ServerOptions o) : model(m), eopts(e), opts(std::move(o)) {
    if (opts.max_batch < 1) throw UsageError("--max-batch must be at least 1");
    if (opts.max_tokens_limit < 1) throw UsageError("--max-tokens-limit must be at least 1");
    if (opts.max_body_bytes < 64) throw UsageError("--max-body-bytes must be at least 64");
    if (opts.port < 0 || opts.port > 65535) throw UsageError("--port must be in 0..65535 (0 picks a free port)");
    if (!(opts.request_timeout_s > 0 && opts.request_timeout_s <= 3600))
      throw UsageError("--request-timeout must be in (0, 3600] seconds");
    if (!(opts.write_timeout_s > 0 && opts.write_timeout_s <= 3600))
      throw UsageError("the write timeout must be in (0, 3600] seconds");
    if (!(opts.shutdown_grace_s >= 0 && opts.shutdown_grace_s <= 3600))
      throw UsageError("--shutdown-grace must be in [0, 3600] seconds");
    if (opts.max_client_conns < 1) throw UsageError("--max-client-conns must be at least 1");
    if (!model.tokenizer) throw UsageError("model '" + model.path + "' has no tokenizer; pass --tokenizer");
    cx.model = &model;
    cx.name = opts.model_name;
    if (cx.name.empty()) cx.name = std::filesystem::path(model.path).stem().string();
    if (cx.name.empty()) cx.name = "model";
    cx.fingerprint = server_fingerprint(REPRO_VERSION, eopts.mode, model.file_sha256);
    cx.max_body_bytes = opts.max_body_bytes;
    cx.max_tokens_limit = opts.max_tokens_limit;
    created_at = static_cast<int64_t>(std::time(nullptr));
    sched = std::make_unique<Scheduler>(model, eopts, opts.max_batch, opts.on_step);
  }

  std::string new_id(const char* prefix) {
    uint64_t n = next_id++;
    return fmt::format("{}-{:08x}{:08x}", prefix, static_cast<uint32_t>(created_at), static_cast<uint32_t>(n));
  }

  void check_auth(const httplib::Request& req) const {
    if (opts.api_key.empty()) return;
    const std::string want = "Bearer " + opts.api_key;
    const std::string got = req.get_header_value("Authorization");
    // Constant-time comparison; the key and the header are never logged or echoed.
    unsigned diff = got.size() == want.size() ? 0u : 1u;
    for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(i < got.size() ? got[i] : 0) ^
                                                     static_cast<unsigned char>(want[i]);
    if (diff != 0)
      throw ApiError(401,
                     "missing or incorrect API key: send the header 'Authorization: Bearer <key>' with the key "
                     "this server was started with (--api-key-env)",
                     "", "invalid_api_key");
  }

  // ---- handlers -----------------------------------------------------------------------------

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      if (stopping) throw ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error");
      check_auth(req);
      json body = parse_request_body(req.body, cx.max_body_bytes);
      auto p = std::make_shared<Parsed>(parse_request(cx, body, chat));
      auto job = std::make_shared<Job>();
      job->req = p->gen;
      const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      sched->submit(job);
      if (!p->stream) {
        std::unique_lock<std::mutex> lk(job->mu);
        while (!job->done) {
          job->cv.wait_for(lk, std::chrono::milliseconds(50));
          if (!job->done && client_gone()) {
            lk.unlock();
            sched->cancel(job);
            lk.lock();
            job->cv.wait(lk, [&] { return job->done; });
          }
        }
        if (job->error_status != 0)
          throw ApiError(job->error_status, job->error, "", job->error_code,
                         job->error_status == 400 ? "invalid_request_error" : "server_error");
        res.status = 200;
        res.set_content(dump(full_response(cx, *p, job->result, id, created)), "application/json");
        return;
      }
      stream(res, p, job, id, created);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // Server-sent events: one chunk per generated token, then a chunk with finish_reason (and the
  // rest of the text), an optional usage chunk, then `data: [DONE]`. A request that fails or is cut
  // by shutdown ends with an error event and [DONE]. A failed write, or a client that closed its
  // socket, cancels the sequence.
  void stream(httplib::Response& res, std::shared_ptr<Parsed> p, std::shared_ptr<Job> job, std::string id,
              int64_t created) {
    struct State {
      size_t next_token = 0;   // tokens already sent
      std::string text;        // pieces of the tokens sent so far
      size_t sent = 0;         // bytes of `text` sent
      bool role_sent = false;
      bool finished = false;
    };
    auto state = std::make_shared<State>();
    res.set_header("Cache-Control", "no-cache");
    Scheduler* sc = sched.get();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, p, job, id, created, state, sc](size_t, httplib::DataSink& sink) -> bool {
          if (state->finished) {
            sink.done();
            return true;
          }
          const Tokenizer& tok = *model.tokenizer;
          std::vector<int> toks;
          std::vector<float> lps;
          std::vector<std::vector<TokenLogprob>> tops;
          bool done = false;
          {
            std::unique_lock<std::mutex> lk(job->mu);
            while (!job->done && job->tokens.size() <= state->next_token) {
              job->cv.wait_for(lk, std::chrono::milliseconds(50));
              if (!job->done && job->tokens.size() <= state->next_token && client_gone()) {
                lk.unlock();
                sc->cancel(job);
                return false;
              }
            }
            toks = job->tokens;
            lps = job->logprobs;
            tops = job->top;
            done = job->done;
          }
          auto emit = [&](const json& event) {
            std::string s = sse_event(event);
            return sink.write(s.data(), s.size());
          };
          auto chunk = [&](const std::string& delta, size_t from, size_t to, size_t offset,
                           std::optional<std::string> finish) {
            const bool role = !state->role_sent;
            state->role_sent = true;
            return emit(stream_chunk(cx, *p, id, created, delta, role, toks, lps, tops, from, to, offset, std::move(finish)));
          };
          // Once finished, the engine's result is the truth for tokens and text.
          if (done && job->error_status == 0) {
            toks = job->result.tokens;
            lps = job->result.logprobs;
            tops = job->result.top_logprobs;
          }
          // Tokens produced since the last call, one chunk each; text that may belong to a stop
          // string (cut by the engine) or to an unfinished UTF-8 sequence is held back.
          for (size_t i = state->next_token; i < toks.size(); ++i) {
            size_t offset = state->text.size();
            state->text += tok.piece(toks[i]);
            size_t safe = std::max(state->sent, streamable(state->text, p->gen.params.stop));
            std::string delta = state->text.substr(state->sent, safe - state->sent);
            state->sent = safe;
            state->next_token = i + 1;
            if (!chunk(delta, i, i + 1, offset, std::nullopt)) {
              sc->cancel(job);
              return false;
            }
          }
          if (!done) return true;
          state->finished = true;
          if (job->error_status != 0) {
            if (!emit(error_json(job->error, "server_error", "", job->error_code))) return false;
          } else {
            const GenResult& r = job->result;
            // Send what was held back: the rest of the engine's text (stop strings already cut).
            std::string rest;
            if (r.text.size() >= state->sent && r.text.compare(0, state->sent, state->text, 0, state->sent) == 0)
              rest = r.text.substr(state->sent);
            if (!chunk(rest, toks.size(), toks.size(), state->sent, r.finish_reason)) return false;
            if (p->include_usage) {
              if (!emit(usage_chunk(cx, *p, id, created, static_cast<int>(r.tokens.size())))) return false;
            }
          }
          if (!sink.write(kSseDone.data(), kSseDone.size())) return false;
          sink.done();
          return true;
        },
        // httplib ends the response: if it ended early (write failure), the sequence is cancelled.
        [job, sc](bool success) {
          if (!success) sc->cancel(job);
        });
  }

  json models_json() const {
    json m = {{"id", cx.name},
              {"object", "model"},
              {"created", created_at},
              {"owned_by", "repro-audit"},
              {"mode", mode_name(eopts.mode)},
              {"model_sha256", model.file_sha256},
              {"context_length", model.config.context_length},
              {"system_fingerprint", cx.fingerprint}};
    return json{{"object", "list"}, {"data", json::array({m})}};
  }

  // Every route marks its connection as handling first: from then on it is never evicted.
  template <class F>
  httplib::Server::Handler route(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      if (t_conn) http.table.set_phase(t_conn, Phase::Handling);
      f(req, res);
    };
  }

  void setup_routes() {
    http.set_payload_max_length(opts.max_body_bytes);
    http.request_timeout_s = opts.request_timeout_s;
    http.write_timeout_s = opts.write_timeout_s;
    http.keep_alive_s = 2;
    // Without TCP_NODELAY the body, written after the headers, waits for the client's delayed ACK
    // (~40 ms on Linux) on every reused connection: a 2 ms request took 44 ms from the second on.
    http.set_tcp_nodelay(true);
    http.table.max_client_conns = opts.max_client_conns;
    http.max_body_bytes = opts.max_body_bytes;
    http.body_limit_message = body_limit_message(cx.max_body_bytes);
    // Debian's libcpp-httplib is compiled with a listen backlog of 5: a burst of clients overflows
    // the accept queue and connections are dropped. Keep the listening socket's fd (with httplib's
    // usual SO_REUSEADDR) so start() can raise the backlog after binding.
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });

    // A declared body over the limit is refused as soon as the headers are in: httplib itself
    // would read (and drop) all of it first, so `Content-Length: 10000000000` would hold the
    // connection until the request deadline. The body is left unread; the connection closes.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!req.has_header("Content-Length")) return httplib::Server::HandlerResponse::Unhandled;
      const std::string v = req.get_header_value("Content-Length");
      const bool digits = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      const bool several = req.get_header_value_count("Content-Length") > 1;
      if (digits && !several && std::stoull(v) <= opts.max_body_bytes) return httplib::Server::HandlerResponse::Unhandled;
      if (t_conn) t_conn->close_after = true;
      res.set_header("Connection", "close");
      if (several || v.find_first_not_of("0123456789") != std::string::npos || v.empty()) {
        res.status = 400;
        res.set_content(dump(error_json("the request has a Content-Length header that is not one decimal number",
                                        "invalid_request_error", "", "bad_request")),
                        "application/json");
      } else {
        res.status = 413;
        res.set_content(dump(error_json(body_limit_message(cx.max_body_bytes), "invalid_request_error", "", "request_too_large")),
                        "application/json");
      }
      return httplib::Server::HandlerResponse::Handled;
    });

    http.Get("/health", route([this](const httplib::Request&, httplib::Response& res) {
      ServerStats s = stats();
      json j = {{"status", stopping ? "stopping" : "ok"},
                {"model", cx.name},
                {"mode", mode_name(eopts.mode)},
                {"system_fingerprint", cx.fingerprint},
                {"active", s.active},
                {"queued", s.queued},
                {"max_batch_seen", s.max_batch_seen}};
      res.status = stopping ? 503 : 200;
      res.set_content(dump(j), "application/json");
    }));
    http.Get("/v1/models", route([this](const httplib::Request& req, httplib::Response& res) {
      try {
        check_auth(req);
        res.set_content(dump(models_json()), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    }));
    http.Get(R"(/v1/models/(.+))", route([this](const httplib::Request& req, httplib::Response& res) {
      try {
        check_auth(req);
        if (req.matches[1] != cx.name)
          throw ApiError(404, fmt::format("the model '{}' does not exist on this server; it serves '{}'",
                                          std::string(req.matches[1]), cx.name),
                         "model", "model_not_found");
        res.set_content(dump(models_json()["data"][0]), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    }));
    http.Post("/v1/completions",
              route([this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); }));
    http.Post("/v1/chat/completions",
              route([this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); }));
    for (const char* path : {"/v1/completions", "/v1/chat/completions"})
      http.Get(path, route([path](const httplib::Request&, httplib::Response& res) {
        send_error(res, ApiError(405, fmt::format("{} takes POST with a JSON body", path), "", "method_not_allowed"));
      }));

    // httplib's own errors (413 body too large, 404 unknown path, 400 bad request line) as JSON.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string msg, code;
      switch (res.status) {
        case 413: msg = body_limit_message(cx.max_body_bytes); code = "request_too_large"; break;
        case 404:
          msg = fmt::format("unknown endpoint {} {}; this server has POST /v1/completions, POST "
                            "/v1/chat/completions, GET /v1/models, GET /health",
                            req.method, req.path);
          code = "not_found";
          break;
        default: msg = fmt::format("HTTP {}: the request could not be handled", res.status); code = "bad_request";
      }
      res.set_content(dump(error_json(msg, "invalid_request_error", "", code)), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = std::string("internal error: ") + e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content(dump(error_json(what, "server_error", "", "internal_error")), "application/json");
    });
  }

  // Every 100 ms: when connections wait for a worker and none is free, close the connection that
  // has been idle or sending its request the longest.
  void watch() {
    while (!watchdog_quit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!stopping && workers->starved()) http.table.evict_oldest();
    }
  }

  ServerStats stats() const {
    SchedulerStats s = sched->stats();
    ServerStats o;
    o.requests = s.requests;
    o.completed = s.completed;
    o.steps = s.steps;
    o.tokens = s.tokens;
    o.max_batch_seen = s.max_batch_seen;
    o.joined_running = s.joined_running;
    o.queued = s.queued;
    o.active = s.active;
    o.cancelled = s.cancelled;
    o.timed_out = http.table.timed_out;
    o.evicted = http.table.evicted;
    o.rejected = http.table.rejected;
    return o;
  }
};

// =============================================================================================
// Server
// =============================================================================================

Server::Server(const Model& model, EngineOptions engine_opts, ServerOptions opts)
    : impl_(std::make_unique<Impl>(model, engine_opts, std::move(opts))) {}

Server::~Server() { stop(); }

void Server::start() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lk(I.life_mu);
  if (I.started) throw UsageError("the server was already started");
  // A client that disconnects mid-response must not kill the process; only replace the default.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, nullptr);
  }
  I.setup_routes();
  if (I.opts.port == 0) {
    I.bound_port = I.http.bind_to_any_port(I.opts.host);
  } else {
    I.bound_port = I.http.bind_to_port(I.opts.host, I.opts.port) ? I.opts.port : -1;
  }
  if (I.bound_port > 0 && I.listen_fd >= 0) ::listen(I.listen_fd, SOMAXCONN);  // raise httplib's backlog of 5
  if (I.bound_port <= 0)
    throw UsageError(fmt::format("cannot listen on {}:{} (--host/--port): the address is in use or not available "
                                 "here; pick another --port, or --port 0 for a free one",
                                 I.opts.host, I.opts.port));
  try {
    I.sched->start();  // builds the engine: a model the op table cannot read is refused here
  } catch (...) {
    I.http.close_listener();
    throw;  // not started: stop() and the destructor have nothing to undo
  }
  I.started = true;
  const int threads = I.opts.http_threads > 0 ? I.opts.http_threads : std::max(64, 2 * I.opts.max_batch + 8);
  I.workers = std::make_unique<Pool>(static_cast<size_t>(threads), kReserveWorkers,
                                     [&I](int fd, bool reserve) { I.http.serve(fd, reserve); });
  I.http_thread = std::thread([&I] { I.http.accept_loop(*I.workers, I.accept_quit); });
  I.watchdog = std::thread([&I] { I.watch(); });
}

void Server::stop() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lk(I.life_mu);
  if (!I.started || I.stopped) return;
  I.stopped = true;
  I.stopping = true;
  const auto t0 = Clock::now();
  auto secs = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  // 1. Idle keep-alive and slow connections end now; no new request is decoded.
  I.http.table.closing_waiting = true;
  I.http.table.shutdown_where(false);
  // 2. In-flight requests decode until the grace period ends; then the rest end with 503 / an error event.
  I.sched->drain(t0 + secs(I.opts.shutdown_grace_s));
  // 3. Handlers write their last bytes ([DONE]); a client that reads nothing is dropped.
  const auto flush_end = Clock::now() + secs(I.opts.write_timeout_s);
  while (I.http.table.handling() > 0 && Clock::now() < flush_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  I.http.table.closing_all = true;
  I.http.table.shutdown_where(true);
  I.watchdog_quit = true;
  if (I.watchdog.joinable()) I.watchdog.join();
  I.accept_quit = true;
  if (I.http_thread.joinable()) I.http_thread.join();
  I.http.close_listener();
  if (I.workers) I.workers->shutdown();
}

int Server::port() const { return impl_->bound_port; }
std::string Server::url() const {
  const std::string& h = impl_->opts.host;
  std::string host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
  return fmt::format("http://{}:{}", host, impl_->bound_port);
}
const std::string& Server::model_name() const { return impl_->cx.name; }
const std::string& Server::fingerprint() const { return impl_->cx.fingerprint; }
ServerStats Server::stats() const { return impl_->stats(); }

void Server::pause() { impl_->sched->pause(); }
void Server::resume() { impl_->sched->resume(); }

}  // namespace repro
