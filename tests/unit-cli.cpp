// The command line as a new user meets it, through the real binary: --format FORMAT=PATH in run,
// report --verify, diff (configuration first, digest warnings, missing argument), invalid UTF-8 in
// JSON and text output, "did you mean", run as the default subcommand, and the man page.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
std::string env(const fs::path& dir) { return "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' "; }
test::CmdResult cli(const fs::path& dir, const std::string& args) {
  return test::run_shell(env(dir) + "'" + test::binary() + "' " + args);
}
// stdout only (stderr to a file)
std::string cli_stdout(const fs::path& dir, const std::string& args, int* code) {
  auto r = test::run_shell("(" + env(dir) + "'" + test::binary() + "' " + args + " 2>'" + (dir / "stderr").string() + "')");
  *code = r.code;
  return r.output;
}
const char* kSmall = "--max-tokens 4 --repeats 2 --batch-sizes 1,2 --modes batch-invariant --prompt 'Once upon a time' ";
}  // namespace

TEST_CASE("run --format FORMAT=PATH: '-' is stdout, a path writes that one format there") {
  auto dir = test::scratch_dir("cli-format");
  int code = 0;
  std::string md = cli_stdout(dir, std::string("run ") + kSmall + "--format md=- --out '" + (dir / "o1").string() + "'", &code);
  CHECK(code == 0);
  CHECK(md.rfind("# repro-audit report", 0) == 0);  // the summary went to stderr
  std::string js = cli_stdout(dir, std::string("run ") + kSmall + "--quiet --format json=- --out '" + (dir / "o2").string() + "'", &code);
  CHECK(code == 0);
  auto j = nlohmann::json::parse(js);
  CHECK(j["schema"] == "repro-audit/report/v1");
  auto r = cli(dir, std::string("run ") + kSmall + "--quiet --format 'json,junit=" + (dir / "ci.xml").string() +
                        "' --out '" + (dir / "o3").string() + "'");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(fs::exists(dir / "ci.xml"));
  CHECK(fs::exists(dir / "o3" / "report.json"));
  CHECK(!fs::exists(dir / "o3" / "report.junit.xml"));
  auto bad = cli(dir, "run --quiet --format pdf=-");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--format must be report formats json, md, html or junit, each optionally as FORMAT=PATH (got 'pdf=-')") != std::string::npos);
}

TEST_CASE("report --verify says 'digest OK'; a mismatch never prints the hash that would make it pass") {
  auto dir = test::scratch_dir("cli-verify");
  auto r = cli(dir, std::string("run ") + kSmall + "--quiet --out '" + (dir / "a").string() + "'");
  REQUIRE(r.code == 0);
  const std::string path = (dir / "a" / "report.json").string();
  auto ok = cli(dir, "report '" + path + "' --verify");
  CHECK(ok.code == 0);
  CHECK(ok.output.find("digest OK") != std::string::npos);
  // forge: change the verdict, keep the recorded digest
  std::string text = read_file(path);
  auto j = nlohmann::json::parse(text);
  j["summary"]["verdict"] = "divergent";
  std::string forged = (dir / "forged.json").string();
  write_file_atomic(forged, j.dump(2));
  std::string stored, actual;
  CHECK_FALSE(verify_report_digest(j.dump(2), &stored, &actual));
  auto bad = cli(dir, "report '" + forged + "' --verify");
  INFO(bad.output);
  CHECK(bad.code == 2);
  CHECK(bad.output.find("its content does not match its recorded digest") != std::string::npos);
  CHECK(bad.output.find(actual) == std::string::npos);  // the forging hash
  CHECK(bad.output.find("signed") == std::string::npos);
  CHECK(std::count(bad.output.begin(), bad.output.end(), '\n') == 1);
}

TEST_CASE("diff: configuration differences first, digest warnings, a missing argument named") {
  auto dir = test::scratch_dir("cli-diff");
  REQUIRE(cli(dir, std::string("run ") + kSmall + "--quiet --out '" + (dir / "a").string() + "'").code == 0);
  REQUIRE(cli(dir, "run --max-tokens 6 --repeats 2 --batch-sizes 1,2 --modes batch-invariant --prompt 'Once upon a time' "
                   "--quiet --out '" + (dir / "b").string() + "'").code == 0);
  const std::string a = (dir / "a" / "report.json").string(), b = (dir / "b" / "report.json").string();
  auto d = cli(dir, "diff '" + a + "' '" + b + "'");
  INFO(d.output);
  CHECK(d.code == 1);
  auto cfg = d.output.find("plan.max_tokens 4 -> 6");
  auto cases = d.output.find("changed ");
  CHECK(cfg != std::string::npos);
  CHECK(cases != std::string::npos);
  CHECK(cfg < cases);
  CHECK(d.output.find("warning") == std::string::npos);
  // an edited report gets a warning
  auto j = nlohmann::json::parse(read_file(b));
  j["summary"]["verdict"] = "reproducible!";
  write_file_atomic((dir / "edited.json").string(), j.dump(2));
  auto w = cli(dir, "diff '" + a + "' '" + (dir / "edited.json").string() + "'");
  CHECK(w.output.find("warning: report '" + (dir / "edited.json").string() +
                      "': its content does not match its recorded digest") != std::string::npos);
  auto one = cli(dir, "diff '" + a + "'");
  CHECK(one.code == 2);
  CHECK(one.output.find("error: diff needs two reports: repro-audit diff BASELINE.json NEW.json (missing NEW.json") !=
        std::string::npos);
}

