// The report archive: SQLite (WAL), append-only hash chain. See include/repro/compliance/archive.hpp.
#include "repro/compliance/archive.hpp"

#include <pwd.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro::compliance {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kGenesis(64, '0');

// Schema. Triggers make the tables append-only for every writer that goes through SQLite without
// dropping them; the hash chain catches the writers who do.
const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS entries(
  seq INTEGER PRIMARY KEY,
  added_at TEXT NOT NULL,
  report_created TEXT NOT NULL,
  report_sha256 TEXT NOT NULL,
  verdict TEXT NOT NULL,
  result TEXT NOT NULL,
  model_sha256 TEXT NOT NULL,
  profile TEXT NOT NULL,
  endpoints TEXT NOT NULL,
  who TEXT NOT NULL,
  location TEXT NOT NULL,
  retain_until TEXT NOT NULL,
  key_id TEXT NOT NULL,
  signature_checked INTEGER NOT NULL,
  envelope TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
  seq INTEGER NOT NULL,
  name TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  content BLOB NOT NULL,
  PRIMARY KEY(seq, name));
CREATE INDEX IF NOT EXISTS entries_model ON entries(model_sha256);
CREATE INDEX IF NOT EXISTS entries_created ON entries(report_created);
CREATE INDEX IF NOT EXISTS entries_report ON entries(report_sha256);
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
  BEGIN SELECT RAISE(ABORT, 'the repro-audit archive is append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
  BEGIN SELECT RAISE(ABORT, 'the repro-audit archive is append-only'); END;
CREATE TRIGGER IF NOT EXISTS files_no_update BEFORE UPDATE ON files
  BEGIN SELECT RAISE(ABORT, 'the repro-audit archive is append-only'); END;
CREATE TRIGGER IF NOT EXISTS files_no_delete BEFORE DELETE ON files
  BEGIN SELECT RAISE(ABORT, 'the repro-audit archive is append-only'); END;
)sql";

const char* kColumns =
    "seq, added_at, report_created, report_sha256, verdict, result, model_sha256, profile, endpoints, who, location, "
    "retain_until, key_id, signature_checked, envelope, prev_hash, row_hash";

struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const std::string& sql, const std::string& where) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw BackendError("archive '" + where + "': " + sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s); }
  void bind(int i, const std::string& v) { sqlite3_bind_text(s, i, v.data(), int(v.size()), SQLITE_TRANSIENT); }
  void bind(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  void blob(int i, const std::string& v) { sqlite3_bind_blob(s, i, v.data(), int(v.size()), SQLITE_TRANSIENT); }
  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(s, col);
    return p ? std::string(reinterpret_cast<const char*>(p), size_t(sqlite3_column_bytes(s, col))) : std::string();
  }
  std::string bytes(int col) const {
    const void* p = sqlite3_column_blob(s, col);
    return p ? std::string(static_cast<const char*>(p), size_t(sqlite3_column_bytes(s, col))) : std::string();
  }
  int64_t integer(int col) const { return sqlite3_column_int64(s, col); }
};

// SQLite could not write (SQLITE_FULL, SQLITE_IOERR_*): the disk, a quota or a file size limit is
// the cause, not the archive. Exit 3, naming the file and the operating system's error.
bool io_failure(int rc) {
  return (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR;
}
BackendError write_failure(sqlite3* db, const std::string& path) {
  // The OS error when SQLite kept it (it does not always: a short write is SQLITE_FULL without one).
  const int e = sqlite3_system_errno(db);
  const std::string os = e != 0 ? std::strerror(e)
                         : (sqlite3_extended_errcode(db) & 0xff) == SQLITE_FULL
                             ? "disk full"
                             : "the disk is full or failed";
  return BackendError("--db '" + path + "': cannot write the archive: " + os +
                      " (SQLite: " + sqlite3_errmsg(db) +
                      "); free disk space (or raise the file size limit), then add the report again");
}
// A failed statement: a write failure as above, anything else as SQLite says it.
[[noreturn]] void fail_step(sqlite3* db, const std::string& path) {
  if (io_failure(sqlite3_extended_errcode(db))) throw write_failure(db, path);
  throw BackendError("archive '" + path + "': " + sqlite3_errmsg(db));
}

void exec(sqlite3* db, const char* sql, const std::string& where) {
  char* err = nullptr;
  if (int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    if (io_failure(rc) || io_failure(sqlite3_extended_errcode(db))) throw write_failure(db, where);
    throw BackendError("archive '" + where + "': " + msg);
  }
}

std::string utc(std::time_t t, const char* fmt) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}

