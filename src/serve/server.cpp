// `repro-audit serve`: OpenAI-compatible HTTP server over the local Engine (cpp-httplib): the routes.
//
// Threads: the connection guard (connections.cpp: accept thread, worker pool, connection loop;
// httplib parses and routes each request) runs the connections; ONE engine thread (scheduler.cpp)
// owns the Engine. A handler validates the request (api.cpp, over the wire format of
// repro/openai/protocol.hpp), puts a Job on the scheduler's queue and waits on it; the engine thread
// routes tokens and results back. What the guard does against hostile clients is listed in
// connections.cpp (docs/RELIABILITY.md).
#include "repro/serve/server.hpp"

#include <fmt/core.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "connections.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/common/version.hpp"
#include "repro/serve/api.hpp"
#include "repro/serve/metrics.hpp"
#include "repro/serve/scheduler.hpp"

namespace repro {

using json = nlohmann::json;
using namespace serve;

std::string server_fingerprint(const std::string& version, Mode mode, const std::string& model_sha256) {
  return "ra-" + sha256_hex(version + "|" + mode_name(mode) + "|" + model_sha256).substr(0, 16);
}

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e.what(), e.type, e.param, e.code)), "application/json");
}

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

  std::unique_ptr<Metrics> metrics;  // GET /metrics; the scheduler updates it
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
    cx.parse_special = opts.parse_special;
    created_at = static_cast<int64_t>(std::time(nullptr));
    MetricsInfo mi;
    mi.version = REPRO_VERSION;
    mi.commit = tool_commit();
    mi.mode = mode_name(eopts.mode);
    mi.device = device_name(eopts.device);
    mi.precision = precision_name(eopts.precision);
    mi.model = cx.name;
    mi.model_sha256 = model.file_sha256;
    mi.fingerprint = cx.fingerprint;
    mi.max_batch = opts.max_batch;
    metrics = std::make_unique<Metrics>(mi);
    sched = std::make_unique<Scheduler>(model, eopts, opts.max_batch, opts.on_step);
    sched->set_metrics(metrics.get());
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
    bool queued = false;  // from then on the scheduler counts how the request ends
    try {
      if (stopping) throw ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error");
      check_auth(req);
      const auto body = parse_request_body(req.body, cx.max_body_bytes);
      auto p = std::make_shared<Parsed>(parse_request(cx, body, chat));
      auto job = std::make_shared<Job>();
      job->req = p->gen;
      const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      sched->submit(job);
      queued = true;
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
        json body = full_response(cx, *p, job->result, id, created);
        add_batch_extension(body, job->max_batch.load());
        res.set_content(dump(body), "application/json");
        return;
      }
      stream(res, p, job, id, created);
    } catch (const ApiError& e) {
      if (!queued) metrics->finished(std::to_string(e.status));
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
            const bool last = finish.has_value();
            json c = stream_chunk(cx, *p, id, created, delta, role, toks, lps, tops, from, to, offset, std::move(finish));
            if (last) add_batch_extension(c, job->max_batch.load());
            return emit(c);
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
            if (json re = routed_experts_chunk(cx, *p, r, id, created); !re.is_null() && !emit(re)) return false;
            if (p->include_usage) {
              json u = usage_chunk(cx, *p, id, created, static_cast<int>(r.tokens.size()));
              add_batch_extension(u, job->max_batch.load());
              if (!emit(u)) return false;
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

  // GET /info: who this server is and how it batches, so a client can identify it (its posture).
  json info_json() const {
    return json{{"engine", "repro-audit"},
                {"version", REPRO_VERSION},
                {"commit", tool_commit()},
                {"mode", mode_name(eopts.mode)},
                {"device", device_name(eopts.device)},
                {"precision", precision_name(eopts.precision)},
                {"tp", eopts.tp},
                {"allreduce", allreduce_name(eopts.allreduce)},
                {"speculative", speculative_name(eopts.speculative)},
                {"max_batch", sched->max_batch()},
                {"model", cx.name},
                {"model_sha256", model.file_sha256},
                {"system_fingerprint", cx.fingerprint},
                {"metrics", "/metrics"},
                {"batch_extension", std::string(kBatchExtension) + ".max_batch"}};
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
        res.set_content(
            dump(error_json(body_limit_message(cx.max_body_bytes), "invalid_request_error", "", "request_too_large")),
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
    // Prometheus text (docs/REMOTE.md "serve's /metrics"); like /health, no key needed: it holds counts
    // and the posture /health already shows, nothing of any request.
    http.Get("/metrics", route([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics->render(), "text/plain; version=0.0.4; charset=utf-8");
    }));
    http.Get("/info", route([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump(info_json()), "application/json");
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
                            "/v1/chat/completions, GET /v1/models, GET /health, GET /info, GET /metrics",
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
    I.metrics->set_max_batch(I.sched->max_batch());
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
