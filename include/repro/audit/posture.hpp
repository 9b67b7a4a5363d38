// The endpoint's identity and determinism posture, asked of the server itself in the preflight.
//
// Each engine's own info route, tried in this order with one short GET each beside the API's base
// (the URL up to /v1): SGLang GET /get_server_info (its flags: enable_deterministic_inference,
// attention_backend, random_seed), llama.cpp GET /props (total_slots, build_info), Ollama
// GET /api/version, vLLM GET /version, and GET /info (repro-audit serve: engine, version, mode;
// TGI: model_id, version, max_concurrent_requests). A route counts only when it answers HTTP 200 with
// a JSON object of that engine's shape; the Server header and the API's system_fingerprint are
// recorded beside. An engine nothing identifies is "unknown", never guessed. Nothing here fails the
// run: a route that is missing, slow, huge or garbage is skipped.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"
#include "repro/remote/client.hpp"

namespace repro {

// The API's base beside the completions URL: http://h:8000/v1/chat/completions -> http://h:8000.
std::string api_base_url(const std::string& completions_url);

// Asks the info routes; `headers` are the request headers of the API (authorization).
EndpointPosture detect_posture(const EndpointSpec& spec, const std::string& completions_url,
                               const std::vector<std::string>& headers);

// Reads one info route's answer (exposed for tests): fills the posture when `body` is a JSON object
// of the engine's shape for that route, and returns whether it did.
bool read_info_route(const std::string& route, const std::string& body, EndpointPosture& p);

// The posture's findings (plain language), from engine, mode and claims.
void posture_findings(EndpointPosture& p);

}  // namespace repro