std::string login_name() {
  if (const passwd* pw = getpwuid(geteuid())) return pw->pw_name;
  return "uid " + std::to_string(geteuid());
}

std::string str_at(const json& j, const char* a, const char* b = nullptr) {
  const json* p = &j;
  for (const char* k : {a, b}) {
    if (!k) break;
    if (!p->is_object() || !p->contains(k)) return {};
    p = &(*p)[k];
  }
  return p->is_string() ? p->get<std::string>() : std::string();
}

// The fields of an entry, listed once: the row hash commits to exactly these (plus the sequence
// number, the envelope's and the files' digests), and export writes them, so a field added here is
// both hashed and exported.
json entry_fields(const ArchiveEntry& e) {
  return {{"added_at", e.added_at},
          {"report_created", e.report_created},
          {"report_sha256", e.report_sha256},
          {"verdict", e.verdict},
          {"result", e.result},
          {"model_sha256", e.model_sha256},
          {"profile", e.profile},
          {"endpoints", e.endpoints},
          {"who", e.who},
          {"where", e.where},
          {"retain_until", e.retain_until},
          {"key_id", e.key_id},
          {"signature_checked", e.signature_checked},
          {"prev_hash", e.prev_hash}};
}

// What the row hash commits to: every field, the envelope's and files' digests, the previous hash.
std::string row_hash(const ArchiveEntry& e, const std::string& envelope) {
  json files = json::object();
  for (const auto& f : e.files) files[f.name] = f.sha256;
  json j = entry_fields(e);
  j["seq"] = e.seq;
  j["envelope_sha256"] = sha256_hex(envelope);
  j["files"] = files;
  return sha256_hex(canonical_json_compact(j));
}

ArchiveEntry read_entry(const Stmt& st, std::string* envelope) {
  ArchiveEntry e;
  e.seq = st.integer(0);
  e.added_at = st.text(1);
  e.report_created = st.text(2);
  e.report_sha256 = st.text(3);
  e.verdict = st.text(4);
  e.result = st.text(5);
  e.model_sha256 = st.text(6);
  e.profile = st.text(7);
  json eps;
  parse_json(st.text(8), eps);
  if (eps.is_array())
    for (const auto& x : eps)
      if (x.is_string()) e.endpoints.push_back(x.get<std::string>());
  e.who = st.text(9);
  e.where = st.text(10);
  e.retain_until = st.text(11);
  e.key_id = st.text(12);
  e.signature_checked = st.integer(13) != 0;
  if (envelope) *envelope = st.text(14);
  e.prev_hash = st.text(15);
  e.row_hash = st.text(16);
  return e;
}

// Files of one entry: name, digest as recorded, and (when wanted) the content.
std::vector<std::pair<ArchiveFile, std::string>> read_files(sqlite3* db, const std::string& where, int64_t seq) {
  Stmt st(db, "SELECT name, sha256, content FROM files WHERE seq = ? ORDER BY name", where);
  st.bind(1, seq);
  std::vector<std::pair<ArchiveFile, std::string>> out;
  while (sqlite3_step(st.s) == SQLITE_ROW) out.push_back({{st.text(0), st.text(1)}, st.bytes(2)});
  return out;
}

}  // namespace

