// RemoteClient: one thread, one libcurl multi handle, any number of requests in flight.
//
// Loop (run): start queued attempts -> curl_multi_perform -> finish completed transfers (parse,
// retry or deliver) -> check read timeouts -> curl_multi_poll until socket activity, the next curl
// timeout, the next backoff timer, or 50 ms (so the stop flag and read timeouts are seen).
// Nothing blocks: a retry's backoff is a timer in the loop; callbacks run on this thread and may
// submit more work (closed-loop load).
//
// Faults: 429 and 5xx, timeouts, connect errors, resets, cut streams, invalid JSON and empty choices
// are retried up to spec.max_retries with exponential backoff and jitter (Retry-After honoured,
// capped at retry_after_max_s; no wait longer than total_timeout_s); other 4xx and TLS failures are
// not retried. libcurl's own silent re-send on a dead kept-alive connection is refused (on_seek), so
// every attempt the server can have seen is one counted here. A request that fails for good is
// delivered with RemoteResult::error = "<cause>: <detail> (after N attempts)".
//
// TLS: peer and host verification always on; CAINFO from spec.ca_cert. No insecure switch.
// Secrets: the key only ever goes into the curl header list; every string produced here (errors,
// log lines) is passed through scrub_secret() (log lines: scrub_secrets(), URL credentials too), and
// logged headers are redacted.
#include <curl/curl.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_set>

#include "repro/common/error.hpp"
#include "repro/remote/client.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

long rss_kb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long size = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void curl_global_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Hosts never reached through a proxy: NO_PROXY / no_proxy, and loopback always.
std::string noproxy_list() {
  std::string np = "127.0.0.1,localhost,::1";
  for (const char* name : {"NO_PROXY", "no_proxy"})
    if (const char* v = std::getenv(name); v && *v) np = std::string(v) + "," + np;
  return np;
}

// What every request of the client does, POST or GET: TLS peer and host verification always on
// (CAINFO from --ca-cert), no redirects followed, http and https only, no signals, the connect timeout.
void set_transfer_rules(CURL* e, const EndpointSpec& spec, const std::string& noproxy, char* errbuf) {
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(spec.connect_timeout_s * 1000));
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!spec.ca_cert.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, spec.ca_cert.c_str());
  curl_easy_setopt(e, CURLOPT_NOPROXY, noproxy.c_str());
}

// The failure cause of a transfer that libcurl ended with `code` (not CURLE_OK).
FailCause transport_cause(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT: return FailCause::timeout;
    case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY:
      return FailCause::connect;
    case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
      return FailCause::reset;
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH: case CURLE_SSL_INVALIDCERTSTATUS:
      return FailCause::tls;
    default: return FailCause::other;
  }
}

}  // namespace

double monotonic_seconds() { return mono_now(); }

// ---------------------------------------------------------------- spec helpers

namespace {
// A key goes into an HTTP header: a line break in it would inject headers. Control characters and
// DEL are refused (the message never shows the key).
void check_key_chars(const std::string& k, const std::string& where) {
  for (unsigned char c : k)
    if (c < 0x20 || c == 0x7f)
      throw UsageError("the API key in " + where +
                       " contains a control character (a line break inside it?); put the key alone on one line");
}
}  // namespace

std::string load_api_key(const std::string& env_name, const std::string& file) {
  if (!file.empty()) {
    std::string k;
    try {
      k = trim(read_file(file, "--api-key-file"));
    } catch (const UsageError& e) {
      throw UsageError(std::string(e.what()) + " (--api-key-file)");
    }
    if (k.empty()) throw UsageError("--api-key-file '" + file + "' is empty; put the API key in it");
    check_key_chars(k, "--api-key-file '" + file + "'");
    return k;
  }
  if (env_name.empty()) return {};
  const char* v = std::getenv(env_name.c_str());
  std::string k = v ? trim(v) : std::string();
  check_key_chars(k, "the environment variable " + env_name + " (--api-key-env)");
  return k;
}

