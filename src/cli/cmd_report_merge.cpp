// `repro-audit report merge DIR... [--out DIR] [--format ...] [--allow-partial] [--sign-key KEY]`: the
// shard reports of one plan (run --shard K/N) checked for coverage and merged into one report, analysed
// as one run. The checks and the union are src/audit/shards.cpp (merge_shards); this file reads the
// files, writes every format and signs as `run` does.
#include <cstdio>
#include <filesystem>

#include "repro/audit/analysis.hpp"
#include "repro/audit/shards.hpp"
#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/report/report.hpp"

namespace repro::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string out = "repro-audit-report";
  std::string formats;
  std::string sign_key;
  bool allow_partial = false;
  bool quiet = false;
};

// A shard's report: DIR/report.json for a directory, else the file itself. Read and checked before
// anything is written: not JSON, truncated, another schema or an edited file is named here.
ShardInput read_shard(const std::string& arg) {
  namespace fs = std::filesystem;
  std::string path = arg;
  std::error_code ec;
  if (fs::is_directory(arg, ec)) {
    path = (fs::path(arg) / "report.json").string();
    if (!fs::exists(path, ec)) {
      if (fs::exists(fs::path(arg) / "checkpoint.json", ec))
        throw UsageError("report merge: '" + arg + "' holds a shard that did not finish (checkpoint.json, no "
                         "report.json); finish it with: repro-audit run --resume " + arg);
      throw UsageError("report merge: '" + arg + "' has no report.json; give the --out directory of a shard run "
                       "(run --shard K/N) or its report.json");
    }
  }
  ShardInput in;
  in.file = path;
  const std::string text = read_file(path, "shard report");
  try {
    in.report = from_json(text, path);
  } catch (const UsageError& e) {
    throw UsageError(std::string("report merge: ") + e.what());
  }
  std::string stored;
  if (!verify_report_digest(text, &stored))
    throw UsageError("report merge: '" + path + "': " +
                     (stored.empty() ? std::string("it has no recorded digest (digests.report_sha256)")
                                     : std::string("its content does not match its recorded digest")) +
                     "; the file was edited after it was written: use the file the shard run wrote");
  in.text_sha256 = stored;
  return in;
}

int run_report_merge(const MergeOptions& o) {
  namespace fs = std::filesystem;
  if (!o.sign_key.empty()) read_file(o.sign_key, "private key (--sign-key)");  // before any work
  std::vector<ShardInput> shards;
  for (const auto& a : o.inputs) shards.push_back(read_shard(a));
  // The merged report must not overwrite a shard's.
  if (o.out != "-")
    for (const auto& s : shards) {
      std::error_code ec;
      if (fs::exists(o.out, ec) && fs::equivalent(fs::path(s.file).parent_path().empty() ? "." : fs::path(s.file).parent_path(), o.out, ec))
        throw UsageError("report merge: --out '" + o.out + "' is the directory of the shard report '" + s.file +
                         "'; write the merged report elsewhere");
    }
  repro::MergeOptions mo;
  mo.allow_partial = o.allow_partial;
  AuditReport merged = merge_shards(std::move(shards), mo);
  analyze(merged);
  finish_merge(merged);

  std::vector<std::string> formats = merged.plan.is_object() && merged.plan.contains("formats") &&
                                             merged.plan["formats"].is_array()
                                         ? merged.plan["formats"].get<std::vector<std::string>>()
                                         : std::vector<std::string>{"json", "md", "html", "junit"};
  // FORMAT=PATH entries name the shard's own files; the merge writes every format into --out.
  for (auto& f : formats)
    if (auto eq = f.find('='); eq != std::string::npos) f = f.substr(0, eq);
  if (!o.formats.empty()) formats = parse_formats(o.formats);
  if (!o.sign_key.empty()) {
    bool json_file = false;
    for (const auto& f : formats)
      json_file = json_file || (f == "json" && o.out != "-") || (f.rfind("json=", 0) == 0 && f != "json=-");
    if (!json_file)
      throw UsageError("--sign-key: the signature covers report.json; write it to a file (--format with json, --out DIR)");
  }
  std::vector<std::string> written = write_reports(merged, o.out, formats);
  if (!o.sign_key.empty()) {
    std::string json_path;
    for (const auto& w : written)
      if (w != "-" && w.size() > 5 && w.compare(w.size() - 5, 5, ".json") == 0) json_path = w;
    auto files = compliance::locate_report(json_path);
    compliance::sign_report(files, o.sign_key);
    written.push_back(files.path(files.envelope));
  }
  bool stdout_taken = o.out == "-";
  for (const auto& w : written) stdout_taken = stdout_taken || w == "-";
  std::FILE* term = stdout_taken ? stderr : stdout;
  const MergeInfo& mi = *merged.merge;
  if (!o.quiet) {
    write_text(to_terminal(merged, terminal_columns(fileno(term))), term);
    for (const auto& s : mi.shards)
      std::fprintf(term, "shard %d/%d: %s (sha256 %s), host %s, %d cases\n", s.index, mi.count, s.file.c_str(),
                   s.report_sha256.substr(0, 12).c_str(), s.host.hostname.c_str(), s.cases);
    for (const auto& h : mi.hosts)
      std::fprintf(term, "host %s against %s: %d of %d cases bitwise identical%s%s\n", h.host.c_str(),
                   mi.shards[0].host_label.c_str(), h.identical, h.cases,
                   h.first_difference.empty() ? "" : "; first difference: ", h.first_difference.c_str());
    for (const auto& w : written)
      if (w != "-") std::fprintf(term, "wrote %s\n", w.c_str());
  }
  if (!mi.complete) {
    std::string shards_text;
    for (int k : mi.missing_shards) shards_text += (shards_text.empty() ? "" : ", ") + std::to_string(k);
    std::fprintf(stderr, "warning: incomplete merge: %zu missing shard(s)%s%s, %zu case(s) of the plan without "
                 "completions; the verdict is \"%s\", never a pass\n", mi.missing_shards.size(),
                 shards_text.empty() ? "" : ": ", shards_text.c_str(), mi.missing_cases.size(),
                 merged.summary.verdict.c_str());
  }
  return exit_code_for(merged);
}

}  // namespace

void setup_report_merge(CLI::App& report, Runner& runner) {
  auto o = std::make_shared<MergeOptions>();
  auto* sub = report.add_subcommand(
      "merge", "Merge the shard reports of one plan (run --shard K/N) into one report, after a coverage check");
  sub->add_option("shards", o->inputs, "Each shard's --out directory (or its report.json), every shard 1..N once")
      ->required();
  sub->add_option("--out,-o", o->out, "Directory of the merged report ('-' = stdout)")->capture_default_str();
  sub->add_option("--format,-f", o->formats,
                  "Comma-separated formats: json, md, html, junit (default: the plan's formats)");
  sub->add_flag("--allow-partial", o->allow_partial,
                "Merge even with shards or cases missing: the report is marked incomplete and lists them; its "
                "verdict is \"incomplete\" (exit 1), never a pass");
  sub->add_option("--sign-key", o->sign_key,
                  "Sign the merged report with this private key (from `keygen`): writes report.intoto.jsonl");
  sub->add_flag("-q,--quiet", o->quiet, "No summary");
  sub->callback([&runner, o] { runner = [o] { return run_report_merge(*o); }; });
}

}  // namespace repro::cli
