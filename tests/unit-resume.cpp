// ctest-labels: unit remote
// `run --resume` continues exactly the run it names, or refuses: flags that would change the plan
// (--chat-template included), another model (same path, other bytes), edited prompts, a local run
// resumed against endpoints and a remote run resumed without them or against others. A finished run
// has nothing to resume and is left byte for byte as it was (its signature stays valid). A resumed
// remote run sends only what had not finished and equals an uninterrupted run case by case (loopback
// fault server, real binary).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "fault_server.hpp"
#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
using test::Fault;
using test::FaultServer;
namespace fs = std::filesystem;

namespace {

std::string env(const fs::path& dir) {
  return "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' ";
}
test::CmdResult run(const fs::path& dir, const std::string& args) {
  return test::run_shell(env(dir) + "'" + test::binary() + "' " + args);
}

// `repro-audit ARGS` in the background (its output discarded).
pid_t start(const fs::path& dir, const std::string& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string cmd = env(dir) + "exec '" + test::binary() + "' " + args + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  return pid;
}
int exit_status(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Exit 2, one `error: --resume DIR: ...` line that says `says`.
void check_refused(const test::CmdResult& r, const std::string& says) {
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.rfind("error: --resume ", 0) == 0);
  CHECK(r.output.find(says) != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
}

}  // namespace

TEST_CASE("--resume of a local run refuses other flags, other model bytes, edited prompts and endpoints") {
  auto dir = test::scratch_dir("resume-refuse-local");
  REQUIRE(run(dir, "generate --max-tokens 1").code == 0);  // the embedded model, into the cache
  fs::path cached;
  for (const auto& e : fs::directory_iterator(dir / "cache"))
    if (e.path().extension() == ".gguf") cached = e.path();
  REQUIRE(!cached.empty());
  const fs::path model = dir / "m.gguf", out = dir / "out";
  fs::copy_file(cached, model);
  REQUIRE(run(dir, "run --quiet --model '" + model.string() +
                       "' -n 1 --batch-sizes 1 --modes batch-invariant --precisions f32 "
                       "--max-tokens 4 --prompt 'Once upon a time' --format json --out '" +
                       out.string() + "'")
              .code == 0);
  const std::string resume = "run --quiet --resume '" + out.string() + "'";

  // Flags that repeat the run's values change nothing: accepted.
  auto same = run(
      dir,
      resume +
          " --repeats 1 --max-tokens 4 --modes batch-invariant --prompt 'Once upon a time' --profile quick");
  CAPTURE(same.output);
  CHECK(same.code == 0);
  // Flags that would change the plan: refused, naming the flag, both values and the fix.
  check_refused(run(dir, resume + " --repeats 3"), "--repeats gives 3 but the run used 1 (repeats); drop it");
  check_refused(run(dir, resume + " --modes default"),
                "--modes gives [\"default\"] but the run used [\"batch-invariant\"]");
  check_refused(run(dir, resume + " --no-cache-probe"),
                "--no-cache-probe gives false but the run used true (cache_probe)");
  check_refused(run(dir, resume + " --profile ci"), "the profile 'ci' has sha256 ");
  check_refused(run(dir, resume + " --prompt 'Another prompt'"), "the prompts given (1, sha256 ");
  check_refused(run(dir, resume + " --threads 2"), "--threads gives 2 but the run used 1");
  check_refused(run(dir, resume + " --precision bf16"), "--precision gives bf16 but the run used f32");
  check_refused(run(dir, resume + " --precisions f32,bf16"),
                "--precisions gives [\"f32\",\"bf16\"] but the run used [\"f32\"] (precisions)");
  check_refused(run(dir, resume + " --out '" + (dir / "elsewhere").string() + "'"),
                "--out: a resumed run writes into");
  // Another chat template renders `messages` prompts otherwise: false divergence between the segments.
  check_refused(run(dir, resume + " --chat-template llama3"),
                "--chat-template gives llama3 but the run used ");
  // A local run resumed against an endpoint.
  check_refused(run(dir, resume + " --endpoint http://127.0.0.1:9/v1 --api-model m"),
                "the run audited the local model " + fs::absolute(model).string() + "; drop --endpoint");

  // The same path with other bytes is not the same model.
  {
    std::string bytes = test::slurp(model);
    bytes[bytes.size() - 1] = static_cast<char>(bytes[bytes.size() - 1] ^ 1);
    std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  }
  auto other = run(dir, resume);
  check_refused(other, "the model file " + fs::absolute(model).string() + " has sha256 ");
  CHECK(
      other.output.find(
          "but the run used 270cba1bd510..; resume with the same model (--model FILE) or start a new run") !=
      std::string::npos);
  // The same bytes elsewhere are the same model.
  fs::copy_file(cached, dir / "moved.gguf");
  CHECK(run(dir, resume + " --model '" + (dir / "moved.gguf").string() + "'").code == 0);

  // Prompts edited in the report: not the run's prompts any more.
  nlohmann::json j = nlohmann::json::parse(test::slurp(out / "report.json"));
  REQUIRE(j["prompts"].size() == 1);
  j["prompts"].begin().value() = "Once upon a midnight";
  std::ofstream(out / "report.json", std::ios::trunc) << j.dump();
  check_refused(run(dir, resume), "(the file was edited); start a new run");
}

TEST_CASE(
    "--resume of a remote run: same endpoints or refused; finished requests are not sent again; "
    "equal to an uninterrupted run case by case") {
  test::FaultServerOptions fo;
  fo.slow_s = 0.15;
  fo.models = {"m"};
  FaultServer srv(fo);
  srv.set_default(Fault::slow);
  const std::set<std::string> probe_prompts = {"alpha beta", "gamma delta"};
  auto probes = [&] {  // probe requests the server received (fillers and preflight not counted)
    int n = 0;
    for (const auto& s : srv.seen())
      if (s.body.is_object() && s.body.contains("prompt") && s.body["prompt"].is_string() &&
          probe_prompts.count(s.body["prompt"].get<std::string>()))
        ++n;
    return n;
  };
  // Without the cache probe, interrupted after 5 probes; with it (cold + 2 warm requests per
  // prompt, first), interrupted inside the first prompt's cache probe.
  for (const bool cache : {false, true}) {
    CAPTURE(cache);
    auto dir = test::scratch_dir(cache ? "resume-remote-cache" : "resume-remote");
    const std::string ep = " --endpoint a=" + srv.url() + "/v1";
    const std::string plan =
        " --api-model m --api completions -n 3 --concurrency 1,2 --max-tokens 4"
        " --prompt 'alpha beta' --prompt 'gamma delta' --format json" +
        std::string(cache ? "" : " --no-cache-probe");
    const int total = 2 * (2 * 3 + (cache ? 3 : 0));  // prompts x (levels x repeats + cache probe)
    const int full_before = probes();

    auto full = run(dir, "run --quiet" + ep + plan + " --out '" + (dir / "full").string() + "'");
    CAPTURE(full.output);
    REQUIRE(full.code == 0);
    CHECK(probes() - full_before == total);

    // Interrupted after a few probes.
    const int before = probes();
    const fs::path part = dir / "part";
    pid_t pid = start(dir, "run --quiet" + ep + plan + " --out '" + part.string() + "'");
    REQUIRE(pid > 0);
    for (int i = 0; i < 2000 && probes() - before < (cache ? 2 : 5); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill(pid, SIGINT);
    CHECK(exit_status(pid) == 130);
    AuditReport partial = load_report((part / "report.json").string());
    const int finished = static_cast<int>(partial.completions.size());
    CHECK(finished > 0);
    CHECK(finished < total);

    // Refused before any request: no endpoint, another URL, other request settings, other plan flags.
    const int mid = probes();
    const std::string resume = "run --quiet --resume '" + part.string() + "'";
    if (!cache) {
      check_refused(run(dir, resume), "the run audited endpoints; resume it with the same --endpoint a=" +
                                          srv.url() + "/v1 (and the same API key), or start a new run");
      check_refused(
          run(dir, resume + " --endpoint a=http://127.0.0.1:9/v1"),
          "endpoint 1 (a=http://127.0.0.1:9/v1) has url \"http://127.0.0.1:9/v1\" but the run used \"" +
              srv.url() + "/v1\"");
      check_refused(run(dir, resume + ep + " --api-model other"),
                    "has api_model \"other\" but the run used \"m\"");
      check_refused(run(dir, resume + ep + " --stream"), "has stream true but the run used false");
      check_refused(run(dir, resume + ep + " --concurrency 1"),
                    "--concurrency gives [1] but the run used [1,2]");
      check_refused(run(dir, resume + ep + " --extra-body '{\"top_k\": 1}'"), "has --extra-body ");
    }
    CHECK(probes() == mid);

    // Resumed: only the missing requests are sent, the cache probe setting holds, and the result is the
    // uninterrupted run's, completion by completion.
    const size_t seen_mid = srv.seen().size();
    auto r = run(dir, resume + ep);
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(probes() - mid == total - finished);
    AuditReport done = load_report((part / "report.json").string());
    AuditReport whole = load_report(((dir / "full") / "report.json").string());
    CHECK(!done.summary.interrupted);
    REQUIRE(done.completions.size() == static_cast<size_t>(total));
    std::map<std::string, std::string> a, b;
    for (const auto& c : done.completions) a[cell_key(c)] = c.text;
    for (const auto& c : whole.completions) b[cell_key(c)] = c.text;
    CHECK(a == b);
    size_t cached = 0;
    for (const auto& c : done.completions) cached += c.cache_state.empty() ? 0 : 1;
    CHECK(cached == (cache ? 6u : 0u));
    REQUIRE(done.cases.size() == whole.cases.size());
    for (size_t i = 0; i < done.cases.size(); ++i) {
      CHECK(done.cases[i].prompt_id == whole.cases[i].prompt_id);
      CHECK(done.cases[i].n == whole.cases[i].n);
      CHECK(done.cases[i].unique == whole.cases[i].unique);
    }
    CHECK(done.plan == whole.plan);
    // The request statistics cover both segments: the interrupted one's and what the resumed one sent
    // (every request the server received since, less the preflight's).
    const auto seen = srv.seen();
    int64_t sent_after = 0;
    for (size_t i = seen_mid; i < seen.size(); ++i)
      if (!(seen[i].body.is_object() && seen[i].body.value("prompt", std::string()) == "Hello")) ++sent_after;
    auto stat = [](const AuditReport& rep, const char* k) {
      return rep.environment["remote_stats"]["a"][k].get<int64_t>();
    };
    CHECK(stat(partial, "requests") > 0);
    // Every POST of the resumed segment either finished (requests) or was a filler still in flight
    // when its closed loop ended (aborted; one that had not reached the server yet is not seen).
    const int64_t added = stat(done, "requests") - stat(partial, "requests");
    const int64_t added_aborted = stat(done, "aborted") - stat(partial, "aborted");
    CAPTURE(added);
    CAPTURE(added_aborted);
    CAPTURE(sent_after);
    CHECK(added <= sent_after);
    CHECK(sent_after <= added + added_aborted);
  }
}

TEST_CASE("--resume of a finished, signed run: nothing to resume, nothing written, the signature still holds") {
  auto dir = test::scratch_dir("resume-finished");
  const fs::path out = dir / "out", key = dir / "signer";
  REQUIRE(run(dir, "keygen --out '" + key.string() + "'").code == 0);
  auto first = run(dir, "run --quiet -n 1 --batch-sizes 1 --modes batch-invariant --max-tokens 4 "
                        "--prompt 'Once upon a time' --sign-key '" + key.string() + "' --out '" + out.string() + "'");
  CAPTURE(first.output);
  REQUIRE(first.code == 0);
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(out)) before[e.path().filename().string()] = test::slurp(e.path());
  REQUIRE(before.count("report.intoto.jsonl"));

  auto again = run(dir, "run --quiet --resume '" + out.string() + "'");
  CAPTURE(again.output);
  CHECK(again.code == 0);
  CHECK(again.output == "nothing to resume: the run in " + out.string() +
                            " finished (report.json, verdict reproducible); nothing was written\n");
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(out)) after[e.path().filename().string()] = test::slurp(e.path());
  CHECK(after == before);
  auto v = run(dir, "verify '" + out.string() + "' --pubkey '" + key.string() + ".pub'");
  CAPTURE(v.output);
  CHECK(v.code == 0);
  // A gate run again gets the finished run's own answer: a divergent run stays exit 1.
  const fs::path div = dir / "divergent";
  fs::create_directories(div);
  nlohmann::json doc = nlohmann::json::parse(before.at("report.json"));
  doc["summary"]["verdict"] = "divergent";
  write_file_atomic((div / "report.json").string(), doc.dump());
  auto d = run(dir, "run --quiet --resume '" + div.string() + "'");
  CAPTURE(d.output);
  CHECK(d.code == 1);
  CHECK(d.output.find("finished (report.json, verdict divergent); nothing was written") != std::string::npos);
}

