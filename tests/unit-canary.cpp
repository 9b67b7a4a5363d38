// `repro-audit canary`: the classification rules on analysed reports, and end to end through the
// real binary: GREEN on an unchanged rerun, YELLOW on a bit-level change (a baseline whose recorded
// bits differ in one context), RED on another model file,
// exit codes and bad input; against `serve` on loopback: GREEN, then RED when the served model changes.
// An untrusted baseline: an edited one (stale digest) is refused before any request, the API key goes
// only to URLs given on the command line, --pubkey checks the baseline's envelope, --out never
// overwrites the baseline, and an interrupted baseline is refused as incomplete.
// ctest-labels: unit remote
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "repro/audit/canary.hpp"
#include "repro/audit/compare.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/report/canonical.hpp"
#include "repro/report/report.hpp"
#include "fault_server.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
std::string env(const fs::path& dir) { return "REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' "; }
test::CmdResult cli(const fs::path& dir, const std::string& args) {
  return test::run_shell("cd '" + dir.string() + "' && " + env(dir) + "'" + test::binary() + "' " + args);
}
nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p.string())); }

// A one-case report with the given token outputs (cluster hashes) and answers.
AuditReport one_case(std::vector<std::string> hashes, std::vector<std::string> answers = {}) {
  AuditReport r;
  r.summary.verdict = "reproducible";
  CaseResult c;
  c.prompt_id = "p1";
  c.decoding_id = "greedy";
  c.mode = "default";
  for (size_t i = 0; i < hashes.size(); ++i) {
    Cluster k;
    k.hash = hashes[i];
    if (!answers.empty()) k.answer = answers[i];
    c.clusters.push_back(k);
  }
  if (!answers.empty()) c.tara = answers.size() == 1;
  r.cases.push_back(c);
  return r;
}
}  // namespace

TEST_CASE("canary rules: identical is GREEN; token drift RED; answer-preserving YELLOW; answer drift RED") {
  CHECK(classify_canary(one_case({"a"}), one_case({"a"})).level == CanaryLevel::Green);
  auto tok = classify_canary(one_case({"a"}), one_case({"b"}));
  CHECK(tok.level == CanaryLevel::Red);
  CHECK(tok.token_drift == 1);
  REQUIRE(tok.alarms.size() == 1);
  CHECK(tok.alarms[0].rfind("RED case p1 [greedy] default: token outputs changed", 0) == 0);
  auto same_answer = classify_canary(one_case({"a"}, {"42"}), one_case({"a", "b"}, {"42", "42"}));
  CHECK(same_answer.level == CanaryLevel::Yellow);
  CHECK(same_answer.answer_preserving == 1);
  auto other_answer = classify_canary(one_case({"a"}, {"42"}), one_case({"b"}, {"41"}));
  CHECK(other_answer.level == CanaryLevel::Red);
  CHECK(other_answer.answer_drift == 1);
  // a case missing from the rerun, or a rerun that failed, vouches for nothing
  AuditReport none = one_case({});
  none.cases.clear();
  CHECK(classify_canary(one_case({"a"}), none).level == CanaryLevel::Red);
  AuditReport failed = one_case({"a"});
  failed.summary.verdict = "errors";
  CHECK(classify_canary(one_case({"a"}), failed).level == CanaryLevel::Red);
}

TEST_CASE("canary rules: served model and system_fingerprint changes are RED; endpoint noise is not bit drift") {
  AuditReport a = one_case({"a"}), b = one_case({"a"});
  a.environment["endpoints"] = nlohmann::json::array();
  b.environment = a.environment;
  Completion ca;
  ca.prompt_id = "p1";
  ca.decoding_id = "greedy";
  ca.mode = "default";
  ca.tokens = {1, 2};
  ca.logprobs = {-0.5f, -0.25f};
  ca.system_fingerprint = "fp_1";
  Completion cb = ca;
  cb.logprobs[1] = -0.2500001f;  // other bits, same tokens
  a.completions = {ca};
  b.completions = {cb};
  a.cases[0].bit_unique = 2;     // the endpoint was already bit-divergent in the baseline
  CHECK(classify_canary(a, b).level == CanaryLevel::Green);
  a.cases[0].bit_unique = 1;     // ... or not: then other bits are drift
  auto bits = classify_canary(a, b);
  CHECK(bits.level == CanaryLevel::Yellow);
  CHECK(bits.bit_drift == 1);
  b.completions[0].system_fingerprint = "fp_2";
  auto fp = classify_canary(a, b);
  CHECK(fp.level == CanaryLevel::Red);
  CHECK(canary_text(fp).find("RED default system_fingerprint: fp_1 -> fp_2") != std::string::npos);
}

