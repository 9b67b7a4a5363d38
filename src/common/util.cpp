#include "repro/common/util.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "repro/common/error.hpp"

namespace repro {

namespace {
std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}
struct MdCtx {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  ~MdCtx() { EVP_MD_CTX_free(c); }
};
}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  MdCtx ctx;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx.c || EVP_DigestInit_ex(ctx.c, EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.c, data, size) != 1 || EVP_DigestFinal_ex(ctx.c, out, &len) != 1)
    throw std::runtime_error("OpenSSL SHA-256 failed");
  return hex(out, len);
}

std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

std::string sha256_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UsageError(fmt_error_open(path));
  MdCtx ctx;
  EVP_DigestInit_ex(ctx.c, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx.c, buf.data(), n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw UsageError("cannot read '" + path + "': I/O error; check the file and the disk");
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.c, out, &len);
  return hex(out, len);
}

std::string fmt_error_open(const std::string& path, const char* what) {
  return std::string("cannot open ") + what + " '" + path + "': " + std::strerror(errno) +
         "; check the path and its permissions";
}

std::string read_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(std::string("cannot read ") + what + " '" + path + "': it is a directory; give a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt_error_open(path, what));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError(std::string("cannot read ") + what + " '" + path + "': I/O error");
  return s;
}

void write_file_atomic(const std::string& path, std::string_view data) {
  if (path == "-") {
    std::fwrite(data.data(), 1, data.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UsageError("cannot write '" + path + "': " + std::strerror(errno) +
                     "; check that its directory exists and is writable");
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw UsageError("cannot write '" + path + "': " + std::strerror(e) + "; free disk space or choose another --out");
    }
    off += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw UsageError("cannot write '" + path + "': " + std::strerror(e) + "; check the directory permissions");
  }
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    out.emplace_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return std::string(s.substr(b, e - b));
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  if (word.size() >= 3)  // a prefix of exactly one candidate ("stories" for "stories260K")
    for (const auto& c : candidates)
      if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) {
        if (!best.empty()) return {};
        best = c;
      }
  if (!best.empty()) return best;
  for (const auto& c : candidates) {
    // plain Levenshtein over bytes (short strings: flags, names)
    std::vector<size_t> prev(c.size() + 1), cur(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= c.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (word[i - 1] == c[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    if (prev[c.size()] < best_d) best_d = prev[c.size()], best = c;
  }
  // a typo: at most a third of the longer word changed (and at least one edit allowed)
  size_t limit = std::max<size_t>(1, std::max(word.size(), best.size()) / 3);
  return best_d <= limit ? best : std::string();
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len > 1) {
      uint32_t cp = c & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
      static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);  // no overlongs, surrogates
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string cache_dir() {
  if (const char* d = std::getenv("REPRO_AUDIT_CACHE"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/repro-audit";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/repro-audit";
  return std::filesystem::temp_directory_path().string() + "/repro-audit-cache";
}

}  // namespace repro
