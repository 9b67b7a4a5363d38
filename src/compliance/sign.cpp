// Ed25519 keys, the in-toto Statement of a report, and its DSSE envelope. See
// include/repro/compliance/sign.hpp for the formats.
#include "repro/compliance/sign.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro::compliance {

namespace fs = std::filesystem;
using nlohmann::json;

// ============================================================================ encodings

std::string dsse_pae(std::string_view type, std::string_view body) {
  std::string out = "DSSEv1 ";
  out += std::to_string(type.size());
  out += ' ';
  out += type;
  out += ' ';
  out += std::to_string(body.size());
  out += ' ';
  out += body;
  return out;
}

std::string base64_encode(std::string_view in) {
  static const char* A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += A[v >> 18], out += A[(v >> 12) & 63], out += A[(v >> 6) & 63], out += A[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += A[v >> 18], out += A[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += A[v >> 18], out += A[(v >> 12) & 63], out += A[(v >> 6) & 63], out += '=';
  }
  return out;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return bits < 6;  // a lone 6-bit group cannot end valid base64
}

// ============================================================================ keys

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

std::string bio_string(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  return std::string(data, n > 0 ? size_t(n) : 0);
}

std::string public_der(EVP_PKEY* k) {
  unsigned char* der = nullptr;
  int n = i2d_PUBKEY(k, &der);
  if (n <= 0) throw std::runtime_error("OpenSSL: cannot encode the public key");
  std::string out(reinterpret_cast<char*>(der), size_t(n));
  OPENSSL_free(der);
  return out;
}

// A key file appears whole or not at all: write_key_temp writes `data` to a fresh temporary file
// beside `path` (mode 0600 from creation, then `mode`), fsynced, and returns its name; a failed write
// (a full disk: BackendError, exit 3) leaves no file. publish_key gives it its name without ever
// replacing a file (renameat2 RENAME_NOREPLACE, else link); false when the name is taken.
std::string write_key_temp(const std::string& path, const std::string& data, mode_t mode) {
  fs::path p(path);
  std::string tmpl = (p.has_parent_path() ? p.parent_path().string() : std::string(".")) + "/." +
                     p.filename().string() + ".tmp.XXXXXX";
  std::vector<char> tmp(tmpl.begin(), tmpl.end());
  tmp.push_back('\0');
  int fd = ::mkstemp(tmp.data());  // mode 0600 from the start
  if (fd < 0) {
    int e = errno;
    if (disk_full(e)) write_failed(path, e);
    throw UsageError(fmt_error_open(path, "key file"));
  }
  ::fchmod(fd, mode);
  int err = 0;
  for (size_t off = 0; off < data.size() && !err;) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      err = w < 0 ? errno : EIO;
    else
      off += size_t(w);
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) {
    ::unlink(tmp.data());
    write_failed(path, err);
  }
  return std::string(tmp.data());
}

bool publish_key(const std::string& tmp, const std::string& path) {
  int rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {  // a file system without RENAME_NOREPLACE
    rc = ::link(tmp.c_str(), path.c_str());
    if (rc == 0) ::unlink(tmp.c_str());
  }
  int e = errno;
  if (rc == 0) return true;
  ::unlink(tmp.c_str());
  if (e == EEXIST) return false;
  throw UsageError("keygen --out: cannot create '" + path + "': " + std::strerror(e) +
                   "; choose another prefix");
}

Pkey read_private_key(const std::string& path) {
  std::string pem = read_file(path, "private key (--key)");
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    std::fprintf(stderr, "warning: private key '%s' is readable by other users (mode %03o); run: chmod 600 %s\n",
                 path.c_str(), unsigned(st.st_mode & 0777), path.c_str());
  Bio bio(BIO_new_mem_buf(pem.data(), int(pem.size())));
  Pkey k(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!k)
    throw UsageError("--key '" + path + "': not a PEM private key; create one with `repro-audit keygen --out PREFIX`");
  if (EVP_PKEY_id(k.get()) != EVP_PKEY_ED25519)
    throw UsageError("--key '" + path + "': not an Ed25519 key; create one with `repro-audit keygen --out PREFIX`");
  return k;
}

}  // namespace

