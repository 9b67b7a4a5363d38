// `repro-audit serve`: OpenAI-compatible HTTP server over the local Engine (cpp-httplib).
//
// Threads: httplib's accept thread and worker pool run the handlers; ONE engine thread owns the
// Engine. A handler parses and validates the request, tokenizes the prompt, puts a Job on the queue
// and waits on the Job's condition variable. The engine thread admits queued jobs into the running
// batch (up to max_batch), calls step() while anything decodes, and routes each on_token callback
// and each finished result to its Job. Handlers never touch the Engine.
#include "repro/serve/server.hpp"

#include <fmt/core.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "repro/common/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

using json = nlohmann::json;

std::string server_fingerprint(const std::string& version, Mode mode, const std::string& model_sha256) {
  return "ra-" + sha256_hex(version + "|" + mode_name(mode) + "|" + model_sha256).substr(0, 16);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Errors: OpenAI-style {"error": {"message", "type", "param", "code"}}.
// ---------------------------------------------------------------------------------------------

struct ApiError : std::runtime_error {
  int status;
  std::string param, code, type;
  ApiError(int status_, std::string message, std::string param_ = "", std::string code_ = "invalid_value",
           std::string type_ = "invalid_request_error")
      : std::runtime_error(std::move(message)),
        status(status_),
        param(std::move(param_)),
        code(std::move(code_)),
        type(std::move(type_)) {}
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e.what(), e.type, e.param, e.code)), "application/json");
}

// ---------------------------------------------------------------------------------------------
// Request parameters
// ---------------------------------------------------------------------------------------------

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

std::optional<double> get_number(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  if (!v.is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key, "invalid_type");
  return v.get<double>();
}

std::optional<int64_t> get_int(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  throw ApiError(400, fmt::format("'{}' must be an integer", key), key, "invalid_type");
}

std::optional<bool> get_bool(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  if (!b[key].is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), key, "invalid_type");
  return b[key].get<bool>();
}

// One parsed generation request.
struct Parsed {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  std::string prompt_text;  // for text_offset
  GenRequest gen;
};

// Largest m <= n such that s[0, m) does not end inside a UTF-8 sequence.
size_t utf8_complete(const std::string& s, size_t n) {
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;
}

// Length of the prefix of `text` that can be streamed now: it holds back any stop string (the engine
// cuts it) and any suffix that could still grow into one, and never splits a UTF-8 sequence.
size_t streamable(const std::string& text, const std::vector<std::string>& stops) {
  size_t safe = text.size();
  for (const auto& s : stops) {
    size_t pos = text.find(s);
    if (pos != std::string::npos) safe = std::min(safe, pos);
    for (size_t k = std::min(s.size() - 1, text.size()); k > 0; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        safe = std::min(safe, text.size() - k);
        break;
      }
  }
  return utf8_complete(text, safe);
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// A request waiting for (or in) the running batch. The engine thread writes, the handler reads.
struct Job {
  GenRequest req;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> tokens;      // produced so far (on_token)
  std::vector<float> logprobs;
  bool done = false;
  GenResult result;
  int error_status = 0;         // != 0: failed with this HTTP status
  std::string error;
};

}  // namespace

// =============================================================================================
// Impl
// =============================================================================================

struct Server::Impl {
  const Model& model;
  EngineOptions eopts;
  ServerOptions opts;
  std::string name, fp;
  int64_t created_at = 0;

  std::unique_ptr<Engine> engine;
  httplib::Server http;
  std::thread http_thread, engine_thread;
  int bound_port = -1;
  int listen_fd = -1;  // the listening socket (set by the socket-options hook)
  std::atomic<bool> stopping{false};
  std::mutex life_mu;
  bool started = false, stopped = false;
  std::atomic<uint64_t> next_id{1};

  // Queue and statistics, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool paused = false, quit = false;
  ServerStats st;

  Impl(const Model& m, EngineOptions e, ServerOptions o) : model(m), eopts(e), opts(std::move(o)) {
    if (opts.max_batch < 1) throw UsageError("--max-batch must be at least 1");
    if (opts.max_tokens_limit < 1) throw UsageError("--max-tokens-limit must be at least 1");
    if (opts.max_body_bytes < 64) throw UsageError("--max-body-bytes must be at least 64");
    if (opts.port < 0 || opts.port > 65535) throw UsageError("--port must be in 0..65535 (0 picks a free port)");
    if (!model.tokenizer) throw UsageError("model '" + model.path + "' has no tokenizer; pass --tokenizer");
    name = opts.model_name;
    if (name.empty()) name = std::filesystem::path(model.path).stem().string();
    if (name.empty()) name = "model";
    fp = server_fingerprint(REPRO_VERSION, eopts.mode, model.file_sha256);
    created_at = static_cast<int64_t>(std::time(nullptr));
  }

