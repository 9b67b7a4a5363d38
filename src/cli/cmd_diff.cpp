// `repro-audit diff A.json B.json [--json]`: drift between two runs. Exit 1 on drift, 0 otherwise, 2 on bad input.
#include <cstdio>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "repro/cli/commands.hpp"

namespace repro::cli {

namespace {
struct DiffOptions {
  std::string a, b;
  bool json = false;
};

// Reads a report; warns (stderr) when its content does not match its recorded digest.
AuditReport load_checked(const std::string& path) {
  std::string text = read_file(path, "report");
  AuditReport r = from_json(text, path);
  if (!verify_report_digest(text))
    std::fprintf(stderr, "warning: report '%s': its content does not match its recorded digest; it was edited after "
                 "it was written\n", path.c_str());
  return r;
}

int run_diff(const DiffOptions& o) {
  if (o.a.empty() || o.b.empty())
    throw UsageError(std::string("diff needs two reports: repro-audit diff BASELINE.json NEW.json (") +
                     (o.a.empty() ? "no report given" : "missing NEW.json, the report to compare with '" + o.a + "'") + ")");
  AuditReport a = load_checked(o.a);
  AuditReport b = load_checked(o.b);
  Drift d = compute_drift(a, b);
  if (o.json)
    std::fputs((drift_json(d).dump(2) + "\n").c_str(), stdout);
  else
    write_text(drift_text(d, o.a, o.b), stdout);
  return d.drifted() ? kExitDivergent : kExitOk;
}
}  // namespace

void setup_diff(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<DiffOptions>();
  auto* sub = parent.add_subcommand(
      "diff", "Show drift between two reports (cases whose majority output, unique count, verdict or schema-valid count changed); exit 1 on drift");
  sub->add_option("a", opt->a, "BASELINE.json: the earlier (golden) report");
  sub->add_option("b", opt->b, "NEW.json: the report to compare with it");
  sub->add_flag("--json", opt->json, "Print the drift as JSON");
  sub->callback([&runner, opt] { runner = [opt] { return run_diff(*opt); }; });
}

}  // namespace repro::cli
