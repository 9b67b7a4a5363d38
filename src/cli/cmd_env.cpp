// `repro-audit env [--json] [--threads N]`: the environment record every report carries (tool and
// build, OS, CPU, BLAS, GPU, the environment variables that change numerics, visible risks).
#include <algorithm>
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

// A scalar as text: strings bare, numbers and booleans as written, null as "unknown".
std::string scalar_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "unknown";
  return v.dump();
}

// Indented "key: value" lines, never raw JSON: arrays of scalars on one line, arrays of objects as "- "
// items with their own indented lines, empty objects as "(none)".
void print_text(const nlohmann::json& j, int depth, std::string& out) {
  const std::string pad(size_t(depth) * 2, ' ');
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    if (v.is_object()) {
      out += pad + it.key() + ":" + (v.empty() ? " (none)\n" : "\n");
      print_text(v, depth + 1, out);
    } else if (v.is_array() && (it.key() == "nondeterminism_risks" ||
                                std::any_of(v.begin(), v.end(), [](const nlohmann::json& x) { return x.is_structured(); }))) {
      out += pad + it.key() + ":" + (v.empty() ? (it.key() == "nondeterminism_risks" ? " none seen\n" : " (none)\n") : "\n");
      for (const auto& x : v) {
        if (!x.is_structured()) {
          out += pad + "  - " + scalar_text(x) + "\n";
          continue;
        }
        std::string item;
        print_text(x.is_object() ? x : nlohmann::json{{"values", x}}, depth + 2, item);
        if (item.size() >= pad.size() + 4) item.replace(0, pad.size() + 4, pad + "  - ");  // the first line carries the dash
        out += item.empty() ? pad + "  - (none)\n" : item;
      }
    } else if (v.is_array()) {
      std::string line;
      for (const auto& x : v) line += (line.empty() ? "" : " ") + scalar_text(x);
      out += pad + it.key() + ": " + (line.empty() ? "(none)" : line) + "\n";
    } else {
      out += pad + it.key() + ": " + scalar_text(v) + "\n";
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
