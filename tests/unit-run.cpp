// `repro-audit run` end to end through the real binary on the embedded synthetic model:
// reports, exit codes, bad input, Ctrl-C / SIGTERM partial output and --resume, --baseline.
#include <doctest/doctest.h>

#include <set>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "repro/audit/analysis.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "repro/model/model.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
// Every test gets its own cache so the embedded model is synthesized in a known place.
std::string env(const fs::path& dir) { return "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' "; }
std::string cli(const fs::path& dir, const std::string& args) { return env(dir) + "'" + test::binary() + "' " + args; }
test::CmdResult sh(const std::string& cmd) { return test::run_shell(cmd); }
}  // namespace

TEST_CASE("run with no arguments: quick profile on the embedded model, all reports, exit 0") {
  auto dir = test::scratch_dir("run-default");
  auto r = sh("cd '" + dir.string() + "' && " + cli(dir, "run --quiet"));
  INFO(r.output);
  CHECK(r.code == 0);
  for (const char* f : {"report.json", "report.md", "report.html", "report.junit.xml"})
    CHECK(fs::exists(dir / "repro-audit-report" / f));
  AuditReport rep = load_report((dir / "repro-audit-report" / "report.json").string());
  CHECK(rep.schema == "repro-audit/report/v1");
  CHECK(rep.profile == "quick");
  CHECK(rep.summary.verdict == "reproducible");
  CHECK(verify_report_digest(read_file((dir / "repro-audit-report" / "report.json").string())));
  int invariant_cases = 0;
  std::set<std::string> precisions;
  for (const auto& c : rep.cases)
    if (c.mode == "batch-invariant") {
      ++invariant_cases;
      precisions.insert(c.precision);
      CHECK(c.unique == 1);
      CHECK(c.tarr);
      CHECK(!c.bit_divergent);
    }
  CHECK(invariant_cases == 3 * 2);  // 3 prompts at f32 and bf16 (the quick profile's precisions)
  CHECK(precisions == std::set<std::string>{"bf16", "f32"});
  CHECK(rep.plan["precisions"] == nlohmann::json::array({"f32", "bf16"}));
  CHECK(rep.environment["engine"]["precisions"] == nlohmann::json::array({"f32", "bf16"}));
  bool has_ratio = false;
  for (const auto& t : rep.throughput)
    if (t.mode == "batch-invariant" && t.ratio_vs_default) has_ratio = true;
  CHECK(has_ratio);
  CHECK(rep.environment.contains("model"));
  CHECK(rep.environment["digests"].contains("model_sha256"));
  auto doc = nlohmann::json::parse(read_file((dir / "repro-audit-report" / "report.json").string()));
  CHECK(doc["digests"]["profile_sha256"] == rep.environment["digests"]["profile_sha256"]);
  CHECK(doc["digests"]["model_sha256"] == rep.environment["model"]["sha256"]);
  CHECK(doc["plan"]["cache_probe"] == true);
  // Markdown and HTML explain themselves: prompt text, environment, throughput with its measurements.
  for (const char* f : {"report.md", "report.html"}) {
    CAPTURE(f);
    std::string text = read_file((dir / "repro-audit-report" / f).string());
    CHECK(text.find("Once upon a time") != std::string::npos);
    CHECK(text.find("Environment") != std::string::npos);
    CHECK(text.find("stories260K") != std::string::npos);
    CHECK(text.find(rep.environment["model"]["sha256"].get<std::string>()) != std::string::npos);
    CHECK(text.find("OpenBLAS") != std::string::npos);
    CHECK(text.find("the throughput of default (mean ± sd over ") != std::string::npos);  // one ratio definition, with spread
    CHECK(text.find("; per batch size: batch 1: ") != std::string::npos);
    CHECK(std::none_of(text.begin(), text.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20 && ch != '\n'; }));
  }
  for (const auto& t : rep.throughput) {
    CAPTURE(t.batch_size);
    CHECK(t.runs >= 3);  // each batched run of the cell is one measurement (3 prompts at least)
    CHECK(t.min_tokens_per_s <= t.mean_tokens_per_s);
    CHECK(t.mean_tokens_per_s <= t.max_tokens_per_s);
    CHECK(t.stddev_tokens_per_s >= 0);
  }
  // `repro-audit` alone is `repro-audit run`
  auto r2 = sh("cd '" + dir.string() + "' && " + cli(dir, "--help"));
  CHECK(r2.output.find("run") != std::string::npos);
}

