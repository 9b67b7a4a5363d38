// ctest-labels: unit remote
// Hostile JSON reaching the auditor: values nested far past any real document (in a prompts file,
// a schema, an endpoint's answer, a report, an envelope) and report.json with a repeated key. The
// parse is bounded (include/repro/common/json.hpp), so none of these crash; each is refused with
// the limit named, verify says INVALID, and an endpoint's bad answer costs only that answer.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#define REPRO_FUZZ_NO_MAIN
#include "../fuzz/fuzz_report.cpp"
#include "fault_server.hpp"
#include "repro/common/util.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
void write(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}
std::string deep(int n) { return std::string(n, '[') + std::string(n, ']'); }
const char* kLimit = "nested deeper than 256 levels of arrays and objects, the limit for JSON input";

// A small signed run of the embedded model, made once for the file.
struct Signed {
  fs::path root, dir, key, pub;
};
const Signed& signed_run() {
  static Signed s = [] {
    Signed x;
    x.root = test::scratch_dir("hostile-json");
    x.dir = x.root / "signed";
    x.key = x.root / "k";
    x.pub = x.root / "k.pub";
    REQUIRE(test::run_cli("keygen --out " + q(x.key)).code == 0);
    auto r = test::run_cli("run --quiet --max-tokens 4 --repeats 2 --batch-sizes 1,2 --prompt 'Once upon a time' --out " +
                           q(x.dir) + " --sign-key " + q(x.key));
    INFO(r.output);
    REQUIRE(r.code == 0);
    return x;
  }();
  return s;
}
fs::path copy_of(const std::string& name) {
  fs::path d = signed_run().root / name;
  fs::remove_all(d);
  fs::copy(signed_run().dir, d);
  return d;
}

}  // namespace

TEST_CASE("hostile JSON files: prompts, schemas, extra bodies and profiles nested 100,000 deep are exit 2 naming the limit") {
  auto dir = test::scratch_dir("hostile-json-inputs");
  write(dir / "p.jsonl", "{\"id\":\"a\",\"prompt\":" + deep(100000) + "}\n");
  auto r = test::run_cli("run --quiet --prompts " + q(dir / "p.jsonl") + " --out " + q(dir / "o1"));
  CHECK(r.code == 2);
  CHECK(r.output.find("line 1: invalid JSON (" + std::string(kLimit) + ")") != std::string::npos);
  write(dir / "s.json", "{\"type\":\"array\",\"items\":" + deep(100000) + "}");
  for (const char* cmd : {"run --quiet --out '" , "generate --prompt hi --max-tokens 2 --json-schema '"}) {
    std::string args = std::string(cmd) + (std::string(cmd).rfind("run", 0) == 0 ? (dir / "o2").string() + "' --json-schema '" : "") +
                       (dir / "s.json").string() + "'";
    auto g = test::run_cli(args);
    CAPTURE(args);
    CAPTURE(g.output);
    CHECK(g.code == 2);
    CHECK(g.output.find(kLimit) != std::string::npos);
  }
  auto e = test::run_cli("run --endpoint e=http://127.0.0.1:9 --api-model m --extra-body '{\"x\":" + deep(300) + "}'");
  CHECK(e.code == 2);
  CHECK(e.output.find("--extra-body: not valid JSON (" + std::string(kLimit) + ")") != std::string::npos);
  write(dir / "prof.json", "{\"repeats\":" + deep(100000) + "}");
  auto p = test::run_cli("run --quiet --profile " + q(dir / "prof.json") + " --out " + q(dir / "o3"));
  CHECK(p.code == 2);
  CHECK(p.output.find("invalid JSON (" + std::string(kLimit) + ")") != std::string::npos);
}

TEST_CASE("a hostile endpoint answering 600 KB of nested brackets: the answer is invalid, the run finishes and is written") {
  test::FaultServerOptions fo;
  fo.fixed_text = deep(300000);
  fo.token_ids = false;
  test::FaultServer srv(fo);
  const fs::path root = test::scratch_dir("hostile-json-endpoint");
  const fs::path schema = root / "s.json";
  write(schema, R"({"type":"array","items":{"type":"integer"}})");
  for (const std::string& flag : std::vector<std::string>{"--answer-json-path '$[0]'", "--json-schema " + q(schema)}) {
    CAPTURE(flag);
    const fs::path dir = root / (flag[2] == 'a' ? "answer" : "schema");
    auto r = test::run_cli("run --quiet --endpoint e=" + srv.url() + "/v1 --api-model m --max-retries 0 --concurrency 1,2 "
                           "-n 2 --no-cache-probe --prompt hi --max-tokens 3 " + flag + " --out " + q(dir));
    CAPTURE(r.output);
    CHECK(r.code < 128);  // no signal: the process finished
    REQUIRE(fs::exists(dir / "report.json"));
    AuditReport rep = load_report((dir / "report.json").string());
    REQUIRE(!rep.completions.empty());
    for (const auto& c : rep.completions) CHECK(c.text.size() == 600000);
    if (flag[2] == 'a') {
      REQUIRE(!rep.cases.empty());
      for (const auto& c : rep.cases) CHECK(c.answer_missing == c.n);
    } else {
      for (const auto& c : rep.completions) CHECK(c.schema_valid == std::optional<bool>(false));
    }
  }
}

