// serve's connection guard (private to src/serve): its own accept loop, worker pool and connection
// loop around httplib, which only parses and routes requests. What it guarantees against hostile
// clients is listed in connections.cpp (docs/RELIABILITY.md).
#pragma once
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace repro::serve {

using Clock = std::chrono::steady_clock;

// A complete HTTP response written straight to a socket (for connections refused or timed out
// before httplib parsed a request). Best effort: never blocks.
void send_raw(int fd, int status, const char* reason, const std::string& message, const std::string& code,
              const char* extra_header = "");

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

extern thread_local Conn* t_conn;  // the connection this worker thread serves

struct ConnTable {
  std::mutex mu;
  std::list<Conn*> conns;
  std::atomic<bool> closing_waiting{false};  // shutdown: idle and reading connections end now
  std::atomic<bool> closing_all{false};      // shutdown, flush time over: every connection ends
  std::atomic<int64_t> evicted{0}, rejected{0}, timed_out{0};
  int max_client_conns = 32;
  static constexpr double kMinAgeS = 1.0;  // a connection sending its request is never closed sooner

  // Registers a new connection; false when its address is over the cap and nothing can be evicted.
  bool open(Conn* c);
  void close(Conn* c);
  void set_phase(Conn* c, Phase p);
  // Makes room for a waiting connection: closes the one idle or sending its request the longest.
  bool evict_oldest();
  void shutdown_where(bool all);
  int handling();
  size_t size();

 private:
  bool evictable(const Conn* c, Clock::time_point now) const;
  void evict_locked(Conn* c);
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
  bool wait(short events, double timeout_s) const;

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_.fd; }

  // The peer closed its end (or the socket failed): nothing more can be delivered.
  bool peer_gone() const { return gone(c_.fd); }
  static bool gone(int fd);
  static void address_of(const sockaddr_storage& ss, std::string& ip, int& port);

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
  Pool(size_t workers, size_t reserve, Serve serve);
  void enqueue(int fd);
  // Workers finish the connections already queued (shutdown closes them quickly), then exit.
  void shutdown();
  // Connections waiting for a worker while none is free.
  bool starved();

 private:
  struct Waiting {
    int fd;
    bool not_get = false;  // its first bytes are there and do not start a GET
  };
  void work();
  // The first request's bytes, peeked without reading them: "GET " (true), anything else or
  // nothing yet (false; `not_get` once it is known).
  static bool starts_get(Waiting& w);
  void work_reserve();

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
  void accept_loop(Pool& pool, const std::atomic<bool>& quit);
  // Closes the listening socket (after the accept loop ended).
  void close_listener();

 private:
  bool process_and_close_socket(socket_t sock) override { return process_connection(sock, keep_alive_max); }
  bool process_connection(socket_t sock, size_t max_requests);
};

// Threads beside --http-threads that answer GET requests (health and model probes) when every
// worker is busy.
inline constexpr size_t kReserveWorkers = 2;

// The calling handler's connection is gone (the client closed it).
bool client_gone();

}  // namespace repro::serve