TEST_CASE("run: bad input exits 2 with one line naming the flag or file") {
  auto dir = test::scratch_dir("run-bad");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"run --repeats 0", "--repeats must be an integer from 1 to 1000000 (got 0)"},
      {"run --modes fast", "--modes must be default, batch-invariant, deterministic or tp-invariant (got 'fast')"},
      {"run --min-tarr nan", "--min-tarr must be a number from 0 to 1 (got nan)"},
      {"run --temperatures=0,-0.5", "--temperatures must be numbers from 0 to 10 (got -0.5)"},
      {"run --profile nosuch", "unknown profile 'nosuch'"},
      {"run --prompts /nonexistent/p.txt", "cannot open prompts file '/nonexistent/p.txt'"},
      {"run --model /nonexistent/m.gguf", "/nonexistent/m.gguf"},
      {"run --batch-sizes 1,x", "--batch-sizes must be integers from 1 to 4096 (got 'x')"},
      {"run --max-tokens 100000", "context length"},
      {"run --format pdf", "pdf"},
      {"run --positions sideways", "--positions must be first, middle, last or a non-negative integer (got 'sideways')"},
      {"run --no-such-flag", "no-such-flag"},
      {"run --precisions f32,fp8", "--precisions must be f32, bf16 or f16 (got 'fp8')"},
      {"run --precision bf16 --precisions f32", "--precision and --precisions exclude each other"},
      // the gate must apply to something that runs
      {"run --modes default", "the gate of profile 'quick' (thresholds.modes; override with --gate-modes): "
                              "'batch-invariant' is not a mode or endpoint label of this run; this run has default"},
      {"run --gate-modes foo", "--gate-modes: 'foo' is not a mode or endpoint label of this run; this run has "
                               "default, batch-invariant"},
      {"run --prompt ''", "--prompt: empty prompt"},
      {"run --profile quik", "unknown profile 'quik' (did you mean 'quick'?)"},
  };
  for (const auto& c : cases) {
    auto r = sh(cli(dir, c.args + " --quiet --out '" + (dir / "out").string() + "'"));
    CAPTURE(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
    CHECK(r.output.rfind("error: ", 0) == 0);
  }
}

TEST_CASE("run: the gate fails (exit 1) when a gated mode diverges, and --baseline detects drift") {
  auto dir = test::scratch_dir("run-gate");
  // Sampled decoding with a seed per config: each case must still be reproducible in batch-invariant mode.
  std::string common = "--quiet --max-tokens 8 --repeats 2 --batch-sizes 1,4 --prompt 'Once upon a time' ";
  auto a = sh(cli(dir, "run " + common + "--modes batch-invariant --out '" + (dir / "a").string() + "'"));
  INFO(a.output);
  CHECK(a.code == 0);
  // Gate the default mode with a strict threshold on the bitwise level via an extractor-free run:
  // default mode's divergence, if any, is a measurement; gating it may pass or fail, but the
  // exit code must agree with the report's verdict.
  auto b = sh(cli(dir, "run " + common + "--modes default --gate-modes default --out '" + (dir / "b").string() + "'"));
  AuditReport rb = load_report((dir / "b" / "report.json").string());
  CHECK(b.code == (rb.summary.divergent_cases > 0 ? 1 : 0));
  // Same plan again, compared against the first run: no drift.
  auto c = sh(cli(dir, "run " + common + "--modes batch-invariant --out '" + (dir / "c").string() + "' --baseline '" +
                           (dir / "a" / "report.json").string() + "'"));
  CHECK(c.code == 0);
  // Another prompt against that baseline: cases added and removed -> drift -> exit 1, and every report says so.
  auto d = sh(cli(dir, "run --max-tokens 8 --repeats 2 --batch-sizes 1,4 --prompt 'Lily wanted to' "
                       "--modes batch-invariant --out '" +
                           (dir / "d").string() + "' --baseline '" + (dir / "a" / "report.json").string() + "'"));
  INFO(d.output);
  CHECK(d.code == 1);
  CHECK(d.output.find("verdict: DRIFT (exit 1)") != std::string::npos);
  CHECK(d.output.find("REPRODUCIBLE") == std::string::npos);
  AuditReport rd = load_report((dir / "d" / "report.json").string());
  CHECK(rd.summary.verdict == "drift");
  REQUIRE(rd.baseline.has_value());
  CHECK(rd.baseline->drifted);
  CHECK(rd.baseline->digest_ok);
  CHECK(rd.baseline->file == (dir / "a" / "report.json").string());
  CHECK(rd.baseline->report_sha256.size() == 64);
  CHECK(rd.baseline->changes.size() == 4);  // one case removed, one added, at each of the two precisions
  std::string md = read_file((dir / "d" / "report.md").string());
  CHECK(md.find("**Verdict: DRIFT (gate: every mode)** (exit 1)") != std::string::npos);
  CHECK(md.find("## Baseline") != std::string::npos);
  std::string html = read_file((dir / "d" / "report.html").string());
  CHECK(html.find("Verdict: DRIFT (gate: every mode)<small>") != std::string::npos);
  CHECK(html.find("id=\"baseline\"") != std::string::npos);
  std::string junit = read_file((dir / "d" / "report.junit.xml").string());
  CHECK(junit.find("<testsuites name=\"repro-audit\" tests=\"3\" failures=\"1\" errors=\"0\">") != std::string::npos);
  CHECK(junit.find("type=\"drift\"") != std::string::npos);
  // no drift: the baseline section says so and the verdict stays reproducible
  AuditReport rc = load_report((dir / "c" / "report.json").string());
  CHECK(rc.summary.verdict == "reproducible");
  REQUIRE(rc.baseline.has_value());
  CHECK_FALSE(rc.baseline->drifted);
}

