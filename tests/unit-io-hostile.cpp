// Hostile inputs and outputs through the real binary and the file helpers: device nodes, FIFOs and
// huge numbers as inputs; symlinks, devices and full disks as outputs; control bytes in errors;
// chat messages kept across --resume (SIGTERM during a run: tests/unit-run.cpp).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "repro/audit/plan.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
std::string env(const fs::path& dir) { return "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' "; }
std::string cli(const fs::path& dir, const std::string& args) { return env(dir) + "'" + test::binary() + "' " + args; }
using test::slurp;
// One `error:` line, exit 2, naming `names` and free of raw control bytes.
void check_usage_error(const test::CmdResult& r, const std::string& names, const std::string& says) {
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.rfind("error: ", 0) == 0);
  CHECK(r.output.find(names) != std::string::npos);
  CHECK(r.output.find(says) != std::string::npos);
  CHECK(r.output.find("Success") == std::string::npos);
  CHECK(r.output.find("stoi") == std::string::npos);
}
}  // namespace

TEST_CASE("inputs: regular files only, bounded, never blocking; numbers in range; messages name the file") {
  auto dir = test::scratch_dir("io-inputs");
  check_usage_error(test::run_shell(cli(dir, "run -q --prompts /dev/zero --out '" + (dir / "o").string() + "'")),
                    "prompts file '/dev/zero'", "a device, not a regular file");
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto t0 = std::chrono::steady_clock::now();
  check_usage_error(test::run_shell(env(dir) + "timeout 20 '" + test::binary() + "' " + "model info '" + fifo + "'"),
                    "model file '" + fifo + "'", "a FIFO (named pipe)");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  check_usage_error(test::run_shell(cli(dir, "run -q --positions 99999999999 --out '" + (dir / "o").string() + "'")),
                    "--positions", "99999999999");
  check_usage_error(test::run_shell(cli(dir, "run -q --threads 100000 --out '" + (dir / "o").string() + "'")),
                    "--threads", "100000");
  check_usage_error(test::run_shell(cli(dir, "generate --threads 100000 --max-tokens 1")), "--threads", "100000");
  auto models = test::shared_models();
  if (!models.empty())
    check_usage_error(test::run_shell(cli(dir, "model info '" + (models / "stories260K.bin").string() +
                                                   "' --tokenizer /dev/null")),
                      "tokenizer file '/dev/null'", "a device");
  // A file name with control bytes is quoted escaped, never raw.
  auto r = test::run_shell(cli(dir, "run -q --prompts \"$(printf 'bad\\001\\033[2Jname.txt')\" --out '" +
                                        (dir / "o").string() + "'"));
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("bad\\x01\\x1b[2Jname.txt") != std::string::npos);
  CHECK(r.output.find('\x01') == std::string::npos);
  CHECK(r.output.find('\x1b') == std::string::npos);
}

TEST_CASE("a corrupt GGUF's error quotes its bytes escaped") {
  auto dir = test::scratch_dir("io-gguf");
  // Header, one KV whose key holds control bytes, and a value type that does not exist.
  std::string g = "GGUF";
  auto u32 = [&](uint32_t v) { g.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { g.append(reinterpret_cast<const char*>(&v), 8); };
  u32(3);
  u64(0);
  u64(1);
  const std::string key = "general.\x01\x1b[31mevil\x07";
  u64(key.size());
  g += key;
  u32(99);
  g += std::string(32, '\0');
  std::ofstream(dir / "bad.gguf", std::ios::binary) << g;
  auto r = test::run_shell(cli(dir, "model info '" + (dir / "bad.gguf").string() + "'"));
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.rfind("error: ", 0) == 0);
  CHECK(r.output.find("bad.gguf") != std::string::npos);
  for (char c : r.output.substr(0, r.output.size() - 1)) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
  CHECK(r.output.find('\x1b') == std::string::npos);
}

