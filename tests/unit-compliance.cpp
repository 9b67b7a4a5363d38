// Signed reports: keygen, sign (DSSE envelope holding an in-toto Statement), verify, checked also by
// tools that are not ours (the openssl command line on the PAE bytes; Debian's securesystemslib),
// and tamper tests: every alteration is detected and named by file and field.
#include <doctest/doctest.h>

#include <cctype>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "repro/common/util.hpp"
#include "repro/compliance/sign.hpp"
#include "repro/report/report.hpp"
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

// One signed report, made once for the whole file (a small real audit on the embedded model).
struct Signed {
  fs::path root, dir, key, pub, key2, pub2;
};
const Signed& signed_report() {
  static Signed s = [] {
    Signed x;
    x.root = test::scratch_dir("compliance");
    x.dir = x.root / "signed";
    x.key = x.root / "k1";
    x.pub = x.root / "k1.pub";
    x.key2 = x.root / "k2";
    x.pub2 = x.root / "k2.pub";
    REQUIRE(test::run_cli("keygen --out " + q(x.key)).code == 0);
    REQUIRE(test::run_cli("keygen --out " + q(x.key2)).code == 0);
    auto r = test::run_cli("run --quiet --max-tokens 8 --repeats 2 --batch-sizes 1,4 --prompt 'Once upon a time' "
                           "--prompt 'The dog' --out " + q(x.dir) + " --sign-key " + q(x.key));
    INFO(r.output);
    REQUIRE(r.code == 0);
    return x;
  }();
  return s;
}

// A fresh copy of the signed report directory to alter.
fs::path copy_signed(const std::string& name) {
  const auto& s = signed_report();
  fs::path d = s.root / name;
  fs::remove_all(d);
  fs::copy(s.dir, d);
  return d;
}

test::CmdResult verify(const fs::path& target, const fs::path& pub) {
  return test::run_cli("verify " + q(target) + (pub.empty() ? "" : " --pubkey " + q(pub)));
}

json envelope_of(const fs::path& dir) {
  std::ifstream in(dir / "report.intoto.jsonl");
  std::string line;
  std::getline(in, line);
  return json::parse(line);
}

// Rewrites report.json with every object's keys in reverse order and 4-space indent.
nlohmann::ordered_json reversed(const nlohmann::ordered_json& j) {
  if (j.is_array()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& e : j) a.push_back(reversed(e));
    return a;
  }
  if (!j.is_object()) return j;
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  nlohmann::ordered_json o = nlohmann::ordered_json::object();
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) o[*k] = reversed(j[*k]);
  return o;
}

// Sets digests.report_sha256 the way anyone can (what a forger does after an edit).
void reseal(json& doc) {
  doc["digests"]["report_sha256"] = report_digest(doc);
}

}  // namespace

TEST_CASE("DSSE PAE and base64 follow the DSSE specification") {
  // The specification's example: PAE("http://example.com/HelloWorld", "hello world").
  CHECK(compliance::dsse_pae("http://example.com/HelloWorld", "hello world") ==
        "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
  CHECK(compliance::dsse_pae("", "") == "DSSEv1 0  0 ");
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x10", 3)}) {
    std::string back;
    REQUIRE(compliance::base64_decode(compliance::base64_encode(s), back));
    CHECK(back == s);
  }
  CHECK(compliance::base64_encode("foobar") == "Zm9vYmFy");
  CHECK(compliance::base64_encode("fooba") == "Zm9vYmE=");
  std::string junk;
  CHECK_FALSE(compliance::base64_decode("Zm9v!mFy", junk));
}

