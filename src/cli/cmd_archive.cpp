// `repro-audit archive add|list|show|verify|export [--db PATH]`: the append-only report archive.
#include <cstdio>
#include <optional>

#include "repro/cli/commands.hpp"
#include "repro/common/error.hpp"
#include "repro/compliance/archive.hpp"

namespace repro::cli {

namespace {
struct ArchiveOptions {
  std::string db;
  // add
  std::vector<std::string> reports;
  std::string pubkey, who, where, expect_head;
  bool record_host = false;
  int retain_days = 3653;
  // list / show / export
  compliance::ArchiveQuery query;
  std::string id, out;
  bool json = false;
};

std::string db_path(const ArchiveOptions& o) { return o.db.empty() ? compliance::default_archive_path() : o.db; }

std::optional<compliance::PublicKey> trusted_key(const ArchiveOptions& o) {
  if (o.pubkey.empty()) return std::nullopt;
  return compliance::load_public_key(o.pubkey);
}

int run_add(const ArchiveOptions& o) {
  compliance::Archive a(db_path(o));
  auto key = trusted_key(o);
  compliance::AddOptions add;
  add.who = o.who;
  add.where = o.where;
  add.record_host = o.record_host;
  add.retain_days = o.retain_days;
  add.trusted = key ? &*key : nullptr;
  for (const auto& r : o.reports) {
    bool added = false;
    auto e = a.add(compliance::locate_report(r), add, &added);
    if (added)
      std::printf("added entry %lld: %s (%s, %s); entry hash %s\n", static_cast<long long>(e.seq), r.c_str(), e.verdict.c_str(),
                  e.signature_checked ? "signature checked" : "signature NOT checked against a trusted key", e.row_hash.c_str());
    else
      std::printf("already archived as entry %lld: %s\n", static_cast<long long>(e.seq), r.c_str());
  }
  return kExitOk;
}

int run_list(const ArchiveOptions& o) {
  compliance::Archive a(db_path(o));
  auto entries = a.list(o.query);
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : entries) j.push_back(compliance::entry_json(e));
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
    return kExitOk;
  }
  std::printf("%-6s %-20s %-13s %-7s %-14s %-14s %s\n", "entry", "report created", "verdict", "result", "report", "model",
              "endpoints");
  for (const auto& e : entries) {
    std::string eps;
    for (const auto& x : e.endpoints) eps += (eps.empty() ? "" : ", ") + x;
    std::printf("%-6lld %-20s %-13s %-7s %-14s %-14s %s\n", static_cast<long long>(e.seq), e.report_created.c_str(),
                e.verdict.c_str(), e.result.c_str(), e.report_sha256.substr(0, 12).c_str(),
                e.model_sha256.substr(0, 12).c_str(), eps.c_str());
  }
  std::printf("%zu entr%s in %s\n", entries.size(), entries.size() == 1 ? "y" : "ies", a.path().c_str());
  return kExitOk;
}

compliance::ArchiveEntry must_find(compliance::Archive& a, const std::string& id) {
  auto e = a.find(id);
  if (!e) throw UsageError("archive: no entry '" + id + "' in " + a.path() + "; see `repro-audit archive list`");
  return *e;
}

int run_show(const ArchiveOptions& o) {
  compliance::Archive a(db_path(o));
  auto e = must_find(a, o.id);
  std::fputs(o.json ? (compliance::entry_json(e).dump(2) + "\n").c_str() : compliance::entry_text(e).c_str(), stdout);
  return kExitOk;
}

int run_export(const ArchiveOptions& o) {
  compliance::Archive a(db_path(o));
  auto e = must_find(a, o.id);
  for (const auto& p : a.export_entry(e.seq, o.out)) std::printf("wrote %s\n", p.c_str());
  std::printf("check it with: repro-audit verify %s --pubkey SIGNER.pub\n", o.out.c_str());
  return kExitOk;
}

