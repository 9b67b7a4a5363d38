// Shared helpers for the doctest suite.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace repro::test {

// ../shared/models beside the checkout; empty path when absent (tests then skip with a message).
inline std::filesystem::path shared_models() {
  if (const char* env = std::getenv("REPRO_SHARED_MODELS")) return env;
  std::filesystem::path p = REPRO_SHARED_MODELS;
  if (std::filesystem::exists(p / "stories260K.gguf")) return p;
  return {};
}

// A fresh scratch directory for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  std::filesystem::path base = std::getenv("REPRO_TEST_TMP") ? std::getenv("REPRO_TEST_TMP")
                                                             : std::filesystem::temp_directory_path();
  auto dir = base / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Path of the built repro-audit executable (for end-to-end tests of the CLI).
inline std::string binary() { return REPRO_BINARY; }

// Runs a shell command line; returns the exit code and stdout+stderr.
struct CmdResult {
  int code;
  std::string output;
};
inline CmdResult run_shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = p ? pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0), out};
}
// Runs `repro-audit ARGS` through the shell.
inline CmdResult run_cli(const std::string& args) { return run_shell("'" + binary() + "' " + args); }

// A file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
// Every file of fuzz/corpus/<name> as (file name, bytes), for the tests that replay a fuzz corpus
// through its entry point; empty when the folder is missing.
inline std::vector<std::pair<std::string, std::string>> corpus_files(const std::string& name) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::filesystem::path dir = std::filesystem::path(REPRO_SOURCE_DIR) / "fuzz" / "corpus" / name;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file()) out.emplace_back(e.path().filename().string(), slurp(e.path()));
  return out;
}
// Every regular file below `dir`, concatenated (to search all outputs of a run for a secret).
inline std::string slurp_dir(const std::filesystem::path& dir) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) all += slurp(e.path());
  return all;
}

// GPT-2's byte alphabet, written out again for the tests: printable bytes are themselves, the other 68
// bytes are U+0100.. in byte order.
inline std::string gpt2_char(int b) {
  int cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    int n = 0;
    for (int k = 0; k < b; ++k)
      if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace repro::test

// Use at the top of a TEST_CASE that needs ../shared/models.
#define REPRO_REQUIRE_MODELS(dir)                                                        \
  auto dir = ::repro::test::shared_models();                                             \
  if (dir.empty()) {                                                                     \
    MESSAGE("SKIPPED: ../shared/models/stories260K.gguf not found beside the checkout"); \
    return;                                                                              \
  }