TEST_CASE("keygen: Ed25519 PEM pair, private key mode 0600, never overwritten, key id = SHA-256 of the DER public key") {
  const auto& s = signed_report();
  struct stat st{};
  REQUIRE(::stat(s.key.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  std::string priv = read_file(s.key.string()), pub = read_file(s.pub.string());
  CHECK(priv.rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);
  CHECK(pub.rfind("-----BEGIN PUBLIC KEY-----", 0) == 0);
  // OpenSSL's command line reads both and agrees they are Ed25519.
  auto t = test::run_shell("openssl pkey -in " + q(s.key) + " -noout -text");
  CHECK(t.output.find("ED25519 Private-Key") != std::string::npos);
  // Key id: sha256 of the DER SubjectPublicKeyInfo, as openssl computes it.
  auto der = test::run_shell("openssl pkey -pubin -in " + q(s.pub) + " -outform DER | sha256sum");
  auto key = compliance::load_public_key(s.pub.string());
  CHECK(der.output.substr(0, 64) == key.key_id);
  CHECK(envelope_of(s.dir)["signatures"][0]["keyid"] == key.key_id);
  // Never overwritten: the private key stays byte for byte what it was.
  auto again = test::run_cli("keygen --out " + q(s.key));
  CHECK(again.code == 2);
  CHECK(again.output.find("error: keygen --out: '" + s.key.string() + "' already exists; keys are never overwritten") !=
        std::string::npos);
  CHECK(read_file(s.key.string()) == priv);
  // A lone PREFIX.pub in the way also stops it (no half-written pair).
  write(s.root / "lone.pub", "x");
  CHECK(test::run_cli("keygen --out " + q(s.root / "lone")).code == 2);
  CHECK_FALSE(fs::exists(s.root / "lone"));
}

TEST_CASE("sign: in-toto Statement v1 with the test-result predicate; subjects are every report file") {
  const auto& s = signed_report();
  json env = envelope_of(s.dir);
  CHECK(env["payloadType"] == "application/vnd.in-toto+json");
  std::string payload;
  REQUIRE(compliance::base64_decode(env["payload"].get<std::string>(), payload));
  json st = json::parse(payload);
  CHECK(st["_type"] == "https://in-toto.io/Statement/v1");
  CHECK(st["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1");
  std::map<std::string, std::string> subjects;
  for (const auto& x : st["subject"]) subjects[x["name"]] = x["digest"]["sha256"];
  REQUIRE(subjects.size() == 4);
  for (const char* f : {"report.json", "report.md", "report.html", "report.junit.xml"})
    CHECK(subjects[f] == sha256_file((s.dir / f).string()));  // the file bytes, as any tool hashes them
  AuditReport r = load_report((s.dir / "report.json").string());
  CHECK(st["predicate"]["result"] == (r.summary.verdict == "reproducible" ? "PASSED" : "FAILED"));
  size_t listed = st["predicate"]["passedTests"].size() + st["predicate"]["warnedTests"].size() +
                  st["predicate"]["failedTests"].size();
  CHECK(listed == r.cases.size());
  std::set<std::string> conf;
  for (const auto& c : st["predicate"]["configuration"]) conf.insert(c["name"].get<std::string>());
  for (const char* c : {"model", "prompts", "plan", "tool"}) CHECK(conf.count(c) == 1);
  for (const auto& c : st["predicate"]["configuration"])
    if (c["name"] == "model") CHECK(c["digest"]["sha256"] == r.environment["model"]["sha256"]);
  // The private key never enters the envelope.
  std::string priv = read_file(s.key.string());
  std::string body = priv.substr(priv.find('\n') + 1, 40);
  CHECK(read_file((s.dir / "report.intoto.jsonl").string()).find(body) == std::string::npos);
}

TEST_CASE("verify: a signed report is valid; without --pubkey it says the signature was not checked") {
  const auto& s = signed_report();
  auto v = verify(s.dir, s.pub);
  INFO(v.output);
  CHECK(v.code == 0);
  CHECK(v.output.find("VALID: signed by the trusted key") != std::string::npos);
  auto f = verify(s.dir / "report.json", s.pub);  // the JSON path works as well as the directory
  CHECK(f.code == 0);
  auto n = verify(s.dir, "");
  CHECK(n.code == 0);
  CHECK(n.output.find("the signature was NOT checked against a trusted key (no --pubkey)") != std::string::npos);
  // Usage errors: exit 2.
  CHECK(verify(s.root / "nowhere", s.pub).code == 2);
  auto bad = verify(s.dir, s.dir / "report.md");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--pubkey") != std::string::npos);
  // JSON output
  auto j = test::run_cli("verify " + q(s.dir) + " --pubkey " + q(s.pub) + " --json");
  CHECK(json::parse(j.output)["valid"] == true);
}

TEST_CASE("independent verification: openssl's command line on the PAE bytes, and securesystemslib") {
  const auto& s = signed_report();
  fs::path work = s.root / "independent";
  fs::remove_all(work);
  fs::create_directories(work);
  json env = envelope_of(s.dir);
  // Decode with openssl's base64, build the PAE here from the specification, verify with pkeyutl.
  write(work / "payload.b64", env["payload"].get<std::string>());
  write(work / "sig.b64", env["signatures"][0]["sig"].get<std::string>());
  REQUIRE(test::run_shell("openssl base64 -d -A -in " + q(work / "payload.b64") + " -out " + q(work / "payload")).code == 0);
  REQUIRE(test::run_shell("openssl base64 -d -A -in " + q(work / "sig.b64") + " -out " + q(work / "sig")).code == 0);
  std::string payload = read_file((work / "payload").string());
  std::string type = env["payloadType"];
  write(work / "pae", "DSSEv1 " + std::to_string(type.size()) + " " + type + " " + std::to_string(payload.size()) + " " + payload);
  auto ok = test::run_shell("openssl pkeyutl -verify -pubin -inkey " + q(s.pub) + " -rawin -in " + q(work / "pae") +
                            " -sigfile " + q(work / "sig"));
  INFO(ok.output);
  CHECK(ok.code == 0);
  CHECK(ok.output.find("Signature Verified Successfully") != std::string::npos);
  // The other key does not verify it; neither does an altered payload.
  CHECK(test::run_shell("openssl pkeyutl -verify -pubin -inkey " + q(s.pub2) + " -rawin -in " + q(work / "pae") +
                        " -sigfile " + q(work / "sig")).code != 0);
  std::string altered = read_file((work / "pae").string());
  altered[altered.size() / 2] ^= 1;
  write(work / "pae2", altered);
  CHECK(test::run_shell("openssl pkeyutl -verify -pubin -inkey " + q(s.pub) + " -rawin -in " + q(work / "pae2") +
                        " -sigfile " + q(work / "sig")).code != 0);

  // securesystemslib (Debian python3-securesystemslib; scripts/deps.sh --test installs it).
  if (test::run_shell("/usr/bin/python3 -c 'import securesystemslib.signer'").code != 0) {
    MESSAGE("SKIPPED: python3-securesystemslib is not installed (scripts/deps.sh --test installs it)");
    return;
  }
  const std::string script = std::string(REPRO_SOURCE_DIR) + "/tests/scripts/dsse_verify.py";
  auto py = test::run_shell("/usr/bin/python3 '" + script + "' " + q(s.dir / "report.intoto.jsonl") + " " + q(s.pub));
  INFO(py.output);
  CHECK(py.code == 0);
  CHECK(py.output.find("signature valid") != std::string::npos);
  CHECK(py.output.find("subject report.json " + sha256_file((s.dir / "report.json").string())) != std::string::npos);
  // An envelope whose payload was altered (signature kept) fails there too.
  json bad = env;
  json st = json::parse(payload);
  st["predicate"]["result"] = "PASSED";
  st["predicate"]["failedTests"] = json::array();
  st["subject"][0]["digest"]["sha256"] = std::string(64, '0');
  bad["payload"] = compliance::base64_encode(st.dump());
  write(work / "bad.intoto.jsonl", bad.dump() + "\n");
  auto pybad = test::run_shell("/usr/bin/python3 '" + script + "' " + q(work / "bad.intoto.jsonl") + " " + q(s.pub));
  CHECK(pybad.code == 1);
  CHECK(pybad.output.find("signature INVALID") != std::string::npos);
}

TEST_CASE("tamper: one flipped byte in any file is detected and named") {
  const auto& s = signed_report();
  for (const char* name : {"report.json", "report.md", "report.html", "report.junit.xml", "report.intoto.jsonl"}) {
    for (double where : {0.1, 0.5, 0.9}) {
      CAPTURE(name);
      CAPTURE(where);
      fs::path d = copy_signed("flip");
      std::string bytes = read_file((d / name).string());
      size_t at = size_t(double(bytes.size()) * where);
      // In report.json a digit beyond double precision (the 17th of -8.696858406066895) re-spells the
      // same number: the signed canonical form covers the content, not the spelling. Flip a non-digit.
      if (std::string(name) == "report.json")
        while (at + 1 < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[at]))) ++at;
      bytes[at] ^= 0x01;
      write(d / name, bytes);
      auto v = verify(d, s.pub);
      INFO(v.output);
      CHECK(v.code == 1);
      CHECK(v.output.find("INVALID") != std::string::npos);
      CHECK(v.output.find(std::string("FAIL  ") + name) != std::string::npos);
    }
  }
}

TEST_CASE("tamper: an edited number is named by its field, also when the self-digest was recomputed") {
  const auto& s = signed_report();
  fs::path d = copy_signed("edit-number");
  json doc = json::parse(read_file((d / "report.json").string()));
  doc["summary"]["completions"] = doc["summary"]["completions"].get<int>() + 1;
  write(d / "report.json", canonical_json(doc));
  auto v = verify(d, s.pub);
  INFO(v.output);
  CHECK(v.code == 1);
  CHECK(v.output.find("FAIL  report.json: /digests/report_sha256 is ") != std::string::npos);
  CHECK(v.output.find("FAIL  report.json: /summary/completions differs from the signed content") != std::string::npos);
  // A forger recomputes digests.report_sha256: the report is then self-consistent, but not what was signed.
  reseal(doc);
  write(d / "report.json", canonical_json(doc));
  auto f = verify(d, s.pub);
  INFO(f.output);
  CHECK(f.code == 1);
  CHECK(f.output.find("ok    report.json: /digests/report_sha256 matches") != std::string::npos);
  CHECK(f.output.find("FAIL  report.json: /summary/completions differs from the signed content") != std::string::npos);
  // A latency deep inside a completion.
  fs::path d2 = copy_signed("edit-latency");
  json doc2 = json::parse(read_file((d2 / "report.json").string()));
  doc2["completions"][3]["latency_s"] = 0.5;
  reseal(doc2);
  write(d2 / "report.json", canonical_json(doc2));
  auto g = verify(d2, s.pub);
  CHECK(g.code == 1);
  CHECK(g.output.find("FAIL  report.json: /completions/3 differs from the signed content") != std::string::npos);
}

TEST_CASE("tamper: a dropped case is detected; reordered keys still verify (canonical form)") {
  const auto& s = signed_report();
  fs::path d = copy_signed("drop-case");
  json doc = json::parse(read_file((d / "report.json").string()));
  size_t n = doc["cases"].size();
  REQUIRE(n >= 2);
  doc["cases"].erase(doc["cases"].size() - 1);
  reseal(doc);
  write(d / "report.json", canonical_json(doc));
  auto v = verify(d, s.pub);
  INFO(v.output);
  CHECK(v.code == 1);
  CHECK(v.output.find("FAIL  report.json: /cases has " + std::to_string(n - 1) + " entries, signed " + std::to_string(n)) !=
        std::string::npos);
  CHECK(v.output.find("FAIL  report.md: not rendered from report.json") != std::string::npos);

  fs::path r = copy_signed("reorder");
  auto ordered = nlohmann::ordered_json::parse(read_file((r / "report.json").string()));
  write(r / "report.json", reversed(ordered).dump(4) + "\n");
  CHECK(read_file((r / "report.json").string()) != read_file((s.dir / "report.json").string()));
  auto o = verify(r, s.pub);
  INFO(o.output);
  CHECK(o.code == 0);
  CHECK(o.output.find("key order or whitespace differs from the signed file; its canonical form matches") != std::string::npos);
}

TEST_CASE("tamper: another key's signature, a replaced subject file, an unsigned extra file") {
  const auto& s = signed_report();
  // Re-signed by someone else (their key, their key id).
  fs::path d = copy_signed("other-key");
  REQUIRE(test::run_cli("sign " + q(d) + " --key " + q(s.key2)).code == 0);
  auto v = verify(d, s.pub);
  INFO(v.output);
  CHECK(v.code == 1);
  auto other = compliance::load_public_key(s.pub2.string());
  CHECK(v.output.find("FAIL  report.intoto.jsonl: signed by key id " + other.key_id.substr(0, 16) + ", not by the trusted key") !=
        std::string::npos);
  CHECK(verify(d, s.pub2).code == 0);  // and it is valid for its own key
  // Another key's signature under the trusted key id.
  json env = envelope_of(d);
  json good = envelope_of(s.dir);
  good["signatures"][0]["sig"] = env["signatures"][0]["sig"];
  fs::path e = copy_signed("swapped-sig");
  write(e / "report.intoto.jsonl", good.dump() + "\n");
  auto w = verify(e, s.pub);
  INFO(w.output);
  CHECK(w.code == 1);
  CHECK(w.output.find("FAIL  report.intoto.jsonl: signatures[0]: does not verify with --pubkey") != std::string::npos);

  // A subject file replaced by the same file of another (valid) report.
  fs::path other_run = s.root / "other-run";
  fs::remove_all(other_run);
  REQUIRE(test::run_cli("run --quiet --max-tokens 6 --repeats 2 --batch-sizes 1 --prompt 'A cat' --out " + q(other_run)).code == 0);
  fs::path f = copy_signed("replaced");
  fs::copy_file(other_run / "report.md", f / "report.md", fs::copy_options::overwrite_existing);
  auto x = verify(f, s.pub);
  INFO(x.output);
  CHECK(x.code == 1);
  CHECK(x.output.find("FAIL  report.md: sha256 ") != std::string::npos);
  CHECK(x.output.find("differs from the signed") != std::string::npos);
  CHECK(x.output.find("FAIL  report.md: not rendered from report.json (line ") != std::string::npos);
  // The whole report replaced, envelope kept: every subject differs.
  fs::path g = copy_signed("replaced-all");
  for (const char* n : {"report.json", "report.md", "report.html", "report.junit.xml"})
    fs::copy_file(other_run / n, g / n, fs::copy_options::overwrite_existing);
  auto y = verify(g, s.pub);
  CHECK(y.code == 1);
  CHECK(y.output.find("FAIL  report.json: ") != std::string::npos);
  CHECK(y.output.find("FAIL  report.junit.xml: sha256 ") != std::string::npos);

  // A render added after signing is not covered; a missing subject is named.
  fs::path h = copy_signed("partial");
  fs::remove(h / "report.html");
  auto z = verify(h, s.pub);
  CHECK(z.code == 1);
  CHECK(z.output.find("FAIL  report.html: listed in the attestation but missing") != std::string::npos);
  fs::remove(h / "report.md");
  REQUIRE(test::run_cli("sign " + q(h / "report.json") + " --key " + q(s.key)).code == 0);
  CHECK(verify(h, s.pub).code == 0);
  fs::copy_file(s.dir / "report.md", h / "report.md");
  auto u = verify(h, s.pub);
  CHECK(u.code == 1);
  CHECK(u.output.find("FAIL  report.md: present but not covered by the attestation") != std::string::npos);
  // Unsigned: exit 1, says how to sign.
  fs::remove(h / "report.intoto.jsonl");
  auto nosig = verify(h, s.pub);
  CHECK(nosig.code == 1);
  CHECK(nosig.output.find("report.intoto.jsonl: missing: the report is not signed") != std::string::npos);
}

TEST_CASE("sign refuses an edited report and a render that does not match the JSON") {
  const auto& s = signed_report();
  fs::path d = copy_signed("sign-edited");
  json doc = json::parse(read_file((d / "report.json").string()));
  doc["summary"]["completions"] = doc["summary"]["completions"].get<int>() + 1;
  write(d / "report.json", canonical_json(doc));
  auto r = test::run_cli("sign " + q(d) + " --key " + q(s.key));
  CHECK(r.code == 2);
  CHECK(r.output.find("digests.report_sha256 does not match its content") != std::string::npos);
  fs::path e = copy_signed("sign-render");
  write(e / "report.md", "# not the report\n");
  auto m = test::run_cli("sign " + q(e) + " --key " + q(s.key));
  CHECK(m.code == 2);
  CHECK(m.output.find("report.md' was not rendered from") != std::string::npos);
  auto k = test::run_cli("sign " + q(e) + " --key " + q(s.pub));
  CHECK(k.code == 2);
  CHECK(k.output.find("--key '" + s.pub.string() + "': not a PEM private key") != std::string::npos);
  auto rs = test::run_cli("run --quiet --out - --sign-key " + q(s.key));
  CHECK(rs.code == 2);
  CHECK(rs.output.find("--sign-key: the signature covers report.json") != std::string::npos);
}

TEST_CASE("env: the environment record every report carries, with numerics variables and visible risks") {
  const std::string env_cmd = "env -u OPENBLAS_CORETYPE VLLM_BATCH_INVARIANT=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 "
                              "OPENAI_API_KEY=sk-env-SECRET-91a HF_TOKEN=hf_SECRET_77 '" + test::binary() + "' ";
  auto r = test::run_shell(env_cmd + "env --json --threads 4");
  INFO(r.output);
  REQUIRE(r.code == 0);
  json e = json::parse(r.output);
  CHECK(e["tool"]["version"] == REPRO_VERSION);
  CHECK(!e["tool"]["commit"].get<std::string>().empty());
  CHECK(e["tool"]["build"].contains("compiler"));
  CHECK(e["tool"]["build"]["fast_math"] == false);
  CHECK(!e["os"]["release"].get<std::string>().empty());
  CHECK(!e["cpu"]["model"].get<std::string>().empty());
  CHECK(e["cpu"]["features"].is_array());
  CHECK(e["threads"] == 4);
  CHECK(e["blas"]["library"] == "OpenBLAS");
  CHECK(!e["blas"]["version"].get<std::string>().empty());
  CHECK(e["gpu"].contains("cuda_build"));
  CHECK(e["environment_variables"]["VLLM_BATCH_INVARIANT"] == "1");
  CHECK(e["environment_variables"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8");
  CHECK(r.output.find("SECRET") == std::string::npos);  // only the allow-listed names are recorded
  bool thread_risk = false, coretype_risk = false;
  for (const auto& x : e["nondeterminism_risks"]) {
    std::string s = x;
    thread_risk = thread_risk || s.find("run 4 threads") != std::string::npos;
    coretype_risk = coretype_risk || s.find("OPENBLAS_CORETYPE pins") != std::string::npos;
  }
  CHECK(thread_risk);
  if (e["blas"]["config"].get<std::string>().find("DYNAMIC_ARCH") != std::string::npos) CHECK(coretype_risk);
  // Pinned: the risk goes away.
  auto pinned = json::parse(test::run_shell("OPENBLAS_CORETYPE=Haswell '" + test::binary() + "' env --json").output);
  CHECK(pinned["environment_variables"]["OPENBLAS_CORETYPE"] == "Haswell");
  for (const auto& x : pinned["nondeterminism_risks"]) CHECK(x.get<std::string>().find("OPENBLAS_CORETYPE") == std::string::npos);
  // Text form.
  auto t = test::run_shell(env_cmd + "env");
  CHECK(t.code == 0);
  CHECK(t.output.find("nondeterminism_risks:") != std::string::npos);
  CHECK(t.output.find("  VLLM_BATCH_INVARIANT: 1") != std::string::npos);
  // never raw JSON: no object or array literal in any line of the text form
  for (const auto& line : split(t.output, '\n')) {
    CAPTURE(line);
    CHECK(line.find("{\"") == std::string::npos);
    CHECK(line.find("[{") == std::string::npos);
    CHECK(line.find("\":") == std::string::npos);
  }
  // Every report carries the same record (plus what the run adds: model, endpoints, digests).
  const auto& s = signed_report();
  json rep = json::parse(read_file((s.dir / "report.json").string()))["environment"];
  json now = json::parse(test::run_cli("env --json").output);
  for (auto it = now.begin(); it != now.end(); ++it) {
    CAPTURE(it.key());
    CHECK(rep.contains(it.key()));
  }
  CHECK(rep["tool"] == now["tool"]);
  CHECK(rep["cpu"] == now["cpu"]);
}

TEST_CASE("report.json's file form: arrays of scalars on one line; a report signed in the earlier form still verifies") {
  const auto& s = signed_report();
  const std::string text = read_file((s.dir / "report.json").string());
  const json doc = json::parse(text);
  CHECK(text == canonical_json(doc));
  CHECK(json::parse(canonical_json(doc)) == doc);
  CHECK(text.find("\"batch_sizes\": [1, 4]") != std::string::npos);
  CHECK(canonical_json(json::parse(R"({"a":[],"b":{},"c":[[1,2],{"x":[true,null,"s"]}],"d":1.5})")) ==
        "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    [1, 2],\n    {\n      \"x\": [true, null, \"s\"]\n    }\n  ],\n"
        "  \"d\": 1.5\n}\n");
  CHECK(canonical_json_v1(doc).size() > text.size());

  // An attestation made over the earlier file form (every array element on its own line): the file as it
  // was written then, its subject digest of that form, signed with the same key.
  using namespace repro::compliance;
  fs::path d = copy_signed("v1-form");
  const std::string v1 = canonical_json_v1(doc);
  write(d / "report.json", v1);
  ReportFiles files = locate_report(d.string());
  json statement = build_statement(files);
  for (auto& subj : statement["subject"])
    if (subj["name"] == "report.json") subj["digest"]["sha256"] = sha256_hex(v1);
  const std::string payload = canonical_json_compact(statement);
  const std::string sig = ed25519_sign(load_private_key(s.key.string()), dsse_pae(kPayloadType, payload));
  const json envelope = {{"payloadType", kPayloadType},
                         {"payload", base64_encode(payload)},
                         {"signatures", json::array({{{"keyid", load_public_key(s.pub.string()).key_id},
                                                      {"sig", base64_encode(sig)}}})}};
  write(d / "report.intoto.jsonl", envelope.dump() + "\n");
  auto v = verify(d, s.pub);
  INFO(v.output);
  CHECK(v.code == 0);
  CHECK(v.output.find("report.json: sha256 matches the attestation") != std::string::npos);
  // and a changed value in that form is still caught
  write(d / "report.json", v1.substr(0, v1.find("\"max_tokens\": 8")) + "\"max_tokens\": 9" +
                               v1.substr(v1.find("\"max_tokens\": 8") + 15));
  CHECK(verify(d, s.pub).code == 1);
}