int run_archive_verify(const ArchiveOptions& o) {
  compliance::Archive a(db_path(o));
  auto key = trusted_key(o);
  auto c = a.verify(key ? &*key : nullptr);
  if (!o.expect_head.empty() && o.expect_head != c.head)
    c.problems.push_back("head: the newest entry's hash is " + c.head + ", expected " + o.expect_head +
                         " (--expect-head): entries were removed or added since that head was recorded");
  if (o.json) {
    nlohmann::json j = {{"db", a.path()}, {"entries", c.entries}, {"head", c.head}, {"valid", c.valid()},
                        {"problems", c.problems}, {"notes", c.notes}, {"signatures_checked", key.has_value()}};
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
  } else {
    for (const auto& p : c.problems) std::printf("  FAIL  %s\n", p.c_str());
    for (const auto& n : c.notes) std::printf("  note  %s\n", n.c_str());
    if (!key) std::printf("  note  envelopes were not checked against a trusted key (no --pubkey)\n");
    std::printf("%s: %lld entries, head %s%s\n", c.valid() ? "VALID" : "INVALID", static_cast<long long>(c.entries),
                c.head.c_str(), c.valid() ? "" : (" (" + std::to_string(c.problems.size()) + " problems)").c_str());
  }
  return c.valid() ? kExitOk : kExitDivergent;
}
}  // namespace

void setup_archive(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<ArchiveOptions>();
  auto* arch = parent.add_subcommand("archive", "Append-only archive of signed reports (SQLite, hash chain): add, list, show, verify, export");
  arch->require_subcommand(1);
  arch->add_option("--db", o->db, "Archive database (default: $REPRO_AUDIT_ARCHIVE, else $XDG_DATA_HOME/repro-audit/archive.db)");

  auto* add = arch->add_subcommand("add", "Verify signed reports and append them to the archive");
  add->add_option("report", o->reports, "Report directories or report.json files (signed)")->required();
  add->add_option("--pubkey", o->pubkey, "Trusted public key: refuse reports it did not sign");
  add->add_option("--who", o->who, "Who adds the report (default: $REPRO_ARCHIVE_WHO, else the login name)");
  add->add_option("--where", o->where, "Where it is added from (default: $REPRO_ARCHIVE_WHERE, else nothing)");
  add->add_flag("--record-host", o->record_host, "Also record this machine's host name (off by default)");
  add->add_option("--retain-days", o->retain_days, "Retention period in days (default 3653: ten years)")->capture_default_str();
  add->callback([&runner, o] { runner = [o] { return run_add(*o); }; });

  auto* list = arch->add_subcommand("list", "List archived reports, filtered by model digest, verdict, endpoint, date");
  list->add_option("--model", o->query.model, "Model SHA-256 (or a prefix)");
  list->add_option("--verdict", o->query.verdict, "reproducible, divergent, errors, interrupted, or PASSED/FAILED/WARNED");
  list->add_option("--endpoint", o->query.endpoint, "Endpoint label or URL (substring)");
  list->add_option("--since", o->query.since, "Reports created on or after this date (YYYY-MM-DD)");
  list->add_option("--until", o->query.until, "Reports created on or before this date (YYYY-MM-DD)");
  list->add_flag("--json", o->json, "Print JSON");
  list->callback([&runner, o] { runner = [o] { return run_list(*o); }; });

  auto* show = arch->add_subcommand("show", "Show one entry: fields, files and digests, chain hashes");
  show->add_option("entry", o->id, "Entry number or report SHA-256 (prefix)")->required();
  show->add_flag("--json", o->json, "Print JSON");
  show->callback([&runner, o] { runner = [o] { return run_show(*o); }; });

  auto* verify = arch->add_subcommand("verify", "Check the hash chain and every file; exit 1 when anything was altered");
  verify->add_option("--pubkey", o->pubkey, "Also verify every envelope against this trusted key");
  verify->add_option("--expect-head", o->expect_head, "Entry hash of the newest entry recorded earlier (detects removed tail entries)");
  verify->add_flag("--json", o->json, "Print JSON");
  verify->callback([&runner, o] { runner = [o] { return run_archive_verify(*o); }; });

  auto* exp = arch->add_subcommand("export", "Write one entry's files to a directory that `repro-audit verify` checks");
  exp->add_option("entry", o->id, "Entry number or report SHA-256 (prefix)")->required();
  exp->add_option("--out,-o", o->out, "Directory to write (must not hold the files already)")->required();
  exp->callback([&runner, o] { runner = [o] { return run_export(*o); }; });

  for (auto* s : {add, list, show, verify, exp}) s->fallthrough();  // --db after the action works too
}

}  // namespace repro::cli