TEST_CASE("reports and envelopes nested past the limit: verify says INVALID; report, diff and canary exit 2") {
  const auto& s = signed_run();
  // report.json: a deep value where a string was, digest resealed as a forger would.
  fs::path d = copy_of("deep-report");
  std::string text = read_file((d / "report.json").string());
  const std::string key = "\"schema\": ";
  auto at = text.find(key);
  REQUIRE(at != std::string::npos);
  auto end = text.find(',', at);
  text = text.substr(0, at + key.size()) + deep(100000) + text.substr(end);
  write(d / "report.json", text);
  auto v = test::run_cli("verify " + q(d) + " --pubkey " + q(s.pub));
  CAPTURE(v.output);
  CHECK(v.code == 1);
  CHECK(v.output.find("INVALID") != std::string::npos);
  CHECK(v.output.find("report.json: not valid JSON (" + std::string(kLimit) + "): the file was altered") !=
        std::string::npos);
  for (const std::string& cmd : {"report " + q(d / "report.json") + " --format md",
                                 "diff " + q(d / "report.json") + " " + q(s.dir / "report.json"),
                                 "diff " + q(s.dir / "report.json") + " " + q(d / "report.json"),
                                 "canary --quiet --baseline " + q(d) + " --out " + q(d / "rerun")}) {
    CAPTURE(cmd);
    auto r = test::run_cli(cmd);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("invalid JSON (" + std::string(kLimit) + ")") != std::string::npos);
  }
  // The envelope: one line of nested brackets.
  fs::path e = copy_of("deep-envelope");
  write(e / "report.intoto.jsonl", deep(200000) + "\n");
  auto ve = test::run_cli("verify " + q(e) + " --pubkey " + q(s.pub));
  CAPTURE(ve.output);
  CHECK(ve.code == 1);
  CHECK(ve.output.find("report.intoto.jsonl: not a JSON object (" + std::string(kLimit) + ")") != std::string::npos);
  // The statement inside a well-formed envelope.
  fs::path st = copy_of("deep-statement");
  json env = json::parse(read_file((st / "report.intoto.jsonl").string()));
  env["payload"] = compliance::base64_encode(deep(100000));
  write(st / "report.intoto.jsonl", env.dump() + "\n");
  auto vs = test::run_cli("verify " + q(st) + " --pubkey " + q(s.pub));
  CAPTURE(vs.output);
  CHECK(vs.code == 1);
  CHECK(vs.output.find("payload: not a JSON in-toto Statement (" + std::string(kLimit) + ")") != std::string::npos);
}

TEST_CASE("a signed report.json with a repeated key before the real one is INVALID, not VALID") {
  const auto& s = signed_run();
  fs::path d = copy_of("dup-key");
  std::string text = read_file((d / "report.json").string());
  const std::string summary = "\"summary\": {";
  auto at = text.find(summary);
  REQUIRE(at != std::string::npos);
  // A reader that keeps the first value sees FORGED; nlohmann keeps the last, so the digest and the
  // signature cover the real one.
  text.insert(at + summary.size(), "\"verdict\":\"FORGED\",");
  write(d / "report.json", text);
  auto v = test::run_cli("verify " + q(d) + " --pubkey " + q(s.pub));
  CAPTURE(v.output);
  CHECK(v.code == 1);
  CHECK(v.output.find("INVALID") != std::string::npos);
  CHECK(v.output.find("report.json: not valid JSON (the key \"verdict\" appears twice in one object): the file was "
                      "altered") != std::string::npos);
  auto r = test::run_cli("report " + q(d / "report.json") + " --format md");
  CHECK(r.code == 2);
  CHECK(r.output.find("the key \"verdict\" appears twice in one object") != std::string::npos);
  // The same repeat inside the signed statement.
  fs::path st = copy_of("dup-statement");
  json env = json::parse(read_file((st / "report.intoto.jsonl").string()));
  std::string payload;
  REQUIRE(compliance::base64_decode(env["payload"].get<std::string>(), payload));
  payload.insert(1, "\"_type\":\"forged\",");
  env["payload"] = compliance::base64_encode(payload);
  write(st / "report.intoto.jsonl", env.dump() + "\n");
  auto vs = test::run_cli("verify " + q(st) + " --pubkey " + q(s.pub));
  CAPTURE(vs.output);
  CHECK(vs.code == 1);
  CHECK(vs.output.find("the key \"_type\" appears twice in one object") != std::string::npos);
}

TEST_CASE("every file of fuzz/corpus/report replays through the fuzz entry without a crash") {
  const auto files = test::corpus_files("report");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(fuzz::report_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  CHECK(files.size() >= 7);
}
