// `verify`: checks a signed report. Every check that fails adds one line naming the file and the
// field that differs; nothing stops at the first problem, so one run lists everything.
#include "repro/compliance/verify.hpp"

#include <filesystem>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro::compliance {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {


// "line 12: expected '...', found '...'" for the first differing line of two texts.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t line = 1, a = 0, b = 0;
  while (a < want.size() || b < got.size()) {
    size_t ea = want.find('\n', a), eb = got.find('\n', b);
    std::string la = want.substr(a, ea == std::string::npos ? std::string::npos : ea - a);
    std::string lb = got.substr(b, eb == std::string::npos ? std::string::npos : eb - b);
    if (la != lb || (ea == std::string::npos) != (eb == std::string::npos)) {
      auto clip = [](std::string s) { return s.size() > 60 ? s.substr(0, 60) + "..." : s; };
      return "line " + std::to_string(line) + ": expected '" + clip(la) + "', found '" + clip(lb) + "'";
    }
    if (ea == std::string::npos) break;
    a = ea + 1, b = eb + 1, ++line;
  }
  return "the files differ";
}

// Names the parts of report.json that differ from the signed section digests, deepest first.
std::vector<std::string> section_differences(const json& signed_sections, const json& now_sections) {
  std::vector<std::string> out;
  if (!signed_sections.is_object()) return out;
  auto parent_of = [](const std::string& k) { return k.substr(0, k.find('/', 1)); };
  // Children of each top-level key that differ.
  for (auto it = signed_sections.begin(); it != signed_sections.end(); ++it) {
    const std::string& key = it.key();
    if (key.find('/', 1) != std::string::npos) continue;  // a child: handled under its parent
    auto now = now_sections.find(key);
    if (now == now_sections.end()) {
      out.push_back(key + " was removed");
      continue;
    }
    if (*now == *it) continue;
    size_t before = out.size();
    size_t signed_children = 0, now_children = 0;
    for (auto c = signed_sections.begin(); c != signed_sections.end(); ++c)
      if (c.key() != key && parent_of(c.key()) == key) {
        ++signed_children;
        auto n = now_sections.find(c.key());
        if (n == now_sections.end()) out.push_back(c.key() + " was removed");
        else if (*n != *c) out.push_back(c.key() + " differs");
      }
    for (auto c = now_sections.begin(); c != now_sections.end(); ++c)
      if (c.key() != key && parent_of(c.key()) == key) {
        ++now_children;
        if (!signed_sections.contains(c.key())) out.push_back(c.key() + " was added");
      }
    if (signed_children != now_children)
      out.insert(out.begin() + long(before), key + " has " + std::to_string(now_children) + " entries, signed " +
                                                 std::to_string(signed_children));
    if (out.size() == before) out.push_back(key + " differs");
  }
  for (auto it = now_sections.begin(); it != now_sections.end(); ++it)
    if (it.key().find('/', 1) == std::string::npos && !signed_sections.contains(it.key()))
      out.push_back(it.key() + " was added");
  return out;
}

bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\\') == std::string::npos;
}

// The envelope: its signature, then the statement it carries (null when unreadable).
json check_envelope(const ReportFiles& f, const PublicKey* trusted, Verification& v) {
  const std::string env_path = f.path(f.envelope);
  const std::string E = f.envelope + ": ";
  std::error_code ec;
  if (!fs::is_regular_file(env_path, ec)) {
    v.problems.push_back(E + "missing: the report is not signed (sign it with `repro-audit sign " + f.path(f.json) +
                         " --key KEY`)");
    return nullptr;
  }
  return check_envelope_text(read_file(env_path, "envelope"), f.envelope, trusted, v);
}

}  // namespace

