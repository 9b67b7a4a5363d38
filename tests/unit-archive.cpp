// The report archive: add/list/show/export/verify through the real CLI on a real SQLite file;
// tampering done with the sqlite3 command line is detected; two processes adding at once lose
// nothing; secrets never reach a report, an envelope or the archive.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "repro/common/util.hpp"
#include "repro/compliance/archive.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/model.hpp"
#include "repro/report/report.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

bool have_sqlite3_cli() { return test::run_shell("sqlite3 -version").code == 0; }

struct Base {
  fs::path root, key, pub, report;  // report: a signed report directory
  json doc;                         // its report.json
};

const Base& base() {
  static Base b = [] {
    Base x;
    x.root = test::scratch_dir("archive");
    x.key = x.root / "k";
    x.pub = x.root / "k.pub";
    REQUIRE(test::run_cli("keygen --out " + q(x.key)).code == 0);
    x.report = x.root / "report";
    auto r = test::run_cli("run --quiet --max-tokens 4 --repeats 2 --batch-sizes 1 --modes batch-invariant "
                           "--prompt 'Once upon a time' --out " + q(x.report) + " --sign-key " + q(x.key));
    INFO(r.output);
    REQUIRE(r.code == 0);
    x.doc = json::parse(read_file((x.report / "report.json").string()));
    return x;
  }();
  return b;
}

// A distinct signed report (JSON only) derived from the base one: another creation time, verdict,
// model digest or endpoint, resealed and signed with the base key.
fs::path variant(const fs::path& dir, const std::string& created, const std::string& verdict, const std::string& model,
                 const std::string& endpoint = "") {
  json doc = base().doc;
  doc["created"] = created;
  doc["summary"]["verdict"] = verdict;
  doc["digests"]["model_sha256"] = model;
  if (!endpoint.empty())
    doc["environment"]["endpoints"] = json::array({{{"label", endpoint}, {"url", "https://" + endpoint + ".example/v1"}}});
  doc["digests"]["report_sha256"] = report_digest(doc);
  fs::remove_all(dir);
  fs::create_directories(dir);
  write(dir / "report.json", canonical_json(doc));
  compliance::sign_report(compliance::locate_report(dir.string()), base().key.string());
  return dir;
}

// Three entries: Jan reproducible model A, Feb divergent model B on endpoint "vllm-prod", Mar reproducible model A.
fs::path three_entry_db(const std::string& name) {
  const auto& b = base();
  fs::path db = b.root / (name + ".db");
  for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
  const std::string A(64, 'a'), B(64, 'b');
  auto r1 = variant(b.root / (name + "-1"), "2026-01-10T10:00:00Z", "reproducible", A);
  auto r2 = variant(b.root / (name + "-2"), "2026-02-10T10:00:00Z", "divergent", B, "vllm-prod");
  auto r3 = variant(b.root / (name + "-3"), "2026-03-10T10:00:00Z", "reproducible", A);
  auto r = test::run_cli("archive --db " + q(db) + " add " + q(r1) + " " + q(r2) + " " + q(r3) + " --pubkey " + q(b.pub));
  INFO(r.output);
  REQUIRE(r.code == 0);
  return db;
}

test::CmdResult sql(const fs::path& db, const std::string& statements) {
  return test::run_shell("sqlite3 " + q(db) + " \"" + statements + "\"");
}
test::CmdResult archive_verify(const fs::path& db, const std::string& extra = "") {
  return test::run_cli("archive --db " + q(db) + " verify" + extra);
}
const char* kDropTriggers =
    "DROP TRIGGER entries_no_update; DROP TRIGGER entries_no_delete; DROP TRIGGER files_no_update; "
    "DROP TRIGGER files_no_delete;";

}  // namespace