TEST_CASE("run: an answer regex the tiny model never matches is NO ANSWER (exit 0 with a warning), not divergence") {
  auto dir = test::scratch_dir("run-no-answer");
  auto r = sh("cd '" + dir.string() + "' && " +
              cli(dir, "run -n 2 --prompt 'Once upon a time' --modes batch-invariant --batch-sizes 1,2 --max-tokens 4 "
                       "--answer-regex 'ANSWER: ([0-9]+)' --format json,md,junit --out o"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("verdict: NO ANSWER (exit 0)") != std::string::npos);
  CHECK(r.output.find("warning: 'batch-invariant (f32)': --answer-regex found no answer in 1 of 1 cases (their outputs "
                      "are identical, so not divergent; TARa has nothing to compare): check --answer-regex against the "
                      "outputs") != std::string::npos);
  CHECK(r.output.find("cases with no answer") != std::string::npos);
  auto doc = nlohmann::json::parse(test::slurp(dir / "o" / "report.json"));
  CHECK(doc["summary"]["verdict"] == "no answer");
  CHECK(doc["summary"]["divergent_cases"] == 0);
  const auto& m = doc["summary"]["modes"][0];
  CHECK(m["verdict"] == "no answer");
  CHECK(m["gate"] == "pass");
  CHECK(m["no_answer_cases"] == 1);
  const auto& c = doc["cases"][0];
  CHECK(c["no_answer"] == true);
  CHECK(c["divergent"] == false);
  CHECK(c["tara"] == false);
  CHECK(c["answer_missing"] == c["n"]);
  CHECK(test::slurp(dir / "o" / "report.md").find(": NO ANSWER") != std::string::npos);
  CHECK(test::slurp(dir / "o" / "report.junit.xml").find("<skipped message=\"no answer: ") != std::string::npos);
  // An extractor that finds the answer: reproducible, no no_answer anywhere.
  r = sh("cd '" + dir.string() + "' && " +
         cli(dir, "run -n 2 --prompt 'Once upon a time' --modes batch-invariant --batch-sizes 1,2 --max-tokens 4 "
                  "--answer-regex '(.)' --format json --out o2"));
  CHECK(r.code == 0);
  auto doc2 = nlohmann::json::parse(test::slurp(dir / "o2" / "report.json"));
  CHECK(doc2["summary"]["verdict"] == "reproducible");
  CHECK(doc2["cases"][0]["no_answer"] == false);
  CHECK(!doc2["summary"]["modes"][0].contains("no_answer_cases"));
}

TEST_CASE("run: Ctrl-C and SIGTERM write what finished (exit 130 / 143) and --resume completes the plan") {
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    auto dir = test::scratch_dir(sig == SIGINT ? "run-sigint" : "run-sigterm");
    auto out = dir / "out";
    // Make the cache first so the signal lands in the replay, not in model synthesis.
    REQUIRE(sh(cli(dir, "generate --max-tokens 1")).code == 0);
    std::string args =
        "run --quiet --repeats 6 --precisions f32,bf16 --batch-sizes 1,8,16 --max-tokens 24 --out '" + out.string() +
        "'";
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::string cmd = env(dir) + "exec '" + test::binary() + "' " + args + " >/dev/null 2>&1";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    kill(pid, sig);
    int st = 0;
    waitpid(pid, &st, 0);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == (sig == SIGINT ? 130 : 143));
    REQUIRE(fs::exists(out / "report.json"));
    AuditReport partial = load_report((out / "report.json").string());
    CHECK(partial.summary.interrupted);
    CHECK(partial.summary.verdict == "interrupted");
    CHECK(partial.completions.size() > 0);
    // 3 prompts x (1 + 2x2 + 2x2 contexts) x 6 repeats x 2 precisions x 2 modes
    const size_t total = 3 * 9 * 6 * 2 * 2;
    CHECK(partial.completions.size() < total);
    auto r = sh(cli(dir, "run --quiet --resume '" + out.string() + "'"));
    INFO(r.output);
    CHECK(r.code == 0);
    AuditReport done = load_report((out / "report.json").string());
    CHECK(done.completions.size() == total);
    CHECK(!done.summary.interrupted);
  }
}

