// Remote preflight: before any replay, check that each endpoint answers at all.
//   1. GET <base>/v1/models (providers that have it; not Azure): connection refused, TLS failures,
//      redirects, 401/403 and HTML pages (a login page, a proxy) end the run here;
//   2. one tiny request (1 token, greedy) with the run's --api-model: an unknown model is a usage
//      error naming the models the server offers;
//   3. the engine's identity and determinism posture from its info routes (never fails the run).
// Throws UsageError (exit 2) for what the user must change in the command line, BackendError
// (exit 3) for an endpoint that answers nothing usable; each message is one line with the cause.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"
#include "repro/remote/client.hpp"

namespace repro {

struct PreflightResult {
  std::vector<std::string> models;  // ids listed by GET /v1/models (empty when not available)
  bool models_listed = false;       // GET /v1/models answered with a model list
  EndpointPosture posture;          // engine, version, determinism posture (repro/audit/posture.hpp)
};

PreflightResult preflight_endpoint(const EndpointSpec& spec);

}  // namespace repro
