// Subcommand registry. Each subcommand lives in its own file src/cli/cmd_<name>.cpp with an Options
// struct, a setup function that declares its flags on CLI11, and a run function that returns the
// exit code. main.cpp stays thin: it parses, runs, and turns exceptions into one `error:` line.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace repro::cli {

// The chosen subcommand's run function, set by its CLI11 callback.
using Runner = std::function<int()>;

struct Subcommand {
  const char* name;
  void (*setup)(CLI::App& parent, Runner& runner);
};

void setup_model(CLI::App& parent, Runner& runner);
void setup_generate(CLI::App& parent, Runner& runner);
void setup_run(CLI::App& parent, Runner& runner);
void setup_report(CLI::App& parent, Runner& runner);
void setup_report_merge(CLI::App& report, Runner& runner);  // `report merge`, added by setup_report
void setup_diff(CLI::App& parent, Runner& runner);
void setup_bench(CLI::App& parent, Runner& runner);
void setup_serve(CLI::App& parent, Runner& runner);
void setup_keygen(CLI::App& parent, Runner& runner);
void setup_sign(CLI::App& parent, Runner& runner);
void setup_verify(CLI::App& parent, Runner& runner);
void setup_archive(CLI::App& parent, Runner& runner);
void setup_env(CLI::App& parent, Runner& runner);
void setup_canary(CLI::App& parent, Runner& runner);
void setup_tokenize(CLI::App& parent, Runner& runner);

// The one table of subcommands, in --help order.
inline const Subcommand kSubcommands[] = {
    {"run", setup_run},         {"report", setup_report}, {"diff", setup_diff}, {"canary", setup_canary},
    {"generate", setup_generate}, {"tokenize", setup_tokenize}, {"model", setup_model}, {"serve", setup_serve},
    {"bench", setup_bench},       {"keygen", setup_keygen}, {"sign", setup_sign},
    {"verify", setup_verify},     {"archive", setup_archive}, {"env", setup_env},
};

// Builds the whole CLI (used by main and by tests of --help text).
void build_app(CLI::App& app, Runner& runner);
// Parses argv and runs; returns the exit code (prints `error: ...` on failure).
int main_entry(int argc, char** argv);

}  // namespace repro::cli
