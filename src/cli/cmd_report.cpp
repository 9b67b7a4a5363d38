// `repro-audit report REPORT.json [--format json,md,html,junit] [--out DIR]`: re-renders a stored report.
// Its one subcommand, `report merge DIR...`, is src/cli/cmd_report_merge.cpp.
#include <cstdio>

#include "repro/common/error.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"

namespace repro::cli {

namespace {
struct ReportOptions {
  std::string input;
  std::string formats;
  std::string out;
  bool verify = false;
};

int run_report(const ReportOptions& o) {
  if (o.input.empty())
    throw UsageError("report: give a report.json written by `repro-audit run`, or merge shard reports with "
                     "`repro-audit report merge DIR...`");
  std::string text = read_file(o.input, "report");
  AuditReport r = from_json(text, o.input);
  std::string stored;
  if (!verify_report_digest(text, &stored)) {
    std::string msg = "report '" + o.input + "': " +
                      (stored.empty() ? std::string("it has no recorded digest (digests.report_sha256)")
                                      : std::string("its content does not match its recorded digest (digests.report_sha256)")) +
                      "; the file was edited after it was written, use the file the run wrote";
    if (o.verify) throw UsageError(msg);
    std::fprintf(stderr, "warning: %s\n", msg.c_str());
  } else if (o.verify) {
    std::fprintf(stderr, "report '%s': digest OK\n", o.input.c_str());
  }
  if (o.formats.empty() && o.out.empty()) {
    write_text(to_terminal(r, terminal_columns(1)), stdout);
    return kExitOk;
  }
  auto formats = parse_formats(o.formats.empty() ? "json,md,html,junit" : o.formats);
  auto written = write_reports(r, o.out.empty() ? "-" : o.out, formats);
  for (const auto& p : written)
    if (p != "-") std::fprintf(stderr, "wrote %s\n", p.c_str());
  return kExitOk;
}
}  // namespace

void setup_report(CLI::App& parent, Runner& runner) {
  auto opt = std::make_shared<ReportOptions>();
  auto* sub = parent.add_subcommand(
      "report", "Re-render a stored report.json (terminal summary by default); `report merge` merges shard reports");
  sub->add_option("report", opt->input, "report.json written by `repro-audit run`");
  sub->add_option("--format,-f", opt->formats,
                  "Comma-separated formats: json, md, html, junit; FORMAT=PATH writes one to PATH ('-' = stdout). "
                  "Default with --out: all four");
  sub->add_option("--out,-o", opt->out, "Output directory ('-' = stdout; default stdout when --format is given)");
  sub->add_flag("--verify", opt->verify, "Fail (exit 2) when the report's SHA-256 digest does not match its content");
  setup_report_merge(*sub, runner);  // `report merge DIR...` (src/cli/cmd_report_merge.cpp)
  sub->callback([&runner, opt, sub] {
    if (sub->got_subcommand("merge")) return;  // merge's own runner
    runner = [opt] { return run_report(*opt); };
  });
}

}  // namespace repro::cli