TEST_CASE("run: the printed generate command replays a batched completion bit for bit") {
  auto dir = test::scratch_dir("run-repro-command");
  auto r = sh(cli(dir, "run --quiet --modes default --gate-modes default --precisions bf16 --batch-sizes 1,4 "
                       "--positions last --filler-sets 2 --max-tokens 12 --prompt \"Lily's dog\" --format json "
                       "--out '" + (dir / "out").string() + "'"));
  INFO(r.output);
  REQUIRE((r.code == 0 || r.code == 1));
  AuditReport rep = load_report((dir / "out" / "report.json").string());
  const Completion* batched = nullptr;
  for (const auto& c : rep.completions)
    if (c.batch_size == 4 && c.filler_set == "f1") batched = &c;
  REQUIRE(batched != nullptr);
  CHECK(batched->position == 3);
  std::string cmd = repro_command(rep, *batched);
  REQUIRE(cmd.rfind("repro-audit generate ", 0) == 0);
  CHECK(cmd.find("--precision bf16") != std::string::npos);
  CHECK(cmd.find("--filler-seed 2") != std::string::npos);  // filler_seed 1 + set 1
  auto g = sh(env(dir) + "'" + test::binary() + "'" + cmd.substr(std::string("repro-audit").size()));
  INFO(cmd);
  INFO(g.output);
  REQUIRE(g.code == 0);
  auto j = nlohmann::json::parse(g.output);
  CHECK(j["tokens"].get<std::vector<int>>() == batched->tokens);
  CHECK(j["text"].get<std::string>() == batched->text);
  CHECK(j["logits_sha256"].get<std::string>() == batched->logits_sha256);
  CHECK(j["fillers"].get<std::vector<std::string>>() == batched->filler_ids);
}

TEST_CASE("run: reports show the first divergent tokens as the model's text, with ids") {
  // The analysis of a divergent case with the tokenizer of the embedded model: record_token_text keeps
  // the tokenizer's text for the ids at the first divergence, and the reports print it.
  auto dir = test::scratch_dir("run-token-text");
  auto r = sh(cli(dir, "run --quiet --modes batch-invariant --precisions f32 --batch-sizes 1 --max-tokens 4 --prompt 'Once upon a time' "
                       "--format json --out '" + (dir / "out").string() + "'"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  AuditReport rep = load_report((dir / "out" / "report.json").string());
  REQUIRE(rep.completions.size() == 1);
  CHECK(rep.token_text.empty());  // nothing diverged: no token text recorded
  auto model = load_model(rep.environment["model"]["path"].get<std::string>());
  // a second completion that leaves the first at token 2 with the newline byte token and a word
  Completion other = rep.completions[0];
  const int newline = model->tokenizer->encode("\n", false).back();
  other.tokens[2] = newline;
  other.text = model->tokenizer->decode(other.tokens);
  other.repeat = 1;
  rep.completions.push_back(other);
  rep.throughput.clear();
  analyze(rep);
  record_token_text(rep, [&](int id) { return model->tokenizer->piece(id); });
  const Cluster& k = rep.cases[0].clusters[1];
  REQUIRE(k.first_divergence_token == 2);
  const std::string want_major = display_text(model->tokenizer->piece(rep.completions[0].tokens[2]));
  CHECK(rep.token_text.at(std::to_string(newline)) == "\\n");
  CHECK(!want_major.empty());
  std::string label = "\"" + want_major + "\" (id " + std::to_string(rep.completions[0].tokens[2]) + ")";
  CHECK(divergence_label(rep, rep.cases[0], k).find(label + ", logprob ") != std::string::npos);
  CHECK(divergence_label(rep, rep.cases[0], k).find(" vs \"\\n\" (id " + std::to_string(newline) + ")") != std::string::npos);
  std::string h = to_html(rep);
  CHECK(h.find("(id " + std::to_string(newline) + ")") != std::string::npos);
  CHECK(h.find("&quot;\\n&quot;") != std::string::npos);
}
