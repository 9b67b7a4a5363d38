// Canonical JSON and the report digest (see include/repro/report/canonical.hpp).
#include "repro/report/canonical.hpp"

#include "repro/common/util.hpp"

namespace repro {

using nlohmann::json;

namespace {
std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool scalars_only(const json& a) {
  for (const auto& e : a)
    if (e.is_structured()) return false;
  return true;
}

// Objects and arrays of structures one member per line, indented by 2; an array of scalars on one line.
void file_form(const json& j, size_t depth, std::string& out) {
  const bool obj = j.is_object();
  if (j.empty() || !j.is_structured() || (!obj && scalars_only(j))) {
    if (!j.is_array() || j.empty()) {
      out += compact(j);
      return;
    }
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + compact(j[i]);
    out += ']';
    return;
  }
  out += obj ? "{\n" : "[\n";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    out.append(2 * (depth + 1), ' ');
    if (obj) out += compact(json(it.key())) + ": ";
    file_form(*it, depth + 1, out);
    out += i + 1 < j.size() ? ",\n" : "\n";
  }
  out.append(2 * depth, ' ');
  out += obj ? '}' : ']';
}
}  // namespace

std::string canonical_json_compact(const json& j) { return compact(j); }

std::string canonical_json(const json& j) {
  std::string out;
  file_form(j, 0, out);
  return out + "\n";
}

std::string canonical_json_v1(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"; }

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
