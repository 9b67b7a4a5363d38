// An OpenAI-compatible endpoint as the client sees it: the provider presets (--provider) and the
// endpoint's configuration (URL, model, API, key, TLS, timeouts, retries).
//
// Security: EndpointSpec::api_key lives in memory only. It is sent as `Authorization: Bearer` (or
// Azure's `api-key` header) and never written into an error string, a response, the stats or the
// verbose log: every string the client produces passes through scrub_secret() (repro/remote/redact.hpp).
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace repro {

enum class Provider { openai, azure, vllm, sglang, llamacpp, ollama, tgi };

// "openai" ... "tgi"; throws UsageError naming --provider and the accepted values.
Provider parse_provider(const std::string& name);
const char* provider_name(Provider p);
// Whether this preset sends logprobs when asked (Ollama's OpenAI API does not return them).
bool provider_supports_logprobs(Provider p);
// Whether the preset's server matches special-token text in a completion prompt ("<|im_start|>"
// becomes that control token), as the local engine does under --parse-special: "yes" for vllm,
// sglang and tgi (Hugging Face tokenizers match added and special tokens in text) and llamacpp (its
// server tokenizes prompts with special parsing on); "unknown" for openai, azure and ollama.
const char* provider_parse_special(Provider p);

struct EndpointSpec {
  std::string label;               // label (the audit reports it as the mode)
  std::string url;                 // base: http://127.0.0.1:8000 or http://host:8000/v1 or https://x.openai.azure.com
  std::string api_model;           // "model" field; Azure: the deployment name
  std::string api = "chat";        // "chat" | "completions"
  Provider provider = Provider::openai;
  bool stream = false;
  // The endpoint's rule for special-token text in completion prompts: "yes" (matched, as
  // --parse-special does locally), "no" (encoded as ordinary text) or "unknown". The preset's
  // (provider_parse_special) unless --endpoint-parse-special says otherwise; parse_special_source
  // says which ("preset vllm", "--endpoint-parse-special"). Recorded per endpoint in the report.
  std::string parse_special = "unknown";
  std::string parse_special_source;
  nlohmann::json extra_body = nlohmann::json::object();  // merged (top level, overriding) into every request
  std::string api_key;             // memory only; empty = no auth header
  std::string azure_api_version = "2024-06-01";
  std::string ca_cert;             // PEM bundle for TLS verification (verification is always on)
  double connect_timeout_s = 10;
  double read_timeout_s = 120;     // no byte received for this long -> timeout (checked in the loop)
  double total_timeout_s = 120;    // one attempt, end to end, however the bytes trickle (--timeout)
  size_t max_response_bytes = 64u << 20;  // one response, streamed or not; more is an error
  int max_retries = 3;             // retries after the first attempt
  double backoff_base_s = 0.5;     // delay before retry k (k=1..): base*2^(k-1), jittered into [d/2, d]
  double backoff_max_s = 30;
  double retry_after_max_s = 120;  // a larger Retry-After is capped to this
  bool verbose = false;            // log requests/responses (headers redacted) to `log`
  std::function<void(const std::string&)> log;  // verbose sink; default stderr
};

// "--endpoint" value: "label=URL" or bare "URL" (label = URL). Throws UsageError on a bad URL.
EndpointSpec parse_endpoint_arg(const std::string& arg);

}  // namespace repro