TEST_CASE("archive: add, list with queries, show, export a directory that verify accepts") {
  const auto& b = base();
  fs::path db = three_entry_db("queries");
  auto all = test::run_cli("archive --db " + q(db) + " list --json");
  REQUIRE(all.code == 0);
  json entries = json::parse(all.output);
  REQUIRE(entries.size() == 3);
  CHECK(entries[0]["entry"] == 1);
  CHECK(entries[0]["prev_hash"] == std::string(64, '0'));
  CHECK(entries[1]["prev_hash"] == entries[0]["row_hash"]);
  CHECK(entries[2]["prev_hash"] == entries[1]["row_hash"]);
  CHECK(entries[1]["verdict"] == "divergent");
  CHECK(entries[1]["result"] == "FAILED");
  CHECK(entries[0]["signature_checked"] == true);
  CHECK(entries[0]["where"] == "");  // no host name unless asked
  CHECK(entries[0]["files"].size() == 2);  // report.json + report.intoto.jsonl
  auto count = [&](const std::string& filter) {
    auto r = test::run_cli("archive --db " + q(db) + " list --json " + filter);
    INFO(r.output);
    REQUIRE(r.code == 0);
    return json::parse(r.output).size();
  };
  CHECK(count("--model " + std::string(64, 'a')) == 2);
  CHECK(count("--model bbbb") == 1);
  CHECK(count("--verdict divergent") == 1);
  CHECK(count("--verdict PASSED") == 2);
  CHECK(count("--endpoint vllm-prod") == 1);
  CHECK(count("--since 2026-02-01") == 2);
  CHECK(count("--until 2026-02-10") == 2);
  CHECK(count("--since 2026-01-15 --until 2026-02-28") == 1);
  CHECK(count("--since 2027-01-01") == 0);
  auto text = test::run_cli("archive --db " + q(db) + " list");
  CHECK(text.output.find("3 entries in") != std::string::npos);

  auto show = test::run_cli("archive --db " + q(db) + " show 2");
  CHECK(show.code == 0);
  CHECK(show.output.find("verdict        divergent (FAILED)") != std::string::npos);
  CHECK(show.output.find("endpoint       vllm-prod https://vllm-prod.example/v1") != std::string::npos);
  CHECK(test::run_cli("archive --db " + q(db) + " show " + entries[2]["report_sha256"].get<std::string>().substr(0, 12)).code == 0);
  auto missing = test::run_cli("archive --db " + q(db) + " show 99");
  CHECK(missing.code == 2);
  CHECK(missing.output.find("archive: no entry '99'") != std::string::npos);

  // Export: a directory a third party checks with `verify`.
  fs::path out = b.root / "exported";
  fs::remove_all(out);
  auto ex = test::run_cli("archive --db " + q(db) + " export 2 --out " + q(out));
  INFO(ex.output);
  CHECK(ex.code == 0);
  auto v = test::run_cli("verify " + q(out) + " --pubkey " + q(b.pub));
  INFO(v.output);
  CHECK(v.code == 0);
  CHECK(test::run_cli("archive --db " + q(db) + " export 2 --out " + q(out)).code == 2);  // never overwrites
  // The full report with renders round-trips too.
  CHECK(test::run_cli("archive --db " + q(db) + " add " + q(b.report) + " --who auditor --where lab-1 --retain-days 200").code == 0);
  fs::path out2 = b.root / "exported-full";
  fs::remove_all(out2);
  CHECK(test::run_cli("archive --db " + q(db) + " export 4 --out " + q(out2)).code == 0);
  CHECK(fs::exists(out2 / "report.html"));
  CHECK(test::run_cli("verify " + q(out2) + " --pubkey " + q(b.pub)).code == 0);
  auto e4 = json::parse(test::run_cli("archive --db " + q(db) + " show 4 --json").output);
  CHECK(e4["who"] == "auditor");
  CHECK(e4["where"] == "lab-1");
  CHECK(e4["retain_until"].get<std::string>().size() == 10);

  // Adding the same signed report again adds nothing; unsigned or invalid reports are refused.
  auto again = test::run_cli("archive --db " + q(db) + " add " + q(b.report));
  CHECK(again.output.find("already archived as entry 4") != std::string::npos);
  fs::path unsigned_dir = b.root / "unsigned";
  fs::remove_all(unsigned_dir);
  fs::create_directories(unsigned_dir);
  fs::copy_file(b.report / "report.json", unsigned_dir / "report.json");
  auto un = test::run_cli("archive --db " + q(db) + " add " + q(unsigned_dir));
  CHECK(un.code == 2);
  CHECK(un.output.find("only signed, valid reports are archived") != std::string::npos);
  auto ok = archive_verify(db, " --pubkey " + q(b.pub));
  INFO(ok.output);
  CHECK(ok.code == 0);
  CHECK(ok.output.find("VALID: 4 entries") != std::string::npos);

  // Default location: under the user's data directory.
  fs::path data = b.root / "xdg";
  fs::remove_all(data);
  auto d = test::run_shell("XDG_DATA_HOME=" + q(data) + " '" + test::binary() + "' archive list");
  CHECK(d.code == 0);
  CHECK(fs::exists(data / "repro-audit" / "archive.db"));
}

