// ctest-labels: browser
// The HTML report renders in headless Chromium (Debian's) with no network: screenshot and DOM dump.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
const char* kChromium = "/usr/bin/chromium";

std::string chromium_cmd(const fs::path& profile, const std::string& action, const fs::path& html) {
  return std::string(kChromium) +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
         " --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir='" +
         profile.string() + "' --window-size=1280,2000 " + action + " 'file://" + html.string() + "'";
}
}  // namespace

TEST_CASE("HTML report renders in headless Chromium and shows the verdict") {
  if (!fs::exists(kChromium)) {
    MESSAGE("SKIPPED: " << kChromium << " not found (apt-get install chromium)");
    return;
  }
  auto dir = test::scratch_dir("html-chromium");
  // the expected report of unit-report.cpp, re-rendered
  AuditReport r = load_report((fs::path(REPRO_SOURCE_DIR) / "tests/data/report-small.json").string());
  auto html = dir / "report.html";
  write_file_atomic(html.string(), to_html(r));
  auto png = dir / "report.png";

  std::string shot = chromium_cmd(dir / "profile1", "--screenshot='" + png.string() + "'", html) + " >'" +
                     (dir / "shot.log").string() + "' 2>&1";
  int rc = std::system(shot.c_str());
  CHECK_MESSAGE(WIFEXITED(rc), shot);
  REQUIRE_MESSAGE(fs::exists(png), "no screenshot; see " << (dir / "shot.log").string());
  CHECK(fs::file_size(png) > 20000);  // a blank 1280x2000 page compresses to a few KB
  std::string bytes = read_file(png.string());
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);

  std::string dom_cmd = chromium_cmd(dir / "profile2", "--dump-dom", html) + " 2>/dev/null";
  FILE* f = popen(dom_cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string dom;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) dom.append(buf, n);
  pclose(f);
  CHECK(dom.find("id=\"verdict\"") != std::string::npos);
  CHECK(dom.find("Verdict: REPRODUCIBLE") != std::string::npos);
  CHECK(dom.find("<svg") != std::string::npos);
  CHECK(dom.find("<mark>") != std::string::npos);
  MESSAGE("screenshot: " << png.string() << " (" << fs::file_size(png) << " bytes)");
}