TEST_CASE("invalid UTF-8: generate and model info --json replace it with U+FFFD, token ids stay exact") {
  auto dir = test::scratch_dir("cli-utf8");
  auto g = cli(dir, "generate --json --max-tokens 4 --prompt \"$(printf 'ab\\377cd')\"");
  INFO(g.output);
  REQUIRE(g.code == 0);
  auto j = nlohmann::json::parse(g.output.substr(g.output.find('{')));
  CHECK(j["prompt"] == "ab\xEF\xBF\xBD" "cd");
  CHECK(j["tokens"].size() == 4);
  auto t = cli(dir, "generate --max-tokens 4 --prompt \"$(printf 'ab\\377cd')\"");
  CHECK(t.code == 0);
  CHECK(t.output.find("ab\xEF\xBF\xBD" "cd") != std::string::npos);
  // a model file whose name is not valid UTF-8
  std::string odd = (dir / "m\xff.gguf").string();
  REQUIRE(cli(dir, "model synth --out '" + odd + "'").code == 0);
  auto m = cli(dir, "model info --json '" + odd + "'");
  INFO(m.output);
  CHECK(m.code == 0);
  auto mj = nlohmann::json::parse(m.output);
  CHECK(mj["path"].get<std::string>().find("m\xEF\xBF\xBD.gguf") != std::string::npos);
  CHECK(sanitize_utf8("a\xC3\xA9z") == "a\xC3\xA9z");        // valid stays
  CHECK(sanitize_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  CHECK(sanitize_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST_CASE("CLI: did you mean, run as the default subcommand") {
  auto dir = test::scratch_dir("cli-names");
  auto sub = cli(dir, "reprot x.json");
  CHECK(sub.code == 2);
  CHECK(sub.output.find("did you mean 'report'?") != std::string::npos);
  auto flag = cli(dir, "run --max-tokns 3");
  CHECK(flag.code == 2);
  CHECK(flag.output.find("did you mean '--max-tokens'?") != std::string::npos);
  auto prof = cli(dir, "--profile quik");
  CHECK(prof.code == 2);
  CHECK(prof.output.find("unknown profile 'quik' (did you mean 'quick'?)") != std::string::npos);
  auto ci = cli(dir, "--profile ci --quiet --max-tokens 4 --out '" + (dir / "ci").string() + "'");
  INFO(ci.output);
  CHECK(ci.code == 0);
  CHECK(fs::exists(dir / "ci" / "report.json"));
  CHECK(load_report((dir / "ci" / "report.json").string()).profile == "ci");
}

TEST_CASE("man page: every line renders, field names match the JSON") {
  std::string man = read_file(std::string(REPRO_SOURCE_DIR) + "/man/repro-audit.1");
  CHECK(man.find("ratio_vs_default") == std::string::npos);
  // a text line starting with '.' or '\'' is a request to roff: only known macros may start a line
  const std::set<std::string> macros = {"TH", "SH", "SS", "B", "BR", "BI", "I", "IR", "IP", "TP", "PP", "br", "nf", "fi", "RS", "RE"};
  int lineno = 0;
  for (const auto& line : split(man, '\n')) {
    ++lineno;
    if (line.empty() || (line[0] != '.' && line[0] != '\'')) continue;
    std::string name = line.substr(1, line.find(' ') == std::string::npos ? std::string::npos : line.find(' ') - 1);
    CAPTURE(lineno);
    CAPTURE(line);
    CHECK(macros.count(name) == 1);
  }
  auto g = test::run_shell("command -v groff >/dev/null && groff -man -Tutf8 -ww -z '" + std::string(REPRO_SOURCE_DIR) +
                           "/man/repro-audit.1'");
  if (g.code == 0) CHECK(g.output.empty());
  std::string schema = read_file(std::string(REPRO_SOURCE_DIR) + "/docs/REPORT-SCHEMA.md");
  // deterministic is a mode of the engine: the plan's modes list it with what its batch contexts mean
  CHECK(schema.find("`default`, `batch-invariant`, `deterministic` (every request decoded alone") != std::string::npos);
  CHECK(schema.find("`t0.8-p0.95-k40`") == std::string::npos);  // sampled ids carry their seed
}
