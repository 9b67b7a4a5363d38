// PLACEHOLDER: replaced by the real subcommand.
#include "repro/error.hpp"
#include "src/cli/commands.hpp"

namespace repro::cli {
void setup_diff(CLI::App& parent, Runner& runner) {
  auto* sub = parent.add_subcommand("diff", "(not implemented yet)");
  sub->callback([&runner] { runner = []() -> int { throw UsageError("'diff' is not implemented yet"); }; });
}
}  // namespace repro::cli
