#include "repro/common/util.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
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

uint64_t check_regular_file(const std::string& path, const char* what, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UsageError(fmt_error_open(path, what));
  const std::string who = std::string(what) + " '" + path + "'";
  if (S_ISDIR(st.st_mode)) throw UsageError("cannot read " + who + ": it is a directory, not a regular file; give a file");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISFIFO(st.st_mode)                     ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode)                     ? "a socket"
                                                                  : "not a regular file";
    throw UsageError("cannot read " + who + ": it is " + std::string(kind) +
                     ", not a regular file; give a regular file (copy the data into one first)");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw UsageError("cannot read " + who + ": it is " + std::to_string(size) + " bytes, over the limit of " +
                     std::to_string(max_bytes) + " bytes for a " + what + "; give a smaller file");
  return size;
}

std::string read_file(const std::string& path, const char* what, uint64_t max_bytes) {
  check_regular_file(path, what, max_bytes);
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UsageError(fmt_error_open(path, what));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between stat and open
    ::close(fd);
    throw UsageError(std::string("cannot read ") + what + " '" + path + "': not a regular file; give a regular file");
  }
  std::string s;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw UsageError(std::string("cannot read ") + what + " '" + path + "': " + std::strerror(e) +
                       "; check the file and the disk");
    }
    if (n == 0) break;
    if (s.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      throw UsageError(std::string("cannot read ") + what + " '" + path + "': it grew over the limit of " +
                       std::to_string(max_bytes) + " bytes while it was read; give a smaller file");
    }
    s.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return s;
}

bool disk_full(int err) {
  return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EIO;
}

void write_failed(const std::string& path, int err) {
  const std::string why = "cannot write '" + path + "': " + std::strerror(err);
  if (disk_full(err))
    throw BackendError(why + "; free disk space (or raise the file size limit) or write elsewhere");
  throw UsageError(why + "; check the path and its directory");
}

void check_replaceable(const std::string& path) {
  if (path == "-") return;
  // Replace only a regular file: never a symlink (it would be replaced by a file, or followed to
  // somewhere else), a device node, a FIFO or a directory.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const char* kind = S_ISLNK(st.st_mode)                        ? "a symbolic link"
                       : S_ISDIR(st.st_mode)                      ? "a directory"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISFIFO(st.st_mode)                     ? "a FIFO (named pipe)"
                                                                  : "not a regular file";
    throw UsageError("refusing to write '" + path + "': it is " + kind +
                     ", and only regular files are replaced; give another path, or '-' for standard output");
  }
}

void write_file_atomic(const std::string& path, std::string_view data) {
  if (path == "-") {
    size_t w = std::fwrite(data.data(), 1, data.size(), stdout);
    if (w != data.size() || std::fflush(stdout) != 0)
      throw BackendError(std::string("cannot write to standard output: ") + std::strerror(errno) +
                         "; check the disk or the pipe it goes to");
    return;
  }
  check_replaceable(path);
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmpl = dir + "/." + p.filename().string() + ".tmp.XXXXXX";
  std::vector<char> tmp(tmpl.begin(), tmpl.end());
  tmp.push_back('\0');
  int fd = ::mkstemp(tmp.data());  // O_EXCL: never follows or reuses anything already there
  if (fd < 0) {
    int e = errno;
    if (disk_full(e)) write_failed(path, e);
    throw UsageError("cannot write '" + path + "': " + std::strerror(e) +
                     "; check that its directory exists and is writable");
  }
  ::fchmod(fd, 0644);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.data());
      write_failed(path, e);
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.data());
    write_failed(path, e);
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.data());
    write_failed(path, e);
  }
  if (::rename(tmp.data(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.data());
    throw UsageError("cannot write '" + path + "': " + std::strerror(e) + "; check the directory permissions");
  }
}

int terminal_columns(int fd) {
  if (const char* env = std::getenv("COLUMNS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 20 && v <= 1000) return static_cast<int>(v);
  }
  struct winsize ws {};
  if (::isatty(fd) && ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 0;
}

size_t display_width(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string fit_columns(std::string_view s, size_t cols) {
  if (display_width(s) <= cols) return std::string(s);
  if (cols < 3) return std::string(cols, '.');
  size_t keep = cols - 3, chars = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (chars == keep) break;
      ++chars;
    }
  }
  return std::string(s.substr(0, i)) + "...";
}

std::string wrap_words(std::string_view text, size_t cols, std::string_view indent) {
  if (cols == 0) return std::string(text);
  std::string out;
  const size_t first = text.find_first_not_of(' ');
  const std::string lead(text.substr(0, first == std::string_view::npos ? 0 : first));  // kept on the first line
  std::string line = lead;
  std::vector<std::string> words;
  for (const std::string& w : split(text, ' ')) {
    if (w.empty()) continue;
    // a word longer than a line (a path, a hash) is broken where the line ends
    std::string_view rest = w;
    const size_t margin = std::max(indent.size(), lead.size());
    const size_t room = cols > margin + 1 ? cols - margin : 1;
    while (display_width(rest) > room) {
      size_t i = 0, chars = 0;
      for (; i < rest.size(); ++i)
        if ((static_cast<unsigned char>(rest[i]) & 0xC0) != 0x80 && chars++ == room) break;
      words.emplace_back(rest.substr(0, i));
      rest = rest.substr(i);
    }
    words.emplace_back(rest);
  }
  for (const std::string& w : words) {
    if (line != lead && line != indent && display_width(line) + 1 + display_width(w) > cols) {
      out += line + "\n";
      line = std::string(indent);
    }
    line += (line == lead || line == indent ? "" : " ") + w;
  }
  return out + line;
}

std::string printable(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  auto esc = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) esc(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A valid UTF-8 sequence is kept whole (no overlong forms, no surrogates, at most U+10FFFF).
    size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; ok && k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    if (ok) ok = (n == 2 && cp >= 0x80) || (n == 3 && cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) ||
                 (n == 4 && cp >= 0x10000 && cp <= 0x10FFFF);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      esc(c);
      ++i;
    }
  }
  return out;
}

void write_text(std::string_view s, std::FILE* f) { (void)std::fwrite(s.data(), 1, s.size(), f); }

std::string printable_lines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t from = 0; from <= s.size();) {
    const size_t nl = s.find('\n', from);
    out += printable(s.substr(from, nl == std::string_view::npos ? std::string_view::npos : nl - from));
    if (nl == std::string_view::npos) break;
    out += '\n';
    from = nl + 1;
  }
  return out;
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
