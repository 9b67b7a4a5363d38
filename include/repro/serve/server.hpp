// `repro-audit serve`: an OpenAI-compatible HTTP server (cpp-httplib) over the local Engine.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (streaming as SSE and not),
// GET /v1/models, GET /health, GET /info (engine, version, mode, max batch, model), GET /metrics
// (Prometheus text, repro/serve/metrics.hpp). Continuous batching: ONE engine thread owns the Engine; HTTP handler
// threads only enqueue requests and wait for the tokens the engine thread routes back to them, so a
// request that arrives while others decode joins the running batch at the next step.
//
// Non-standard response fields for auditing clients: choices[0].token_ids (generated ids) and, in
// streaming chunks, the ids of that chunk; "repro_audit": {"max_batch": N} (the largest batch the
// request's steps decoded; a stream's last chunks); `system_fingerprint` is server_fingerprint() below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"

namespace repro {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback by default
  int port = 8000;                 // 0 = an ephemeral free port (see Server::port())
  int max_batch = 32;              // sequences decoding together at most
  std::string model_name;          // the served name; empty = the model file's stem
  std::string api_key;             // empty = no auth; else "Authorization: Bearer <key>" on /v1/*
  size_t max_body_bytes = 1 << 20; // larger request bodies get 413
  int max_tokens_limit = 4096;     // larger max_tokens get 400
  bool parse_special = false;      // completion prompts match control-token text (Tokenizer::encode_special)
  int http_threads = 0;            // HTTP worker threads; 0 = max(64, 2 * max_batch + 8)
  // Hostile clients (docs/RELIABILITY.md):
  double request_timeout_s = 10;   // a request's headers and body must arrive within this (else 408)
  int max_client_conns = 32;       // connections per client address still sending a request or idle
  double shutdown_grace_s = 10;    // stop(): in-flight requests may finish for this long
  double write_timeout_s = 5;      // a client that reads nothing for this long is dropped
  // Called on the engine thread after each step with the batch size that step ran (tests, metrics).
  std::function<void(int batch)> on_step;
};

struct ServerStats {
  int64_t requests = 0;        // generation requests accepted into the queue
  int64_t completed = 0;       // generation requests finished by the engine
  int64_t steps = 0;           // engine steps run
  int64_t tokens = 0;          // tokens generated
  int max_batch_seen = 0;      // largest batch one step ran
  int64_t joined_running = 0;  // requests submitted while other sequences were decoding
  int queued = 0;              // waiting for a batch slot now
  int active = 0;              // in the batch now
  int64_t cancelled = 0;       // requests dropped because their client went away
  int64_t timed_out = 0;       // connections closed (408) because a request did not arrive in time
  int64_t evicted = 0;         // idle or slow connections closed to make room for others
  int64_t rejected = 0;        // connections refused (503) over --max-client-conns
};

// "ra-" + the first 16 hex digits of sha256(version + "|" + mode + "|" + model_sha256).
std::string server_fingerprint(const std::string& version, Mode mode, const std::string& model_sha256);

class Server {
 public:
  // The model must outlive the server. Throws UsageError on bad options.
  Server(const Model& model, EngineOptions engine_opts, ServerOptions opts);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts the engine and HTTP threads; returns once connections are accepted.
  // Throws UsageError naming --host/--port when the address cannot be bound.
  void start();
  // Graceful: new generation requests get 503; requests in flight decode for up to
  // shutdown_grace_s, then whatever is left ends (a stream with an error event and [DONE], a
  // non-streamed request with 503); idle and slow connections are closed; every thread is joined.
  // Returns within about shutdown_grace_s + write_timeout_s. Idempotent; safe from any thread
  // except an HTTP handler or the on_step hook.
  void stop();

  int port() const;         // the bound port (after start)
  std::string url() const;  // "http://host:port"
  const std::string& model_name() const;
  const std::string& fingerprint() const;
  ServerStats stats() const;

  // While paused the engine thread admits no queued request (running sequences still decode).
  // Lets tests queue many requests and release them into one batch.
  void pause();
  void resume();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace repro
