// The DSSE envelope of a signed report, read from its text: the signature over the PAE bytes (against
// a trusted key when one is given), then the in-toto Statement it carries. `verify` calls it on the
// envelope file; fuzz/fuzz_report.cpp calls it on any bytes.
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/compliance/verify.hpp"
#include "repro/report/report.hpp"

namespace repro::compliance {

using nlohmann::json;

json check_envelope_text(const std::string& text, const std::string& name, const PublicKey* trusted,
                         Verification& v) {
  const std::string E = name + ": ";
  std::vector<std::string> lines;
  for (auto& l : split(text, '\n'))
    if (!trim(l).empty()) lines.push_back(l);
  if (lines.size() != 1) {
    v.problems.push_back(E + "expected one DSSE envelope line, found " + std::to_string(lines.size()));
    if (lines.empty()) return nullptr;
  }
  json env;
  std::string err;
  if (!parse_json(lines[0], env, &err, kReportJsonLimits) || !env.is_object()) {
    v.problems.push_back(E + "not a JSON object" + (err.empty() ? "" : " (" + err + ")") + ": the envelope was altered");
    return nullptr;
  }
  std::string type = env.value("payloadType", std::string());
  if (type != kPayloadType) v.problems.push_back(E + "payloadType is '" + type + "', expected '" + kPayloadType + "'");
  std::string payload;
  if (!env.contains("payload") || !env["payload"].is_string() || !base64_decode(env["payload"].get<std::string>(), payload)) {
    v.problems.push_back(E + "payload: missing or not base64");
    return nullptr;
  }
  const std::string pae = dsse_pae(type, payload);
  const json sigs = env.contains("signatures") ? env["signatures"] : json();
  if (!sigs.is_array() || sigs.empty()) {
    v.problems.push_back(E + "signatures: none");
  } else {
    std::vector<std::string> ids;
    bool trusted_ok = false, trusted_named = false;
    for (size_t i = 0; i < sigs.size(); ++i) {
      const json& s = sigs[i];
      std::string id = s.is_object() ? s.value("keyid", std::string()) : std::string();
      std::string sig;
      ids.push_back(id.empty() ? "(none)" : id);
      if (!s.is_object() || !s.contains("sig") || !s["sig"].is_string() || !base64_decode(s["sig"].get<std::string>(), sig)) {
        v.problems.push_back(E + "signatures[" + std::to_string(i) + "].sig: missing or not base64");
        continue;
      }
      if (!trusted) continue;
      bool ok = ed25519_verify(trusted->der, pae, sig);
      if (id == trusted->key_id) trusted_named = true;
      if (ok) trusted_ok = true;
      if (id == trusted->key_id && !ok)
        v.problems.push_back(E + "signatures[" + std::to_string(i) + "]: does not verify with --pubkey (key id " +
                             short_id(trusted->key_id) + "): the payload or the signature was altered");
    }
    v.key_id = ids.empty() ? "" : ids[0];
    for (size_t i = 1; i < ids.size(); ++i) v.key_id += "," + ids[i];
    if (trusted) {
      if (trusted_ok) {
        v.signature_trusted = true;
        v.passed.push_back("signature: Ed25519 over the DSSE PAE, valid for the trusted key " + short_id(trusted->key_id) +
                           " (--pubkey)");
      } else if (!trusted_named) {
        v.problems.push_back(E + "signed by key id " + short_id(v.key_id) + ", not by the trusted key " +
                             short_id(trusted->key_id) + " (--pubkey); no signature verifies with it");
      }
    } else {
      v.notes.push_back("the signature was NOT checked against a trusted key (no --pubkey); the envelope names key id " +
                        v.key_id + "; pass the signer's PREFIX.pub with --pubkey to check it");
    }
  }
  json st;
  if (!parse_json(payload, st, &err, kReportJsonLimits) || !st.is_object()) {
    v.problems.push_back(E + "payload: not a JSON in-toto Statement" + (err.empty() ? "" : " (" + err + ")"));
    return nullptr;
  }
  if (st.value("_type", std::string()) != kStatementType)
    v.problems.push_back(E + "statement _type is '" + st.value("_type", std::string()) + "', expected '" + kStatementType + "'");
  if (st.value("predicateType", std::string()) != kTestResultPredicate)
    v.problems.push_back(E + "statement predicateType is '" + st.value("predicateType", std::string()) + "', expected '" +
                         kTestResultPredicate + "'");
  if (!st.contains("subject") || !st["subject"].is_array()) {
    v.problems.push_back(E + "statement has no subject list");
    return nullptr;
  }
  if (st.contains("predicate") && st["predicate"].is_object()) v.result = st["predicate"].value("result", std::string());
  v.passed.push_back(E + "DSSE envelope with an in-toto Statement v1, test-result predicate (result " +
                     (v.result.empty() ? "missing" : v.result) + ")");
  return st;
}

}  // namespace repro::compliance
