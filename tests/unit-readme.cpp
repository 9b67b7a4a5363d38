// ctest-labels: model remote slow
// The README's examples, run as written: every command line of every ```sh block of README.md, in
// order, in one bash script, from a scratch directory laid out like the checkout (docs/ and build/
// are links to the real ones) with HOME set to a scratch home, so `cmake --install build --prefix
// ~/.local` and the PATH line of the README put the binary the commands use on PATH.
//
// The rules (also in docs/CI.md, "The README's examples"):
//   - a command passes when it exits 0, or with a code its comment names ("# ... exit 1 on drift");
//   - a command ending in `&` is a server: the script waits (up to 60 s) until the port of its
//     --port accepts connections, and the test stops it by PID at the end if the README did not;
//   - a block after the line `<!-- examples-test: not run: REASON -->` is not run, and the test
//     prints each of its commands with the reason (today: the quick start, which installs Debian
//     packages and builds); at most one such block, so examples cannot be left out quietly.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <chrono>
#include <vector>

#include "test_util.hpp"

using namespace repro::test;
namespace fs = std::filesystem;

namespace {

struct Example {
  std::string command;  // continuation lines joined
  int line = 0;         // in README.md
  bool run = true;
  std::string why_not;  // when not run
};

std::vector<Example> readme_examples(const std::string& text) {
  std::vector<Example> out;
  std::istringstream in(text);
  std::string line, pending, not_run;
  bool in_block = false, block_runs = true;
  std::string block_why;
  int n = 0, start = 0;
  const std::string marker = "<!-- examples-test: not run: ";
  while (std::getline(in, line)) {
    ++n;
    if (!in_block) {
      if (line.rfind(marker, 0) == 0) not_run = line.substr(marker.size(), line.find(" -->") - marker.size());
      if (line == "```sh") {
        in_block = true;
        block_runs = not_run.empty();
        block_why = not_run;
        not_run.clear();
      } else if (!line.empty() && line.rfind("<!--", 0) != 0) {
        not_run.clear();  // the marker applies to the block right after it
      }
      continue;
    }
    if (line == "```") {
      in_block = false;
      continue;
    }
    if (pending.empty()) {
      const std::string t = line.substr(std::min(line.size(), line.find_first_not_of(' ')));
      if (t.empty() || t[0] == '#') continue;
      start = n;
    }
    if (!line.empty() && line.back() == '\\') {
      pending += line.substr(0, line.size() - 1);
      continue;
    }
    pending += line;
    out.push_back({pending, start, block_runs, block_why});
    pending.clear();
  }
  return out;
}

// The codes a command may exit with: 0, and any "exit N" its comment names.
std::vector<int> allowed_codes(const std::string& cmd) {
  std::vector<int> codes = {0};
  const size_t hash = cmd.find(" #");
  if (hash == std::string::npos) return codes;
  const std::string comment = cmd.substr(hash);
  static const std::regex exit_re("exit (\\d+)");
  for (std::sregex_iterator it(comment.begin(), comment.end(), exit_re), end; it != end; ++it)
    codes.push_back(std::stoi((*it)[1]));
  return codes;
}

std::string trim_right(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

TEST_CASE("README examples: every command runs as written") {
  const fs::path src = REPRO_SOURCE_DIR;
  const std::vector<Example> examples = readme_examples(slurp(src / "README.md"));
  REQUIRE(examples.size() >= 10);
  const fs::path dir = scratch_dir("readme-examples");
  const fs::path home = dir / "home";
  fs::create_directories(home);
  fs::create_directory_symlink(src / "docs", dir / "docs");
  fs::create_directory_symlink(fs::path(binary()).parent_path(), dir / "build");

  // One script: each command's output and exit code go to files named by its index.
  std::string script = "cd '" + dir.string() + "'\nexport HOME='" + home.string() + "'\n";
  // The binary the commands use is the one the README's install lines put on PATH, not the build's.
  script += "export PATH=/usr/local/bin:/usr/bin:/bin\nunset COLUMNS REPRO_AUDIT_CACHE XDG_CACHE_HOME\n";
  int not_run = 0, blocks_not_run = 0;
  std::string last_why;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    if (!e.run) {
      ++not_run;
      if (e.why_not != last_why) ++blocks_not_run, last_why = e.why_not;
      MESSAGE("not run (README.md:" << e.line << ", " << e.why_not << "): " << e.command);
      continue;
    }
    const std::string out = (dir / ("out-" + std::to_string(i))).string();
    const std::string rc = (dir / ("rc-" + std::to_string(i))).string();
    std::string cmd = trim_right(e.command.substr(0, e.command.find(" #")));
    if (!cmd.empty() && cmd.back() == '&') {  // a server: started, then waited for
      cmd.pop_back();
      std::smatch port;
      REQUIRE_MESSAGE(std::regex_search(cmd, port, std::regex("--port (\\d+)")),
                      "README.md:" << e.line << ": a command started with & needs --port for the test to wait on");
      // a simple command, not a { group }: $! is then the server's own PID, not a subshell's that
      // would leave the server running when it is killed
      script += cmd + " >'" + out + "' 2>&1 </dev/null &\necho $! >'" + dir.string() + "/pid-" +
                std::to_string(i) + "'\necho 0 >'" + rc + "'\n";
      script += "for t in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/" + port[1].str() +
                ") 2>/dev/null && break; sleep 0.1; done\n";
      continue;
    }
    script += "{ " + cmd + " ; } >'" + out + "' 2>&1 </dev/null\necho $? >'" + rc + "'\n";
  }
  CHECK(blocks_not_run <= 1);
  CHECK(not_run <= 3);
  {
    std::ofstream f(dir / "examples.sh");
    f << script;
  }
  const CmdResult r = run_shell("timeout 560 bash '" + (dir / "examples.sh").string() + "'");
  // servers the README left running are stopped by their PID
  for (size_t i = 0; i < examples.size(); ++i) {
    const std::string pid = slurp(dir / ("pid-" + std::to_string(i)));
    if (pid.empty()) continue;
    ::kill(std::stoi(pid), SIGTERM);
    // and it is gone: a server left running would hold its port for the next run
    bool gone = false;
    for (int t = 0; t < 100 && !gone; ++t) {
      const std::string stat = slurp("/proc/" + pid + "/stat");  // "PID (comm) S ...": gone, or a zombie
      const size_t paren = stat.rfind(')');
      gone = stat.empty() || (paren != std::string::npos && stat.compare(paren + 1, 2, " Z") == 0);
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK_MESSAGE(gone, "the server started by README example " << i << " (PID " << pid << ") still runs");
  }
  CHECK_MESSAGE(r.code == 0, r.output);
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    if (!e.run) continue;
    const std::string rc = slurp(dir / ("rc-" + std::to_string(i)));
    const std::string out = slurp(dir / ("out-" + std::to_string(i)));
    INFO("README.md:" << e.line << ": " << e.command << "\n" << out.substr(out.size() > 3000 ? out.size() - 3000 : 0));
    REQUIRE_MESSAGE(!rc.empty(), "did not run (an earlier command hung?)");
    const int code = std::stoi(rc);
    const std::vector<int> ok = allowed_codes(e.command);
    CHECK(std::find(ok.begin(), ok.end(), code) != ok.end());
  }
  // what the examples promise: the install put the binary on PATH, and the demo shows a flip
  CHECK(fs::exists(home / ".local" / "bin" / "repro-audit"));
}

TEST_CASE("README examples: the extractor reads blocks, continuations, markers and exit codes") {
  const std::string md =
      "text\n<!-- examples-test: not run: installs packages -->\n```sh\nsetup.sh   # installs\n```\n"
      "```sh\n# a comment line\nrepro-audit run \\\n    --out x   # two lines\nrepro-audit diff a b   # exit 1 on drift\n```\n";
  const auto ex = readme_examples(md);
  REQUIRE(ex.size() == 3);
  CHECK(!ex[0].run);
  CHECK(ex[0].why_not == "installs packages");
  CHECK(ex[1].run);
  CHECK(ex[1].command == "repro-audit run     --out x   # two lines");
  CHECK(ex[1].line == 8);
  CHECK(allowed_codes(ex[2].command) == std::vector<int>{0, 1});
  CHECK(allowed_codes(ex[1].command) == std::vector<int>{0});
}
