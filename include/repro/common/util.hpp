// Small shared utilities: hashing, files, strings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
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

// Size of `path` when it names a regular file (symlinks followed) of at most max_bytes; else throws
// UsageError naming the file, what it is (directory, device, FIFO, socket; too large) and the fix.
// Never blocks (a FIFO is refused, not opened).
uint64_t check_regular_file(const std::string& path, const char* what, uint64_t max_bytes);

// Whole file into memory (regular files of at most max_bytes only, see check_regular_file);
// throws UsageError("<what> 'path': <reason>") when unreadable.
std::string read_file(const std::string& path, const char* what = "file", uint64_t max_bytes = uint64_t{1} << 30);

// Atomic write: write to a fresh temporary file in the same directory, fsync, rename over path.
// Only a regular file (or nothing) is ever replaced: a symlink, device, FIFO or directory at
// `path` is refused (UsageError). `path == "-"` writes to stdout; a failed write there throws
// BackendError (exit 3). A full disk (see disk_full) is a BackendError (exit 3: the environment
// failed, not the input); a failure leaves no partial file. Other failures throw UsageError naming
// the path and the fix.
void write_file_atomic(const std::string& path, std::string_view data);

// The check write_file_atomic makes first: UsageError when `path` is a symlink, device, FIFO or
// directory ("-" and a missing or regular file pass). For checking outputs before long work.
void check_replaceable(const std::string& path);

// errno values that mean the disk (or a quota or file size limit) could not take the data: ENOSPC,
// EDQUOT, EFBIG, EIO.
bool disk_full(int err);
// Throws for a failed write of `path` with errno `err`: BackendError "cannot write 'PATH': <OS
// error>; free disk space ..." when disk_full(err), else UsageError.
[[noreturn]] void write_failed(const std::string& path, int err);

// `s` with bytes that are not printable escaped as \xNN (control characters, DEL, invalid UTF-8);
// valid UTF-8 text is kept. For error messages that quote file contents.
std::string printable(std::string_view s);
// The same for text of several lines (a terminal summary): line breaks are kept, every other
// control byte (ESC starting a terminal escape sequence, CR, BEL, ...) is escaped as \xNN.
std::string printable_lines(std::string_view s);
// Writes all of `s` to `f` (fputs would stop at a NUL byte); errors show in ferror(f).
void write_text(std::string_view s, std::FILE* f);

// Width of the terminal that output to `fd` reaches, in columns: $COLUMNS when it holds a number
// from 20 to 1000 (so a user, a test or a script can set it), else the terminal's own width
// (TIOCGWINSZ) when `fd` is a terminal, else 0: not a terminal, no limit.
int terminal_columns(int fd);
// Columns `s` takes on a terminal: one per UTF-8 character (continuation bytes take none).
size_t display_width(std::string_view s);
// `s` cut to at most `cols` columns at a character boundary, "..." marking the cut (cols >= 3).
std::string fit_columns(std::string_view s, size_t cols);
// `text` broken at spaces into lines of at most `cols` columns, each line after the first starting
// with `indent`; cols 0 keeps one line.
std::string wrap_words(std::string_view text, size_t cols, std::string_view indent = "");

std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
// The candidate closest to `word` (Levenshtein) when it is close enough to be a typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD (valid input is returned unchanged).
std::string sanitize_utf8(std::string_view s);

// Cache directory: $REPRO_AUDIT_CACHE, else $XDG_CACHE_HOME/repro-audit, else ~/.cache/repro-audit.
std::string cache_dir();

}  // namespace repro