std::string default_archive_path() {
  if (const char* p = std::getenv("REPRO_AUDIT_ARCHIVE"); p && *p) return p;
  fs::path base;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) base = x;
  else if (const char* h = std::getenv("HOME"); h && *h) base = fs::path(h) / ".local" / "share";
  else base = ".";
  return (base / "repro-audit" / "archive.db").string();
}

Archive::Archive(const std::string& path) : path_(path) {
  if (path.empty()) throw UsageError("--db: empty path; give a database file");
  fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw UsageError("--db '" + path + "': cannot open the archive (" + msg + "); choose a writable path");
  }
  sqlite3_busy_timeout(db_, 60000);  // concurrent writers wait for each other
  // Switching to WAL and creating the schema can meet a lock held by another process opening the
  // same new archive; SQLite's busy handler does not cover every such case, so retry (up to 60 s).
  std::string failure;
  for (int attempt = 0; attempt < 600; ++attempt) {
    int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) {
      rc = sqlite3_exec(db_,
                        "BEGIN IMMEDIATE; "
                        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='entries';",
                        nullptr, nullptr, nullptr);
      if (rc == SQLITE_OK) {
        Stmt has(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='entries'", path_);
        bool fresh = sqlite3_step(has.s) == SQLITE_ROW && has.integer(0) == 0;
        if (fresh) rc = sqlite3_exec(db_, kSchema, nullptr, nullptr, nullptr);  // a new archive
        if (rc == SQLITE_OK) rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
        if (rc != SQLITE_OK) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      }
    }
    if (rc == SQLITE_OK) {
      failure.clear();
      break;
    }
    failure = sqlite3_errmsg(db_);
    if (io_failure(rc) || io_failure(sqlite3_extended_errcode(db_))) {  // the disk, not the archive
      BackendError e = write_failure(db_, path);
      sqlite3_close(db_);
      db_ = nullptr;
      throw e;
    }
    if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
    ::usleep(100000);
  }
  if (!failure.empty()) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw UsageError("--db '" + path + "': not a usable repro-audit archive (" + failure + ")");
  }
}

Archive::~Archive() { sqlite3_close(db_); }

