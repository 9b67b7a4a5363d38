// The replay half of `run` and `canary` (see include/repro/cli/replay.hpp).
#include "repro/cli/replay.hpp"

#include <stdlib.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "repro/audit/analysis.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/audit/preflight.hpp"
#include "repro/audit/runner.hpp"
#include "repro/audit/shards.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/remote/redact.hpp"
#include "repro/report/report.hpp"
#include "repro/report/schema.hpp"

namespace repro::cli {

namespace {

std::atomic<bool> g_stop{false};
volatile std::sig_atomic_t g_signal = 0;
// SIGINT and SIGTERM: stop after what is in flight, write what finished, exit 130 / 143.
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  g_stop = true;
  std::signal(sig, SIG_DFL);  // a second signal ends at once
}

// When the reports cannot be written (a full disk), the finished completions are kept for --resume:
// as checkpoint.json in the --out directory, else in a fresh directory under $TMPDIR (or /tmp).
// Says where in one line on stderr; never throws (the write's own error is the one that counts).
void keep_finished(const AuditReport& r, const std::string& out_dir, const char* fix) {
  namespace fs = std::filesystem;
  AuditReport kept = r;  // what --resume reads: the plan, provenance and completions, not the analysis
  kept.cases.clear();
  kept.cross_mode.clear();
  kept.tradeoff.clear();
  kept.variants.clear();
  kept.token_text.clear();
  kept.summary = Summary{};
  std::string text;
  try {
    text = to_json(kept);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: the finished run (%zu completions) could not be kept: %s\n",
                 r.completions.size(), e.what());
    return;
  }
  std::string failed;
  auto try_dir = [&](const std::string& dir) {
    try {
      write_file_atomic((fs::path(dir) / "checkpoint.json").string(), text);
      std::fprintf(stderr,
                   "note: the finished run (%zu completions) is kept in %s; %s, then write its reports with: "
                   "repro-audit run --resume %s\n",
                   r.completions.size(), (fs::path(dir) / "checkpoint.json").string().c_str(), fix, dir.c_str());
      return true;
    } catch (const std::exception& e) {
      failed += (failed.empty() ? "" : "; ") + std::string(e.what());
      return false;
    }
  };
  if (out_dir != "-" && !out_dir.empty() && try_dir(out_dir)) return;
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = (t && *t ? std::string(t) : std::string("/tmp")) + "/repro-audit-kept-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) != nullptr) {
    if (try_dir(buf.data())) return;
    fs::remove_all(buf.data());
  } else {
    failed += (failed.empty() ? "" : "; ") + std::string("cannot create a directory in ") + tmpl + ": " +
              std::strerror(errno);
  }
  std::fprintf(stderr, "error: the finished run (%zu completions) could not be kept either: %s\n",
               r.completions.size(), failed.c_str());
}

}  // namespace

