// ctest-labels: remote
// The CI gate against misbehaving endpoints: `repro-audit run --endpoint` (the real binary, libcurl)
// against the loopback fault server. A job that gates on this tool must never pass because the
// endpoint was down, answered with errors or nothing, or the gated endpoint never ran; and errors
// must never count as divergence. Each test checks the exit code, the verdict in every report format
// and the one-line cause on stderr.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "fault_server.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
using test::FaultServer;
using test::FaultServerOptions;
namespace fs = std::filesystem;

namespace {

struct Run {
  int code;
  std::string out, err;
  fs::path dir;
};

// `repro-audit run --quiet`-less run (the terminal summary is checked) with stdout and stderr apart.
Run run_cli(const std::string& name, const std::string& args) {
  Run r;
  r.dir = test::scratch_dir("run-gate-" + name);
  std::string cmd = "('" + test::binary() + "' run " + args + " --out '" + (r.dir / "out").string() + "' > '" +
                    (r.dir / "stdout").string() + "' 2> '" + (r.dir / "stderr").string() + "')";
  r.code = test::run_shell(cmd).code;
  r.out = read_file((r.dir / "stdout").string());
  r.err = read_file((r.dir / "stderr").string());
  return r;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The verdict, as every report format and the terminal state it.
void check_verdict(const Run& r, const std::string& verdict, int code) {
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == code);
  CHECK(r.out.find("verdict: " + upper(verdict) + " (exit " + std::to_string(code) + ")") != std::string::npos);
  const fs::path out = r.dir / "out";
  REQUIRE(fs::exists(out / "report.json"));
  AuditReport rep = load_report((out / "report.json").string());
  CHECK(rep.summary.verdict == verdict);
  std::string md = read_file((out / "report.md").string());
  CHECK(md.find("**Verdict: " + upper(verdict) + " (gate: ") != std::string::npos);
  CHECK(md.find("(exit " + std::to_string(code) + ")") != std::string::npos);
  CHECK(md.find("## What to do") != std::string::npos);
  std::string html = read_file((out / "report.html").string());
  CHECK(html.find("id=\"verdict\">Verdict: " + upper(verdict) + " (gate: ") != std::string::npos);
  CHECK(html.find("id=\"advice\"") != std::string::npos);
  std::string junit = read_file((out / "report.junit.xml").string());
  std::string head = junit.substr(0, junit.find('\n', junit.find("<testsuites")));
  CAPTURE(head);
  const bool clean = head.find("failures=\"0\" errors=\"0\"") != std::string::npos;
  CHECK(clean == (code == 0));
  if (code == 3) {
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
  }
}

}  // namespace

TEST_CASE("gate: an endpoint whose output follows concurrency is gated by default: DIVERGENT, exit 1") {
  FaultServerOptions o;
  o.vary_with_load = true;
  o.slow_s = 0.05;  // requests overlap, so the load a probe sees follows the concurrency
  FaultServer s(o);
  s.set_default(test::Fault::slow);
  auto r = run_cli("load", "--endpoint " + s.url() + " --api-model m --api completions --concurrency 1,8 --repeats 3");
  check_verdict(r, "divergent", 1);
  AuditReport rep = load_report((r.dir / "out" / "report.json").string());
  REQUIRE(rep.summary.modes.size() == 1);
  CHECK(rep.summary.modes[0].gated);
  CHECK(rep.summary.modes[0].verdict == "divergent");
  CHECK(rep.summary.modes[0].gate == "fail");
  CHECK(r.out.find("divergent cases:") != std::string::npos);
  // What to do: the endpoint does not say which engine it is, so both engines' documented switches, each
  // with its limits and source; and a reproducer per divergent cluster, a curl command with the request
  // body and the key as a variable reference.
  CHECK(r.out.find("what to do:") != std::string::npos);
  bool vllm = false, sglang = false;
  for (const auto& a : rep.advice) {
    vllm = vllm || (a.action.find("VLLM_BATCH_INVARIANT=1") != std::string::npos && a.source.find("docs.vllm.ai") != std::string::npos &&
                    !a.limits.empty());
    sglang = sglang || (a.action.find("--enable-deterministic-inference") != std::string::npos &&
                        a.source.find("docs.sglang.io") != std::string::npos && !a.limits.empty());
  }
  CHECK(vllm);
  CHECK(sglang);
  REQUIRE(!rep.cases.empty());
  const std::string& cmd = rep.cases[0].clusters.at(0).repro_command;
  CAPTURE(cmd);
  CHECK(cmd.rfind("curl -sS '" + s.url(), 0) == 0);
  CHECK(cmd.find("\"Authorization: Bearer $OPENAI_API_KEY\"") != std::string::npos);
  CHECK(cmd.find("\"prompt\":") != std::string::npos);
  CHECK(cmd.find("\"model\":\"m\"") != std::string::npos);
  const std::string md = read_file((r.dir / "out" / "report.md").string());
  CHECK(md.find("Send each cluster's first request again") != std::string::npos);
  CHECK(md.find("curl -sS") != std::string::npos);
  // JUnit's failure names the factor the divergence follows (or says none explains it).
  const std::string junit = read_file((r.dir / "out" / "report.junit.xml").string());
  CHECK((junit.find("<failure message=\"explained by ") != std::string::npos ||
         junit.find("<failure message=\"no single factor explains") != std::string::npos));
  // the server returns token ids with logprobs: divergent tokens read as the text the logprobs named
  CHECK(junit.find("&quot; (id ") != std::string::npos);
  CHECK(!rep.token_text.empty());
  // The curl command runs as written and the server answers it (no key needed on loopback).
  auto sent = test::run_shell("OPENAI_API_KEY=unused " + cmd + " -o /dev/null -w '%{http_code}'");
  CHECK(sent.output.find("200") != std::string::npos);
}