TEST_CASE("canary end to end: GREEN unchanged, YELLOW on other bits, RED on another model file") {
  auto dir = test::scratch_dir("canary");
  REQUIRE(cli(dir, "model synth --out m.gguf --seed 1 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2").code == 0);
  auto base = cli(dir, "run --model m.gguf --max-tokens 6 --quiet --out base");
  INFO(base.output);
  REQUIRE(base.code == 0);

  auto green = cli(dir, "canary --baseline base --quiet --out green");
  INFO(green.output);
  CHECK(green.code == 0);
  CHECK(green.output.find("canary GREEN") != std::string::npos);
  auto gj = read_json(dir / "green" / "canary.json");
  CHECK(gj["level"] == "GREEN");
  CHECK(gj["cases_compared"].get<int>() > 0);
  CHECK(fs::exists(dir / "green" / "report.json"));
  CHECK(load_report((dir / "green" / "report.json").string()).baseline.has_value());

  // The same baseline with one default-mode completion's recorded logprob moved by one ulp, tokens
  // kept: the rerun's bits differ from it in exactly that context.
  fs::create_directories(dir / "edited");
  nlohmann::json rj = read_json(dir / "base" / "report.json");
  bool edited = false;
  for (auto& c : rj["completions"])
    if (!edited && c["mode"] == "default" && c["precision"] == "f32" && !c["logprobs"].empty()) {
      float x = c["logprobs"][0].get<float>();
      uint32_t u;
      std::memcpy(&u, &x, 4);
      u ^= 1u;
      std::memcpy(&x, &u, 4);
      c["logprobs"][0] = x;
      edited = true;
    }
  REQUIRE(edited);
  rj["digests"]["report_sha256"] = report_digest(rj);  // a baseline written that way, digest and all
  std::ofstream(dir / "edited" / "report.json") << rj.dump(2);
  auto yellow = cli(dir, "canary --baseline edited/report.json --quiet --out yellow");
  INFO(yellow.output);
  CHECK(yellow.code == 1);
  CHECK(yellow.output.find("canary YELLOW") != std::string::npos);
  CHECK(yellow.output.find("YELLOW default (f32): 1 completion(s) with the same tokens but other bits") != std::string::npos);

  // Another model file at the recorded path.
  REQUIRE(cli(dir, "model synth --out m.gguf --seed 2 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2").code == 0);
  auto red = cli(dir, "canary --baseline base/report.json --quiet --out red");
  INFO(red.output);
  CHECK(red.code == 5);  // RED has its own code: 2 is a usage error
  CHECK(red.output.find("canary RED") != std::string::npos);
  CHECK(red.output.find("RED model digest ") != std::string::npos);
  CHECK(read_json(dir / "red" / "canary.json")["level"] == "RED");
  // another model writes other tokens: where the majority outputs part is shown as text, not hashes
  CHECK((red.output.find("majority output parts at character ") != std::string::npos ||
         red.output.find("majority output differs from its first character: '") != std::string::npos));
  CHECK(red.output.find("token outputs changed") != std::string::npos);

  // the nightly recipe routes the codes: RED pages, a usage error says the job is broken, never pages
  const std::string recipe = std::string(REPRO_SOURCE_DIR) + "/docs/recipes/canary-cron.sh";
  auto cron = test::run_shell("cd '" + dir.string() + "' && " + env(dir) + "REPRO_AUDIT='" + test::binary() +
                              "' sh '" + recipe + "' base nightly");
  INFO(cron.output);
  CHECK(cron.code == 5);
  CHECK(cron.output.find("PAGE canary RED") != std::string::npos);
  auto typo = test::run_shell("cd '" + dir.string() + "' && " + env(dir) + "REPRO_AUDIT='" + test::binary() +
                              "' sh '" + recipe + "' no-such-baseline nightly");
  INFO(typo.output);
  CHECK(typo.code == 2);
  CHECK(typo.output.find("canary job broken (usage error)") != std::string::npos);
  CHECK(typo.output.find("PAGE") == std::string::npos);
}