std::string generate_keypair(const std::string& prefix) {
  if (prefix.empty()) throw UsageError("keygen --out: empty prefix; give a path such as keys/audit");
  const std::string pub_path = prefix + ".pub";
  for (const auto& p : {prefix, pub_path})
    if (fs::exists(fs::symlink_status(p)))
      throw UsageError("keygen --out: '" + p + "' already exists; keys are never overwritten, choose another prefix");
  EVP_PKEY* raw = nullptr;
  std::unique_ptr<EVP_PKEY_CTX, void (*)(EVP_PKEY_CTX*)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr),
                                                             EVP_PKEY_CTX_free);
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1)
    throw std::runtime_error("OpenSSL: Ed25519 key generation failed");
  Pkey k(raw);
  Bio priv(BIO_new(BIO_s_mem())), pub(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(priv.get(), k.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_PUBKEY(pub.get(), k.get()) != 1)
    throw std::runtime_error("OpenSSL: cannot encode the key pair as PEM");
  // Both files whole or neither: written first, then named; a failure removes what was written.
  auto exists = [](const std::string& p) {
    return UsageError("keygen --out: '" + p +
                      "' already exists; keys are never overwritten, choose another prefix");
  };
  const std::string priv_tmp = write_key_temp(prefix, bio_string(priv.get()), 0600);
  std::string pub_tmp;
  try {
    pub_tmp = write_key_temp(pub_path, bio_string(pub.get()), 0644);
  } catch (...) {
    ::unlink(priv_tmp.c_str());
    throw;
  }
  if (!publish_key(priv_tmp, prefix)) {
    ::unlink(pub_tmp.c_str());
    throw exists(prefix);
  }
  try {
    if (!publish_key(pub_tmp, pub_path)) throw exists(pub_path);
  } catch (...) {
    ::unlink(prefix.c_str());  // the private key just named: no half pair stays
    throw;
  }
  return sha256_hex(public_der(k.get()));
}

PublicKey load_public_key(const std::string& path) {
  PublicKey out;
  out.pem = read_file(path, "public key (--pubkey)");
  Bio bio(BIO_new_mem_buf(out.pem.data(), int(out.pem.size())));
  Pkey k(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (!k) {  // the public half of a private key file is accepted too
    Bio again(BIO_new_mem_buf(out.pem.data(), int(out.pem.size())));
    k.reset(PEM_read_bio_PrivateKey(again.get(), nullptr, nullptr, nullptr));
  }
  if (!k) throw UsageError("--pubkey '" + path + "': not a PEM public key; give the PREFIX.pub written by `repro-audit keygen`");
  if (EVP_PKEY_id(k.get()) != EVP_PKEY_ED25519)
    throw UsageError("--pubkey '" + path + "': not an Ed25519 key; give the PREFIX.pub written by `repro-audit keygen`");
  out.der = public_der(k.get());
  out.key_id = sha256_hex(out.der);
  return out;
}

bool ed25519_verify(const std::string& der, std::string_view msg, std::string_view sig) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  Pkey k(d2i_PUBKEY(nullptr, &p, long(der.size())));
  if (!k || EVP_PKEY_id(k.get()) != EVP_PKEY_ED25519) return false;
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, k.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                          reinterpret_cast<const unsigned char*>(msg.data()), msg.size()) == 1;
}

// ============================================================================ report files

std::string ReportFiles::path(const std::string& name) const { return (fs::path(dir) / name).string(); }

namespace {
std::string stem_of(const std::string& json_name) {
  const std::string ext = ".json";
  if (json_name.size() > ext.size() && json_name.compare(json_name.size() - ext.size(), ext.size(), ext) == 0)
    return json_name.substr(0, json_name.size() - ext.size());
  return json_name;
}
}  // namespace

