// `repro-audit diff A.json B.json [--json]`: drift between two runs. Exit 1 on drift, 0 otherwise, 2 on bad input.
#include <cstdio>

#include "repro/common/error.hpp"
#include "repro/report/report.hpp"
#include "repro/cli/commands.hpp"

namespace repro::cli {

namespace {
struct DiffOptions {
  std::string a, b;
  bool json = false;
};

int run_diff(const DiffOptions& o) {
  AuditReport a = load_report(o.a);
  AuditReport b = load_report(o.b);
  Drift d = compute_drift(a, b);
  if (o.json)
    std::fputs((drift_json(d).dump(2) + "\n").c_str(), stdout);
  else
    std::fputs(drift_text(d, o.a, o.b).c_str(), stdout);
  return d.drifted() ? kExitDivergent : kExitOk;
}
}  // namespace

void setup_diff(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<DiffOptions>();
  auto* sub = parent.add_subcommand(
      "diff", "Show drift between two reports (cases whose majority output, unique count or verdict changed); exit 1 on drift");
  sub->add_option("a", opt->a, "baseline report.json")->required();
  sub->add_option("b", opt->b, "new report.json")->required();
  sub->add_flag("--json", opt->json, "Print the drift as JSON");
  sub->callback([&runner, opt] { runner = [opt] { return run_diff(*opt); }; });
}

}  // namespace repro::cli