TEST_CASE("canary --precision bf16 on an f32 baseline maps each mode's cases across the change") {
  auto dir = test::scratch_dir("canary-precision");
  REQUIRE(cli(dir, "model synth --out m.gguf --seed 1 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2").code == 0);
  auto base = cli(dir, "run --model m.gguf --max-tokens 6 --precisions f32 --quiet --out base");
  INFO(base.output);
  REQUIRE(base.code == 0);
  const int cases = static_cast<int>(read_json(dir / "base" / "report.json")["cases"].size());
  REQUIRE(cases > 0);
  auto bf16 = cli(dir, "canary --baseline base --precision bf16 --quiet --out bf16");
  INFO(bf16.output);
  const auto cj = read_json(dir / "bf16" / "canary.json");
  CHECK(cj["cases_compared"].get<int>() == cases);  // not 0: the f32 cases are compared with the bf16 ones
  CHECK(bf16.output.find("compared across the change: default (f32) -> default (bf16)") != std::string::npos);
  CHECK(bf16.output.find("compared across the change: batch-invariant (f32) -> batch-invariant (bf16)") !=
        std::string::npos);
  CHECK(bf16.output.find("missing from the rerun") == std::string::npos);
  CHECK(bf16.output.find("is new in the rerun") == std::string::npos);
  CHECK(cj["mapped"].size() == 2);
  CHECK((bf16.code == 0 || bf16.code == 1 || bf16.code == 5));

  // a baseline that ran both precisions: --precision bf16 reruns its bf16 cases, the f32 ones are not "missing"
  auto both = cli(dir, "run --model m.gguf --max-tokens 6 --precisions f32,bf16 --quiet --out both");
  REQUIRE(both.code == 0);
  auto only = cli(dir, "canary --baseline both --precision bf16 --out only");
  INFO(only.output);
  CHECK(only.code == 0);  // the same bf16 run again: GREEN
  CHECK(only.output.find("reruns the baseline's bf16 cases only") != std::string::npos);
  CHECK(read_json(dir / "only" / "canary.json")["cases_compared"].get<int>() == cases);
}

TEST_CASE("case matching maps one mode or endpoint swapped for another, never an ambiguous set") {
  auto with_modes = [](std::vector<std::pair<std::string, std::string>> modes) {
    AuditReport r;
    for (const auto& [m, p] : modes) {
      CaseResult c;
      c.prompt_id = "p1";
      c.decoding_id = "greedy";
      c.mode = m;
      c.precision = p;
      r.cases.push_back(c);
    }
    return r;
  };
  // a mode swapped for another (diff of a default run with a batch-invariant run)
  auto m = match_cases(with_modes({{"default", "f32"}}), with_modes({{"batch-invariant", "f32"}}));
  REQUIRE(m.cases.size() == 1);
  CHECK(m.cases[0].a != nullptr);
  CHECK(m.cases[0].b != nullptr);
  CHECK(m.mapped == std::vector<std::string>{"default (f32) -> batch-invariant (f32)"});
  // an endpoint label changed
  m = match_cases(with_modes({{"old", ""}}), with_modes({{"new", ""}}));
  CHECK(m.mapped == std::vector<std::string>{"old -> new"});
  // two modes each to another precision: paired by mode
  m = match_cases(with_modes({{"default", "f32"}, {"batch-invariant", "f32"}}),
                  with_modes({{"default", "bf16"}, {"batch-invariant", "bf16"}}));
  CHECK(m.mapped.size() == 2);
  CHECK(m.mapped[0] == "default (f32) -> default (bf16)");
  // two endpoints renamed: which is which is a guess, so nothing is mapped
  m = match_cases(with_modes({{"a", ""}, {"b", ""}}), with_modes({{"c", ""}, {"d", ""}}));
  CHECK(m.mapped.empty());
  CHECK(m.cases.size() == 4);
  // the drift between them says it compared across the change
  auto d = compute_drift(with_modes({{"default", "f32"}}), with_modes({{"default", "bf16"}}));
  CHECK(std::find(d.config.begin(), d.config.end(),
                  "cases of default (f32) -> default (bf16) compared across the change") != d.config.end());
  CHECK(d.cases.empty());
}

