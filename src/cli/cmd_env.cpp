// `repro-audit env [--json] [--threads N]`: the environment record every report carries (tool and
// build, OS, CPU, BLAS, GPU, the environment variables that change numerics, visible risks).
#include <cstdio>
#include <string>

#include "repro/audit/runner.hpp"
#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"

namespace repro::cli {

namespace {
struct EnvOptions {
  bool json = false;
  int threads = 1;
};

// Indented "key: value" lines; arrays of scalars on one line, arrays of objects one per line.
void print_text(const nlohmann::json& j, int depth, std::string& out) {
  const std::string pad(size_t(depth) * 2, ' ');
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    if (v.is_object()) {
      out += pad + it.key() + ":\n";
      print_text(v, depth + 1, out);
    } else if (v.is_array() && it.key() == "nondeterminism_risks") {
      out += pad + it.key() + ":" + (v.empty() ? " none seen\n" : "\n");
      for (const auto& x : v) out += pad + "  - " + (x.is_string() ? x.get<std::string>() : x.dump()) + "\n";
    } else if (v.is_array()) {
      std::string line;
      for (const auto& x : v) line += (line.empty() ? "" : " ") + (x.is_string() ? x.get<std::string>() : x.dump());
      out += pad + it.key() + ": " + (line.empty() ? "(none)" : line) + "\n";
    } else {
      out += pad + it.key() + ": " + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n";
    }
  }
}

int run_env(const EnvOptions& o) {
  if (o.threads < 1) throw UsageError("--threads must be >= 1");
  nlohmann::json env = environment_record(o.threads);
  if (o.json) {
    std::fputs((env.dump(2) + "\n").c_str(), stdout);
    return kExitOk;
  }
  if (env["environment_variables"].empty()) env["environment_variables"] = "(none of the recorded variables is set)";
  std::string out;
  print_text(env, 0, out);
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}
}  // namespace

void setup_env(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<EnvOptions>();
  auto* sub = parent.add_subcommand(
      "env", "Print the environment record every report carries: tool, build, OS, CPU, BLAS, GPU, numerics variables, risks");
  sub->add_flag("--json", opt->json, "Print JSON (the report's \"environment\" object)");
  sub->add_option("--threads", opt->threads, "Engine threads to record (as run --threads)")->capture_default_str();
  sub->callback([&runner, opt] { runner = [opt] { return run_env(*opt); }; });
}

}  // namespace repro::cli