TEST_CASE("archive: edits, deletions and reordering made with the sqlite3 CLI are detected") {
  if (!have_sqlite3_cli()) {
    MESSAGE("SKIPPED: the sqlite3 command line is not installed (scripts/deps.sh --test installs it)");
    return;
  }
  const auto& b = base();
  fs::path db = three_entry_db("tamper");
  CHECK(archive_verify(db).code == 0);
  // Triggers refuse changes outright.
  auto refused = sql(db, "UPDATE entries SET verdict='reproducible' WHERE seq=2;");
  CHECK(refused.code != 0);
  CHECK(refused.output.find("append-only") != std::string::npos);
  CHECK(sql(db, "DELETE FROM entries WHERE seq=2;").code != 0);
  CHECK(archive_verify(db).code == 0);

  auto fresh = [&](const std::string& name) {
    fs::path d = b.root / (name + ".db");
    fs::copy_file(db, d, fs::copy_options::overwrite_existing);
    REQUIRE(sql(d, kDropTriggers).code == 0);
    return d;
  };
  SUBCASE("edit a field") {
    auto d = fresh("t-edit");
    REQUIRE(sql(d, "UPDATE entries SET verdict='reproducible', result='PASSED' WHERE seq=2;").code == 0);
    auto v = archive_verify(d);
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 2: its fields, envelope or file digests do not match its row hash (edited)") !=
          std::string::npos);
  }
  SUBCASE("edit a field and recompute nothing else: the retention date") {
    auto d = fresh("t-retain");
    REQUIRE(sql(d, "UPDATE entries SET retain_until='2026-12-31' WHERE seq=1;").code == 0);
    CHECK(archive_verify(d).output.find("FAIL  entry 1: its fields") != std::string::npos);
  }
  SUBCASE("delete a row in the middle") {
    auto d = fresh("t-delete");
    REQUIRE(sql(d, "DELETE FROM entries WHERE seq=2;").code == 0);
    auto v = archive_verify(d);
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 3: expected entry 2 here: entries 2 were deleted") != std::string::npos);
    CHECK(v.output.find("FAIL  entry 3: prev_hash does not match") != std::string::npos);
    CHECK(v.output.find("FAIL  entry 2: its files remain but the entry was deleted") != std::string::npos);
  }
  SUBCASE("delete a row and its files, renumber the rest") {
    auto d = fresh("t-renumber");
    REQUIRE(sql(d, "DELETE FROM files WHERE seq=2; DELETE FROM entries WHERE seq=2; "
                   "UPDATE files SET seq=2 WHERE seq=3; UPDATE entries SET seq=2 WHERE seq=3;").code == 0);
    auto v = archive_verify(d);
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 2: prev_hash does not match") != std::string::npos);
  }
  SUBCASE("reorder two rows") {
    auto d = fresh("t-reorder");
    REQUIRE(sql(d, "UPDATE entries SET seq=-1 WHERE seq=1; UPDATE entries SET seq=1 WHERE seq=2; "
                   "UPDATE entries SET seq=2 WHERE seq=-1; UPDATE files SET seq=-1 WHERE seq=1; "
                   "UPDATE files SET seq=1 WHERE seq=2; UPDATE files SET seq=2 WHERE seq=-1;").code == 0);
    auto v = archive_verify(d);
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 1: prev_hash does not match") != std::string::npos);
    CHECK(v.output.find("FAIL  entry 1: its fields") != std::string::npos);
  }
  SUBCASE("edit a stored file, with or without its recorded digest") {
    auto d = fresh("t-file");
    REQUIRE(sql(d, "UPDATE files SET content=replace(content, 'reproducible', 'divergent') WHERE seq=3 AND name='report.json';").code == 0);
    auto v = archive_verify(d);
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 3: file report.json: content does not match its recorded sha256 (edited)") !=
          std::string::npos);
    // Rewrite the recorded digest to match the edited content (computed here: the shell has no sha256()).
    auto content = test::run_shell("sqlite3 " + q(d) + " \"SELECT hex(content) FROM files WHERE seq=3 AND name='report.json';\"");
    std::string hex = trim(content.output), bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    REQUIRE(sql(d, "UPDATE files SET sha256='" + sha256_hex(bytes) + "' WHERE seq=3 AND name='report.json';").code == 0);
    auto w = archive_verify(d);
    INFO(w.output);
    CHECK(w.code == 1);
    CHECK(w.output.find("file report.json: content does not match") == std::string::npos);
    CHECK(w.output.find("FAIL  entry 3: its fields, envelope or file digests do not match its row hash (edited)") !=
          std::string::npos);
  }
  SUBCASE("remove the newest entry: caught against a recorded head") {
    auto head = json::parse(archive_verify(db, " --json").output)["head"].get<std::string>();
    auto d = fresh("t-tail");
    REQUIRE(sql(d, "DELETE FROM files WHERE seq=3; DELETE FROM entries WHERE seq=3;").code == 0);
    CHECK(archive_verify(d).code == 0);  // a shorter chain is a valid chain ...
    auto v = archive_verify(d, " --expect-head " + head);
    INFO(v.output);
    CHECK(v.code == 1);  // ... but not the one whose head was recorded
    CHECK(v.output.find("(--expect-head): entries were removed or added") != std::string::npos);
  }
  SUBCASE("an envelope replaced in the database is caught by the signature check") {
    auto d = fresh("t-envelope");
    REQUIRE(sql(d, "UPDATE files SET content=(SELECT content FROM files WHERE seq=1 AND name='report.intoto.jsonl') "
                   "WHERE seq=2 AND name='report.intoto.jsonl';").code == 0);
    auto v = archive_verify(d, " --pubkey " + q(b.pub));
    INFO(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("FAIL  entry 2: report.json: ") != std::string::npos);
  }
}

