// Signed attestations of reports in the ecosystem's formats (src/compliance/sign.cpp):
// - keys: Ed25519 through OpenSSL, private key as PKCS#8 PEM (mode 0600), public key as
//   SubjectPublicKeyInfo PEM; key id = SHA-256 (hex) of the public key's DER encoding, which
//   `openssl pkey -pubin -in KEY.pub -outform DER | sha256sum` reproduces;
// - statement: in-toto Statement v1 whose subjects are the report files (name + sha256) and whose
//   predicate is the in-toto test-result predicate v0.1;
// - envelope: DSSE v1 (payloadType application/vnd.in-toto+json), signature over the PAE bytes,
//   one envelope per line in <stem>.intoto.jsonl beside <stem>.json.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro::compliance {

inline constexpr const char* kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr const char* kTestResultPredicate = "https://in-toto.io/attestation/test-result/v0.1";
inline constexpr const char* kPayloadType = "application/vnd.in-toto+json";

// ---- encodings
// DSSE pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, with LEN
// the byte length in ASCII decimal.
std::string dsse_pae(std::string_view payload_type, std::string_view payload);
std::string base64_encode(std::string_view bytes);  // standard alphabet, padded
// Standard or URL-safe alphabet, padding optional; false on any other character.
bool base64_decode(std::string_view text, std::string& out);

// ---- keys
// Writes PREFIX (private key, PKCS#8 PEM, mode 0600) and PREFIX.pub (public key PEM). Never
// overwrites: UsageError naming the file when either exists. Returns the key id.
std::string generate_keypair(const std::string& prefix);

struct PublicKey {
  std::string pem;     // as read
  std::string der;     // SubjectPublicKeyInfo
  std::string key_id;  // sha256 hex of der
};
// Reads a public key PEM (or the public half of a private key PEM). UsageError naming the file
// when it is unreadable or not an Ed25519 key.
PublicKey load_public_key(const std::string& path);

// A private key read from its PEM file (PKCS#8), with its key id. UsageError naming the file
// when it is unreadable or not an Ed25519 key.
struct PrivateKey {
  std::string key_id;             // sha256 hex of the public key's DER
  std::shared_ptr<void> handle;   // the OpenSSL key
};
PrivateKey load_private_key(const std::string& path);
// Ed25519 signature of `message`.
std::string ed25519_sign(const PrivateKey& key, std::string_view message);

// Ed25519 verification of `message` with a public key (DER SubjectPublicKeyInfo).
bool ed25519_verify(const std::string& public_der, std::string_view message, std::string_view signature);

// ---- reports
// The files of one report: the JSON and its renders beside it, named after the JSON's stem
// (report.json -> report.md, report.html, report.junit.xml) and the envelope report.intoto.jsonl.
struct ReportFiles {
  std::string dir;                  // directory of the JSON
  std::string json;                 // file name of the JSON, e.g. "report.json"
  std::vector<std::string> renders; // file names of the renders that exist, in md, html, junit order
  std::string envelope;             // file name of the envelope, e.g. "report.intoto.jsonl"
  std::string path(const std::string& name) const;
};
// `target` is a report directory (its report.json) or a report JSON file. UsageError when absent.
ReportFiles locate_report(const std::string& target);
// Render names for a JSON stem, in md, html, junit order.
std::vector<std::string> render_names(const std::string& json_name);
// The render `name` (one of render_names(json_name)) of a report, as `run` and `report` write it.
std::string render(const std::string& json_name, const std::string& name, const AuditReport& r);
// The test-result predicate's result for a report verdict: PASSED (reproducible), WARNED
// (interrupted, no answer) or FAILED (anything else). `sign` writes it and `verify` checks it.
std::string verdict_result(const std::string& verdict);

// Digests of the parts of a report document: "/key" for each top-level field, and one level
// deeper ("/cases/3", "/summary/verdict") for arrays and objects. Lets `verify` name the field
// that was edited. Each value is SHA-256 of the canonical compact form of that part.
nlohmann::json section_digests(const nlohmann::json& doc);

// The in-toto Statement for a report (subjects: the JSON and the renders that exist).
nlohmann::json build_statement(const ReportFiles& files);

// Signs the report: writes the DSSE envelope (one line) to files.envelope, atomically. Returns
// the key id. UsageError naming --key/the file when the key cannot be read.
std::string sign_report(const ReportFiles& files, const std::string& private_key_path);

}  // namespace repro::compliance
