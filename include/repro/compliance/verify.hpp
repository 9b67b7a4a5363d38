// Verification of a signed report (src/compliance/verify.cpp): the DSSE envelope's signature,
// every subject's digest against the files on disk, report.json against its own canonical digest,
// and the Markdown/HTML/JUnit beside it against a fresh rendering of report.json.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/compliance/sign.hpp"

namespace repro::compliance {

// The first 16 hex digits of a digest or key id, as verify's lines quote them.
inline std::string short_id(const std::string& h) { return h.size() > 16 ? h.substr(0, 16) : h; }

struct Verification {
  std::string report;                 // path of the report JSON
  std::vector<std::string> passed;    // checks that held, one line each
  std::vector<std::string> problems;  // "FILE: FIELD: what differs", one line each
  std::vector<std::string> notes;     // e.g. the signature was not checked against a trusted key
  bool signature_trusted = false;     // a signature verified with the trusted public key
  std::string key_id;                 // key id(s) the envelope names, comma-separated
  std::string result;                 // predicate.result of the statement, when readable
  bool valid() const { return problems.empty(); }
};

// Checks the text of an envelope file named `name` (one DSSE line): its signatures (against
// `trusted` when given; null: a note says the signature was not checked), then the in-toto
// Statement it carries. Adds what it finds to `v`; returns the statement (null when unreadable).
// src/compliance/envelope.cpp.
nlohmann::json check_envelope_text(const std::string& text, const std::string& name, const PublicKey* trusted,
                                   Verification& v);

// `trusted` may be null: then the signature is not checked and a note says so.
Verification verify_report(const ReportFiles& files, const PublicKey* trusted);

std::string verification_text(const Verification& v);
nlohmann::json verification_json(const Verification& v);

}  // namespace repro::compliance
