// `repro-audit verify REPORT_DIR|REPORT.json [--pubkey PUB] [--json]`: checks a signed report.
// Exit 0 valid, 1 invalid (each difference named by file and field), 2 usage.
#include <cstdio>
#include <optional>

#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"
#include "repro/compliance/verify.hpp"

namespace repro::cli {

namespace {
struct VerifyOptions {
  std::string report, pubkey;
  bool json = false;
};

int run_verify(const VerifyOptions& o) {
  auto files = compliance::locate_report(o.report);
  std::optional<compliance::PublicKey> key;
  if (!o.pubkey.empty()) key = compliance::load_public_key(o.pubkey);
  auto v = compliance::verify_report(files, key ? &*key : nullptr);
  if (o.json)
    std::fputs((compliance::verification_json(v).dump(2) + "\n").c_str(), stdout);
  else
    std::fputs(compliance::verification_text(v).c_str(), stdout);
  return v.valid() ? kExitOk : kExitDivergent;
}
}  // namespace

void setup_verify(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<VerifyOptions>();
  auto* sub = parent.add_subcommand(
      "verify", "Verify a signed report: envelope signature, file digests, canonical report digest, renders; exit 1 if invalid");
  sub->add_option("report", opt->report, "Report directory or its report.json")->required();
  sub->add_option("--pubkey,-p", opt->pubkey,
                  "Trusted public key (PREFIX.pub); without it the signature is not checked against a trusted key");
  sub->add_flag("--json", opt->json, "Print the result as JSON");
  sub->callback([&runner, opt] { runner = [opt] { return run_verify(*opt); }; });
}

}  // namespace repro::cli
