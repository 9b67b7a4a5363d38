// libFuzzer target: reading report.json (src/report/json.cpp through the schema of
// src/report/schema.cpp), the bounded JSON reader beneath it (src/common/json.cpp) and the signed
// envelope beside it (src/compliance/envelope.cpp), as `verify`, `report`, `diff`, `canary` and
// `run --resume` read files someone handed them. Builds from its
// own short source list (CMakeLists.txt: fuzz_report_SOURCES), see docs/FUZZING.md.
// tests/unit-hostile-json.cpp includes this file with REPRO_FUZZ_NO_MAIN and replays
// fuzz/corpus/report/ through report_one_input() as a regression test.
//
// Input layout: the whole input is the file. Properties checked:
// - reading never throws anything but UsageError, never crashes, never recurses past the limit;
// - a report that reads back writes (to_json) and reads again to the same canonical bytes;
// - a document that parses has depth <= the limit, and its canonical form parses again;
// - the same bytes read as an envelope file (without a trusted key, and with one whose signatures
//   never verify) give findings, never an exception, and never a trusted signature.
#include <cstddef>
#include <cstdint>
#include <string>

#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/compliance/verify.hpp"
#include "repro/report/canonical.hpp"
#include "repro/report/report.hpp"

namespace repro::fuzz {

inline int report_one_input(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc;
  if (parse_json(text, doc, nullptr, kReportJsonLimits)) {
    if (json_depth(doc) > kMaxJsonDepth) __builtin_trap();
    nlohmann::json again;
    if (!parse_json(canonical_json(doc), again, nullptr, kReportJsonLimits) || again != doc) __builtin_trap();
  }
  (void)verify_report_digest(text);
  {
    compliance::Verification v;
    (void)compliance::check_envelope_text(text, "fuzz.intoto.jsonl", nullptr, v);
    // An Ed25519 SubjectPublicKeyInfo around 32 fixed bytes: no input holds its private key.
    static const compliance::PublicKey trusted = [] {
      compliance::PublicKey k;
      k.der = std::string("\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00", 12) + std::string(32, '\x11');
      k.key_id = "fuzz";
      return k;
    }();
    compliance::Verification t;
    (void)compliance::check_envelope_text(text, "fuzz.intoto.jsonl", &trusted, t);
    if (t.signature_trusted) __builtin_trap();
  }
  try {
    const AuditReport r = from_json(text, "fuzz");
    const std::string written = to_json(r);
    const AuditReport back = from_json(written, "fuzz (written back)");
    if (to_json(back) != written) __builtin_trap();
  } catch (const UsageError&) {
    // the expected answer to a malformed report
  }
  return 0;
}

}  // namespace repro::fuzz

#ifndef REPRO_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::fuzz::report_one_input(data, size);
}
#endif