TEST_CASE("gate: 4 different outputs of 4 with --max-divergent 0 --min-tarr 1: DIVERGENT, exit 1") {
  FaultServerOptions o;
  o.vary_per_request = true;
  FaultServer s(o);
  auto r = run_cli("vary", "--endpoint e=" + s.url() + " --api-model m --concurrency 1 --repeats 4 --no-cache-probe "
                   "--prompt 'Once upon a time' --max-divergent 0 --min-tarr 1");
  check_verdict(r, "divergent", 1);
  AuditReport rep = load_report((r.dir / "out" / "report.json").string());
  REQUIRE(rep.cases.size() == 1);
  CHECK(rep.cases[0].unique == 4);
}

TEST_CASE("gate: --gate-modes naming no endpoint of the run is a usage error (exit 2), before any request") {
  FaultServer s;
  auto r = run_cli("nolabel", "--endpoint prod=" + s.url() + " --api-model m --gate-modes prd");
  CAPTURE(r.err);
  CHECK(r.code == 2);
  CHECK(r.err.find("--gate-modes: 'prd' is not a mode or endpoint label of this run (did you mean 'prod'?)") !=
        std::string::npos);
  CHECK(s.requests.load() == 0);
  CHECK(!fs::exists(r.dir / "out" / "report.json"));
}

TEST_CASE("gate: 60% failed requests tolerated by --max-error-rate 0.9 are errors, never divergence") {
  FaultServerOptions o;
  o.fail_of_5 = 3;
  FaultServer s(o);
  auto r = run_cli("faults60", "--endpoint fp=" + s.url() + " --api-model m --max-retries 0 --gate-modes fp "
                   "--max-error-rate 0.9 --concurrency 1,4 --repeats 4");
  check_verdict(r, "reproducible", 0);
  AuditReport rep = load_report((r.dir / "out" / "report.json").string());
  CHECK(rep.summary.divergent_cases == 0);
  CHECK(rep.summary.max_unique == 1);
  REQUIRE(rep.summary.modes.size() == 1);
  const auto& m = rep.summary.modes[0];
  CHECK(m.error_rate > 0.4);
  CHECK(m.error_rate <= 0.9);
  CHECK(m.requests > rep.summary.completions + rep.summary.errors);  // fillers are counted
  for (const auto& c : rep.cases)
    if (c.n == 0) CHECK(c.failed);  // a case without completions is never "reproducible"
  CHECK(r.out.find("HTTP 500 x") != std::string::npos);  // first error of each kind, with its count
  CHECK(r.out.find("injected fault") != std::string::npos);
}

