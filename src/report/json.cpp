// report.json: written and read through the one schema (src/report/schema.cpp) in canonical form
// (src/report/canonical.cpp). See docs/REPORT-SCHEMA.md.
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/report/canonical.hpp"
#include "repro/report/report.hpp"
#include "repro/report/schema.hpp"

namespace repro {

using nlohmann::json;

json to_json_value(const AuditReport& r) { return json(r); }

std::string to_json(const AuditReport& r) {
  json j = to_json_value(r);
  j["digests"]["report_sha256"] = report_digest(j);
  return canonical_json(j);
}

AuditReport from_json(const std::string& text, const std::string& path) {
  json j;
  std::string err;
  if (!parse_json(text, j, &err, kReportJsonLimits))
    throw UsageError("report '" + path + "': invalid JSON (" + err + "); give a report.json written by repro-audit");
  const std::string fix = "; give a report.json written by repro-audit (schema " + std::string(kReportSchema) + ")";
  if (!j.is_object()) throw UsageError("report '" + path + "': top level: expected an object" + fix);
  auto s = j.find("schema");
  std::string schema = s != j.end() && s->is_string() ? s->get<std::string>() : "";
  if (schema != kReportSchema)
    throw UsageError("report '" + path + "': schema '" + schema + "' is not " + kReportSchema +
                     "; give a report.json written by this version of repro-audit");
  try {
    return j.get<AuditReport>();
  } catch (const UsageError& e) {
    throw UsageError("report '" + path + "': " + e.what() + fix);
  }
}

AuditReport load_report(const std::string& path) { return from_json(read_file(path, "report"), path); }

bool verify_report_digest(const std::string& text, std::string* stored, std::string* actual) {
  json j;
  if (!parse_json(text, j, nullptr, kReportJsonLimits) || !j.is_object()) return false;
  std::string want;
  if (auto d = j.find("digests"); d != j.end() && d->is_object())
    if (auto s = d->find("report_sha256"); s != d->end() && s->is_string()) want = s->get<std::string>();
  std::string got = report_digest(j);
  if (stored) *stored = want;
  if (actual) *actual = got;
  return !want.empty() && want == got;
}

}  // namespace repro
