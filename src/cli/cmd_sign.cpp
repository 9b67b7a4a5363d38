// `repro-audit sign REPORT.json|DIR --key KEY`: writes report.intoto.jsonl, a DSSE envelope holding an
// in-toto Statement (subjects: the report files; predicate: test-result) signed with KEY.
#include <cstdio>

#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"
#include "repro/compliance/sign.hpp"

namespace repro::cli {

namespace {
struct SignOptions {
  std::string report, key;
};

int run_sign(const SignOptions& o) {
  auto files = compliance::locate_report(o.report);
  std::string id = compliance::sign_report(files, o.key);
  std::printf("wrote %s (signed %zu file%s with key id %s)\n", files.path(files.envelope).c_str(),
              1 + files.renders.size(), files.renders.empty() ? "" : "s", id.c_str());
  return kExitOk;
}
}  // namespace

void setup_sign(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<SignOptions>();
  auto* sub = parent.add_subcommand(
      "sign", "Sign a report: write report.intoto.jsonl (in-toto Statement in a DSSE envelope, Ed25519)");
  sub->add_option("report", opt->report, "report.json, or the report directory")->required();
  sub->add_option("--key,-k", opt->key, "Private key written by `repro-audit keygen`")->required();
  sub->callback([&runner, opt] { runner = [opt] { return run_sign(*opt); }; });
}

}  // namespace repro::cli