TEST_CASE("canary: bad input exits 2 with one line naming the flag and the fix") {
  auto dir = test::scratch_dir("canary-bad");
  auto r = cli(dir, "canary");
  CHECK(r.code == 2);
  CHECK(r.output.find("--baseline") != std::string::npos);
  fs::create_directories(dir / "empty");
  r = cli(dir, "canary --baseline empty");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --baseline 'empty': no report.json in that directory") != std::string::npos);
  r = cli(dir, "canary --baseline nothing.json");
  CHECK(r.code == 2);
  CHECK(r.output.find("nothing.json") != std::string::npos);
}

TEST_CASE("canary against serve on loopback: GREEN on the same server, RED when the model behind the name changes") {
  auto dir = test::scratch_dir("canary-remote");
  const std::string synth = "model synth --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 ";
  REQUIRE(cli(dir, synth + "--seed 1 --out m1.gguf").code == 0);
  REQUIRE(cli(dir, synth + "--seed 2 --out m2.gguf").code == 0);
  const std::string key = "sk-canary-NEVER-IN-OUTPUT-77aa";
  auto m1 = load_model((dir / "m1.gguf").string());
  ServerOptions so;
  so.port = 0;
  so.on_step = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };  // probes overlap: co-batching is proven, not left to timing
  so.api_key = key;
  so.model_name = "house-model";
  auto server = std::make_unique<Server>(*m1, EngineOptions{Mode::BatchInvariant, 1}, so);
  server->start();
  const std::string k = "CANARY_KEY='" + key + "' ";
  auto base = test::run_shell("cd '" + dir.string() + "' && " + k + "'" + test::binary() +
                              "' run --quiet --endpoint inv=" + server->url() +
                              " --api-model house-model --api completions --api-key-env CANARY_KEY --concurrency 1,4"
                              " --repeats 2 --max-tokens 8 --prompt 'Once upon a time' --out base");
  INFO(base.output);
  REQUIRE(base.code == 0);
  auto green = test::run_shell("cd '" + dir.string() + "' && " + k + "'" + test::binary() +
                               "' canary --baseline base --endpoint inv=" + server->url() +
                               " --api-key-env CANARY_KEY --quiet --out green");  // the key goes to given URLs only
  INFO(green.output);
  CHECK(green.code == 0);
  CHECK(green.output.find("canary GREEN") != std::string::npos);
  server->stop();

  // Another model file served under the same name, at another port.
  auto m2 = load_model((dir / "m2.gguf").string());
  server = std::make_unique<Server>(*m2, EngineOptions{Mode::BatchInvariant, 1}, so);
  server->start();
  auto red = test::run_shell("cd '" + dir.string() + "' && " + k + "'" + test::binary() +
                             "' canary --baseline base --endpoint inv=" + server->url() +
                             " --api-key-env CANARY_KEY --quiet --out red");
  INFO(red.output);
  CHECK(red.code == 5);
  CHECK(red.output.find("RED inv system_fingerprint: ") != std::string::npos);
  server->stop();
  // the key reached no file
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() != ".gguf")
      CHECK(read_file(e.path().string()).find(key) == std::string::npos);
}

