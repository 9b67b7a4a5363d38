// Encodings (DSSE PAE, base64) and Ed25519 keys through OpenSSL: the primitives that `sign`,
// `verify` and `keygen` share. See include/repro/compliance/sign.hpp for the formats.
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
#include "repro/compliance/sign.hpp"

namespace repro::compliance {

namespace fs = std::filesystem;

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

PrivateKey load_private_key(const std::string& path) {
  Pkey key = read_private_key(path);
  PrivateKey k;
  k.key_id = sha256_hex(public_der(key.get()));
  k.handle = std::shared_ptr<void>(key.release(), [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
  return k;
}

std::string ed25519_sign(const PrivateKey& key, std::string_view message) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  EVP_PKEY* pkey = static_cast<EVP_PKEY*>(key.handle.get());
  size_t sig_len = 0;
  if (!ctx || !pkey || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, pkey) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &sig_len, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1)
    throw std::runtime_error("OpenSSL: Ed25519 signing failed");
  std::string sig(sig_len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &sig_len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    throw std::runtime_error("OpenSSL: Ed25519 signing failed");
  sig.resize(sig_len);
  return sig;
}

}  // namespace repro::compliance