TEST_CASE("archive: two concurrent writers (loops of `archive add` processes) adding 100 reports each lose nothing") {
  const auto& b = base();
  fs::path db = b.root / "concurrent.db";
  for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
  std::string list1, list2;
  std::set<std::string> digests;
  for (int i = 0; i < 200; ++i) {
    char created[32];
    std::snprintf(created, sizeof created, "2026-05-%02dT%02d:%02d:00Z", 1 + i % 28, i / 60, i % 60);
    fs::path d = variant(b.root / "many" / std::to_string(i), created, "reproducible", std::string(64, 'c'));
    digests.insert(json::parse(read_file((d / "report.json").string()))["digests"]["report_sha256"].get<std::string>());
    (i % 2 ? list2 : list1) += " " + q(d);
  }
  REQUIRE(digests.size() == 200);
  // Two writers, each a loop of 100 `archive add` processes (as two CI jobs would run), at once.
  const std::string bin = "'" + test::binary() + "' archive --db " + q(db) + " add ";
  auto loop = [&](const std::string& list, const std::string& who) {
    return "( for d in" + list + "; do " + bin + "\"$d\" --who " + who + " || exit 1; done ) > " + q(b.root / (who + ".log")) +
           " 2>&1";
  };
  auto r = test::run_shell(loop(list1, "p1") + " & p1=$!; " + loop(list2, "p2") +
                           " & p2=$!; wait $p1; s1=$?; wait $p2; s2=$?; exit $((s1 | s2))");
  INFO(read_file((b.root / "p1.log").string()).substr(0, 300));
  INFO(read_file((b.root / "p2.log").string()).substr(0, 300));
  CHECK(r.code == 0);
  auto all = test::run_cli("archive --db " + q(db) + " list --json");
  REQUIRE(all.code == 0);
  json entries = json::parse(all.output);
  CHECK(entries.size() == 200);
  std::set<std::string> seen;
  int switches = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    seen.insert(entries[i]["report_sha256"].get<std::string>());
    CHECK(entries[i]["entry"] == int(i + 1));
    if (i > 0 && entries[i]["who"] != entries[i - 1]["who"]) ++switches;
  }
  CHECK(seen == digests);
  MESSAGE("the two writers' entries interleave " << switches << " times in the chain");
  auto v = archive_verify(db);
  INFO(v.output);
  CHECK(v.code == 0);
  CHECK(v.output.find("VALID: 200 entries") != std::string::npos);
  auto mode = test::run_shell("sqlite3 " + q(db) + " 'PRAGMA journal_mode;'");
  if (mode.code == 0) CHECK(trim(mode.output) == "wal");
}

