// Canonical JSON and the report digest (see include/repro/report/canonical.hpp).
#include "repro/report/canonical.hpp"

#include "repro/common/util.hpp"

namespace repro {

using nlohmann::json;

std::string canonical_json_compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string canonical_json(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"; }

const std::vector<std::string>& report_digest_excluded() {
  static const std::vector<std::string> fields = {"/digests/report_sha256"};
  return fields;
}

json report_digest_view(const json& report) {
  json v = report;
  if (!v.is_object()) return v;
  for (const auto& f : report_digest_excluded()) {
    json::json_pointer p(f);
    if (!v.contains(p)) continue;
    json& parent = v[p.parent_pointer()];
    if (parent.is_object()) parent.erase(p.back());
  }
  return v;
}

std::string report_digest(const json& report) { return sha256_hex(canonical_json_compact(report_digest_view(report))); }

}  // namespace repro
