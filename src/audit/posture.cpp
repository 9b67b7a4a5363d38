// Endpoint identity and determinism posture: see include/repro/audit/posture.hpp.
#include "repro/audit/posture.hpp"

#include <algorithm>

#include "repro/common/json.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return sanitize_utf8(it->get<std::string>().substr(0, 200));
  if (it->is_number() || it->is_boolean()) return it->dump();
  return "";
}

std::string on_off(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return "unknown";
  return it->get<bool>() ? "on" : "off";
}

void keep(EndpointPosture& p, const nlohmann::json& j, std::initializer_list<const char*> keys) {
  if (!p.info.is_object()) p.info = nlohmann::json::object();
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end()) continue;
    if (it->is_string())
      p.info[k] = sanitize_utf8(it->get<std::string>().substr(0, 200));
    else if (it->is_number() || it->is_boolean())
      p.info[k] = *it;
  }
}

}  // namespace

std::string api_base_url(const std::string& completions_url) {
  std::string u = completions_url.substr(0, completions_url.find('?'));
  if (auto v1 = u.find("/v1/"); v1 != std::string::npos) return u.substr(0, v1);
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "/v1") == 0) return u.substr(0, u.size() - 3);
  const size_t scheme = u.find("://");
  const size_t path = u.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return path == std::string::npos ? u : u.substr(0, path);
}

bool read_info_route(const std::string& route, const std::string& body, EndpointPosture& p) {
  nlohmann::json j;
  if (!parse_json(body, j) || !j.is_object()) return false;
  if (route == "/get_server_info") {  // SGLang: the server's arguments
    if (!j.contains("enable_deterministic_inference") && !(j.contains("tp_size") && j.contains("model_path")))
      return false;
    p.engine = "sglang";
    p.version = str(j, "version");
    p.deterministic = on_off(j, "enable_deterministic_inference");
    p.batch_invariance = p.deterministic == "on" ? "claimed" : p.deterministic == "off" ? "not claimed" : "unknown";
    keep(p, j, {"enable_deterministic_inference", "attention_backend", "random_seed", "tp_size", "max_running_requests",
                "disable_radix_cache", "sampling_backend"});
    return true;
  }
  if (route == "/props") {  // llama.cpp server
    if (!j.contains("default_generation_settings") && !j.contains("total_slots")) return false;
    p.engine = "llama.cpp";
    p.version = str(j, "build_info");
    p.deterministic = "unknown";
    p.batch_invariance = "not claimed";
    keep(p, j, {"total_slots", "build_info", "model_path"});
    return true;
  }
  if (route == "/api/version") {  // Ollama
    if (!j.contains("version") || !j["version"].is_string() || j.size() > 2) return false;
    p.engine = "ollama";
    p.version = str(j, "version");
    p.batch_invariance = "not claimed";
    return true;
  }
  if (route == "/version") {  // vLLM: {"version": "0.11.0"}
    if (!j.contains("version") || !j["version"].is_string() || j.size() > 2) return false;
    p.engine = "vllm";
    p.version = str(j, "version");
    p.batch_invariance = "not claimed";  // VLLM_BATCH_INVARIANT is an environment switch the API does not report
    return true;
  }
  if (route == "/info") {
    if (str(j, "engine") == "repro-audit") {  // repro-audit serve
      p.engine = "repro-audit";
      p.version = str(j, "version");
      const std::string mode = str(j, "mode");
      const bool invariant = mode == "batch-invariant" || mode == "deterministic" || mode == "tp-invariant";
      p.deterministic = mode.empty() ? "unknown" : invariant ? "on" : "off";
      p.batch_invariance = mode.empty() ? "unknown" : invariant ? "claimed" : "not claimed";
      keep(p, j, {"mode", "max_batch", "device", "precision", "tp", "allreduce", "speculative", "model",
                  "model_sha256"});
      return true;
    }
    if (j.contains("model_id") && (j.contains("max_concurrent_requests") || j.contains("model_dtype"))) {  // TGI
      p.engine = "tgi";
      p.version = str(j, "version");
      p.batch_invariance = "not claimed";
      keep(p, j, {"model_id", "model_sha", "model_dtype", "model_device_type", "max_concurrent_requests", "sha"});
      return true;
    }
  }
  return false;
}

void posture_findings(EndpointPosture& p) {
  p.findings.clear();
  if (p.engine == "unknown") {
    p.findings.push_back("the engine is unknown (no info route answered): its determinism posture cannot be checked");
    return;
  }
  bool single_slot = false;
  if (p.info.is_object()) {
    if (auto s = p.info.find("total_slots"); s != p.info.end() && s->is_number_integer() && s->get<int>() == 1)
      single_slot = true;
    if (auto s = p.info.find("max_batch"); s != p.info.end() && s->is_number_integer() && s->get<int>() == 1)
      single_slot = true;
  }
  if (single_slot)
    p.findings.push_back("the server runs one request at a time: concurrency cannot co-batch here, so no level proves "
                         "batch invariance");
  if (p.batch_invariance == "claimed")
    p.findings.push_back("the engine reports a deterministic, batch-invariant mode: the co-batched levels test that "
                         "claim");
  else if (!single_slot)
    p.findings.push_back("temperature 0 is not determinism: this engine batches dynamically and reports no batch "
                         "invariance");
}

EndpointPosture detect_posture(const EndpointSpec& spec, const std::string& completions_url,
                               const std::vector<std::string>& headers) {
  EndpointPosture p;
  const std::string base = api_base_url(completions_url);
  EndpointSpec s = spec;
  s.connect_timeout_s = std::min(spec.connect_timeout_s, 5.0);
  s.read_timeout_s = std::min(spec.read_timeout_s, 5.0);
  for (const char* route : {"/get_server_info", "/props", "/api/version", "/version", "/info"}) {
    const HttpGetResult g = http_get(s, base + route, headers, 1u << 20);
    if (!g.server.empty() && std::find(p.sources.begin(), p.sources.end(), "header server: " + g.server) == p.sources.end())
      p.sources.push_back("header server: " + g.server);
    if (g.cause == FailCause::connect) break;  // nothing listens: no route will answer
    if (g.cause != FailCause::none || g.status != 200) continue;
    EndpointPosture found = p;
    if (read_info_route(route, g.body, found)) {
      found.sources.insert(found.sources.begin(), std::string("GET ") + route);
      p = std::move(found);
      break;
    }
  }
  if (p.engine == "unknown")
    for (const auto& src : p.sources)
      if (src.find("llama.cpp") != std::string::npos) {  // llama.cpp's server names itself in the Server header
        p.engine = "llama.cpp";
        p.batch_invariance = "not claimed";
      }
  posture_findings(p);
  return p;
}

}  // namespace repro
