// Builds the CLI from the subcommand table and maps errors to exit codes.
#include <fmt/core.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
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
      "Exit status: 0 reproducible, 1 divergent, 2 usage/bad input, 3 backend failure, 130 interrupted,\n"
      "143 terminated (SIGTERM).");
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


// The one place errors are printed: one line, with bytes that are not printable escaped (a message
// may quote a corrupt file).
int fail(int code, const std::string& msg, const char* suffix = "") {
  std::fprintf(stderr, "error: %s%s\n", printable(msg).c_str(), suffix);
  return code;
}

// Output that could not be written (a full disk, a closed pipe) is a failure, not success.
int check_stdout(int code) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    int e = errno;
    return fail(kExitBackend, std::string("cannot write to standard output: ") + std::strerror(e) +
                                  "; check the disk or the pipe it goes to");
  }
  return code;
}
}  // namespace

int main_entry(int argc, char** argv) {
  // A file size limit (ulimit -f) makes a write fail with EFBIG, like a full disk: the write's error
  // is handled (finished work kept, one error line), not a kill by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
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
    if (e.get_exit_code() == 0) return check_stdout(app.exit(e));  // --help, --version
    return fail(kExitUsage, e.what(), (suggestion(app, e.what()) + " (see 'repro-audit --help')").c_str());
  } catch (const std::exception& e) {
    return fail(kExitUsage, e.what());
  }
  if (!runner) {
    // No subcommand: `repro-audit` alone runs the default audit, like `repro-audit run`.
    char arg0[] = "repro-audit";
    char arg1[] = "run";
    char* args[] = {arg0, arg1, nullptr};
    return main_entry(2, args);
  }
  try {
    return check_stdout(runner());
  } catch (const UsageError& e) {
    return fail(kExitUsage, e.what());
  } catch (const BackendError& e) {
    return fail(kExitBackend, e.what());
  } catch (const std::bad_alloc&) {
    return fail(kExitBackend, "out of memory (try a smaller model, batch size or --max-tokens)");
  } catch (const std::exception& e) {
    return fail(kExitBackend, e.what());
  }
}

}  // namespace repro::cli