TEST_CASE("gate: failed requests over the default --max-error-rate (5%): ERRORS, exit 3, cause on stderr") {
  FaultServerOptions o;
  o.fail_of_5 = 1;  // 20%
  FaultServer s(o);
  auto r = run_cli("faults20", "--endpoint fp=" + s.url() + " --api-model m --max-retries 0 --concurrency 1,4 --repeats 4");
  check_verdict(r, "errors", 3);
  CHECK(r.err.find("error: 'fp': ") != std::string::npos);
  CHECK(r.err.find("over --max-error-rate 5.0%") != std::string::npos);
  CHECK(r.err.find("HTTP 500") != std::string::npos);
  CHECK(r.err.find("injected fault") != std::string::npos);
  AuditReport rep = load_report((r.dir / "out" / "report.json").string());
  CHECK(rep.summary.modes[0].verdict == "errors");
  CHECK(rep.summary.divergent_cases == 0);
}

TEST_CASE("gate: an endpoint that answers every request with empty content: ERRORS, exit 3") {
  FaultServerOptions o;
  o.empty_content = true;
  FaultServer s(o);
  auto r = run_cli("empty", "--endpoint e=" + s.url() + " --api-model m --concurrency 1,2 --repeats 2");
  check_verdict(r, "errors", 3);
  CHECK(r.err.find("empty_content") != std::string::npos);
  CHECK(r.err.find("no completion at all") != std::string::npos);
}

// ---------------------------------------------------------------------------- preflight

namespace {
void check_preflight(const Run& r, int code, const std::string& cause) {
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == code);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(cause) != std::string::npos);
  CHECK(r.out.find("REPRODUCIBLE") == std::string::npos);
  CHECK(!fs::exists(r.dir / "out" / "report.json"));  // nothing replayed, no report claims anything
}
}  // namespace

TEST_CASE("preflight: nothing listening: exit 3, 'cannot connect', with --max-error-rate 0 too") {
  int port;
  {
    FaultServer s;  // take an ephemeral port, then free it
    port = s.port();
  }
  for (const char* extra : {"", " --max-error-rate 0"}) {
    auto r = run_cli("dead", "--endpoint http://127.0.0.1:" + std::to_string(port) + "/v1 --api-model x" + extra);
    check_preflight(r, 3, "cannot connect");
  }
}

TEST_CASE("preflight: 401, a 302 redirect, an HTML login page: exit 3 with the cause") {
  {
    FaultServerOptions o;
    o.expected_key = "sk-right";
    FaultServer s(o);
    auto r = run_cli("401", "--endpoint " + s.url() + " --api-model m --api-key-env NO_SUCH_KEY_VAR");
    check_preflight(r, 3, "HTTP 401: Incorrect API key provided; check the key (--api-key-env / --api-key-file)");
  }
  {
    FaultServerOptions o;
    o.redirect_to = "http://127.0.0.1:1/login";
    FaultServer s(o);
    auto r = run_cli("302", "--endpoint " + s.url() + " --api-model m");
    check_preflight(r, 3, "redirected (HTTP 302) to http://127.0.0.1:1/login; give the final URL as --endpoint");
  }
  {
    FaultServerOptions o;
    o.html_login = true;
    FaultServer s(o);
    auto r = run_cli("html", "--endpoint " + s.url() + " --api-model m");
    check_preflight(r, 3, "answered with an HTML page, not the OpenAI API");
  }
}

TEST_CASE("preflight: an unknown model is a usage error naming the models the server offers") {
  FaultServerOptions o;
  o.models = {"llama-3-8b", "qwen2-7b"};
  FaultServer s(o);
  auto r = run_cli("model", "--endpoint " + s.url() + " --api-model llama-3-8 --api completions");
  check_preflight(r, 2, "it offers llama-3-8b, qwen2-7b (did you mean 'llama-3-8b'?)");
  CHECK(r.err.find("--api-model 'llama-3-8'") != std::string::npos);
}

TEST_CASE("preflight: TLS failure (self-signed certificate, no --ca-cert): exit 3") {
  auto dir = test::scratch_dir("run-gate-tls");
  auto mk = test::run_shell("cd '" + dir.string() +
                            "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                            "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout key.pem -out cert.pem");
  if (mk.code != 0) {
    MESSAGE("SKIPPED: the openssl command-line tool is needed to make a test certificate");
    return;
  }
  FaultServerOptions o;
  o.cert_file = (dir / "cert.pem").string();
  o.key_file = (dir / "key.pem").string();
  FaultServer s(o);
  auto r = run_cli("tls-run", "--endpoint " + s.url() + " --api-model m");
  check_preflight(r, 3, "TLS failure");
  CHECK(r.err.find("--ca-cert") != std::string::npos);
}
