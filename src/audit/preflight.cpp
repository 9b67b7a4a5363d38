// Remote preflight: see include/repro/audit/preflight.hpp. The model list is one plain GET (libcurl
// easy, the same TLS rules as the client: verification on, --ca-cert, no redirects followed); the
// tiny request goes through RemoteClient, exactly as the replay's requests will.
#include "repro/audit/preflight.hpp"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

struct GetResult {
  CURLcode code = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::string content_type, location, body;
};

size_t on_body(char* p, size_t size, size_t n, void* ud) {
  auto* s = static_cast<std::string*>(ud);
  size_t len = size * n;
  if (s->size() + len > (4u << 20)) return 0;  // a model list is small; more is not the API
  s->append(p, len);
  return len;
}

GetResult http_get(const EndpointSpec& spec, const std::string& url, const std::vector<std::string>& headers) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  GetResult r;
  CURL* e = curl_easy_init();
  if (!e) {
    r.code = CURLE_FAILED_INIT;
    r.curl_error = "curl_easy_init failed";
    return r;
  }
  curl_slist* hdrs = nullptr;
  for (const auto& h : headers)
    if (strncasecmp(h.c_str(), "content-type:", 13) != 0) hdrs = curl_slist_append(hdrs, h.c_str());
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(spec.connect_timeout_s * 1000));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::min(spec.read_timeout_s, 60.0) * 1000));
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!spec.ca_cert.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, spec.ca_cert.c_str());
  curl_easy_setopt(e, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
  r.code = curl_easy_perform(e);
  if (r.code != CURLE_OK) r.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(r.code);
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
  char* ct = nullptr;
  curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
  if (ct) r.content_type = ct;
  char* loc = nullptr;
  curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &loc);
  if (loc) r.location = loc;
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(e);
  return r;
}

bool looks_like_html(const std::string& content_type, const std::string& body) {
  if (content_type.find("html") != std::string::npos) return true;
  std::string head = trim(body.substr(0, 64));
  for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return head.rfind("<!doctype", 0) == 0 || head.rfind("<html", 0) == 0;
}

// The models URL beside the completions URL: .../v1/chat/completions -> .../v1/models.
// The query of the completions URL is kept (http://h/v1/chat/completions?api-version=X ->
// http://h/v1/models?api-version=X).
std::string models_url(const std::string& completions_url) {
  const size_t q = completions_url.find('?');
  std::string u = completions_url.substr(0, q),
              query = q == std::string::npos ? "" : completions_url.substr(q);
  for (const char* tail : {"/chat/completions", "/completions"})
    if (u.size() >= std::strlen(tail) && u.compare(u.size() - std::strlen(tail), std::string::npos, tail) == 0)
      return u.substr(0, u.size() - std::strlen(tail)) + "/models" + query;
  return {};
}

std::string join_list(const std::vector<std::string>& v, size_t max = 12) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > max) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

}  // namespace

PreflightResult preflight_endpoint(const EndpointSpec& spec) {
  PreflightResult out;
  const std::string who = "--endpoint '" + spec.label + "'";
  const std::string key_hint = "check the key (--api-key-env / --api-key-file)";
  RequestParams tiny;
  tiny.prompt = "Hello";
  tiny.decoding.id = "preflight";
  tiny.decoding.max_tokens = 1;
  tiny.send_seed = false;
  const HttpRequestSpec req = build_request(spec, tiny);

  // ---- 1. GET /v1/models
  if (spec.provider != Provider::azure) {
    const std::string url = models_url(req.url);
    GetResult g = http_get(spec, url, req.headers);
    const std::string where = who + ": GET " + redact_url(url);
    auto fail = [&](const std::string& why) { return BackendError(scrub_secret(where + ": " + why, spec.api_key)); };
    if (g.code != CURLE_OK) {
      switch (g.code) {
        case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY:
          throw fail("cannot connect (" + g.curl_error + "); check that the server is running and the URL and port");
        case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_ISSUER_ERROR:
          throw fail("TLS failure (" + g.curl_error + "); check the URL's scheme and --ca-cert");
        case CURLE_OPERATION_TIMEDOUT: throw fail("timed out (" + g.curl_error + "); check the URL and --timeout");
        default: throw fail("failed (" + g.curl_error + ")");
      }
    }
    if (g.status >= 300 && g.status < 400)
      throw fail("redirected (HTTP " + std::to_string(g.status) + ") to " +
           (g.location.empty() ? std::string("an unnamed place") : redact_url(g.location)) +
           "; give the final URL as --endpoint (redirects are not followed)");
    if (g.status == 401 || g.status == 403) {
      std::string m = error_message_from_body(g.body);
      throw fail("HTTP " + std::to_string(g.status) + (m.empty() ? "" : ": " + m) + "; " + key_hint);
    }
    if (g.status == 200 && looks_like_html(g.content_type, g.body))
      throw fail("answered with an HTML page, not the OpenAI API (a login page or a proxy?); check the URL");
    if (g.status == 200) {
      nlohmann::json j;
      parse_json(g.body, j);  // an unreadable list is no list: the tiny request decides
      if (j.is_object() && j.contains("data") && j["data"].is_array()) {
        out.models_listed = true;
        for (const auto& m : j["data"])
          if (m.is_object() && m.contains("id") && m["id"].is_string()) out.models.push_back(m["id"].get<std::string>());
      }
    }
    // any other answer (404: no model list on this server): the tiny request decides
  }

  // ---- 2. one tiny request, through the client the replay uses
  EndpointSpec s = spec;
  s.max_retries = std::min(spec.max_retries, 2);
  RemoteClient client(s, 2);
  RemoteResult res;
  bool got = false;
  client.submit(tiny, [&](RemoteResult&& r) {
    res = std::move(r);
    got = true;
  });
  client.run();
  if (!got || res.cause == FailCause::none) return out;
  const std::string& err = res.error;  // "<cause>: <detail> (after N attempts)"
  const std::string where = who + ": a 1-token request with --api-model '" + spec.api_model + "' failed";
  auto has = [&](const char* s) { return err.find(s) != std::string::npos; };
  const bool offered = std::find(out.models.begin(), out.models.end(), spec.api_model) != out.models.end();
  if (has("HTTP 404") && (!out.models.empty() ? !offered : has("model"))) {
    std::string msg = "--api-model '" + spec.api_model + "': " + who + " does not serve it (" + err + ")";
    if (!out.models.empty()) {
      msg += "; it offers " + join_list(out.models);
      std::string near = closest_match(spec.api_model, out.models);
      if (!near.empty()) msg += " (did you mean '" + near + "'?)";
    } else {
      msg += "; check the model name";
    }
    throw UsageError(scrub_secret(msg, spec.api_key));
  }
  std::string hint;
  if (has("HTTP 401") || has("HTTP 403")) hint = key_hint;
  else if (res.cause == FailCause::connect) hint = "check that the server is running and the URL and port";
  else if (res.cause == FailCause::tls) hint = "check the URL's scheme and --ca-cert";
  else if (has("HTTP 3")) hint = "give the final URL as --endpoint (redirects are not followed)";
  else if (res.cause == FailCause::invalid_json) hint = "the answer is not the OpenAI API; check the URL and --api";
  else if (has("HTTP 404")) hint = "check the URL and --api (chat or completions)";
  else hint = "check the endpoint, --api and --provider";
  throw BackendError(scrub_secret(where + ": " + err + "; " + hint, spec.api_key));
}

}  // namespace repro
