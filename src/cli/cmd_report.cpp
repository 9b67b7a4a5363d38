// PLACEHOLDER: replaced by the real subcommand.
#include "repro/error.hpp"
#include "src/cli/commands.hpp"

namespace repro::cli {
void setup_report(CLI::App& parent, Runner& runner) {
  auto* sub = parent.add_subcommand("report", "(not implemented yet)");
  sub->callback([&runner] { runner = []() -> int { throw UsageError("'report' is not implemented yet"); }; });
}
}  // namespace repro::cli
