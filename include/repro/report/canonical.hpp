// Canonical JSON and the report digest: the one definition of the bytes a report's SHA-256 (and any
// signature built on it) covers. docs/REPORT-SCHEMA.md ("Canonical form and digests") documents it.
//
// Canonical form of a JSON value:
//   - object keys sorted by their UTF-8 bytes, at every level (nlohmann::json keeps objects sorted);
//   - numbers: integers as decimal digits; floating-point numbers in the shortest form that reads back
//     to the same double (a fraction or exponent is always present: 1.0, 1e-05); NaN and infinities
//     have no JSON form and are written as null;
//   - strings as UTF-8; invalid UTF-8 bytes are replaced by U+FFFD; control characters and '"' and
//     '\' escaped as JSON requires, nothing else escaped (no \u escapes for non-ASCII).
// Compact form: no whitespace at all. File form: the same, objects and arrays of objects or arrays one
// member per line indented by 2 spaces, an array of scalars on one line ("[1, 2, 3]"), ending with "\n".
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace repro {

// The compact canonical bytes of `j`: what digests are computed over.
std::string canonical_json_compact(const nlohmann::json& j);
// The file form: canonical, indented by 2 spaces, arrays of scalars on one line, with a trailing
// newline (how report.json is written).
std::string canonical_json(const nlohmann::json& j);
// The earlier file form (every array element on its own line, as nlohmann's dump(2) writes it): what
// the attestations of reports written in it hash, so `verify` still accepts them.
std::string canonical_json_v1(const nlohmann::json& j);

// The fields a report's digest does not cover, as JSON pointers (RFC 6901). Today only
// "/digests/report_sha256": the digest itself. A field a later writer adds to carry a digest or a
// signature of the report must be listed here, or it would invalidate itself.
const std::vector<std::string>& report_digest_excluded();
// `report` without the excluded fields (missing ones are ignored; parents are kept even if emptied).
nlohmann::json report_digest_view(const nlohmann::json& report);
// SHA-256 (lower-case hex) of canonical_json_compact(report_digest_view(report)): the value of
// digests.report_sha256. Works on any JSON value; a non-object is hashed as it is.
std::string report_digest(const nlohmann::json& report);

}  // namespace repro