TEST_CASE("canary renders messages with the baseline's chat template; --chat-template is a change under test") {
  auto dir = test::scratch_dir("canary-chat");
  REQUIRE(cli(dir, "model synth --out m.gguf --seed 3 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 "
                   "--chat-template chatml").code == 0);
  std::ofstream(dir / "msgs.jsonl") << R"({"id": "c1", "messages": [{"role": "system", "content": "Be brief."}, )"
                                       R"({"role": "user", "content": "Tell me about the sea."}]})"
                                    << "\n";
  // The baseline overrides the model's ChatML with Llama 3's format.
  auto base = cli(dir, "run --model m.gguf --prompts msgs.jsonl --chat-template llama3 --max-tokens 6 --modes "
                       "batch-invariant --precisions f32 --batch-sizes 1,2 --quiet --out base");
  INFO(base.output);
  REQUIRE(base.code == 0);
  CHECK(read_json(dir / "base" / "report.json")["environment"]["model"]["chat_template"] == "llama3");

  auto green = cli(dir, "canary --baseline base --quiet --out green");
  INFO(green.output);
  CHECK(green.code == 0);
  CHECK(green.output.find("canary GREEN") != std::string::npos);

  auto red = cli(dir, "canary --baseline base --chat-template chatml --quiet --out red");
  INFO(red.output);
  CHECK(red.code == 5);
  CHECK(red.output.find("canary RED") != std::string::npos);

  // A template file: its digest and source are recorded, and another text is a change even where it
  // renders the same bytes (a comment added).
  const std::string t1 = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                         "<|im_start|>assistant\n";
  std::ofstream(dir / "t1.jinja") << t1;
  std::ofstream(dir / "t2.jinja") << t1 << "{# revised #}";
  base = cli(dir, "run --model m.gguf --prompts msgs.jsonl --chat-template t1.jinja --max-tokens 6 --modes "
                  "batch-invariant --precisions f32 --batch-sizes 1,2 --quiet --out base-file");
  INFO(base.output);
  REQUIRE(base.code == 0);
  const auto model_rec = read_json(dir / "base-file" / "report.json")["environment"]["model"];
  CHECK(model_rec["chat_template"] == "jinja");
  CHECK(model_rec["chat_template_source"] == "--chat-template t1.jinja");
  CHECK(model_rec["chat_template_sha256"] == sha256_hex(t1));
  green = cli(dir, "canary --baseline base-file --chat-template t1.jinja --quiet --out green-file");
  INFO(green.output);
  CHECK(green.code == 0);
  red = cli(dir, "canary --baseline base-file --chat-template t2.jinja --quiet --out red-file");
  INFO(red.output);
  CHECK(red.code == 5);
  CHECK(red.output.find("chat template jinja sha256 " + sha256_hex(t1).substr(0, 12)) != std::string::npos);
  // diff names it among the configuration changes; --resume refuses the other template.
  auto diff = cli(dir, "diff base-file/report.json red-file/report.json");
  INFO(diff.output);
  CHECK(diff.output.find("chat template digest") != std::string::npos);
}

namespace {
// A report rewritten with its digest recomputed: what a careful editor of a golden file produces.
void rewrite_with_digest(const fs::path& from, const fs::path& to, const std::function<void(AuditReport&)>& edit) {
  AuditReport r = load_report(from.string());
  edit(r);
  fs::create_directories(to.parent_path());
  write_file_atomic(to.string(), to_json(r));
}
size_t requests_to(test::FaultServer& s) { return s.received().size(); }
}  // namespace

TEST_CASE("canary: an edited baseline (stale digest) is refused before any request; the key goes only to URLs "
          "given on the command line") {
  auto dir = test::scratch_dir("canary-untrusted");
  test::FaultServerOptions fo;
  fo.models = {"m"};
  test::FaultServer house(fo), evil(fo);
  const std::string key = "sk-canary-key-ONLY-FOR-HOUSE-31";
  const std::string k = "CANARY_KEY='" + key + "' ";
  auto canary = [&](const std::string& args) {
    return test::run_shell("cd '" + dir.string() + "' && " + env(dir) + k + "'" + test::binary() + "' canary " + args +
                           " --api-key-env CANARY_KEY --quiet");
  };
  auto base = test::run_shell("cd '" + dir.string() + "' && " + env(dir) + k + "'" + test::binary() +
                              "' run --quiet --endpoint a=" + house.url() + "/v1 --api-model m --api completions "
                              "--api-key-env CANARY_KEY -n 1 --concurrency 1 --max-tokens 4 --prompt 'alpha beta' "
                              "--no-cache-probe --format json --out base");
  INFO(base.output);
  REQUIRE(base.code == 4);  // concurrency 1 only: UNVERIFIED (nothing was co-batched), the report is written

  // The recorded URL pointed elsewhere, digest left stale: refused, and nobody is asked anything.
  nlohmann::json j = read_json(dir / "base" / "report.json");
  j["environment"]["endpoints"][0]["url"] = evil.url() + "/v1";
  fs::create_directories(dir / "stale");
  std::ofstream(dir / "stale" / "report.json") << j.dump(2);
  const size_t house_before = requests_to(house);
  for (const std::string& extra : std::vector<std::string>{"", " --endpoint a=" + house.url() + "/v1"}) {
    auto r = canary("--baseline stale" + extra + " --out stale-rerun");
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.rfind("error: --baseline 'stale/report.json': its content does not match its recorded digest "
                         "(digests.report_sha256): it was edited after it was written; use the baseline as it was "
                         "written, or record a new one with `repro-audit run`\n", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  CHECK(requests_to(evil) == 0);
  CHECK(requests_to(house) == house_before);
  CHECK_FALSE(fs::exists(dir / "stale-rerun"));

  // The same edit with the digest recomputed: the recorded URL is used, but never with the key.
  rewrite_with_digest(dir / "base" / "report.json", dir / "redirected" / "report.json",
                      [&](AuditReport& r) { r.environment["endpoints"][0]["url"] = evil.url() + "/v1"; });
  auto r = canary("--baseline redirected --out redirected-rerun");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("note: endpoint 'a' uses the URL recorded in the baseline, which never receives the API key; "
                      "give --endpoint 'a=URL' to send it") != std::string::npos);
  REQUIRE(requests_to(evil) > 0);
  for (const auto& q : evil.received()) CHECK(q.authorization.empty());

  // A URL given on the command line gets the key.
  const size_t before = requests_to(house);
  r = canary("--baseline redirected --endpoint a=" + house.url() + "/v1 --out given-rerun");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("never receives the API key") == std::string::npos);
  auto got = house.received();
  REQUIRE(got.size() > before);
  for (size_t i = before; i < got.size(); ++i) CHECK(got[i].authorization == "Bearer " + key);
}