void validate_endpoint(const EndpointSpec& s) {
  const std::string who = "--endpoint '" + s.label + "'";
  if (s.url.rfind("http://", 0) != 0 && s.url.rfind("https://", 0) != 0)
    throw UsageError(who + ": URL '" + redact_url(s.url) + "' must start with http:// or https://");
  if (s.api != "chat" && s.api != "completions")
    throw UsageError("--api '" + s.api + "' is not known; use chat or completions");
  if (s.api_model.empty())
    throw UsageError(who + ": no model name; pass --api-model NAME (Azure: the deployment name)");
  if (!(s.connect_timeout_s > 0) || !(s.read_timeout_s > 0) || !(s.total_timeout_s > 0) ||
      !(s.total_timeout_s <= 86400))
    throw UsageError(who + ": --timeout must be > 0 and at most 86400 seconds");
  if (s.max_response_bytes < 1024) throw UsageError(who + ": the response size cap must be at least 1024 bytes");
  if (s.max_retries < 0 || s.max_retries > 100)
    throw UsageError(who + ": --max-retries must be in 0..100");
  if (!s.ca_cert.empty()) {
    std::ifstream f(s.ca_cert);
    if (!f) throw UsageError(fmt_error_open(s.ca_cert, "--ca-cert file"));
  }
  if (!s.extra_body.is_object())
    throw UsageError(who + ": --extra-body must be a JSON object, e.g. '{\"top_k\": 1}'");
}

// ---------------------------------------------------------------- cache headers

std::string cache_hit_header(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string name(trim(std::string(line.substr(0, colon))));
  std::string value(trim(std::string(line.substr(colon + 1))));
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
  if (name.empty() || value.empty() || value.size() > 200) return {};
  std::string upper = value;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  bool hit = false;
  if (name == "age") {
    // Age: seconds the response spent in a cache (RFC 9111); above 0 it came from one.
    hit = value.find_first_not_of("0123456789") == std::string::npos && value.find_first_not_of('0') != std::string::npos;
  } else if (name == "x-cache" || name == "x-cache-status" || name == "x-proxy-cache" || name == "x-vercel-cache" ||
             name == "helicone-cache" || ends_with("cache-status")) {
    hit = upper.find("HIT") != std::string::npos || upper.find("STALE") != std::string::npos;
  }
  return hit ? name + ": " + value : std::string();
}

// ---------------------------------------------------------------- one GET

namespace {

struct GetBody {
  std::string* body;
  size_t max_bytes;
};

size_t on_get_body(char* p, size_t size, size_t n, void* ud) {
  auto* b = static_cast<GetBody*>(ud);
  const size_t len = size * n;
  if (b->body->size() + len > b->max_bytes) return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  b->body->append(p, len);
  return len;
}

}  // namespace

HttpGetResult http_get(const EndpointSpec& spec, const std::string& url, const std::vector<std::string>& headers,
                       size_t max_bytes) {
  curl_global_once();
  HttpGetResult r;
  CURL* e = curl_easy_init();
  if (!e) {
    r.cause = FailCause::other;
    r.error = "curl_easy_init failed";
    return r;
  }
  curl_slist* hdrs = nullptr;
  for (const auto& h : headers)
    if (strncasecmp(h.c_str(), "content-type:", 13) != 0) hdrs = curl_slist_append(hdrs, h.c_str());
  char errbuf[CURL_ERROR_SIZE] = {0};
  GetBody sink{&r.body, max_bytes};
  const std::string noproxy = noproxy_list();
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_get_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink);
  set_transfer_rules(e, spec, noproxy, errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::min(spec.read_timeout_s, 60.0) * 1000));
  const CURLcode code = curl_easy_perform(e);
  if (code != CURLE_OK) {
    r.cause = transport_cause(code);
    r.error = scrub_secret(errbuf[0] ? errbuf : curl_easy_strerror(code), spec.api_key);
  }
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
  char* ct = nullptr;
  curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
  if (ct) r.content_type = ct;
  char* loc = nullptr;
  curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &loc);
  if (loc) r.location = loc;
  curl_header* server = nullptr;
  if (code == CURLE_OK && curl_easy_header(e, "Server", 0, CURLH_HEADER, -1, &server) == CURLHE_OK && server &&
      server->value)
    r.server = sanitize_utf8(std::string(server->value).substr(0, 200));
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(e);
  return r;
}

