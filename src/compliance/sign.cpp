// The in-toto Statement of a report and its DSSE envelope (keys and encodings: dsse.cpp). See
// include/repro/compliance/sign.hpp for the formats.
#include "repro/compliance/sign.hpp"

#include <filesystem>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro::compliance {

namespace fs = std::filesystem;
using nlohmann::json;

// ============================================================================ report files

std::string ReportFiles::path(const std::string& name) const { return (fs::path(dir) / name).string(); }

namespace {
std::string stem_of(const std::string& json_name) {
  const std::string ext = ".json";
  if (json_name.size() > ext.size() && json_name.compare(json_name.size() - ext.size(), ext.size(), ext) == 0)
    return json_name.substr(0, json_name.size() - ext.size());
  return json_name;
}
}  // namespace

std::vector<std::string> render_names(const std::string& json_name) {
  const std::string stem = stem_of(json_name);
  return {stem + ".md", stem + ".html", stem + ".junit.xml"};
}

std::string render(const std::string& json_name, const std::string& name, const AuditReport& r) {
  const std::vector<std::string> names = render_names(json_name);
  if (name == names[0]) return to_markdown(r);
  if (name == names[1]) return to_html(r);
  if (name == names[2]) return to_junit(r);
  throw std::logic_error("render: unknown report file " + name);
}

ReportFiles locate_report(const std::string& target) {
  if (target.empty()) throw UsageError("no report given; give a report directory or its report.json");
  fs::path p(target);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "report.json";
  if (!fs::is_regular_file(p, ec))
    throw UsageError("report '" + p.string() + "' not found; give a report directory or its report.json");
  ReportFiles f;
  f.dir = p.has_parent_path() ? p.parent_path().string() : ".";
  f.json = p.filename().string();
  for (const auto& r : render_names(f.json))
    if (fs::is_regular_file(fs::path(f.dir) / r, ec)) f.renders.push_back(r);
  f.envelope = stem_of(f.json) + ".intoto.jsonl";
  return f;
}

json section_digests(const json& doc) {
  json out = json::object();
  if (!doc.is_object()) return out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string top = "/" + it.key();
    out[top] = sha256_hex(canonical_json_compact(*it));
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i)
        out[top + "/" + std::to_string(i)] = sha256_hex(canonical_json_compact((*it)[i]));
    } else if (it->is_object()) {
      for (auto jt = it->begin(); jt != it->end(); ++jt)
        out[top + "/" + jt.key()] = sha256_hex(canonical_json_compact(*jt));
    }
  }
  return out;
}

// ============================================================================ statement

namespace {

std::string str_at(const json& j, const char* a, const char* b = nullptr) {
  const json* p = &j;
  for (const char* k : {a, b}) {
    if (!k) break;
    if (!p->is_object()) return {};
    auto it = p->find(k);
    if (it == p->end()) return {};
    p = &*it;
  }
  return p->is_string() ? p->get<std::string>() : std::string();
}

json configuration(const json& doc, const AuditReport& r) {
  json conf = json::array();
  const json empty = json::object();
  const json& env = doc.contains("environment") ? doc["environment"] : empty;
  auto digest_of = [&](const char* key) {
    std::string d = str_at(doc, "digests", key);
    return d.empty() ? str_at(env, "digests", key) : d;
  };
  if (std::string d = digest_of("model_sha256"); !d.empty()) {
    json m = {{"name", "model"}, {"digest", {{"sha256", d}}}};
    if (std::string f = str_at(env, "model", "format"); !f.empty()) m["annotations"] = {{"format", f}};
    conf.push_back(m);
  }
  if (env.is_object() && env.contains("endpoints") && env["endpoints"].is_array())
    for (const auto& e : env["endpoints"]) {
      json d = {{"name", "endpoint:" + str_at(e, "label")}, {"uri", str_at(e, "url")}};
      d["annotations"] = {{"api_model", str_at(e, "api_model")}, {"provider", str_at(e, "provider")}};
      conf.push_back(d);
    }
  if (std::string d = digest_of("prompts_sha256"); !d.empty())
    conf.push_back({{"name", "prompts"}, {"digest", {{"sha256", d}}}});
  if (std::string d = digest_of("profile_sha256"); !d.empty())
    conf.push_back({{"name", "profile:" + r.profile}, {"digest", {{"sha256", d}}}});
  // The resolved configuration: the plan as run (profile + flags), in canonical form.
  const json plan = doc.contains("plan") ? doc["plan"] : json(nullptr);
  conf.push_back({{"name", "plan"},
                  {"digest", {{"sha256", sha256_hex(canonical_json_compact(plan))}}},
                  {"annotations", {{"what", "resolved configuration: report.json /plan, canonical compact form"}}}});
  std::string version = str_at(env, "tool", "version"), commit = str_at(env, "tool", "commit");
  if (!version.empty())
    conf.push_back({{"name", "tool"}, {"uri", "pkg:generic/repro-audit@" + version + (commit.empty() ? "" : "?commit=" + commit)}});
  return conf;
}

}  // namespace