std::vector<std::string> render_names(const std::string& json_name) {
  const std::string stem = stem_of(json_name);
  return {stem + ".md", stem + ".html", stem + ".junit.xml"};
}

std::string render(const std::string& json_name, const std::string& name, const AuditReport& r) {
  const std::vector<std::string> names = render_names(json_name);
  if (name == names[0]) return to_markdown(r);
  if (name == names[1]) return to_html(r);
  if (name == names[2]) return to_junit(r);
  throw std::logic_error("render: unknown report file " + name);
}

ReportFiles locate_report(const std::string& target) {
  if (target.empty()) throw UsageError("no report given; give a report directory or its report.json");
  fs::path p(target);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "report.json";
  if (!fs::is_regular_file(p, ec))
    throw UsageError("report '" + p.string() + "' not found; give a report directory or its report.json");
  ReportFiles f;
  f.dir = p.has_parent_path() ? p.parent_path().string() : ".";
  f.json = p.filename().string();
  for (const auto& r : render_names(f.json))
    if (fs::is_regular_file(fs::path(f.dir) / r, ec)) f.renders.push_back(r);
  f.envelope = stem_of(f.json) + ".intoto.jsonl";
  return f;
}

json section_digests(const json& doc) {
  json out = json::object();
  if (!doc.is_object()) return out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string top = "/" + it.key();
    out[top] = sha256_hex(canonical_json_compact(*it));
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i)
        out[top + "/" + std::to_string(i)] = sha256_hex(canonical_json_compact((*it)[i]));
    } else if (it->is_object()) {
      for (auto jt = it->begin(); jt != it->end(); ++jt)
        out[top + "/" + jt.key()] = sha256_hex(canonical_json_compact(*jt));
    }
  }
  return out;
}

// ============================================================================ statement

namespace {

std::string str_at(const json& j, const char* a, const char* b = nullptr) {
  const json* p = &j;
  for (const char* k : {a, b}) {
    if (!k) break;
    if (!p->is_object()) return {};
    auto it = p->find(k);
    if (it == p->end()) return {};
    p = &*it;
  }
  return p->is_string() ? p->get<std::string>() : std::string();
}

json configuration(const json& doc, const AuditReport& r) {
  json conf = json::array();
  const json empty = json::object();
  const json& env = doc.contains("environment") ? doc["environment"] : empty;
  auto digest_of = [&](const char* key) {
    std::string d = str_at(doc, "digests", key);
    return d.empty() ? str_at(env, "digests", key) : d;
  };
  if (std::string d = digest_of("model_sha256"); !d.empty()) {
    json m = {{"name", "model"}, {"digest", {{"sha256", d}}}};
    if (std::string f = str_at(env, "model", "format"); !f.empty()) m["annotations"] = {{"format", f}};
    conf.push_back(m);
  }
  if (env.is_object() && env.contains("endpoints") && env["endpoints"].is_array())
    for (const auto& e : env["endpoints"]) {
      json d = {{"name", "endpoint:" + str_at(e, "label")}, {"uri", str_at(e, "url")}};
      d["annotations"] = {{"api_model", str_at(e, "api_model")}, {"provider", str_at(e, "provider")}};
      conf.push_back(d);
    }
  if (std::string d = digest_of("prompts_sha256"); !d.empty())
    conf.push_back({{"name", "prompts"}, {"digest", {{"sha256", d}}}});
  if (std::string d = digest_of("profile_sha256"); !d.empty())
    conf.push_back({{"name", "profile:" + r.profile}, {"digest", {{"sha256", d}}}});
  // The resolved configuration: the plan as run (profile + flags), in canonical form.
  const json plan = doc.contains("plan") ? doc["plan"] : json(nullptr);
  conf.push_back({{"name", "plan"},
                  {"digest", {{"sha256", sha256_hex(canonical_json_compact(plan))}}},
                  {"annotations", {{"what", "resolved configuration: report.json /plan, canonical compact form"}}}});
  std::string version = str_at(env, "tool", "version"), commit = str_at(env, "tool", "commit");
  if (!version.empty())
    conf.push_back({{"name", "tool"}, {"uri", "pkg:generic/repro-audit@" + version + (commit.empty() ? "" : "?commit=" + commit)}});
  return conf;
}

}  // namespace

