// Remote preflight: see include/repro/audit/preflight.hpp. The model list is one plain GET
// (http_get of the remote client: its TLS rules, verification on, --ca-cert, no redirects followed);
// the tiny request goes through RemoteClient, exactly as the replay's requests will.
#include "repro/audit/preflight.hpp"

#include "repro/audit/posture.hpp"

#include <algorithm>
#include <cstring>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

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
    const HttpGetResult g = http_get(spec, url, req.headers, 4u << 20);  // a model list is small; more is not the API
    const std::string where = who + ": GET " + redact_url(url);
    auto fail = [&](const std::string& why) { return BackendError(scrub_secret(where + ": " + why, spec.api_key)); };
    switch (g.cause) {
      case FailCause::none: break;
      case FailCause::connect:
        throw fail("cannot connect (" + g.error + "); check that the server is running and the URL and port");
      case FailCause::tls: throw fail("TLS failure (" + g.error + "); check the URL's scheme and --ca-cert");
      case FailCause::timeout: throw fail("timed out (" + g.error + "); check the URL and --timeout");
      default: throw fail("failed (" + g.error + ")");
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
  if (!got || res.cause == FailCause::none) {
    // ---- 3. what the server says it is
    out.posture = detect_posture(spec, req.url, req.headers);
    if (got) out.posture.system_fingerprint = sanitize_utf8(res.response.system_fingerprint.substr(0, 200));
    return out;
  }
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
