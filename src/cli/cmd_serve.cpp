// PLACEHOLDER: replaced by the real subcommand.
#include "repro/error.hpp"
#include "src/cli/commands.hpp"

namespace repro::cli {
void setup_serve(CLI::App& parent, Runner& runner) {
  auto* sub = parent.add_subcommand("serve", "(not implemented yet)");
  sub->callback([&runner] { runner = []() -> int { throw UsageError("'serve' is not implemented yet"); }; });
}
}  // namespace repro::cli