  std::string new_id(const char* prefix) {
    uint64_t n = next_id++;
    return fmt::format("{}-{:08x}{:08x}", prefix, static_cast<uint32_t>(created_at), static_cast<uint32_t>(n));
  }

  // ---- engine thread ------------------------------------------------------------------------

  static void finish(const std::shared_ptr<Job>& j, GenResult r) {
    {
      std::lock_guard<std::mutex> lk(j->mu);
      j->result = std::move(r);
      j->done = true;
    }
    j->cv.notify_all();
  }
  static void fail(const std::shared_ptr<Job>& j, int status, const std::string& msg) {
    {
      std::lock_guard<std::mutex> lk(j->mu);
      j->error_status = status;
      j->error = msg;
      j->done = true;
    }
    j->cv.notify_all();
  }

  void bind_callbacks(std::unordered_map<int, std::shared_ptr<Job>>& running) {
    engine->on_token = [&running](int handle, int token, float logprob) {
      auto it = running.find(handle);
      if (it == running.end()) return;
      Job& j = *it->second;
      {
        std::lock_guard<std::mutex> lk(j.mu);
        j.tokens.push_back(token);
        j.logprobs.push_back(logprob);
      }
      j.cv.notify_all();
    };
  }

  void engine_loop() {
    std::unordered_map<int, std::shared_ptr<Job>> running;
    bind_callbacks(running);
    for (;;) {
      std::vector<std::shared_ptr<Job>> admit;
      bool busy = engine->busy();
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return quit || busy || (!paused && !queue.empty()); });
        if (quit && !busy && queue.empty()) break;
        if (!paused || quit)
          while (!queue.empty() && engine->active() + static_cast<int>(admit.size()) < opts.max_batch) {
            admit.push_back(std::move(queue.front()));
            queue.pop_front();
          }
      }
      int64_t joined = 0;
      for (auto& j : admit) {
        try {
          int h = engine->submit(j->req);
          running[h] = j;
          if (busy) ++joined;
        } catch (const UsageError& e) {
          fail(j, 400, e.what());
        } catch (const std::exception& e) {
          fail(j, 500, std::string("the engine rejected the request: ") + e.what());
        }
      }
      if (!engine->busy()) {
        std::lock_guard<std::mutex> lk(mu);
        st.joined_running += joined;
        continue;
      }
      int batch = engine->active();
      std::vector<int> finished;
      try {
        finished = engine->step();
      } catch (const std::exception& e) {
        // The engine's state is unknown after a failed step: fail what it held and start afresh.
        for (auto& [h, j] : running) fail(j, 500, std::string("engine failure: ") + e.what());
        running.clear();
        engine = std::make_unique<Engine>(model, eopts);
        bind_callbacks(running);
        continue;
      }
      int64_t done_now = 0;
      for (int h : finished) {
        auto it = running.find(h);
        GenResult r = engine->take_result(h);
        if (it == running.end()) continue;
        finish(it->second, std::move(r));
        running.erase(it);
        ++done_now;
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        st.joined_running += joined;
        st.steps++;
        st.max_batch_seen = std::max(st.max_batch_seen, batch);
        st.completed += done_now;
        st.active = engine->active();
        st.tokens = engine->generated_tokens();
      }
      if (opts.on_step) opts.on_step(batch);
    }
  }

  void enqueue(const std::shared_ptr<Job>& j) {
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back(j);
      st.requests++;
    }
    cv.notify_all();
  }

  // ---- request parsing ----------------------------------------------------------------------

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

  json parse_body(const httplib::Request& req) const {
    if (req.body.size() > opts.max_body_bytes)
      throw ApiError(413, body_limit_message(), "", "request_too_large");
    json b;
    try {
      b = json::parse(req.body);
    } catch (const json::parse_error& e) {
      throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
    if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
    return b;
  }

  std::string body_limit_message() const {
    return fmt::format("the request body is larger than this server's limit of {} bytes (--max-body-bytes)",
                       opts.max_body_bytes);
  }

  Parsed parse(const json& b, bool chat) const {
    Parsed p;
    p.chat = chat;
    const Tokenizer& tok = *model.tokenizer;

    if (present(b, "model")) {
      if (!b["model"].is_string()) throw ApiError(400, "'model' must be a string", "model", "invalid_type");
      if (b["model"].get<std::string>() != name)
        throw ApiError(404,
                       fmt::format("the model '{}' does not exist on this server; it serves '{}' (GET /v1/models)",
                                   b["model"].get<std::string>(), name),
                       "model", "model_not_found");
    }

    // ---- prompt ----
    std::vector<int>& ids = p.gen.prompt;
    if (chat) {
      if (!present(b, "messages"))
        throw ApiError(400, "'messages' is required: an array of {\"role\", \"content\"} objects", "messages",
                       "missing_required_parameter");
      try {
        p.prompt_text = render_chat(b["messages"], "'messages'");
      } catch (const UsageError& e) {
        throw ApiError(400, e.what(), "messages", "invalid_value");
      }
      ids = tok.encode(p.prompt_text, true);
    } else {
      if (!present(b, "prompt"))
        throw ApiError(400, "'prompt' is required: a string (or an array holding one string)", "prompt",
                       "missing_required_parameter");
      json pr = b["prompt"];
      auto all_ints = [](const json& a) {
        return a.is_array() && !a.empty() &&
               std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number_integer(); });
      };
      if (pr.is_array() && pr.size() == 1 && (pr[0].is_string() || all_ints(pr[0]))) pr = json(pr[0]);
      if (pr.is_string()) {
        p.prompt_text = pr.get<std::string>();
        ids = tok.encode(p.prompt_text, true);
      } else if (all_ints(pr)) {
        for (const auto& x : pr) {
          int64_t id = x.get<int64_t>();
          if (id < 0 || id >= model.config.vocab_size)
            throw ApiError(400, fmt::format("'prompt' token id {} is outside the vocabulary (0..{})", id,
                                            model.config.vocab_size - 1),
                           "prompt");
          ids.push_back(static_cast<int>(id));
        }
        p.prompt_text = tok.decode(ids);
      } else if (pr.is_array() && pr.size() != 1) {
        throw ApiError(400, "'prompt' holds several prompts; this server takes one prompt per request", "prompt");
      } else {
        throw ApiError(400, "'prompt' must be a string, an array of one string, or an array of token ids", "prompt",
                       "invalid_type");
      }
    }
    if (ids.empty()) throw ApiError(400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");

    // ---- decoding parameters ----
    DecodeParams& d = p.gen.params;
    if (auto n = get_int(b, "n"); n && *n != 1)
      throw ApiError(400, "'n' must be 1: this server returns one choice per request", "n");
    if (auto n = get_int(b, "best_of"); n && *n != 1)
      throw ApiError(400, "'best_of' must be 1: this server returns one choice per request", "best_of");
    if (auto e = get_bool(b, "echo"); e && *e) throw ApiError(400, "'echo' is not supported", "echo");
    for (const char* pen : {"presence_penalty", "frequency_penalty"})
      if (auto v = get_number(b, pen); v && *v != 0.0)
        throw ApiError(400, fmt::format("'{}' is not supported; omit it or send 0", pen), pen);
    if (present(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
      throw ApiError(400, "'logit_bias' is not supported", "logit_bias");

    const int ctx = model.config.context_length;
    const int n_prompt = static_cast<int>(ids.size());
    std::optional<int64_t> mt = get_int(b, "max_tokens");
    const char* mt_name = "max_tokens";
    if (chat && !mt) {
      mt = get_int(b, "max_completion_tokens");
      mt_name = "max_completion_tokens";
    }
    if (mt) {
      if (*mt < 1) throw ApiError(400, fmt::format("'{}' must be at least 1", mt_name), mt_name);
      if (*mt > opts.max_tokens_limit)
        throw ApiError(400,
                       fmt::format("'{}' is {}, over this server's limit of {} (--max-tokens-limit)", mt_name, *mt,
                                   opts.max_tokens_limit),
                       mt_name);
      if (n_prompt + *mt > ctx)
        throw ApiError(400,
                       fmt::format("the prompt ({} tokens) plus '{}' ({}) is over the model's context length of {} "
                                   "tokens; shorten the prompt or lower '{}'",
                                   n_prompt, mt_name, *mt, ctx, mt_name),
                       mt_name, "context_length_exceeded");
      d.max_tokens = static_cast<int>(*mt);
    } else {
      // Completions default to 16 tokens (OpenAI); chat to whatever the context and the limit allow.
      int room = ctx - n_prompt;
      if (room < 1)
        throw ApiError(400,
                       fmt::format("the prompt ({} tokens) fills the model's context length of {} tokens; shorten it",
                                   n_prompt, ctx),
                       chat ? "messages" : "prompt", "context_length_exceeded");
      d.max_tokens = std::min({chat ? opts.max_tokens_limit : 16, opts.max_tokens_limit, room});
    }

    if (auto t = get_number(b, "temperature")) {
      if (!(*t >= 0.0 && *t <= 2.0)) throw ApiError(400, "'temperature' must be between 0 and 2", "temperature");
      d.temperature = static_cast<float>(*t);
    }
    if (auto t = get_number(b, "top_p")) {
      if (!(*t > 0.0 && *t <= 1.0)) throw ApiError(400, "'top_p' must be in (0, 1]", "top_p");
      d.top_p = static_cast<float>(*t);
    }
    if (auto k = get_int(b, "top_k")) {
      if (*k < -1) throw ApiError(400, "'top_k' must be -1 or 0 (off) or a positive integer", "top_k");
      d.top_k = *k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(*k, model.config.vocab_size));
    }
    if (auto s = get_int(b, "seed")) d.seed = static_cast<uint64_t>(*s);
    if (auto ig = get_bool(b, "ignore_eos")) d.stop_at_eos = !*ig;

    if (present(b, "stop")) {
      const json& s = b["stop"];
      std::vector<json> items;
      if (s.is_string()) items.push_back(s);
      else if (s.is_array()) items.assign(s.begin(), s.end());
      else throw ApiError(400, "'stop' must be a string or an array of strings", "stop", "invalid_type");
      if (items.size() > 16) throw ApiError(400, "'stop' holds more than 16 strings", "stop");
      for (const auto& x : items) {
        if (!x.is_string() || x.get<std::string>().empty())
          throw ApiError(400, "'stop' must hold non-empty strings", "stop", "invalid_type");
        d.stop.push_back(x.get<std::string>());
      }
    }

    if (chat) {
      if (auto lp = get_bool(b, "logprobs")) p.want_logprobs = *lp;
      if (auto tl = get_int(b, "top_logprobs"); tl && (*tl < 0 || *tl > 20))
        throw ApiError(400, "'top_logprobs' must be between 0 and 20", "top_logprobs");
    } else if (present(b, "logprobs")) {
      const json& lp = b["logprobs"];
      if (lp.is_boolean()) {
        p.want_logprobs = lp.get<bool>();
      } else {
        auto n = get_int(b, "logprobs");
        if (*n < 0 || *n > 5) throw ApiError(400, "'logprobs' must be an integer between 0 and 5", "logprobs");
        p.want_logprobs = true;
      }
    }

    if (auto s = get_bool(b, "stream")) p.stream = *s;
    if (present(b, "stream_options")) {
      if (!b["stream_options"].is_object())
        throw ApiError(400, "'stream_options' must be an object", "stream_options", "invalid_type");
      if (auto u = get_bool(b["stream_options"], "include_usage")) p.include_usage = *u;
    }
    return p;
  }

  // ---- responses ----------------------------------------------------------------------------

  json base(const std::string& id, const char* object, int64_t created) const {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", name}, {"system_fingerprint", fp}};
  }

  static json usage(int prompt, int completion) {
    return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  // Logprobs of tokens[from, to) in the format of the endpoint; `offset` is the text offset of `from`.
  json logprobs_json(bool chat, const std::vector<int>& tokens, const std::vector<float>& lps, size_t from,
                     size_t to, size_t offset) const {
    const Tokenizer& tok = *model.tokenizer;
    if (chat) {
      json content = json::array();
      for (size_t i = from; i < to && i < lps.size(); ++i) {
        std::string piece = tok.piece(tokens[i]);
        content.push_back({{"token", piece}, {"logprob", lps[i]}, {"bytes", bytes_of(piece)},
                           {"top_logprobs", json::array()}});
      }
      return json{{"content", content}};
    }
    json toks = json::array(), vals = json::array(), offs = json::array();
    for (size_t i = from; i < to && i < lps.size(); ++i) {
      std::string piece = tok.piece(tokens[i]);
      toks.push_back(piece);
      vals.push_back(lps[i]);
      offs.push_back(offset);
      offset += piece.size();
    }
    return json{{"tokens", toks}, {"token_logprobs", vals}, {"top_logprobs", nullptr}, {"text_offset", offs}};
  }

  json full_response(const Parsed& p, const GenResult& r, const std::string& id, int64_t created) const {
    json j = base(id, p.chat ? "chat.completion" : "text_completion", created);
    json choice = {{"index", 0}, {"finish_reason", r.finish_reason}, {"token_ids", r.tokens}};
    if (p.chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    else choice["text"] = r.text;
    choice["logprobs"] = p.want_logprobs
                             ? logprobs_json(p.chat, r.tokens, r.logprobs, 0, r.tokens.size(), p.prompt_text.size())
                             : json(nullptr);
    j["choices"] = json::array({choice});
    j["usage"] = usage(static_cast<int>(p.gen.prompt.size()), static_cast<int>(r.tokens.size()));
    return j;
  }

  // ---- handlers -----------------------------------------------------------------------------

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      if (stopping) throw ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error");
      check_auth(req);
      json body = parse_body(req);
      auto p = std::make_shared<Parsed>(parse(body, chat));
      auto job = std::make_shared<Job>();
      job->req = p->gen;
      const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      enqueue(job);
      if (!p->stream) {
        std::unique_lock<std::mutex> lk(job->mu);
        job->cv.wait(lk, [&] { return job->done; });
        if (job->error_status != 0)
          throw ApiError(job->error_status, job->error, "",
                         job->error_status == 400 ? "invalid_value" : "engine_error",
                         job->error_status == 400 ? "invalid_request_error" : "server_error");
        res.status = 200;
        res.set_content(dump(full_response(*p, job->result, id, created)), "application/json");
        return;
      }
      stream(res, p, job, id, created);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // Server-sent events: one chunk per generated token, then a chunk with finish_reason (and the
  // rest of the text), an optional usage chunk, then `data: [DONE]`.
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
    res.set_chunked_content_provider(
        "text/event-stream", [this, p, job, id, created, state](size_t, httplib::DataSink& sink) -> bool {
          if (state->finished) {
            sink.done();
            return true;
          }
          const Tokenizer& tok = *model.tokenizer;
          std::vector<int> toks;
          std::vector<float> lps;
          bool done = false;
          {
            std::unique_lock<std::mutex> lk(job->mu);
            job->cv.wait(lk, [&] { return job->done || job->tokens.size() > state->next_token; });
            toks = job->tokens;
            lps = job->logprobs;
            done = job->done;
          }
          const char* object = p->chat ? "chat.completion.chunk" : "text_completion";
          auto emit = [&](const json& chunk) {
            std::string s = "data: " + dump(chunk) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          auto chunk = [&](const std::string& delta, size_t from, size_t to, size_t offset, const json& finish) {
            json c = base(id, object, created);
            json choice = {{"index", 0}, {"finish_reason", finish}};
            choice["token_ids"] = std::vector<int>(toks.begin() + static_cast<long>(from),
                                                   toks.begin() + static_cast<long>(to));
            if (p->chat) {
              json d = {{"content", delta}};
              if (!state->role_sent) d["role"] = "assistant";
              state->role_sent = true;
              choice["delta"] = d;
            } else {
              choice["text"] = delta;
            }
            choice["logprobs"] = p->want_logprobs && to > from
                                     ? logprobs_json(p->chat, toks, lps, from, to, p->prompt_text.size() + offset)
                                     : json(nullptr);
            c["choices"] = json::array({choice});
            return emit(c);
          };
          // Once finished, the engine's result is the truth for tokens and text.
          if (done && job->error_status == 0) {
            toks = job->result.tokens;
            lps = job->result.logprobs;
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
            if (!chunk(delta, i, i + 1, offset, nullptr)) return false;
          }
          if (!done) return true;
          state->finished = true;
          if (job->error_status != 0) {
            emit(error_json(job->error, "server_error", "", "engine_error"));
          } else {
            const GenResult& r = job->result;
            // Send what was held back: the rest of the engine's text (stop strings already cut).
            std::string rest;
            if (r.text.size() >= state->sent && r.text.compare(0, state->sent, state->text, 0, state->sent) == 0)
              rest = r.text.substr(state->sent);
            if (!chunk(rest, toks.size(), toks.size(), state->sent, r.finish_reason)) return false;
            if (p->include_usage) {
              json u = base(id, object, created);
              u["choices"] = json::array();
              u["usage"] = usage(static_cast<int>(p->gen.prompt.size()), static_cast<int>(r.tokens.size()));
              if (!emit(u)) return false;
            }
          }
          static const char kDone[] = "data: [DONE]\n\n";
          if (!sink.write(kDone, sizeof(kDone) - 1)) return false;
          sink.done();
          return true;
        });
  }

  json models_json() const {
    json m = {{"id", name},
              {"object", "model"},
              {"created", created_at},
              {"owned_by", "repro-audit"},
              {"mode", mode_name(eopts.mode)},
              {"model_sha256", model.file_sha256},
              {"context_length", model.config.context_length},
              {"system_fingerprint", fp}};
    return json{{"object", "list"}, {"data", json::array({m})}};
  }

  void setup_routes() {
    http.set_payload_max_length(opts.max_body_bytes);
    http.set_keep_alive_timeout(2);
    int threads = opts.http_threads > 0 ? opts.http_threads : std::max(64, 2 * opts.max_batch + 8);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    // Debian's libcpp-httplib is compiled with a listen backlog of 5: a burst of clients overflows
    // the accept queue and connections are dropped. Keep the listening socket's fd (with httplib's
    // usual SO_REUSEADDR) so start() can raise the backlog after binding.
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      ServerStats s = stats();
      json j = {{"status", stopping ? "stopping" : "ok"},
                {"model", name},
                {"mode", mode_name(eopts.mode)},
                {"system_fingerprint", fp},
                {"active", s.active},
                {"queued", s.queued},
                {"max_batch_seen", s.max_batch_seen}};
      res.status = stopping ? 503 : 200;
      res.set_content(dump(j), "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        check_auth(req);
        res.set_content(dump(models_json()), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        check_auth(req);
        if (req.matches[1] != name)
          throw ApiError(404, fmt::format("the model '{}' does not exist on this server; it serves '{}'",
                                          std::string(req.matches[1]), name),
                         "model", "model_not_found");
        res.set_content(dump(models_json()["data"][0]), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
    for (const char* path : {"/v1/completions", "/v1/chat/completions"})
      http.Get(path, [path](const httplib::Request&, httplib::Response& res) {
        send_error(res, ApiError(405, fmt::format("{} takes POST with a JSON body", path), "", "method_not_allowed"));
      });

    // httplib's own errors (413 body too large, 404 unknown path, 400 bad request line) as JSON.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string msg, code;
      switch (res.status) {
        case 413: msg = body_limit_message(); code = "request_too_large"; break;
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

  ServerStats stats() const {
    std::lock_guard<std::mutex> lk(mu);
    ServerStats s = st;
    s.queued = static_cast<int>(queue.size());
    return s;
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
  // A client that disconnects mid-response must not kill the process (httplib sends without
  // MSG_NOSIGNAL); only replace the default action.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, nullptr);
  }
  I.engine = std::make_unique<Engine>(I.model, I.eopts);
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
  I.started = true;
  I.engine_thread = std::thread([&I] { I.engine_loop(); });
  I.http_thread = std::thread([&I] { I.http.listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it (bounded).
  for (int i = 0; i < 5000 && !I.http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::stop() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lk(I.life_mu);
  if (!I.started || I.stopped) return;
  I.stopped = true;
  I.stopping = true;
  // Stop accepting; httplib's workers finish the requests they hold (open streams end early) and
  // are joined before listen_after_bind returns. The engine keeps decoding until then.
  for (int i = 0; i < 5000 && !I.http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  I.http.stop();
  if (I.http_thread.joinable()) I.http_thread.join();
  {
    std::lock_guard<std::mutex> qlk(I.mu);
    I.quit = true;
    I.paused = false;
  }
  I.cv.notify_all();
  if (I.engine_thread.joinable()) I.engine_thread.join();
}

int Server::port() const { return impl_->bound_port; }
std::string Server::url() const {
  const std::string& h = impl_->opts.host;
  std::string host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
  return fmt::format("http://{}:{}", host, impl_->bound_port);
}
const std::string& Server::model_name() const { return impl_->name; }
const std::string& Server::fingerprint() const { return impl_->fp; }
ServerStats Server::stats() const { return impl_->stats(); }

void Server::pause() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->paused = true;
}
void Server::resume() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->paused = false;
  }
  impl_->cv.notify_all();
}

}  // namespace repro
