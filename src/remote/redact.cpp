// Secret redaction for every string that leaves the process: URL credentials and API keys.
#include "repro/remote/redact.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace repro {

namespace {

// redact_url, and the values it replaced (for url_secrets).
std::string redact_url_collect(const std::string& url, std::vector<std::string>* found) {
  std::string out = url;
  size_t s = out.find("://");
  if (s != std::string::npos) {
    size_t host_start = s + 3;
    size_t host_end = out.find_first_of("/?#", host_start);
    if (host_end == std::string::npos) host_end = out.size();
    size_t at = host_end > host_start ? out.rfind('@', host_end - 1) : std::string::npos;
    if (at != std::string::npos && at >= host_start) {
      if (found) {
        std::string userinfo = out.substr(host_start, at - host_start);
        found->push_back(userinfo);
        if (size_t colon = userinfo.find(':'); colon != std::string::npos)
          found->push_back(userinfo.substr(colon + 1));
      }
      out = out.substr(0, host_start) + "[REDACTED]@" + out.substr(at + 1);
    }
  }
  // Query (and fragment) parameters whose name looks like a credential.
  size_t q = out.find_first_of("?#");
  if (q == std::string::npos) return out;
  static const char* kSecretNames[] = {"key", "apikey", "api_key", "api-key", "token", "access_token",
                                       "auth", "authorization", "sig", "signature", "password", "passwd",
                                       "pwd", "secret", "client_secret", "code", "session", "credential"};
  std::string res = out.substr(0, q + 1);
  size_t i = q + 1;
  while (i <= out.size()) {
    size_t end = out.find_first_of("&#;", i);
    if (end == std::string::npos) end = out.size();
    std::string part = out.substr(i, end - i);
    size_t eq = part.find('=');
    std::string name = part.substr(0, eq);
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool secret = false;
    for (const char* n : kSecretNames)
      if (lower == n || (lower.size() > std::strlen(n) && lower.compare(lower.size() - std::strlen(n) - 1, std::string::npos,
                                                                          std::string("_") + n) == 0))
        secret = true;
    if (secret && eq != std::string::npos) {
      if (found && eq + 1 < part.size()) found->push_back(part.substr(eq + 1));
      part = name + "=[REDACTED]";
    }
    res += part;
    if (end < out.size()) res += out[end];
    i = end + 1;
  }
  return res;
}

}  // namespace

std::string redact_url(const std::string& url) {
  return redact_url_collect(url, nullptr);
}

std::vector<std::string> url_secrets(const std::string& url) {
  std::vector<std::string> found;
  redact_url_collect(url, &found);
  return found;
}

std::vector<std::string> endpoint_secrets(const std::vector<EndpointSpec>& endpoints) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v, size_t min_length) {
    if (!v.empty() && v.size() >= min_length && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const auto& e : endpoints) {
    add(e.api_key, 1);  // the key, however short
    for (const auto& v : url_secrets(e.url)) add(v, kMinSecretLength);
  }
  // Longest first: a secret that contains another is replaced whole.
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

std::string scrub_secrets(std::string s, const std::vector<std::string>& secrets) {
  for (const auto& k : secrets) s = scrub_secret(std::move(s), k);
  return s;
}

std::string scrub_secret(std::string s, const std::string& secret) {
  if (secret.empty()) return s;
  size_t pos = 0;
  while ((pos = s.find(secret, pos)) != std::string::npos) {
    s.replace(pos, secret.size(), "[REDACTED]");
    pos += 10;
  }
  return s;
}

}  // namespace repro
