// Secret redaction: URL credentials and API keys never appear in reports, logs, errors or labels.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "repro/remote/endpoint.hpp"

namespace repro {

// URL with any user:password@ and the values of secret-looking query parameters (api_key, key,
// token, access_token, sig, signature, password, secret, ...) replaced by [REDACTED] (for every
// output: reports, logs, errors, labels).
std::string redact_url(const std::string& url);
// `s` with every occurrence of `secret` replaced by "[REDACTED]" (no-op for an empty secret).
std::string scrub_secret(std::string s, const std::string& secret);
// The values redact_url replaces in `url`: user:password (and the password alone), secret query values.
std::vector<std::string> url_secrets(const std::string& url);
// URL credentials shorter than this are not scrubbed from text (a 2-character query value would
// rewrite every occurrence of those characters); the API key always is.
inline constexpr size_t kMinSecretLength = 6;
// Every secret of these endpoints, longest first: API keys and URL credentials (url_secrets).
std::vector<std::string> endpoint_secrets(const std::vector<EndpointSpec>& endpoints);
// `s` with every one of `secrets` replaced by "[REDACTED]".
std::string scrub_secrets(std::string s, const std::vector<std::string>& secrets);

}  // namespace repro
