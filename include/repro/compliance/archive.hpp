// The report archive (src/compliance/archive.cpp): one SQLite database (WAL mode) holding signed
// reports, their files and envelopes, with an append-only hash chain: each entry's hash commits to
// its fields, its files' digests and the previous entry's hash, so deleting, reordering or editing
// an entry is detected by Archive::verify. SQLite triggers refuse UPDATE and DELETE as well; a
// writer who drops them is still caught by the chain. Removing the newest entries is only
// detectable against a head hash kept elsewhere (`archive verify --expect-head`).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/compliance/verify.hpp"

struct sqlite3;

namespace repro::compliance {

struct ArchiveFile {
  std::string name, sha256;
};

struct ArchiveEntry {
  int64_t seq = 0;
  std::string added_at;        // UTC, ISO-8601
  std::string report_created;  // the report's own "created"
  std::string report_sha256;   // digests.report_sha256
  std::string verdict;         // summary.verdict
  std::string result;          // the predicate's PASSED / WARNED / FAILED
  std::string model_sha256;    // empty for remote audits
  std::string profile;
  std::vector<std::string> endpoints;  // "label url" (URL as the report records it: redacted)
  std::string who, where;      // who added it; where (empty unless configured)
  std::string retain_until;    // UTC date, YYYY-MM-DD
  std::string key_id;          // signer's key id (from the envelope)
  bool signature_checked = false;  // verified against a trusted key when added
  std::vector<ArchiveFile> files;
  std::string prev_hash, row_hash;
};

struct AddOptions {
  std::string who;             // empty: $REPRO_ARCHIVE_WHO, else the login name
  std::string where;           // empty: $REPRO_ARCHIVE_WHERE, else nothing
  bool record_host = false;    // append the host name to `where` (off by default)
  int retain_days = 3653;      // ten years
  const PublicKey* trusted = nullptr;
};

struct ArchiveQuery {
  std::string model;     // model SHA-256 or a prefix of it
  std::string verdict;   // summary verdict or predicate result (case-insensitive)
  std::string endpoint;  // substring of an endpoint's label or URL
  std::string since, until;  // report creation date range (YYYY-MM-DD or full timestamps), inclusive
};

struct ArchiveCheck {
  int64_t entries = 0;
  std::string head;  // row hash of the newest entry (all zeros when empty)
  std::vector<std::string> problems;
  std::vector<std::string> notes;
  bool valid() const { return problems.empty(); }
};

// $REPRO_AUDIT_ARCHIVE, else $XDG_DATA_HOME/repro-audit/archive.db, else ~/.local/share/repro-audit/archive.db.
std::string default_archive_path();

class Archive {
 public:
  explicit Archive(const std::string& path);  // creates the database (and its directory) when absent
  ~Archive();
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  // Verifies the report (it must be signed and valid), then appends it in one transaction. A report
  // already archived is not added again: `added` is false and the existing entry is returned.
  ArchiveEntry add(const ReportFiles& files, const AddOptions& opt, bool* added = nullptr);
  std::vector<ArchiveEntry> list(const ArchiveQuery& q);
  // By entry number, or by report SHA-256 (or a unique prefix of it).
  std::optional<ArchiveEntry> find(const std::string& id);
  // Writes the entry's files into `dir` (created; existing files are not overwritten).
  std::vector<std::string> export_entry(int64_t seq, const std::string& dir);
  // Walks the chain; with `trusted`, also verifies every envelope against that key.
  ArchiveCheck verify(const PublicKey* trusted);

  const std::string& path() const { return path_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

nlohmann::json entry_json(const ArchiveEntry& e);
std::string entry_text(const ArchiveEntry& e);

}  // namespace repro::compliance