TEST_CASE("secrets never reach a report, an envelope or the archive") {
  const auto& b = base();
  auto model = load_model(default_model_path());
  const std::string key = "sk-live-SECRET-in-env-7c1f93";
  const std::string body_secret = "sk-body-SECRET-in-extra-body-2b8e41";
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.api_key = key;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  fs::path out = b.root / "secret-run";
  fs::remove_all(out);
  fs::path db = b.root / "secret.db";
  for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
  const std::string extra = "{\\\"user\\\": \\\"" + body_secret + "\\\", \\\"metadata\\\": {\\\"headers\\\": {\\\"Authorization\\\": \\\"Bearer " +
                            body_secret + "\\\"}}}";
  auto r = test::run_shell("OPENAI_API_KEY='" + key + "' HF_TOKEN='" + key + "' OPENBLAS_NUM_THREADS=1 '" + test::binary() +
                           "' run --quiet --endpoint srv=" + server.url() + " --api-model " + server.model_name() +
                           " --api completions --concurrency 1,2 --repeats 2 --max-tokens 6 --prompt 'Once upon a time'"
                           " --extra-body \"" + extra + "\" --out " + q(out) + " --sign-key " + q(b.key));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(server.stats().completed > 0);
  CHECK(test::run_cli("archive --db " + q(db) + " add " + q(out) + " --pubkey " + q(b.pub)).code == 0);
  std::string everything;
  for (const auto& e : fs::directory_iterator(out)) everything += read_file(e.path().string());
  for (const char* ext : {"", "-wal"})
    if (fs::exists(db.string() + ext)) everything += read_file(db.string() + ext);
  std::string envelope = json::parse(read_file((out / "report.intoto.jsonl").string()))["payload"];
  std::string statement;
  REQUIRE(compliance::base64_decode(envelope, statement));
  everything += statement;
  CHECK(everything.find("srv") != std::string::npos);                  // the endpoint is recorded ...
  CHECK(everything.find(key) == std::string::npos);                    // ... its key is not
  CHECK(everything.find(body_secret) == std::string::npos);            // nor what --extra-body carried
  CHECK(r.output.find(key) == std::string::npos);
  json doc = json::parse(read_file((out / "report.json").string()));
  CHECK(doc["environment"]["environment_variables"].contains("OPENBLAS_NUM_THREADS"));
  CHECK_FALSE(doc["environment"]["environment_variables"].contains("HF_TOKEN"));
  server.stop();
}