ArchiveEntry Archive::add(const ReportFiles& files, const AddOptions& opt, bool* added) {
  if (added) *added = false;
  Verification v = verify_report(files, opt.trusted);
  if (!v.valid())
    throw UsageError("report '" + v.report + "' does not verify (" + v.problems.front() +
                     "); only signed, valid reports are archived (see `repro-audit verify`)");
  const std::string json_text = read_file(files.path(files.json), "report");
  const json doc = parse_json_or_throw(json_text, "report '" + files.path(files.json) + "'", kReportJsonLimits);
  const std::string envelope = read_file(files.path(files.envelope), "envelope");

  ArchiveEntry e;
  const std::time_t now = std::time(nullptr);
  e.added_at = utc(now, "%Y-%m-%dT%H:%M:%SZ");
  e.report_created = str_at(doc, "created");
  e.report_sha256 = str_at(doc, "digests", "report_sha256");
  e.verdict = str_at(doc, "summary", "verdict");
  e.result = v.result;
  e.model_sha256 = str_at(doc, "digests", "model_sha256");
  if (e.model_sha256.empty()) e.model_sha256 = str_at(doc["environment"], "model", "sha256");
  e.profile = str_at(doc, "profile");
  if (doc.contains("environment") && doc["environment"].contains("endpoints") && doc["environment"]["endpoints"].is_array())
    for (const auto& ep : doc["environment"]["endpoints"]) e.endpoints.push_back(str_at(ep, "label") + " " + str_at(ep, "url"));
  e.who = !opt.who.empty() ? opt.who : std::getenv("REPRO_ARCHIVE_WHO") ? std::getenv("REPRO_ARCHIVE_WHO") : login_name();
  e.where = !opt.where.empty() ? opt.where : std::getenv("REPRO_ARCHIVE_WHERE") ? std::getenv("REPRO_ARCHIVE_WHERE") : "";
  if (opt.record_host) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) e.where += (e.where.empty() ? "" : " ") + std::string("host ") + host;
  }
  if (opt.retain_days < 0) throw UsageError("--retain-days must be >= 0");
  e.retain_until = utc(now + std::time_t(opt.retain_days) * 86400, "%Y-%m-%d");
  e.key_id = v.key_id;
  e.signature_checked = v.signature_trusted;
  std::vector<std::pair<ArchiveFile, std::string>> contents;
  contents.push_back({{files.json, sha256_hex(json_text)}, json_text});
  for (const auto& r : files.renders) {
    std::string c = read_file(files.path(r), "report render");
    contents.push_back({{r, sha256_hex(c)}, c});
  }
  contents.push_back({{files.envelope, sha256_hex(envelope)}, envelope});
  std::sort(contents.begin(), contents.end(), [](const auto& a, const auto& b) { return a.first.name < b.first.name; });
  for (const auto& c : contents) e.files.push_back(c.first);

  exec(db_, "BEGIN IMMEDIATE", path_);  // the write lock: the chain head cannot move until COMMIT
  try {
    exec(db_, kSchema, path_);  // re-arms the append-only triggers if someone dropped them
    {
      Stmt dup(db_, std::string("SELECT ") + kColumns + " FROM entries WHERE report_sha256 = ? AND key_id = ? LIMIT 1", path_);
      dup.bind(1, e.report_sha256);
      dup.bind(2, e.key_id);
      if (sqlite3_step(dup.s) == SQLITE_ROW) {
        ArchiveEntry old = read_entry(dup, nullptr);
        for (const auto& f : read_files(db_, path_, old.seq)) old.files.push_back(f.first);
        exec(db_, "ROLLBACK", path_);
        return old;
      }
    }
    Stmt head(db_, "SELECT seq, row_hash FROM entries ORDER BY seq DESC LIMIT 1", path_);
    e.seq = 1;
    e.prev_hash = kGenesis;
    if (sqlite3_step(head.s) == SQLITE_ROW) {
      e.seq = head.integer(0) + 1;
      e.prev_hash = head.text(1);
    }
    e.row_hash = row_hash(e, envelope);
    Stmt ins(db_, std::string("INSERT INTO entries(") + kColumns + ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", path_);
    ins.bind(1, e.seq);
    ins.bind(2, e.added_at);
    ins.bind(3, e.report_created);
    ins.bind(4, e.report_sha256);
    ins.bind(5, e.verdict);
    ins.bind(6, e.result);
    ins.bind(7, e.model_sha256);
    ins.bind(8, e.profile);
    ins.bind(9, json(e.endpoints).dump());
    ins.bind(10, e.who);
    ins.bind(11, e.where);
    ins.bind(12, e.retain_until);
    ins.bind(13, e.key_id);
    ins.bind(14, int64_t(e.signature_checked));
    ins.bind(15, envelope);
    ins.bind(16, e.prev_hash);
    ins.bind(17, e.row_hash);
    if (sqlite3_step(ins.s) != SQLITE_DONE) fail_step(db_, path_);
    for (const auto& [f, content] : contents) {
      Stmt fi(db_, "INSERT INTO files(seq, name, sha256, content) VALUES(?,?,?,?)", path_);
      fi.bind(1, e.seq);
      fi.bind(2, f.name);
      fi.bind(3, f.sha256);
      fi.blob(4, content);
      if (sqlite3_step(fi.s) != SQLITE_DONE) fail_step(db_, path_);
    }
    exec(db_, "COMMIT", path_);
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (added) *added = true;
  return e;
}

std::vector<ArchiveEntry> Archive::list(const ArchiveQuery& q) {
  std::string sql = std::string("SELECT ") + kColumns + " FROM entries WHERE 1";
  std::vector<std::string> args;
  if (!q.model.empty()) sql += " AND model_sha256 LIKE ? || '%'", args.push_back(q.model);
  if (!q.verdict.empty()) {
    sql += " AND (lower(verdict) = lower(?) OR lower(result) = lower(?))";
    args.push_back(q.verdict), args.push_back(q.verdict);
  }
  if (!q.endpoint.empty()) sql += " AND instr(endpoints, ?) > 0", args.push_back(q.endpoint);
  if (!q.since.empty()) sql += " AND report_created >= ?", args.push_back(q.since);
  if (!q.until.empty()) sql += " AND substr(report_created, 1, length(?)) <= ?", args.push_back(q.until), args.push_back(q.until);
  sql += " ORDER BY seq";
  Stmt st(db_, sql, path_);
  for (size_t i = 0; i < args.size(); ++i) st.bind(int(i + 1), args[i]);
  std::vector<ArchiveEntry> out;
  while (sqlite3_step(st.s) == SQLITE_ROW) out.push_back(read_entry(st, nullptr));
  for (auto& e : out)
    for (const auto& f : read_files(db_, path_, e.seq)) e.files.push_back(f.first);
  return out;
}

std::optional<ArchiveEntry> Archive::find(const std::string& id) {
  // An entry number, else a prefix of the report's sha256. A prefix can be all digits (about one in
  // 300 twelve-digit prefixes is), so a number that names no entry is tried as a prefix too.
  auto query = [&](bool number) {
    std::string sql = std::string("SELECT ") + kColumns + " FROM entries WHERE " +
                      (number ? "seq = ?" : "report_sha256 LIKE ? || '%'") + " ORDER BY seq LIMIT 2";
    Stmt st(db_, sql, path_);
    if (number) st.bind(1, int64_t(std::stoll(id)));
    else st.bind(1, id);
    std::vector<ArchiveEntry> rows;
    while (sqlite3_step(st.s) == SQLITE_ROW) rows.push_back(read_entry(st, nullptr));
    if (rows.size() > 1 && !number)
      throw UsageError("archive: '" + id + "' matches several entries; give more digits or the entry number");
    return rows;
  };
  const bool number = !id.empty() && id.size() < 19 && id.find_first_not_of("0123456789") == std::string::npos;
  std::vector<ArchiveEntry> found = query(number);
  if (found.empty() && number && !id.empty()) found = query(false);
  if (found.empty()) return std::nullopt;
  for (const auto& f : read_files(db_, path_, found[0].seq)) found[0].files.push_back(f.first);
  return found[0];
}

std::vector<std::string> Archive::export_entry(int64_t seq, const std::string& dir) {
  auto files = read_files(db_, path_, seq);
  if (files.empty()) throw UsageError("archive: no entry " + std::to_string(seq) + "; see `repro-audit archive list`");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw UsageError("--out '" + dir + "': cannot create the directory; choose a writable path");
  for (const auto& [f, content] : files)
    if (fs::exists(fs::path(dir) / f.name))
      throw UsageError("--out '" + dir + "': '" + f.name + "' already exists; export into an empty directory");
  std::vector<std::string> written;
  for (const auto& [f, content] : files) {
    if (f.name.find('/') != std::string::npos || f.name == ".." || f.name.empty())
      throw BackendError("archive: entry " + std::to_string(seq) + " has a file named '" + f.name + "'; the archive was altered");
    const std::string p = (fs::path(dir) / f.name).string();
    write_file_atomic(p, content);
    written.push_back(p);
  }
  return written;
}

ArchiveCheck Archive::verify(const PublicKey* trusted) {
  ArchiveCheck c;
  c.head = kGenesis;
  std::string prev = kGenesis;
  int64_t expect = 1;
  Stmt st(db_, std::string("SELECT ") + kColumns + " FROM entries ORDER BY seq", path_);
  while (sqlite3_step(st.s) == SQLITE_ROW) {
    std::string envelope;
    ArchiveEntry e = read_entry(st, &envelope);
    const std::string E = "entry " + std::to_string(e.seq) + ": ";
    if (e.seq != expect)
      c.problems.push_back(E + "expected entry " + std::to_string(expect) + " here: entries " + std::to_string(expect) +
                           (e.seq - 1 > expect ? " to " + std::to_string(e.seq - 1) : std::string()) + " were deleted");
    if (e.prev_hash != prev)
      c.problems.push_back(E + "prev_hash does not match the hash of the entry before it: an entry was deleted, "
                               "inserted or reordered");
    std::string env_sha;
    auto files = read_files(db_, path_, e.seq);
    for (const auto& [f, content] : files) {
      if (sha256_hex(content) != f.sha256)
        c.problems.push_back(E + "file " + f.name + ": content does not match its recorded sha256 (edited)");
      e.files.push_back(f);
    }
    if (files.empty()) c.problems.push_back(E + "its files are missing (deleted)");
    if (row_hash(e, envelope) != e.row_hash)
      c.problems.push_back(E + "its fields, envelope or file digests do not match its row hash (edited)");
    if (trusted && !files.empty()) {
      fs::path tmp = fs::temp_directory_path() / ("repro-archive-verify-" + std::to_string(getpid()) + "-" + std::to_string(e.seq));
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      for (const auto& [f, content] : files)
        if (f.name.find('/') == std::string::npos) write_file_atomic((tmp / f.name).string(), content);
      std::string json_name;
      for (const auto& [f, content] : files)
        if (f.name.size() > 5 && f.name.compare(f.name.size() - 5, 5, ".json") == 0) json_name = f.name;
      if (json_name.empty()) {
        c.problems.push_back(E + "no report JSON among its files");
      } else {
        Verification v = verify_report(locate_report((tmp / json_name).string()), trusted);
        for (const auto& p : v.problems) c.problems.push_back(E + p);
      }
      fs::remove_all(tmp);
    }
    prev = e.row_hash;
    c.head = e.row_hash;
    expect = e.seq + 1;
    c.entries++;
  }
  Stmt trig(db_, "SELECT count(*) FROM sqlite_master WHERE type='trigger' AND name IN ('entries_no_update', "
               "'entries_no_delete', 'files_no_update', 'files_no_delete')", path_);
  if (sqlite3_step(trig.s) == SQLITE_ROW && trig.integer(0) != 4)
    c.notes.push_back("the append-only triggers were removed from the database (the next `archive add` restores them)");
  Stmt orphans(db_, "SELECT DISTINCT seq FROM files WHERE seq NOT IN (SELECT seq FROM entries) ORDER BY seq", path_);
  while (sqlite3_step(orphans.s) == SQLITE_ROW)
    c.problems.push_back("entry " + std::to_string(orphans.integer(0)) + ": its files remain but the entry was deleted");
  return c;
}

json entry_json(const ArchiveEntry& e) {
  json files = json::array();
  for (const auto& f : e.files) files.push_back({{"name", f.name}, {"sha256", f.sha256}});
  json j = entry_fields(e);
  j["entry"] = e.seq;
  j["files"] = files;
  j["row_hash"] = e.row_hash;
  return j;
}

std::string entry_text(const ArchiveEntry& e) {
  std::string out;
  out += "entry          " + std::to_string(e.seq) + "\n";
  out += "added          " + e.added_at + " by " + e.who + (e.where.empty() ? "" : " at " + e.where) + "\n";
  out += "report         " + e.report_sha256 + " (created " + e.report_created + ", profile " + e.profile + ")\n";
  out += "verdict        " + e.verdict + " (" + e.result + ")\n";
  if (!e.model_sha256.empty()) out += "model          " + e.model_sha256 + "\n";
  for (const auto& ep : e.endpoints) out += "endpoint       " + ep + "\n";
  out += "signed by      " + e.key_id + (e.signature_checked ? " (checked against a trusted key when added)" : " (not checked against a trusted key when added)") + "\n";
  out += "retain until   " + e.retain_until + "\n";
  for (const auto& f : e.files) out += "file           " + f.name + " " + f.sha256 + "\n";
  out += "prev hash      " + e.prev_hash + "\n";
  out += "entry hash     " + e.row_hash + "\n";
  return out;
}

}  // namespace repro::compliance