// ---------------------------------------------------------------- stats

void RemoteStats::merge(const RemoteStats& o) {
  requests += o.requests;
  attempts += o.attempts;
  retries += o.retries;
  succeeded += o.succeeded;
  failed += o.failed;
  aborted += o.aborted;
  probe_failed += o.probe_failed;
  filler_failed += o.filler_failed;
  for (auto& [k, v] : o.attempt_errors) attempt_errors[k] += v;
  for (auto& [k, v] : o.final_errors) final_errors[k] += v;
  max_in_flight = std::max(max_in_flight, o.max_in_flight);
  wall_s += o.wall_s;
  client_cpu_s += o.client_cpu_s;
  rss_start_kb = rss_start_kb ? rss_start_kb : o.rss_start_kb;
  rss_peak_in_flight_kb = std::max(rss_peak_in_flight_kb, o.rss_peak_in_flight_kb);
}

nlohmann::json RemoteStats::to_json() const {
  return {{"requests", requests},         {"attempts", attempts},
          {"retries", retries},           {"succeeded", succeeded},
          {"failed", failed},             {"aborted", aborted},
          {"probe_failed", probe_failed}, {"filler_failed", filler_failed},
          {"attempt_errors", attempt_errors}, {"final_errors", final_errors},
          {"max_in_flight", max_in_flight}, {"wall_s", wall_s},
          {"client_cpu_s", client_cpu_s}, {"rss_start_kb", rss_start_kb},
          {"rss_peak_in_flight_kb", rss_peak_in_flight_kb}};
}

RemoteStats RemoteStats::from_json(const nlohmann::json& j) {
  RemoteStats s;
  if (!j.is_object()) return s;
  auto num = [&](const char* k) -> int64_t {
    auto it = j.find(k);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  auto real = [&](const char* k) -> double {
    auto it = j.find(k);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  auto counts = [&](const char* k, std::map<std::string, int64_t>& m) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_object()) return;
    for (auto e = it->begin(); e != it->end(); ++e)
      if (e->is_number_integer()) m[e.key()] = e->get<int64_t>();
  };
  s.requests = num("requests");
  s.attempts = num("attempts");
  s.retries = num("retries");
  s.succeeded = num("succeeded");
  s.failed = num("failed");
  s.aborted = num("aborted");
  s.probe_failed = num("probe_failed");
  s.filler_failed = num("filler_failed");
  counts("attempt_errors", s.attempt_errors);
  counts("final_errors", s.final_errors);
  s.max_in_flight = static_cast<int>(num("max_in_flight"));
  s.wall_s = real("wall_s");
  s.client_cpu_s = real("client_cpu_s");
  s.rss_start_kb = static_cast<long>(num("rss_start_kb"));
  s.rss_peak_in_flight_kb = static_cast<long>(num("rss_peak_in_flight_kb"));
  return s;
}

// ---------------------------------------------------------------- engine

struct Job {
  size_t max_body = 64u << 20;  // spec.max_response_bytes
  std::string secret;           // spec.api_key: scrubbed from response text before it is parsed or cut
  RequestParams params;
  HttpRequestSpec req;
  RemoteClient::Callback done;
  int attempt = 0;  // attempts started
  bool fresh = false;  // the next attempt opens a new connection (the last one died on a kept-alive one)
};

struct Transfer {
  CURL* easy = nullptr;
  curl_slist* hdrs = nullptr;
  std::unique_ptr<Job> job;
  bool decided = false, sse_mode = false;
  long status = 0;
  std::string body;
  SseParser sse;
  StreamAccumulator acc{true};
  std::vector<std::string> events;
  double t0 = 0, t_first_token = -1, t_first_byte = -1, last_activity = 0;
  double retry_after = -1;
  std::string cache_header;  // cache-hit headers of the response (cache_hit_header), "; "-joined
  size_t received = 0;  // body bytes so far, streamed or not (bounded by spec.max_response_bytes)
  size_t sent = 0;      // request body bytes handed to libcurl (on_read)
  bool timed_out = false, too_big = false;
  bool resend_refused = false;  // libcurl wanted to send the request again by itself (on_seek)
  char errbuf[CURL_ERROR_SIZE] = {0};
};

