// `repro-audit keygen --out PREFIX`: an Ed25519 key pair for signing reports (PREFIX, PREFIX.pub).
#include <cstdio>

#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"
#include "repro/compliance/sign.hpp"

namespace repro::cli {

namespace {
struct KeygenOptions {
  std::string out;
};

int run_keygen(const KeygenOptions& o) {
  std::string id = compliance::generate_keypair(o.out);
  std::printf("wrote %s (private key, mode 0600: keep it secret)\nwrote %s.pub (public key: give it to verifiers)\nkey id %s\n",
              o.out.c_str(), o.out.c_str(), id.c_str());
  return kExitOk;
}
}  // namespace

void setup_keygen(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<KeygenOptions>();
  auto* sub = parent.add_subcommand(
      "keygen", "Create an Ed25519 key pair for signing reports: PREFIX (private, PEM, mode 0600) and PREFIX.pub");
  sub->add_option("--out,-o", opt->out, "Path prefix of the key files; existing files are never overwritten")->required();
  sub->callback([&runner, opt] { runner = [opt] { return run_keygen(*opt); }; });
}

}  // namespace repro::cli