Verification verify_report(const ReportFiles& f, const PublicKey* trusted) {
  Verification v;
  v.report = f.path(f.json);
  const std::string J = f.json + ": ";
  const json statement = check_envelope(f, trusted, v);

  // ---- report.json: parse, own digest
  const std::string text = read_file(v.report, "report");
  json doc;
  std::string err;
  const bool parsed = parse_json(text, doc, &err, kReportJsonLimits) && doc.is_object();
  if (!parsed) {
    v.problems.push_back(J + "not valid JSON" + (err.empty() ? "" : " (" + err + ")") + ": the file was altered");
  } else {
    std::string stored, actual;
    if (verify_report_digest(text, &stored, &actual))
      v.passed.push_back(J + "/digests/report_sha256 matches its canonical content");
    else
      v.problems.push_back(J + "/digests/report_sha256 " + (stored.empty() ? "is missing" : "is " + short_id(stored)) +
                           " but the canonical content hashes to " + short_id(actual) + ": edited after it was written");
  }

  // ---- subjects against the files on disk
  if (statement.is_object()) {
    bool json_covered = false;
    std::vector<std::string> covered;
    for (const auto& s : statement["subject"]) {
      std::string name = s.is_object() ? s.value("name", std::string()) : std::string();
      std::string want;
      if (s.is_object() && s.contains("digest") && s["digest"].is_object()) want = s["digest"].value("sha256", std::string());
      if (!plain_name(name) || want.empty()) {
        v.problems.push_back(f.envelope + ": subject '" + name + "' has no plain file name or no sha256 digest");
        continue;
      }
      covered.push_back(name);
      std::error_code ec;
      if (!fs::is_regular_file(f.path(name), ec)) {
        v.problems.push_back(name + ": listed in the attestation but missing from " + f.dir);
        continue;
      }
      if (name == f.json) {
        json_covered = true;
        if (!parsed) continue;
        std::string canon = sha256_hex(canonical_json(doc));
        if (canon != want && sha256_hex(canonical_json_v1(doc)) == want) canon = want;  // an earlier file form
        if (canon == want) {
          if (sha256_hex(text) == want)
            v.passed.push_back(J + "sha256 matches the attestation");
          else
            v.notes.push_back(J + "key order or whitespace differs from the signed file; its canonical form matches the "
                                  "attestation");
          continue;
        }
        json signed_sections;
        if (s.contains("annotations") && s["annotations"].is_object() && s["annotations"].contains("sections"))
          signed_sections = s["annotations"]["sections"];
        auto diffs = section_differences(signed_sections, section_digests(doc));
        if (diffs.empty()) diffs.push_back("content differs");
        const size_t max_lines = 12;
        for (size_t i = 0; i < diffs.size() && i < max_lines; ++i)
          v.problems.push_back(J + diffs[i] + " from the signed content");
        if (diffs.size() > max_lines)
          v.problems.push_back(J + std::to_string(diffs.size() - max_lines) + " more differences from the signed content");
        continue;
      }
      std::string got = sha256_file(f.path(name));
      if (got == want)
        v.passed.push_back(name + ": sha256 matches the attestation");
      else
        v.problems.push_back(name + ": sha256 " + short_id(got) + " differs from the signed " + short_id(want) +
                             ": the file was changed after signing");
    }
    if (!json_covered) v.problems.push_back(J + "not a subject of the attestation: the envelope belongs to another report");
    for (const auto& r : f.renders)
      if (std::find(covered.begin(), covered.end(), r) == covered.end())
        v.problems.push_back(r + ": present but not covered by the attestation (re-sign with `repro-audit sign`)");
  }

  // ---- renders against report.json, and the predicate against the verdict
  if (parsed) {
    try {
      AuditReport r = from_json(text, v.report);
      for (const auto& name : f.renders) {
        const std::string want = render(f.json, name, r), got = read_file(f.path(name), "report render");
        if (want == got)
          v.passed.push_back(name + ": rendered from " + f.json);
        else
          v.problems.push_back(name + ": not rendered from " + f.json + " (" + first_difference(want, got) + ")");
      }
      if (!v.result.empty() && v.result != verdict_result(r.summary.verdict))
        v.problems.push_back(f.envelope + ": predicate.result " + v.result + " does not match the report's verdict '" +
                             r.summary.verdict + "'");
    } catch (const UsageError& e) {
      v.problems.push_back(J + "cannot be read as a report (" + e.what() + ")");
    }
  }
  return v;
}

std::string verification_text(const Verification& v) {
  std::string out = "verify " + v.report + "\n";
  for (const auto& p : v.passed) out += "  ok    " + p + "\n";
  for (const auto& p : v.problems) out += "  FAIL  " + p + "\n";
  for (const auto& p : v.notes) out += "  note  " + p + "\n";
  if (v.valid())
    out += std::string(v.signature_trusted ? "VALID: signed by the trusted key; every file matches the attestation\n"
                                           : "VALID (signature not checked against a trusted key): every file matches "
                                             "the attestation\n");
  else
    out += "INVALID: " + std::to_string(v.problems.size()) + " problem" + (v.problems.size() == 1 ? "" : "s") + "\n";
  return out;
}

json verification_json(const Verification& v) {
  return {{"report", v.report},         {"valid", v.valid()},     {"signature_trusted", v.signature_trusted},
          {"key_id", v.key_id},         {"result", v.result},     {"passed", v.passed},
          {"problems", v.problems},     {"notes", v.notes}};
}

}  // namespace repro::compliance
