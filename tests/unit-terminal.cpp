// ctest-labels: unit model
// The terminal is width-aware: the progress line and the summary fit the terminal's columns
// ($COLUMNS, else TIOCGWINSZ), the mode table drops its least important columns (and names them)
// before it would wrap, tables become one record per row below that, and the short names (TARr@N,
// bit-div, "0 of 3 -> below 56%") are said in words. Checked on the summary of a real run, on the
// progress line, and end to end through a pseudo-terminal (script(1)) at 80 and 60 columns.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "repro/audit/runner.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
// Each line as a terminal shows it: split at \n and \r (a redraw), escape sequences removed.
std::vector<std::string> screen_lines(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\x1b') {  // CSI: ESC [ ... final byte
      size_t j = i + 1;
      if (j < text.size() && text[j] == '[') {
        ++j;
        while (j < text.size() && !(text[j] >= 0x40 && text[j] <= 0x7e)) ++j;
      }
      i = j;
      continue;
    }
    if (c == '\n' || c == '\r') {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}
size_t widest(const std::string& text) {
  size_t w = 0;
  for (const auto& l : screen_lines(text)) w = std::max(w, display_width(l));
  return w;
}

const fs::path& quick_report() {
  static fs::path dir;
  if (dir.empty()) {
    dir = test::scratch_dir("terminal-run");
    auto r = test::run_shell("cd '" + dir.string() + "' && REPRO_AUDIT_CACHE='" + (dir / "cache").string() + "' '" +
                             test::binary() + "' run --max-tokens 6 --batch-sizes 1,4 --quiet --out out");
    INFO(r.output);
    REQUIRE(r.code == 0);
  }
  return dir;
}
}  // namespace

TEST_CASE("terminal_columns: COLUMNS first, then the terminal, else no limit") {
  ::setenv("COLUMNS", "73", 1);
  CHECK(terminal_columns(1) == 73);
  ::setenv("COLUMNS", "junk", 1);
  CHECK(terminal_columns(-1) == 0);  // not a terminal, no usable COLUMNS: no limit
  ::setenv("COLUMNS", "5", 1);       // too narrow to be real: ignored
  CHECK(terminal_columns(-1) == 0);
  ::unsetenv("COLUMNS");
  CHECK(fit_columns("abcdefghij", 6) == "abc...");
  CHECK(fit_columns("h\xc3\xa9llo w\xc3\xb6rld", 8) == "h\xc3\xa9llo...");  // cut at a character, not a byte
  CHECK(wrap_words("one two three four", 9, "  ") == "one two\n  three\n  four");
}

TEST_CASE("progress line: the full line where it fits, shorter forms that fit below, never wider than width - 1") {
  ProgressState p;
  p.done_cells = 17;
  p.total_cells = 240;
  p.done_work = 5000;
  p.total_work = 70000;
  p.measured_work = 5000;
  p.measured_seconds = 12;
  p.elapsed_s = 12;
  p.current = "default (bf16) batch 16 position last fillers 1 prompt 'Once upon a time'";
  p.divergent_cases = 2;
  const std::string full = progress_line(p);
  CHECK(display_width(full) > 120);  // the line the issue measured: 135+ columns
  CHECK(progress_line(p, 200) == full);
  for (int w : {140, 120, 100, 80, 60, 40, 30, 20}) {
    CAPTURE(w);
    const std::string l = progress_line(p, w);
    CHECK(display_width(l) <= static_cast<size_t>(w - 1));
    CHECK(l.find("17/240") != std::string::npos);  // the counts stay
  }
  CHECK(progress_line(p, 100).find("ETA") != std::string::npos);
  CHECK(progress_line(p, 100).find("divergent cases: 2") != std::string::npos);
  CHECK(progress_line(p, 60).find("div 2") != std::string::npos);
}

TEST_CASE("summary: the mode table fits 100, 80 and 60 columns, names what it left out, explains its words") {
  const fs::path dir = quick_report();
  const AuditReport r = load_report((dir / "out" / "report.json").string());
  const std::string wide = to_terminal(r);
  CHECK(wide.find("|dlogprob|") != std::string::npos);
  CHECK(widest(wide) > 120);
  for (int w : {100, 80, 60}) {
    CAPTURE(w);
    const std::string t = to_terminal(r, w);
    INFO(t);
    CHECK(widest(t) <= static_cast<size_t>(w - 1));
    CHECK(t.find("TARr@N") != std::string::npos);
    CHECK(t.find("batch-invariant") != std::string::npos);
  }
  CHECK(to_terminal(r, 100).find("left out") != std::string::npos);
  // in words, on the terminal
  CHECK(wide.find("TARr@N: the share of cases whose N replays were all identical") != std::string::npos);
  CHECK(wide.find("bit-div: the share of cases whose replays differ in any bit") != std::string::npos);
}

TEST_CASE("end to end through a pseudo-terminal: no line of a run, progress redraws included, is wider than COLUMNS") {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    MESSAGE("SKIPPED: script(1) (util-linux) not found; the width rules are checked above without a terminal");
    return;
  }
  const fs::path dir = quick_report();
  for (int w : {80, 60}) {
    CAPTURE(w);
    const std::string cmd = "cd '" + dir.string() + "' && REPRO_AUDIT_CACHE='" + (dir / "cache").string() +
                            "' COLUMNS=" + std::to_string(w) + " script -qefc \"'" + test::binary() +
                            "' run --max-tokens 6 --batch-sizes 1,4 --format json --out pty" + std::to_string(w) +
                            "\" /dev/null";
    auto r = test::run_shell(cmd);
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("cells") != std::string::npos);  // the progress line was drawn (stderr is the terminal)
    CHECK(r.output.find("verdict: REPRODUCIBLE") != std::string::npos);
    CHECK(widest(r.output) <= static_cast<size_t>(w - 1));
  }
}
