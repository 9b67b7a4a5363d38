// Small shared utilities: hashing, files, strings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace repro {

// SHA-256 (OpenSSL EVP), lowercase hex.
std::string sha256_hex(const void* data, size_t size);
std::string sha256_hex(std::string_view s);
// SHA-256 of a file's bytes; throws UsageError naming the file when unreadable.
std::string sha256_file(const std::string& path);

// "cannot open <what> 'path': <strerror>; check the path and its permissions" (uses errno).
std::string fmt_error_open(const std::string& path, const char* what = "file");

// Whole file into memory; throws UsageError("<what> 'path': <reason>") when unreadable.
std::string read_file(const std::string& path, const char* what = "file");

// Atomic write: write to path.tmp.<pid> in the same directory, fsync, rename over path.
// `path == "-"` writes to stdout. Throws UsageError naming the path and the fix.
void write_file_atomic(const std::string& path, std::string_view data);

std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
// The candidate closest to `word` (Levenshtein) when it is close enough to be a typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD (valid input is returned unchanged).
std::string sanitize_utf8(std::string_view s);

// Cache directory: $REPRO_AUDIT_CACHE, else $XDG_CACHE_HOME/repro-audit, else ~/.cache/repro-audit.
std::string cache_dir();

}  // namespace repro
