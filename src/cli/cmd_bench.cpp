// PLACEHOLDER: replaced by the real subcommand.
#include "repro/error.hpp"
#include "src/cli/commands.hpp"

namespace repro::cli {
void setup_bench(CLI::App& parent, Runner& runner) {
  auto* sub = parent.add_subcommand("bench", "(not implemented yet)");
  sub->callback([&runner] { runner = []() -> int { throw UsageError("'bench' is not implemented yet"); }; });
}
}  // namespace repro::cli