namespace {
// The digest `run` records for a list of plain prompts: SHA-256 of their canonical JSON, in plan order.
std::string canonical_prompts_digest(const std::vector<std::pair<std::string, std::string>>& ps) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [id, text] : ps) a.push_back({{"id", id}, {"text", text}});
  return sha256_hex(a.dump());
}
}  // namespace

TEST_CASE("--resume compares prompts by their canonical digest: a colliding set and edited messages are refused; "
          "a report with the older digest form still resumes") {
  auto dir = test::scratch_dir("resume-prompts-digest");
  const std::string plan = " -n 1 --batch-sizes 1 --modes batch-invariant --max-tokens 3 --format json";
  // "a<TAB>b" / "c" and "a" / "b<TAB>c" wrote the same "id\\ttext\\n" line.
  std::ofstream(dir / "tab-in-id.jsonl") << R"({"id": "a\tb", "prompt": "c"})" << "\n";
  std::ofstream(dir / "tab-in-text.jsonl") << R"({"id": "a", "prompt": "b\tc"})" << "\n";
  const fs::path out = dir / "out";
  auto first = run(dir, "run --quiet --prompts '" + (dir / "tab-in-id.jsonl").string() + "'" + plan + " --out '" +
                            out.string() + "'");
  CAPTURE(first.output);
  REQUIRE(first.code == 0);
  AuditReport r0 = load_report((out / "report.json").string());
  CHECK(r0.environment["digests"]["prompts_sha256"] == canonical_prompts_digest({{"a\tb", "c"}}));
  check_refused(run(dir, "run --quiet --resume '" + out.string() + "' --prompts '" +
                             (dir / "tab-in-text.jsonl").string() + "'"),
                "the prompts given (1, sha256 ");

  // A chat prompt whose messages were edited in the checkpoint is not the run's prompt any more.
  std::ofstream(dir / "chat.jsonl") << R"({"id": "c1", "messages": [{"role": "user", "content": "Once upon"}]})"
                                    << "\n";
  const fs::path chat = dir / "chat";
  auto c = run(dir, "run --quiet --prompts '" + (dir / "chat.jsonl").string() + "'" + plan + " --out '" +
                        chat.string() + "'");
  CAPTURE(c.output);
  REQUIRE(c.code == 0);
  nlohmann::json j = nlohmann::json::parse(test::slurp(chat / "report.json"));
  REQUIRE(j["plan"]["prompt_messages"]["c1"].is_array());
  j["plan"]["prompt_messages"]["c1"][0]["role"] = "system";
  j["summary"]["interrupted"] = true;
  std::ofstream(chat / "report.json", std::ios::trunc) << j.dump();
  check_refused(run(dir, "run --quiet --resume '" + chat.string() + "'"), "(the file was edited); start a new run");

  // A report that recorded the older form ("id\\ttext\\n" per prompt) resumes, and records the new form.
  nlohmann::json old = nlohmann::json::parse(test::slurp(out / "report.json"));
  REQUIRE(old["completions"].size() >= 1);
  const size_t all = old["completions"].size();
  old["completions"].erase(old["completions"].size() - 1);
  old["summary"]["interrupted"] = true;
  old["summary"]["verdict"] = "interrupted";
  old["environment"]["digests"]["prompts_sha256"] = sha256_hex("a\tb\tc\n");
  std::ofstream(out / "report.json", std::ios::trunc) << old.dump(2);
  auto resumed = run(dir, "run --quiet --resume '" + out.string() + "'");
  CAPTURE(resumed.output);
  CHECK(resumed.code == 0);
  AuditReport after = load_report((out / "report.json").string());
  CHECK(after.completions.size() == all);
  CHECK(after.environment["digests"]["prompts_sha256"] == canonical_prompts_digest({{"a\tb", "c"}}));
}