json build_statement(const ReportFiles& files) {
  const std::string json_path = files.path(files.json);
  const std::string text = read_file(json_path, "report");
  std::string stored, actual;
  if (!verify_report_digest(text, &stored, &actual))
    throw UsageError("report '" + json_path + "': digests.report_sha256 " + (stored.empty() ? "is missing" : "does not match its content") +
                     "; it was edited after it was written, so it is not signed (re-run the audit)");
  const AuditReport r = from_json(text, json_path);
  const json doc = parse_json_or_throw(text, "report '" + json_path + "'", kReportJsonLimits);

  json subjects = json::array();
  subjects.push_back({{"name", files.json},
                      {"digest", {{"sha256", sha256_hex(canonical_json(doc))}}},
                      {"annotations", {{"report_sha256", stored}, {"sections", section_digests(doc)}}}});
  for (const auto& name : files.renders) {
    const std::string content = read_file(files.path(name), "report render");
    subjects.push_back({{"name", name}, {"digest", {{"sha256", sha256_hex(content)}}}});
  }

  json passed = json::array(), warned = json::array(), failed = json::array();
  for (const auto& c : r.cases) {
    std::string name = c.prompt_id + "/" + c.decoding_id + "/" + c.mode;
    if (c.failed) failed.push_back(name);
    else if (c.divergent || c.errors > 0) warned.push_back(name);
    else passed.push_back(name);
  }
  json predicate = {{"result", verdict_result(r.summary.verdict)},
                    {"configuration", configuration(doc, r)},
                    {"passedTests", passed},
                    {"warnedTests", warned},
                    {"failedTests", failed}};
  return {{"_type", kStatementType}, {"subject", subjects}, {"predicateType", kTestResultPredicate}, {"predicate", predicate}};
}

std::string sign_report(const ReportFiles& files, const std::string& key_path) {
  Pkey key = read_private_key(key_path);
  const std::string key_id = sha256_hex(public_der(key.get()));
  const json statement = build_statement(files);  // refuses a report edited after it was written
  // Renders must say what the JSON says before they are signed with it.
  {
    const std::string json_path = files.path(files.json);
    const AuditReport r = load_report(json_path);
    for (const auto& name : files.renders) {
      if (read_file(files.path(name), "report render") != render(files.json, name, r))
        throw UsageError("'" + files.path(name) + "' was not rendered from '" + json_path +
                         "'; re-render it with `repro-audit report " + json_path + " --out " + files.dir + "` before signing");
    }
  }
  const std::string payload = canonical_json_compact(statement);
  const std::string pae = dsse_pae(kPayloadType, payload);
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  size_t sig_len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &sig_len, reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) != 1)
    throw std::runtime_error("OpenSSL: Ed25519 signing failed");
  std::string sig(sig_len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &sig_len,
                     reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) != 1)
    throw std::runtime_error("OpenSSL: Ed25519 signing failed");
  sig.resize(sig_len);
  json envelope = {{"payloadType", kPayloadType},
                   {"payload", base64_encode(payload)},
                   {"signatures", json::array({{{"keyid", key_id}, {"sig", base64_encode(sig)}}})}};
  write_file_atomic(files.path(files.envelope), canonical_json_compact(envelope) + "\n");
  return key_id;
}

std::string verdict_result(const std::string& verdict) {
  if (verdict == "reproducible") return "PASSED";
  if (verdict == "interrupted" || verdict == "no answer") return "WARNED";
  return "FAILED";  // divergent, errors, and anything this version does not know
}

}  // namespace repro::compliance
