// Endpoint presets: the provider table (--provider) and the --endpoint argument. What each preset
// changes in a request is in request.cpp (build_request).
#include "repro/remote/endpoint.hpp"

#include "repro/common/error.hpp"
#include "repro/remote/redact.hpp"

namespace repro {

Provider parse_provider(const std::string& name) {
  static const std::pair<const char*, Provider> table[] = {
      {"openai", Provider::openai},     {"azure", Provider::azure},   {"vllm", Provider::vllm},
      {"sglang", Provider::sglang},     {"llamacpp", Provider::llamacpp}, {"llama.cpp", Provider::llamacpp},
      {"ollama", Provider::ollama},     {"tgi", Provider::tgi}};
  for (auto& [n, p] : table)
    if (name == n) return p;
  throw UsageError("--provider '" + name +
                   "' is not known; use one of openai, azure, vllm, sglang, llamacpp, ollama, tgi");
}

const char* provider_name(Provider p) {
  switch (p) {
    case Provider::openai: return "openai";
    case Provider::azure: return "azure";
    case Provider::vllm: return "vllm";
    case Provider::sglang: return "sglang";
    case Provider::llamacpp: return "llamacpp";
    case Provider::ollama: return "ollama";
    case Provider::tgi: return "tgi";
  }
  return "openai";
}

bool provider_supports_logprobs(Provider p) { return p != Provider::ollama; }

const char* provider_parse_special(Provider p) {
  switch (p) {
    case Provider::vllm:
    case Provider::sglang:
    case Provider::tgi:
    case Provider::llamacpp: return "yes";
    default: return "unknown";
  }
}

EndpointSpec parse_endpoint_arg(const std::string& arg) {
  EndpointSpec spec;
  std::string url = arg;
  size_t eq = arg.find('=');
  size_t scheme = arg.find("://");
  if (eq != std::string::npos && (scheme == std::string::npos || eq < scheme)) {
    spec.label = arg.substr(0, eq);
    url = arg.substr(eq + 1);
    if (spec.label.empty())
      throw UsageError("--endpoint '" + redact_url(arg) + "': empty label before '='; write label=URL");
  }
  if (!url.starts_with("http://") && !url.starts_with("https://"))
    throw UsageError("--endpoint '" + redact_url(arg) +
                     "': the URL must start with http:// or https://, e.g. http://127.0.0.1:8000/v1");
  {  // trailing slashes of the path (before any query) carry no meaning
    size_t q = url.find_first_of("?#");
    std::string path = url.substr(0, q), rest = q == std::string::npos ? "" : url.substr(q);
    while (path.ends_with("/") && !path.ends_with("//")) path.pop_back();
    url = path + rest;
  }
  spec.url = url;
  if (spec.label.empty()) spec.label = redact_url(url);
  return spec;
}

}  // namespace repro
