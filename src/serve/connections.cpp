// serve's connection guard: the accept loop, the worker pool and the connection loop around httplib.
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
#include "connections.hpp"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "repro/openai/request.hpp"

namespace repro::serve {

thread_local Conn* t_conn = nullptr;

void send_raw(int fd, int status, const char* reason, const std::string& message, const std::string& code,
              const char* extra_header) {
  std::string body = dump(error_json(message, "invalid_request_error", "", code));
  std::string r = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{}",
      status, reason, body.size(), extra_header, body);
  (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// ---------------------------------------------------------------- ConnTable

bool ConnTable::evictable(const Conn* c, Clock::time_point now) const {
  if (c->evicted) return false;
  if (c->phase == Phase::Idle) return true;
  return c->phase == Phase::Reading && now - c->since >= std::chrono::duration<double>(kMinAgeS);
}

void ConnTable::evict_locked(Conn* c) {
  c->evicted = true;
  ::shutdown(c->fd, SHUT_RDWR);  // its worker's poll/recv returns at once; the worker closes it
  ++evicted;
}

bool ConnTable::open(Conn* c) {
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

void ConnTable::close(Conn* c) {
  std::lock_guard<std::mutex> lk(mu);
  conns.remove(c);
}

void ConnTable::set_phase(Conn* c, Phase p) {
  std::lock_guard<std::mutex> lk(mu);
  c->phase = p;
  c->since = Clock::now();
}

bool ConnTable::evict_oldest() {
  std::lock_guard<std::mutex> lk(mu);
  const auto now = Clock::now();
  Conn* oldest = nullptr;
  for (Conn* o : conns)
    if (evictable(o, now) && (!oldest || o->since < oldest->since)) oldest = o;
  if (oldest) evict_locked(oldest);
  return oldest != nullptr;
}

void ConnTable::shutdown_where(bool all) {
  std::lock_guard<std::mutex> lk(mu);
  for (Conn* o : conns)
    if (all || o->phase != Phase::Handling) ::shutdown(o->fd, SHUT_RDWR);
}

int ConnTable::handling() {
  std::lock_guard<std::mutex> lk(mu);
  return static_cast<int>(std::count_if(conns.begin(), conns.end(), [](Conn* o) { return o->phase == Phase::Handling; }));
}

size_t ConnTable::size() {
  std::lock_guard<std::mutex> lk(mu);
  return conns.size();
}

// ---------------------------------------------------------------- GuardStream

bool GuardStream::wait(short events, double timeout_s) const {
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

bool GuardStream::is_readable() const { return buffered() || wait(POLLIN, read_timeout_s_); }

bool GuardStream::is_writable() const {
  return !c_.deadline_hit && !c_.too_large && wait(POLLOUT, write_timeout_s_) && !peer_gone();
}

ssize_t GuardStream::read(char* ptr, size_t size) {
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

ssize_t GuardStream::write(const char* ptr, size_t size) {
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

void GuardStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = c_.addr;
  port = c_.port;
}

void GuardStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ip.clear();
  port = 0;
  if (::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, ip, port);
}

bool GuardStream::gone(int fd) {
  pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void GuardStream::address_of(const sockaddr_storage& ss, std::string& ip, int& port) {
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

// ---------------------------------------------------------------- Pool

Pool::Pool(size_t workers, size_t reserve, Serve serve) : n_(workers), serve_(std::move(serve)) {
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  for (size_t i = 0; i < reserve; ++i) threads_.emplace_back([this] { work_reserve(); });
}

void Pool::enqueue(int fd) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back({fd});
  }
  cv_.notify_one();
}

void Pool::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    down_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

bool Pool::starved() {
  std::lock_guard<std::mutex> lk(mu_);
  return !jobs_.empty() && busy_ >= n_;
}

void Pool::work() {
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

bool Pool::starts_get(Waiting& w) {
  char b[4];
  ssize_t n = ::recv(w.fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) w.not_get = true;
  if (n <= 0) return false;
  if (std::memcmp(b, "GET ", static_cast<size_t>(n)) != 0) w.not_get = true;
  return n == 4 && !w.not_get;
}

void Pool::work_reserve() {
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

// ---------------------------------------------------------------- GuardedHttp

void GuardedHttp::accept_loop(Pool& pool, const std::atomic<bool>& quit) {
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

void GuardedHttp::close_listener() {
  socket_t ls = svr_sock_.exchange(INVALID_SOCKET);
  if (ls != INVALID_SOCKET) ::close(ls);
}

bool GuardedHttp::process_connection(socket_t sock, size_t max_requests) {
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

bool client_gone() { return t_conn && GuardStream::gone(t_conn->fd); }

}  // namespace repro::serve