struct RemoteClient::Impl {
  RemoteClient* self;
  CURLM* multi = nullptr;
  std::deque<std::unique_ptr<Job>> ready;
  std::multimap<double, std::unique_ptr<Job>> timers;
  std::unordered_set<Transfer*> active;
  std::vector<CURL*> pool;
  std::mt19937_64 rng{std::random_device{}()};
  std::string noproxy;
  bool stopping = false;

  const EndpointSpec& spec() const { return self->spec_; }

  void log(const std::string& line) {
    if (!spec().verbose) return;
    std::string s = scrub_secrets(line, endpoint_secrets({spec()}));  // the key and URL credentials
    if (spec().log)
      spec().log(s);
    else
      std::fprintf(stderr, "%s\n", s.c_str());
  }

  static size_t on_header(char* p, size_t size, size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    size_t len = size * n;
    t->last_activity = mono_now();
    std::string_view h(p, len);
    if (h.size() > 12 && strncasecmp(h.data(), "retry-after:", 12) == 0)
      t->retry_after = parse_retry_after(h.substr(12), static_cast<int64_t>(std::time(nullptr)));
    if (h.size() > 5 && strncasecmp(h.data(), "HTTP/", 5) == 0) t->cache_header.clear();  // a new response's headers
    if (std::string hit = cache_hit_header(h); !hit.empty() && t->cache_header.size() < 512)
      t->cache_header += (t->cache_header.empty() ? "" : "; ") + hit;
    return len;
  }

