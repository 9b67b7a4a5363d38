// The report schema (repro-audit/report/v1): nlohmann/json's type mapping for every structure of
// include/repro/audit/result.hpp. One field list per structure (src/report/schema.cpp) drives both
// directions, so the writer and the reader cannot disagree. docs/REPORT-SCHEMA.md documents the fields.
//
//   nlohmann::json j = completion;          // to_json
//   Completion c = j.get<Completion>();     // from_json
//
// Reading: a missing or null field keeps the structure's default; a field of the wrong type throws
// UsageError "<path>: expected <type>" (e.g. "cases[0].n: expected an integer"). Numbers that are not
// finite are written as null; a null logprob reads back as -inf. Unknown fields are ignored.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "repro/audit/result.hpp"

namespace repro {

void to_json(nlohmann::json& j, const DecodingConfig& v);
void to_json(nlohmann::json& j, const Completion& v);
void to_json(nlohmann::json& j, const Cluster& v);
void to_json(nlohmann::json& j, const FactorTable& v);
void to_json(nlohmann::json& j, const CrossModeTable& v);
void to_json(nlohmann::json& j, const CaseResult& v);
void to_json(nlohmann::json& j, const ThroughputRow& v);
void to_json(nlohmann::json& j, const ModeSummary& v);
void to_json(nlohmann::json& j, const Thresholds& v);
void to_json(nlohmann::json& j, const Summary& v);
void to_json(nlohmann::json& j, const EndpointPosture& v);
// The whole report document, with digests.prompts_sha256 / model_sha256 / profile_sha256 but without
// digests.report_sha256 (see repro/report/canonical.hpp for that one).
void to_json(nlohmann::json& j, const AuditReport& v);

// Every string the report stores passed through `f`: every field of the schema's field lists, list
// entries, map keys and values, and every string and object key inside the free-form blocks (plan,
// environment). The one pass that keeps secrets out of every format and the checkpoint (`run` applies
// it with the endpoints' secrets before anything is written).
void rewrite_strings(AuditReport& report, const std::function<std::string(const std::string&)>& f);
void rewrite_strings(Completion& c, const std::function<std::string(const std::string&)>& f);
void rewrite_strings(nlohmann::json& j, const std::function<std::string(const std::string&)>& f);

void from_json(const nlohmann::json& j, DecodingConfig& v);
void from_json(const nlohmann::json& j, Completion& v);
void from_json(const nlohmann::json& j, Cluster& v);
void from_json(const nlohmann::json& j, FactorTable& v);
void from_json(const nlohmann::json& j, CrossModeTable& v);
void from_json(const nlohmann::json& j, CaseResult& v);
void from_json(const nlohmann::json& j, ThroughputRow& v);
void from_json(const nlohmann::json& j, ModeSummary& v);
void from_json(const nlohmann::json& j, Thresholds& v);
void from_json(const nlohmann::json& j, Summary& v);
// Does not check "schema" (from_json(text, path) in report.hpp does); fills cases[].prompt_text
// from "prompts"; ignores "digests".
void from_json(const nlohmann::json& j, AuditReport& v);

}  // namespace repro