int replay_and_report(ReplayJob& job) {
  namespace fs = std::filesystem;
  AuditReport& report = *job.report;
  const PlanOptions& plan = *job.plan;
  static const std::vector<EndpointSpec> no_endpoints;
  const std::vector<EndpointSpec>& endpoints = job.endpoints ? *job.endpoints : no_endpoints;
  const bool remote = !endpoints.empty();
  const std::string& out_dir = job.out_dir;

  // ---- remote preflight: an endpoint that cannot answer ends the run before any replay
  std::vector<EndpointPosture> postures;
  for (const auto& e : endpoints) postures.push_back(preflight_endpoint(e).posture);
  std::optional<GoldenReport> golden;
  if (!job.baseline.empty()) {  // read before the replay: a bad golden file is a usage error, not lost work
    std::string text = read_file(job.baseline, "--baseline report");
    golden.emplace();
    golden->report = from_json(text, job.baseline);
    golden->file = job.baseline;
    golden->digest_ok = verify_report_digest(text, &golden->digest);
  }
  for (const auto& f : plan.formats)  // a FORMAT=PATH that can never be written: refused before the run
    if (auto eq = f.find('='); eq != std::string::npos) check_replaceable(f.substr(eq + 1));
  if (out_dir != "-") {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir))
      throw UsageError("--out '" + out_dir + "': cannot create the directory (" + ec.message() + "); choose a writable path");
  }

  record_provenance(report, plan, job.model, job.model_path, job.engine, endpoints);
  for (size_t i = 0; i < endpoints.size(); ++i) {  // the endpoints' posture: in the evidence and the environment record
    evidence_for(report, endpoints[i].label).posture = postures[i];
    report.environment["endpoints"][i]["posture"] = postures[i];
  }
  if (job.model && job.model_switch.is_object()) report.environment["model"]["switched_from"] = job.model_switch;
  // A shard's report says which part of the plan it holds, on which host (checkpoints included).
  report.shard.reset();
  if (job.shard.count > 0) {
    std::vector<std::string> labels;
    for (const auto& e : endpoints) labels.push_back(e.label);
    report.shard = shard_info(report, plan, job.shard, labels);
  }

  // ---- replay ----
  g_stop = false;
  g_signal = 0;
  auto old = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  RunControl ctl;
  ctl.device = job.engine.device;
  ctl.stop = &g_stop;
  ctl.progress = !job.quiet;
  // Secrets (API keys, URL credentials) a server may echo anywhere in a response, in any JSON
  // escaping: one pass over every string the report stores, before anything is written.
  const std::vector<std::string> secrets = endpoint_secrets(endpoints);
  auto redact = [&secrets](AuditReport& r) {
    if (!secrets.empty())
      rewrite_strings(r, [&secrets](const std::string& s) { return scrub_secrets(s, secrets); });
  };
  std::string checkpoint = out_dir == "-" ? "" : (fs::path(out_dir) / "checkpoint.json").string();
  if (!checkpoint.empty())
    ctl.checkpoint = [&](const AuditReport& r) {
      if (secrets.empty()) {
        write_file_atomic(checkpoint, to_json(r));
        return;
      }
      AuditReport clean = r;
      redact(clean);
      write_file_atomic(checkpoint, to_json(clean));
    };
  try {
    if (remote)
      run_remote(plan, endpoints, report, ctl);
    else
      run_local(plan, *job.model, report, ctl);
  } catch (...) {
    std::signal(SIGINT, old);
    std::signal(SIGTERM, old_term);
    if (!report.completions.empty()) {  // never lose finished work
      redact(report);
      keep_finished(report, out_dir, "fix the error below");
    }
    throw;
  }
  std::signal(SIGINT, old);
  std::signal(SIGTERM, old_term);
  report.summary.interrupted = g_stop.load();
  redact(report);

  // ---- analyse (with the baseline: its drift is part of the verdict), write, gate ----
  analyze(report, golden ? &*golden : nullptr);
  if (job.model)  // the text of the tokens at first divergences, for the reports
    record_token_text(report, [&](int id) { return job.model->tokenizer->piece(id); });
  int override_code = job.after_analysis ? job.after_analysis(report) : -1;
  std::vector<std::string> written;
  try {
    written = write_reports(report, out_dir, plan.formats);
  } catch (const BackendError&) {  // a full disk must not lose the finished run
    keep_finished(report, out_dir, "free disk space");
    throw;
  } catch (...) {
    keep_finished(report, out_dir, "fix the error below");
    throw;
  }
  if (!checkpoint.empty()) fs::remove(checkpoint);
  if (!job.sign_key.empty()) {
    std::string json_path;
    for (const auto& w : written)
      if (w != "-" && w.size() > 5 && w.compare(w.size() - 5, 5, ".json") == 0) json_path = w;
    auto files = compliance::locate_report(json_path);
    compliance::sign_report(files, job.sign_key);
    written.push_back(files.path(files.envelope));
  }
  bool stdout_taken = out_dir == "-";
  for (const auto& w : written) stdout_taken = stdout_taken || w == "-";
  std::FILE* term = stdout_taken ? stderr : stdout;
  if (golden && !golden->digest_ok)
    std::fprintf(stderr, "warning: --baseline '%s': its content does not match its recorded digest; it was edited "
                 "after it was written\n", job.baseline.c_str());
  if (!job.quiet) {
    write_text(to_terminal(report, terminal_columns(fileno(term))), term);
    for (const auto& w : written)
      if (w != "-") std::fprintf(term, "wrote %s\n", w.c_str());
    if (report.shard)
      std::fprintf(term, "shard %d/%d (%s): %zu cases, on %s; merge the shards with: repro-audit report "
                   "merge DIR...\n", report.shard->index, report.shard->count, report.shard->source.c_str(),
                   report.shard->cases.size(), report.shard->host.hostname.c_str());
  }
  int code = exit_code_for(report);
  if (report.summary.verdict == "errors") std::fprintf(stderr, "error: %s\n", verdict_cause(report).c_str());
  if (report.summary.verdict == "no answer")
    std::fprintf(stderr, "warning: %s\n", verdict_cause(report).c_str());
  if (override_code >= 0) code = override_code;
  if (report.summary.interrupted) {
    const bool term_sig = g_signal == SIGTERM;
    std::fprintf(stderr, "interrupted%s: %zu completions analysed and written; continue with --resume %s\n",
                 term_sig ? " (SIGTERM)" : "", report.completions.size(), out_dir.c_str());
    code = term_sig ? kExitTerminated : kExitInterrupted;
  }
  return code;
}

}  // namespace repro::cli