  static size_t on_write(char* p, size_t size, size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    size_t len = size * n;
    double now = mono_now();
    t->last_activity = now;
    if (t->t_first_byte < 0) t->t_first_byte = now;
    if (!t->decided) {
      t->decided = true;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
      char* ct = nullptr;
      curl_easy_getinfo(t->easy, CURLINFO_CONTENT_TYPE, &ct);
      t->sse_mode = t->status == 200 && ct && strncasecmp(ct, "text/event-stream", 17) == 0;
    }
    // One cap for every response, streamed or not: an endless stream ends here too.
    if (t->received + len > t->job->max_body) {
      t->too_big = true;
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
    t->received += len;
    if (t->sse_mode) {
      t->sse.feed(std::string_view(p, len), t->events);
      for (auto& e : t->events)
        if (t->acc.add_event(scrub_secret(std::move(e), t->job->secret)) && t->t_first_token < 0) t->t_first_token = now;
      t->events.clear();
      return len;
    }
    t->body.append(p, len);
    return len;
  }

  // The request body goes to libcurl through a read callback, not CURLOPT_POSTFIELDS, so that
  // sending it a second time needs a rewind (on_seek).
  static size_t on_read(char* buf, size_t size, size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    const std::string& body = t->job->req.body;
    const size_t k = std::min(size * n, body.size() - t->sent);
    std::memcpy(buf, body.data() + t->sent, k);
    t->sent += k;
    return k;
  }

  // libcurl sends a request again by itself when the kept-alive connection it reused turns out to
  // be dead before any response byte ("Connection died, retrying a fresh connect"): an attempt the
  // server may well have received, outside max_retries and counted nowhere. That re-send rewinds
  // the body first; refusing the rewind ends the attempt with CURLE_SEND_FAIL_REWIND, which finish()
  // counts as a reset and retries (or not) like any other, on a fresh connection.
  static int on_seek(void* ud, curl_off_t offset, int origin) {
    auto* t = static_cast<Transfer*>(ud);
    if (origin == SEEK_SET && offset == 0 && t->sent == 0) return CURL_SEEKFUNC_OK;  // nothing sent yet
    t->resend_refused = true;
    return CURL_SEEKFUNC_CANTSEEK;
  }

  CURL* take_easy() {
    if (!pool.empty()) {
      CURL* e = pool.back();
      pool.pop_back();
      curl_easy_reset(e);
      return e;
    }
    return curl_easy_init();
  }

  void start(std::unique_ptr<Job> job) {
    auto* t = new Transfer;
    t->job = std::move(job);
    Job& j = *t->job;
    ++j.attempt;
    ++self->stats_.attempts;
    t->acc = StreamAccumulator(spec().api == "chat");
    t->easy = take_easy();
    for (auto& h : j.req.headers) t->hdrs = curl_slist_append(t->hdrs, h.c_str());
    CURL* e = t->easy;
    curl_easy_setopt(e, CURLOPT_URL, j.req.url.c_str());
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, &Impl::on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, t);
    curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, &Impl::on_seek);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, t);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(j.req.body.size()));
    if (j.fresh) curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    j.fresh = false;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    set_transfer_rules(e, spec(), noproxy, t->errbuf);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(spec().total_timeout_s * 1000));
    t->t0 = t->last_activity = mono_now();
    if (spec().verbose) {
      std::string hl;
      for (auto& h : j.req.headers) {
        if (strncasecmp(h.c_str(), "authorization:", 14) == 0) hl += " [Authorization: REDACTED]";
        else if (strncasecmp(h.c_str(), "api-key:", 8) == 0) hl += " [api-key: REDACTED]";
        else hl += " [" + h + "]";
      }
      log("> POST " + redact_url(j.req.url) + " attempt " + std::to_string(j.attempt) + hl + " " +
          j.req.body.substr(0, 2000));
    }
    active.insert(t);
    self->stats_.max_in_flight = std::max<int>(self->stats_.max_in_flight, static_cast<int>(active.size()));
    curl_multi_add_handle(multi, e);
  }

  void release(Transfer* t) {
    curl_multi_remove_handle(multi, t->easy);
    curl_slist_free_all(t->hdrs);
    t->hdrs = nullptr;
    if (pool.size() < 4096)
      pool.push_back(t->easy);
    else
      curl_easy_cleanup(t->easy);
    active.erase(t);
  }

  // Classify a finished attempt; fills `pr` on success.
  FailCause classify(Transfer* t, CURLcode code, ParsedResponse& pr, std::string& detail) {
    if (t->timed_out) {
      detail = "no data for " + std::to_string(spec().read_timeout_s) + " s (read timeout)";
      return FailCause::timeout;
    }
    if (code != CURLE_OK) {
      std::string msg = t->errbuf[0] ? t->errbuf : curl_easy_strerror(code);
      detail = "curl: " + msg;
      if (code == CURLE_SEND_FAIL_REWIND && t->resend_refused) {
        detail = "the connection was closed before any response byte (a kept-alive connection; the request may "
                 "have reached the server)";
        return FailCause::reset;
      }
      FailCause cause = transport_cause(code);
      if (cause == FailCause::reset && t->sse_mode && t->acc.result().events > 0) {
        detail = "stream cut after " + std::to_string(t->acc.result().events) + " events (" + detail + ")";
        return FailCause::stream_cut;
      }
      if (cause == FailCause::tls) detail += "; check --ca-cert";
      if (code == CURLE_WRITE_ERROR && t->too_big)
        detail = "response larger than " + std::to_string(spec().max_response_bytes) +
                 " bytes (streamed or not); the server sent too much or never ended its stream";
      return cause;
    }
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    t->status = status;
    if (status < 200 || status >= 300) {
      detail = "HTTP " + std::to_string(status);
      // Redact first, then cut: a key near the cut must not leak in part.
      std::string m = error_message_from_body(scrub_secret(t->body, spec().api_key));
      if (!m.empty()) detail += ": " + m;
      if (status == 429) return FailCause::http_429;
      if (status >= 500) return FailCause::http_5xx;
      if (status == 408) return FailCause::timeout;
      return FailCause::http_4xx;
    }
    if (t->sse_mode) {
      if (!t->sse.error().empty()) {
        detail = t->sse.error();
        return FailCause::invalid_json;
      }
      t->acc.finish();
      pr = std::move(t->acc.result());
    } else {
      pr = parse_response_json(scrub_secret(t->body, spec().api_key), spec().api == "chat");
    }
    detail = pr.error;
    return pr.cause;
  }

  double backoff(const Job& j, double retry_after) {
    const EndpointSpec& s = spec();
    // No wait is longer than one attempt may take (--timeout): a Retry-After of days, or a long
    // backoff, would otherwise hold the request far beyond what the user allowed for it.
    const double cap = std::min(s.retry_after_max_s, s.total_timeout_s);
    if (retry_after >= 0) {
      double ra = std::min(retry_after, cap);
      std::uniform_real_distribution<double> u(0, 0.1 * std::max(ra, 0.05));
      return std::min(ra + u(rng), cap);  // never earlier than the server asked, up to the cap
    }
    double d = s.backoff_base_s * std::ldexp(1.0, std::min(j.attempt - 1, 30));
    d = std::min({d, s.backoff_max_s, s.total_timeout_s});
    std::uniform_real_distribution<double> u(d / 2, d);
    return u(rng);
  }

  void finish(Transfer* t, CURLcode code) {
    double now = mono_now();
    ParsedResponse pr;
    std::string detail;
    FailCause cause = classify(t, code, pr, detail);
    double latency = now - t->t0;
    double ttft = t->t_first_token >= 0 ? t->t_first_token - t->t0 : 0;
    const double t_send = t->t0, t_first_byte = t->t_first_byte;
    double retry_after = t->retry_after;
    std::string cache_header = std::move(t->cache_header);
    long status = t->status;
    std::unique_ptr<Job> job = std::move(t->job);
    release(t);
    delete t;
    RemoteStats& st = self->stats_;
    log("< " + std::to_string(status) + " " + cause_name(cause) + " " + std::to_string(latency) + " s" +
        (detail.empty() ? "" : " " + detail));
    if (cause != FailCause::none) {
      ++st.attempt_errors[cause_name(cause)];
      if (cause_retryable(cause) && job->attempt <= spec().max_retries && !stopping) {
        ++st.retries;
        if (cause == FailCause::reset) job->fresh = true;
        timers.emplace(now + backoff(*job, cause == FailCause::http_429 || cause == FailCause::http_5xx
                                               ? retry_after : -1.0),
                       std::move(job));
        return;
      }
    }
    RemoteResult res;
    res.cause = cause;
    res.decoding_id = job->params.decoding.id;
    res.seed = job->params.seed;
    res.attempts = job->attempt;
    res.t_send = t_send;
    res.t_first_byte = t_first_byte;
    res.t_last_byte = now;
    ++st.requests;
    if (cause == FailCause::none) {
      ++st.succeeded;
      res.response = std::move(pr);
      res.response.text = scrub_secret(res.response.text, spec().api_key);
      res.latency_s = latency;
      res.ttft_s = ttft;
      res.cache_header = scrub_secret(cache_header, spec().api_key);
    } else {
      ++st.failed;
      ++st.final_errors[cause_name(cause)];
      res.error = scrub_secret(std::string(cause_name(cause)) + ": " + detail + " (after " +
                                   std::to_string(job->attempt) + " attempt" + (job->attempt > 1 ? "s" : "") + ")",
                               spec().api_key);
    }
    if (job->done) job->done(std::move(res));
  }

  void abort_all() {
    stopping = true;
    std::vector<std::unique_ptr<Job>> jobs;
    const double now = mono_now();
    std::vector<double> sent_at;  // the in-flight ones' send times, by job (aborted intervals end now)
    for (Transfer* t : std::vector<Transfer*>(active.begin(), active.end())) {
      sent_at.push_back(t->t0);
      jobs.push_back(std::move(t->job));
      release(t);
      delete t;
    }
    for (auto& [due, j] : timers) jobs.push_back(std::move(j));
    timers.clear();
    for (auto& j : ready) jobs.push_back(std::move(j));
    ready.clear();
    for (size_t k = 0; k < jobs.size(); ++k) {
      auto& j = jobs[k];
      ++self->stats_.aborted;
      RemoteResult res;
      res.aborted = true;
      if (k < sent_at.size()) {
        res.t_send = sent_at[k];
        res.t_last_byte = now;
      }
      res.cause = FailCause::aborted;
      res.error = "aborted: interrupted before the response finished";
      res.attempts = j->attempt;
      if (j->done) j->done(std::move(res));
    }
  }

  // RSS while the most requests are in flight (sampled by the loop every 100 ms).
  void sample_rss() {
    if (static_cast<int>(active.size()) >= self->stats_.max_in_flight)
      self->stats_.rss_peak_in_flight_kb = std::max(self->stats_.rss_peak_in_flight_kb, rss_kb());
  }

  void check_read_timeouts(double now) {
    std::vector<Transfer*> late;
    for (Transfer* t : active)
      if (now - t->last_activity > spec().read_timeout_s) late.push_back(t);
    for (Transfer* t : late) {
      t->timed_out = true;
      finish(t, CURLE_OK);
    }
  }
};