TEST_CASE("printable() escapes control bytes and invalid UTF-8, keeps valid UTF-8") {
  CHECK(printable("ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable(std::string("a\x01" "b\x7f\n", 5)) == "a\\x01b\\x7f\\x0a");
  CHECK(printable("\xff\xc3") == "\\xff\\xc3");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");          // overlong
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // surrogate
}

TEST_CASE("report writes replace regular files only; '-' writes through; stdout write errors exit 3") {
  auto dir = test::scratch_dir("io-outputs");
  const fs::path target = dir / "target.txt", link = dir / "link.json";
  std::ofstream(target) << "keep me";
  fs::create_symlink(target, link);
  CHECK_THROWS_WITH_AS(write_file_atomic(link.string(), "x"), doctest::Contains("it is a symbolic link"), UsageError);
  CHECK(fs::is_symlink(link));
  CHECK(slurp(target) == "keep me");
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(write_file_atomic(fifo, "x"), doctest::Contains("a FIFO"), UsageError);
  CHECK_THROWS_WITH_AS(write_file_atomic("/dev/null", "x"), doctest::Contains("'/dev/null': it is a device"), UsageError);
  CHECK_THROWS_WITH_AS(write_file_atomic(dir.string(), "x"), doctest::Contains("a directory"), UsageError);
  write_file_atomic((dir / "plain.json").string(), "new");
  write_file_atomic((dir / "plain.json").string(), "newer");
  CHECK(slurp(dir / "plain.json") == "newer");
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);  // no temporary left behind

  // Through the binary: a report to a device is refused, to '-' written through, and a full
  // standard output is an error (exit 3), for every command that prints.
  auto run = test::run_shell(cli(dir, "run -q -n 1 --batch-sizes 1 --max-tokens 2 --format json --out '" +
                                          (dir / "rep").string() + "'"));
  REQUIRE(run.code == 0);
  const std::string rep = (dir / "rep" / "report.json").string();
  REQUIRE(test::run_shell(cli(dir, "model synth --out '" + (dir / "m.gguf").string() + "'")).code == 0);
  auto dev = test::run_shell(cli(dir, "report '" + rep + "' --format json=/dev/null"));
  CAPTURE(dev.output);
  CHECK(dev.code == 2);
  CHECK(dev.output.find("refusing to write '/dev/null'") != std::string::npos);
  auto out = test::run_shell(cli(dir, "report '" + rep + "' --format md=-"));
  CHECK(out.code == 0);
  CHECK(out.output.find("#") != std::string::npos);
  for (const std::string& args : {"report '" + rep + "' --format md=-", std::string("generate --max-tokens 2"),
                                 "model info '" + (dir / "m.gguf").string() + "'", std::string("run -q -n 1 --batch-sizes 1 --max-tokens 2 --out -")}) {
    auto full = test::run_shell("(TMPDIR='" + dir.string() + "' " + cli(dir, args) + " > /dev/full)");
    CAPTURE(args);
    CAPTURE(full.output);
    CHECK(full.code == 3);
    CHECK(full.output.find("cannot write to standard output: No space left on device") != std::string::npos);
  }
}

namespace {
// Runs `args` with the size of every file it writes limited to `bytes` (RLIMIT_FSIZE: a write past
// it fails with EFBIG, as on a full disk; the process ignores SIGXFSZ). Root cannot bypass it.
test::CmdResult limited(const fs::path& dir, long bytes, const std::string& args) {
  return test::run_shell("cd '" + dir.string() + "' && TMPDIR='" + (dir / "tmp").string() + "' " + env(dir) +
                         "prlimit --fsize=" + std::to_string(bytes) + " '" + test::binary() + "' " + args);
}
bool have_prlimit() { return test::run_shell("command -v prlimit").code == 0; }
std::vector<std::string> names_in(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("full disk: run keeps the finished run for --resume, one line says where, exit 3") {
  if (!have_prlimit()) {
    MESSAGE("SKIPPED: prlimit not found");
    return;
  }
  auto dir = test::scratch_dir("io-full-run");
  fs::create_directories(dir / "tmp");
  const std::string args = "run -q -n 2 --prompt hi --modes batch-invariant --precisions f32 --batch-sizes 1,2 "
                           "--max-tokens 4 --format json ";
  auto ok = test::run_shell("cd '" + dir.string() + "' && " + cli(dir, args + "--out whole"));
  REQUIRE(ok.code == 0);
  const auto whole = fs::file_size(dir / "whole" / "report.json");
  // Room for what --resume needs (the completions), not for the analysed report.
  auto r = limited(dir, long(whole) - 1500, args + "--out o");
  INFO(r.output);
  CHECK(r.code == 3);
  CHECK(r.output.find("error: cannot write 'o/report.json': File too large; free disk space (or raise the file size "
                      "limit) or write elsewhere\n") != std::string::npos);
  CHECK(r.output.find("note: the finished run (10 completions) is kept in o/checkpoint.json; free disk space, then "
                      "write its reports with: repro-audit run --resume o\n") != std::string::npos);
  CHECK(names_in(dir / "o") == std::vector<std::string>{"checkpoint.json"});  // no partial report.json
  auto resumed = test::run_shell("cd '" + dir.string() + "' && " + cli(dir, "run -q --resume o"));
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  AuditReport a = load_report((dir / "whole" / "report.json").string()), b = load_report((dir / "o" / "report.json").string());
  CHECK(b.completions.size() == 10);
  CHECK(b.summary.verdict == a.summary.verdict);
  CHECK(!fs::exists(dir / "o" / "checkpoint.json"));

  // Nothing fits in the --out directory (standard output here): kept under $TMPDIR.
  auto piped = test::run_shell("cd '" + dir.string() + "' && (TMPDIR='" + (dir / "tmp").string() + "' " +
                               cli(dir, args + "--out - > /dev/full)"));
  INFO(piped.output);
  CHECK(piped.code == 3);
  CHECK(piped.output.find("note: the finished run (10 completions) is kept in " + (dir / "tmp").string() +
                          "/repro-audit-kept-") != std::string::npos);
  auto kept = names_in(dir / "tmp");
  REQUIRE(kept.size() == 1);
  CHECK(fs::exists(dir / "tmp" / kept[0] / "checkpoint.json"));
  CHECK(load_report((dir / "tmp" / kept[0] / "checkpoint.json").string()).completions.size() == 10);

  // A report path that can never be written is refused before the run, not after it.
  auto dev = test::run_shell("cd '" + dir.string() + "' && " +
                             cli(dir, "run -q -n 1 --prompt hi --batch-sizes 1 --max-tokens 2 --format json=/dev/null "
                                      "--out d"));
  CHECK(dev.code == 2);
  CHECK(dev.output == "error: refusing to write '/dev/null': it is a device, and only regular files are replaced; "
                      "give another path, or '-' for standard output\n");
  CHECK(!fs::exists(dir / "d" / "checkpoint.json"));
}

TEST_CASE("full disk: keygen leaves no key file, not even an empty one, and exits 3") {
  if (!have_prlimit()) {
    MESSAGE("SKIPPED: prlimit not found");
    return;
  }
  auto dir = test::scratch_dir("io-full-keygen");
  for (long limit : {0L, 50L, 100L}) {  // nothing, part of the private key, part of each
    CAPTURE(limit);
    auto r = limited(dir, limit, "keygen --out key");
    INFO(r.output);
    CHECK(r.code == 3);
    CHECK(r.output.find("error: cannot write 'key") != std::string::npos);
    CHECK(r.output.find("': File too large; free disk space") != std::string::npos);
    CHECK(names_in(dir).empty());
  }
  auto r = test::run_shell("cd '" + dir.string() + "' && " + cli(dir, "keygen --out key"));
  CHECK(r.code == 0);
  CHECK(names_in(dir) == std::vector<std::string>{"key", "key.pub"});
  CHECK(fs::file_size(dir / "key") > 0);
  auto again = test::run_shell("cd '" + dir.string() + "' && " + cli(dir, "keygen --out key"));
  CHECK(again.code == 2);
  CHECK(again.output.find("error: keygen --out: 'key' already exists; keys are never overwritten") != std::string::npos);
  CHECK(names_in(dir) == std::vector<std::string>{"key", "key.pub"});
}

TEST_CASE("full disk: archive add names the archive and the OS error, exit 3, and the archive is unchanged") {
  if (!have_prlimit()) {
    MESSAGE("SKIPPED: prlimit not found");
    return;
  }
  auto dir = test::scratch_dir("io-full-archive");
  auto sh = [&](const std::string& args) { return test::run_shell("cd '" + dir.string() + "' && " + cli(dir, args)); };
  REQUIRE(sh("keygen --out key").code == 0);
  for (const char* p : {"r1", "r2"})
    REQUIRE(sh(std::string("run -q -n 1 --prompt ") + p + " --modes batch-invariant --precisions f32 --batch-sizes 1 "
               "--max-tokens 2 --sign-key key --out " + p).code == 0);
  REQUIRE(sh("archive add --db a.db r1").code == 0);
  for (long limit : {0L, 40000L}) {  // opening the archive (its WAL index), writing the entry
    CAPTURE(limit);
    auto r = limited(dir, limit, "archive add --db a.db r2");
    INFO(r.output);
    CHECK(r.code == 3);
    CHECK(r.output.rfind("error: --db 'a.db': cannot write the archive: ", 0) == 0);
    if (limit == 0) CHECK(r.output.find("cannot write the archive: File too large (SQLite: ") != std::string::npos);
    CHECK(r.output.find("); free disk space (or raise the file size limit), then add the report again") !=
          std::string::npos);
    CHECK(r.output.find("not a usable") == std::string::npos);
  }
  CHECK(sh("archive list --db a.db").output.find("1 entry in a.db") != std::string::npos);
  auto added = sh("archive add --db a.db r2");
  INFO(added.output);
  CHECK(added.code == 0);
  CHECK(added.output.find("added entry 2") != std::string::npos);
  CHECK(sh("archive verify --db a.db").code == 0);
}

TEST_CASE("--resume keeps chat messages: a JSONL messages prompt is not flattened into one user message") {
  auto dir = test::scratch_dir("io-resume-messages");
  std::ofstream(dir / "p.jsonl")
      << R"({"id": "c1", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})"
      << "\n";
  PlanOptions o;
  o.prompts = prompts_from_file((dir / "p.jsonl").string());
  REQUIRE(o.prompts.size() == 1);
  REQUIRE(o.prompts[0].messages.size() == 2);
  AuditReport r;
  r.plan = plan_to_json(o);
  r.prompts[o.prompts[0].id] = o.prompts[0].text;
  write_file_atomic((dir / "checkpoint.json").string(), to_json(r));
  PlanOptions back = plan_from_report(load_report((dir / "checkpoint.json").string()));
  REQUIRE(back.prompts.size() == 1);
  CHECK(back.prompts[0].text == o.prompts[0].text);
  // The same messages; the report keeps keys sorted (the file's order returns with --prompts given again).
  CHECK(nlohmann::json(back.prompts[0].messages) == nlohmann::json(o.prompts[0].messages));
  CHECK(o.prompts[0].messages[0].begin().key() == "role");  // the file's order, as the template sees it
}
