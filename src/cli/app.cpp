// Builds the CLI from the subcommand table and maps errors to exit codes.
#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <string>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
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

namespace {

// "did you mean" for the words CLI11 did not expect: flags against the options of the subcommand
// given (or of every subcommand), other words against the subcommand names.
std::string suggestion(CLI::App& app, const std::string& message) {
  const std::string marker = "not expected: ";
  auto at = message.find(marker);
  if (at == std::string::npos) return {};
  std::vector<CLI::App*> given = app.get_subcommands(), scope = given;  // the subcommand given, if any
  if (scope.empty())
    for (auto* sc : app.get_subcommands({})) scope.push_back(sc);
  std::vector<std::string> flags, commands;
  for (auto* sc : scope)
    for (const auto* opt : sc->get_options())
      for (const auto& n : opt->get_lnames()) flags.push_back("--" + n);
  for (auto* sc : app.get_subcommands({})) commands.push_back(sc->get_name());
  for (const auto& word : split(message.substr(at + marker.size()), ' ')) {
    std::string near;
    if (word.rfind("-", 0) == 0)
      near = closest_match(word.substr(0, word.find('=')), flags);
    else if (given.empty())
      near = closest_match(word, commands);
    if (!near.empty()) return "; did you mean '" + near + "'?";
  }
  return {};
}

}  // namespace

int main_entry(int argc, char** argv) {
  CLI::App app{"repro-audit"};
  Runner runner;
  // `run` is the default subcommand: `repro-audit --profile ci` is `repro-audit run --profile ci`.
  std::vector<char*> args(argv, argv + argc);
  static char run_word[] = "run";
  if (argc > 1 && argv[1][0] == '-' && std::string(argv[1]) != "--help" && std::string(argv[1]) != "-h" &&
      std::string(argv[1]) != "--version")
    args.insert(args.begin() + 1, run_word);
  try {
    build_app(app, runner);
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "error: %s%s (see 'repro-audit --help')\n", e.what(), suggestion(app, e.what()).c_str());
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