RemoteClient::RemoteClient(EndpointSpec spec, int max_connections) : spec_(std::move(spec)), impl_(new Impl) {
  curl_global_once();
  impl_->self = this;
  impl_->multi = curl_multi_init();
  long maxc = std::max(1, max_connections);
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, maxc);
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxc);
  curl_multi_setopt(impl_->multi, CURLMOPT_MAXCONNECTS, maxc);
  impl_->noproxy = noproxy_list();
}

RemoteClient::~RemoteClient() {
  if (!impl_->active.empty()) impl_->abort_all();
  for (CURL* e : impl_->pool) curl_easy_cleanup(e);
  curl_multi_cleanup(impl_->multi);
  delete impl_;
}

int RemoteClient::in_flight() const { return static_cast<int>(impl_->active.size()); }

void RemoteClient::submit(const RequestParams& params, Callback done) {
  if (impl_->stopping) return;
  auto j = std::make_unique<Job>();
  j->params = params;
  j->req = build_request(spec_, params);
  j->max_body = spec_.max_response_bytes;
  j->secret = spec_.api_key;
  j->done = std::move(done);
  impl_->ready.push_back(std::move(j));
}

void RemoteClient::run(const std::atomic<bool>* stop) {
  Impl& m = *impl_;
  m.stopping = false;
  cancelled_ = false;
  const double wall0 = mono_now(), cpu0 = thread_cpu_s();
  if (stats_.rss_start_kb == 0) stats_.rss_start_kb = rss_kb();
  double last_check = wall0, last_rss = wall0;
  while (true) {
    if ((stop && stop->load()) || cancelled_) {
      m.abort_all();
      break;
    }
    double now = mono_now();
    while (!m.timers.empty() && m.timers.begin()->first <= now) {
      m.ready.push_back(std::move(m.timers.begin()->second));
      m.timers.erase(m.timers.begin());
    }
    while (!m.ready.empty()) {
      auto j = std::move(m.ready.front());
      m.ready.pop_front();
      m.start(std::move(j));
    }
    if (m.active.empty() && m.timers.empty()) break;
    int running = 0;
    curl_multi_perform(m.multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(m.multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      CURLcode code = msg->data.result;
      if (t) m.finish(t, code);
    }
    if (!m.ready.empty() || cancelled_) continue;
    now = mono_now();
    if (now - last_check >= 0.02) {
      m.check_read_timeouts(now);
      last_check = now;
      if (now - last_rss >= 0.1) {
        m.sample_rss();
        last_rss = now;
      }
      if (!m.ready.empty() || cancelled_) continue;
    }
    long wait_ms = 50;
    long ct = -1;
    curl_multi_timeout(m.multi, &ct);
    if (ct >= 0) wait_ms = std::min(wait_ms, ct);
    if (!m.timers.empty())
      wait_ms = std::min<long>(wait_ms, std::max<long>(0, static_cast<long>((m.timers.begin()->first - now) * 1000) + 1));
    if (wait_ms > 0) curl_multi_poll(m.multi, nullptr, 0, static_cast<int>(wait_ms), nullptr);
  }
  stats_.wall_s += mono_now() - wall0;
  stats_.client_cpu_s += thread_cpu_s() - cpu0;
}

}  // namespace repro
