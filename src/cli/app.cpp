// Builds the CLI from the subcommand table and maps errors to exit codes.
#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <string>

#include "repro/common/error.hpp"
#include "repro/common/version.hpp"
#include "repro/cli/commands.hpp"

namespace repro::cli {

void build_app(CLI::App& app, Runner& runner) {
  app.description(
      "repro-audit " REPRO_VERSION ": audit whether LLM inference is reproducible.\n"
      "Replays prompts while varying batch composition and seeds, hashes outputs, clusters\n"
      "divergent completions and reports the throughput cost of determinism.\n"
      "Exit status: 0 reproducible, 1 divergent, 2 usage/bad input, 3 backend failure, 130 interrupted.");
  app.set_version_flag("--version", std::string("repro-audit ") + tool_version() + " (" + tool_commit() + ")");
  app.require_subcommand(0, 1);
  for (const auto& sc : kSubcommands) sc.setup(app, runner);
}

int main_entry(int argc, char** argv) {
  CLI::App app{"repro-audit"};
  Runner runner;
  try {
    build_app(app, runner);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "error: %s (see 'repro-audit --help')\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  if (!runner) {
    // No subcommand: `repro-audit` alone runs the default audit, like `repro-audit run`.
    char arg0[] = "repro-audit";
    char arg1[] = "run";
    char* args[] = {arg0, arg1, nullptr};
    return main_entry(2, args);
  }
  try {
    return runner();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  } catch (const BackendError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBackend;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory (try a smaller model, batch size or --max-tokens)\n");
    return kExitBackend;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBackend;
  }
}

}  // namespace repro::cli