TEST_CASE("canary --pubkey checks the baseline's envelope; --out never overwrites the baseline; an interrupted "
          "baseline is incomplete") {
  auto dir = test::scratch_dir("canary-trust");
  REQUIRE(cli(dir, "model synth --out m.gguf --seed 1 --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2").code == 0);
  REQUIRE(cli(dir, "keygen --out signer").code == 0);
  REQUIRE(cli(dir, "keygen --out other").code == 0);
  const std::string plan = "--model m.gguf --max-tokens 4 --prompt 'Once upon a time' -n 1 --batch-sizes 1 "
                           "--modes batch-invariant --quiet";
  auto base = cli(dir, "run " + plan + " --sign-key signer --out base");
  INFO(base.output);
  REQUIRE(base.code == 0);
  REQUIRE(fs::exists(dir / "base" / "report.intoto.jsonl"));
  REQUIRE(cli(dir, "run " + plan + " --out unsigned").code == 0);

  auto ok = cli(dir, "canary --baseline base --pubkey signer.pub --quiet --out right");
  INFO(ok.output);
  CHECK(ok.code == 0);
  CHECK(ok.output.find("canary GREEN") != std::string::npos);

  auto wrong = cli(dir, "canary --baseline base --pubkey other.pub --quiet --out wrong");
  INFO(wrong.output);
  CHECK(wrong.code == 2);
  CHECK(wrong.output.rfind("error: --baseline 'base/report.json' does not verify with --pubkey other.pub: "
                           "report.intoto.jsonl: signed by key id ", 0) == 0);
  CHECK(std::count(wrong.output.begin(), wrong.output.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "wrong"));

  auto unsigned_ = cli(dir, "canary --baseline unsigned --pubkey signer.pub --quiet --out u");
  INFO(unsigned_.output);
  CHECK(unsigned_.code == 2);
  CHECK(unsigned_.output.rfind("error: --baseline 'unsigned/report.json' does not verify with --pubkey signer.pub: "
                               "report.intoto.jsonl: missing: the report is not signed", 0) == 0);

  // --out naming the baseline's directory (in any spelling) would overwrite the golden report.
  const std::string golden = test::slurp(dir / "base" / "report.json");
  for (const std::string& out : std::vector<std::string>{"base", "base/", "./base", (dir / "base").string()}) {
    auto r = cli(dir, "canary --baseline base/report.json --quiet --out '" + out + "'");
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.rfind("error: --out '" + out + "' is the baseline's directory: the rerun would overwrite the "
                         "golden report; choose another --out\n", 0) == 0);
  }
  CHECK(test::slurp(dir / "base" / "report.json") == golden);

  // An interrupted baseline vouches for part of its plan only.
  rewrite_with_digest(dir / "unsigned" / "report.json", dir / "part" / "report.json", [](AuditReport& r) {
    r.summary.interrupted = true;
    r.summary.verdict = "interrupted";
  });
  auto part = cli(dir, "canary --baseline part --quiet --out part-rerun");
  INFO(part.output);
  CHECK(part.code == 2);
  CHECK(part.output.rfind("error: --baseline 'part/report.json': baseline incomplete: that run was interrupted; "
                          "finish it with `repro-audit run --resume part`, then compare against it\n", 0) == 0);
  CHECK_FALSE(fs::exists(dir / "part-rerun"));
}