json build_statement(const ReportFiles& files) {
  const std::string json_path = files.path(files.json);
  const std::string text = read_file(json_path, "report");
  std::string stored, actual;
  if (!verify_report_digest(text, &stored, &actual))
    throw UsageError("report '" + json_path + "': digests.report_sha256 " + (stored.empty() ? "is missing" : "does not match its content") +
                     "; it was edited after it was written, so it is not signed (re-run the audit)");
  const AuditReport r = from_json(text, json_path);
  const json doc = parse_json_or_throw(text, "report '" + json_path + "'", kReportJsonLimits);

  json subjects = json::array();
  subjects.push_back({{"name", files.json},
                      {"digest", {{"sha256", sha256_hex(canonical_json(doc))}}},
                      {"annotations", {{"report_sha256", stored}, {"sections", section_digests(doc)}}}});
  for (const auto& name : files.renders) {
    const std::string content = read_file(files.path(name), "report render");
    subjects.push_back({{"name", name}, {"digest", {{"sha256", sha256_hex(content)}}}});
  }

  json passed = json::array(), warned = json::array(), failed = json::array();
  for (const auto& c : r.cases) {
    std::string name = c.prompt_id + "/" + c.decoding_id + "/" + c.mode;
    if (c.failed) failed.push_back(name);
    else if (c.divergent || c.errors > 0) warned.push_back(name);
    else passed.push_back(name);
  }
  json predicate = {{"result", verdict_result(r.summary.verdict)},
                    {"configuration", configuration(doc, r)},
                    {"passedTests", passed},
                    {"warnedTests", warned},
                    {"failedTests", failed}};
  return {{"_type", kStatementType}, {"subject", subjects}, {"predicateType", kTestResultPredicate}, {"predicate", predicate}};
}

std::string sign_report(const ReportFiles& files, const std::string& key_path) {
  const PrivateKey key = load_private_key(key_path);
  const std::string& key_id = key.key_id;
  const json statement = build_statement(files);  // refuses a report edited after it was written
  // Renders must say what the JSON says before they are signed with it.
  {
    const std::string json_path = files.path(files.json);
    const AuditReport r = load_report(json_path);
    for (const auto& name : files.renders) {
      if (read_file(files.path(name), "report render") != render(files.json, name, r))
        throw UsageError("'" + files.path(name) + "' was not rendered from '" + json_path +
                         "'; re-render it with `repro-audit report " + json_path + " --out " + files.dir + "` before signing");
    }
  }
  const std::string payload = canonical_json_compact(statement);
  const std::string pae = dsse_pae(kPayloadType, payload);
  const std::string sig = ed25519_sign(key, pae);
  json envelope = {{"payloadType", kPayloadType},
                   {"payload", base64_encode(payload)},
                   {"signatures", json::array({{{"keyid", key_id}, {"sig", base64_encode(sig)}}})}};
  write_file_atomic(files.path(files.envelope), canonical_json_compact(envelope) + "\n");
  return key_id;
}

std::string verdict_result(const std::string& verdict) {
  if (verdict == "reproducible") return "PASSED";
  if (verdict == "interrupted" || verdict == "no answer") return "WARNED";
  return "FAILED";  // divergent, errors, and anything this version does not know
}

}  // namespace repro::compliance
