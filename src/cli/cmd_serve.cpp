// `repro-audit serve`: the local engine behind an OpenAI-compatible HTTP API (see repro/server.hpp).
#include <fmt/core.h>
#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>

#include "repro/engine/engine.hpp"
#include "repro/common/error.hpp"
#include "repro/model/model.hpp"
#include "repro/model/default_model.hpp"
#include "repro/serve/server.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"

namespace repro::cli {

namespace {
// A SIGINT/SIGTERM that reaches a thread started before the mask below was set (a library's worker
// started while the model loaded) lands here instead of ending the process.
volatile std::sig_atomic_t g_serve_signal = 0;
extern "C" void note_serve_signal(int sig) { g_serve_signal = sig; }
}  // namespace

namespace {

struct ServeOptions {
  EngineFlags engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  int max_batch = 32;
  std::string api_key_env;
  size_t max_body_bytes = 1 << 20;
  int max_tokens_limit = 4096;
  std::string model_name;
  int http_threads = 0;
  double request_timeout = 10;
  int max_client_conns = 32;
  double shutdown_grace = 10;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int run_serve(const ServeOptions& o) {
  EngineOptions eopts = o.engine.engine_options();

  ServerOptions sopts;
  sopts.host = o.host;
  sopts.port = o.port;
  sopts.max_batch = o.max_batch;
  sopts.max_body_bytes = o.max_body_bytes;
  sopts.max_tokens_limit = o.max_tokens_limit;
  sopts.parse_special = o.engine.parse_special;
  sopts.model_name = o.model_name;
  sopts.http_threads = o.http_threads;
  sopts.request_timeout_s = o.request_timeout;
  sopts.max_client_conns = o.max_client_conns;
  sopts.shutdown_grace_s = o.shutdown_grace;
  if (!o.api_key_env.empty()) {
    const char* key = std::getenv(o.api_key_env.c_str());
    if (!key || !*key)
      throw UsageError(fmt::format("--api-key-env {}: that environment variable is not set or is empty; export it "
                                   "with the key clients must send as 'Authorization: Bearer <key>'",
                                   o.api_key_env));
    sopts.api_key = key;
  }
  if (!is_loopback(o.host) && sopts.api_key.empty())
    std::fprintf(stderr, "warning: --host %s accepts connections from other machines and no --api-key-env is set\n",
                 o.host.c_str());

  std::string model_path = o.engine.model();
  if (model_path.empty()) {  // the embedded default model, served under its own name
    model_path = default_model_path();
    if (sopts.model_name.empty()) sopts.model_name = "stories260K";
  }
  std::unique_ptr<Model> model = o.engine.load(model_path);
  o.engine.load_draft(eopts);
  if (model->chat_template.name == "unknown")
    throw UsageError("model '" + model_path + "': its chat template (" + model->chat_template.origin +
                     ") cannot be interpreted: " + model->chat_template.problem + "; pass --chat-template with one of " +
                     chat_template_names() + " or a template file");

  // SIGINT/SIGTERM are blocked in every thread started from here on (the server's threads inherit
  // this mask) and taken here with sigtimedwait, so shutdown runs in plain code, not in a signal
  // handler. Threads that existed before (started while the model loaded) do not block them: the
  // handler only notes such a signal, and the wait below sees the note within 100 ms.
  sigset_t sigs, old;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  struct sigaction note {}, old_int {}, old_term {};
  note.sa_handler = note_serve_signal;
  sigemptyset(&note.sa_mask);
  note.sa_flags = SA_RESTART;
  g_serve_signal = 0;
  sigaction(SIGINT, &note, &old_int);
  sigaction(SIGTERM, &note, &old_term);
  pthread_sigmask(SIG_BLOCK, &sigs, &old);
  auto restore = [&] {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  };

  int sig = 0;
  {
    Server server(*model, eopts, sopts);
    try {
      server.start();
    } catch (...) {
      restore();
      throw;
    }
    std::printf("listening on %s (mode %s, model %s) on %s, precision %s\n", server.url().c_str(),
                mode_name(eopts.mode), server.model_name().c_str(), device_name(eopts.device),
                precision_name(eopts.precision));
    std::fflush(stdout);
    const timespec tick{0, 100 * 1000 * 1000};
    while (!sig) {
      const int got = sigtimedwait(&sigs, nullptr, &tick);
      if (got > 0) sig = got;
      else if (g_serve_signal) sig = g_serve_signal;
    }
    std::fprintf(stderr, "serve: %s received, finishing in-flight requests (at most %g s) and shutting down\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", sopts.shutdown_grace_s);
    server.stop();
    ServerStats s = server.stats();
    std::fprintf(stderr, "serve: stopped after %lld requests, %lld tokens, largest batch %d\n",
                 static_cast<long long>(s.completed), static_cast<long long>(s.tokens), s.max_batch_seen);
  }
  restore();
  return kExitOk;
}

}  // namespace

void setup_serve(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub = parent.add_subcommand(
      "serve",
      "Serve the local engine over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
      "streaming and not, /v1/models, /health, /info, Prometheus /metrics) with continuous batching.\n"
      "Responses carry a system_fingerprint (engine version, mode, model SHA-256), the generated token\n"
      "ids and \"repro_audit\": {\"max_batch\": N}, the largest batch the request was decoded in.");
  EngineFlagSpec spec;
  spec.model_must_exist = true;
  spec.chat_template = true;
  spec.stop_token = true;
  spec.parse_special = true;
  spec.tp = true;
  spec.speculative = true;
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--host", o->host, "Address to bind (loopback by default)")->capture_default_str();
  sub->add_option("--port", o->port, "Port to bind; 0 picks a free one and prints it")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--max-batch", o->max_batch, "Most sequences decoding together (--mode deterministic: always 1)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--api-key-env", o->api_key_env,
                  "Require 'Authorization: Bearer <key>' with the key read from this environment variable");
  sub->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body accepted (else 413, at once when Content-Length says more)")
      ->check(CLI::Range(static_cast<size_t>(64), static_cast<size_t>(1) << 30))
      ->capture_default_str();
  sub->add_option("--max-tokens-limit", o->max_tokens_limit, "Largest max_tokens accepted (else 400)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--model-name", o->model_name, "Name clients use in 'model' (default: the file's stem)");
  sub->add_option("--http-threads", o->http_threads, "HTTP worker threads (0: max(64, 2 x --max-batch + 8)); two more answer GET requests (/health) when all are busy")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  sub->add_option("--request-timeout", o->request_timeout,
                  "Seconds a request's headers and body may take to arrive, in total (else 408)")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  sub->add_option("--max-client-conns", o->max_client_conns,
                  "Connections one client address may hold idle or still sending a request")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  sub->add_option("--shutdown-grace", o->shutdown_grace,
                  "On SIGTERM/SIGINT, seconds in-flight requests may take to finish; then streams end with an "
                  "error event and [DONE]")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  sub->callback([o, &runner] { runner = [o] { return run_serve(*o); }; });
}

}  // namespace repro::cli
