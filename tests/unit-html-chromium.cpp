// ctest-labels: browser
// The HTML report renders in headless Chromium (Debian's) with no network: screenshot and DOM dump.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <vector>

#include "repro/audit/analysis.hpp"
#include "repro/report/report.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {
const char* kChromium = "/usr/bin/chromium";

std::string chromium_cmd(const fs::path& profile, const std::string& action, const fs::path& html,
                         const std::string& size = "1280,2000") {
  return std::string(kChromium) +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
         " --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars --user-data-dir='" +
         profile.string() + "' --window-size=" + size + " " + action + " 'file://" + html.string() + "'";
}

std::string read_pipe(const std::string& cmd) {
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// The report's layout as Chromium lays it out in a window of `size`: a copy of the page (the report
// itself runs no script and forbids them) with a script that writes the boxes of the first-screen
// elements and the page's scroll width into the DOM, which --dump-dom returns. "name=top,bottom,left,right;"
std::map<std::string, std::vector<double>> layout(const fs::path& dir, const std::string& html, const std::string& size,
                                                  const std::string& tag) {
  std::string page = html;
  const std::string csp = "<meta http-equiv=\"Content-Security-Policy\"";
  if (auto at = page.find(csp); at != std::string::npos) page.erase(at, page.find('>', at) + 1 - at);
  const std::string script = R"(<pre id="layout-probe"></pre><script>
(function () {
  var out = "";
  var ids = ["verdict", "mode-verdicts", "gate", "what-to-do", "advice", "chart-divergent-cases", "toc", "headline",
             "charts"];
  ids.forEach(function (id) {
    var e = document.getElementById(id);
    if (!e) return;
    var b = e.getBoundingClientRect();
    out += id + "=" + b.top + "," + b.bottom + "," + b.left + "," + b.right + ";";
  });
  var h3 = Array.prototype.filter.call(document.querySelectorAll("h3"),
                                       function (e) { return e.textContent.indexOf("Attribution") === 0; })[0];
  if (h3) { var b = h3.getBoundingClientRect(); out += "attribution=" + b.top + "," + b.bottom + ",0,0;"; }
  out += "page=" + window.innerHeight + "," + document.documentElement.scrollWidth + "," + window.innerWidth + ",0;";
  var cut = 0;
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (t) {
    var b = t.getBoundingClientRect();
    if (b.right > window.innerWidth + 0.5) cut++;
  });
  out += "cut=" + cut + ",0,0,0;";
  document.getElementById("layout-probe").textContent = out;
})();
</script>)";
  page.insert(page.rfind("</body>"), script);
  auto file = dir / ("probe-" + tag + ".html");
  write_file_atomic(file.string(), page);
  std::string dom = read_pipe(chromium_cmd(dir / ("profile-" + tag), "--dump-dom", file, size) + " 2>/dev/null");
  std::map<std::string, std::vector<double>> boxes;
  const std::string open = "<pre id=\"layout-probe\">";
  auto at = dom.find(open);
  REQUIRE_MESSAGE(at != std::string::npos, "no layout probe in the DOM Chromium returned");
  at += open.size();
  std::string text = dom.substr(at, dom.find("</pre>", at) - at);
  for (const auto& item : split(text, ';')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    std::vector<double> v;
    for (const auto& x : split(item.substr(eq + 1), ',')) v.push_back(std::strtod(x.c_str(), nullptr));
    boxes[item.substr(0, eq)] = v;
  }
  return boxes;
}

// Width and height from a PNG's IHDR chunk.
std::pair<int, int> png_size(const std::string& b) {
  auto be = [&](size_t at) {
    return (static_cast<unsigned char>(b[at]) << 24) | (static_cast<unsigned char>(b[at + 1]) << 16) |
           (static_cast<unsigned char>(b[at + 2]) << 8) | static_cast<unsigned char>(b[at + 3]);
  };
  return b.size() >= 24 ? std::pair<int, int>{be(16), be(20)} : std::pair<int, int>{0, 0};
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

  std::string dom = read_pipe(chromium_cmd(dir / "profile2", "--dump-dom", html) + " 2>/dev/null");
  CHECK(dom.find("id=\"verdict\"") != std::string::npos);
  CHECK(dom.find("Verdict: REPRODUCIBLE") != std::string::npos);
  CHECK(dom.find("<svg") != std::string::npos);
  CHECK(dom.find("<mark>") != std::string::npos);
  MESSAGE("screenshot: " << png.string() << " (" << fs::file_size(png) << " bytes)");
}

TEST_CASE("HTML report: the first screen of a run where default diverges shows each mode's verdict, the gate and what to do") {
  if (!fs::exists(kChromium)) {
    MESSAGE("SKIPPED: " << kChromium << " not found (apt-get install chromium)");
    return;
  }
  auto dir = test::scratch_dir("html-first-screen");
  // The report of unit-report.cpp: default diverges in 1 of 2 cases, the gate covers batch-invariant only
  // (which reproduces), so the run's verdict is REPRODUCIBLE: the banner must say what the gate covers
  // and that default diverged.
  // (Its one failed request of 9 is tolerated here, so default's own verdict is its divergence.)
  AuditReport r = load_report((fs::path(REPRO_SOURCE_DIR) / "tests/data/report-small.json").string());
  r.thresholds.max_error_rate = 0.5;
  analyze(r);
  REQUIRE(r.summary.verdict == "reproducible");
  REQUIRE(r.summary.modes.at(0).verdict == "divergent");
  const std::string html = to_html(r);
  auto file = dir / "report.html";
  write_file_atomic(file.string(), html);

  // The words of the banner, as Chromium renders them (the DOM after layout).
  std::string dom = read_pipe(chromium_cmd(dir / "profile-dom", "--dump-dom", file, "1280,800") + " 2>/dev/null");
  CHECK(dom.find("Verdict: REPRODUCIBLE (gate: batch-invariant); not gated: default DIVERGENT") != std::string::npos);
  CHECK(dom.find("<b>default</b>: DIVERGENT") != std::string::npos);
  CHECK(dom.find("<b>batch-invariant</b>: REPRODUCIBLE") != std::string::npos);
  CHECK(dom.find("The gate covers batch-invariant only") != std::string::npos);
  CHECK(dom.find("Use batch-invariant kernels") != std::string::npos);

  // A screenshot of exactly the first screen (1280 x 800).
  auto png = dir / "first-screen.png";
  std::string shot = chromium_cmd(dir / "profile-shot", "--screenshot='" + png.string() + "'", file, "1280,800") +
                     " >'" + (dir / "shot.log").string() + "' 2>&1";
  std::system(shot.c_str());
  REQUIRE_MESSAGE(fs::exists(png), "no screenshot; see " << (dir / "shot.log").string());
  auto [w, h] = png_size(read_file(png.string()));
  CHECK(w == 1280);
  CHECK(h == 800);

  // The layout: the banner, each mode's verdict, the gate, what to do and the divergence chart end within
  // the first screen (the viewport of a 1280 x 800 window: its inner height, about 660 px in headless
  // Chromium); every attribution table starts below them.
  auto box = layout(dir, html, "1280,800", "wide");
  REQUIRE(box.count("page"));
  const double screen = box["page"][0];
  MESSAGE("viewport height " << screen);
  CHECK(screen >= 600);
  for (const char* id : {"verdict", "mode-verdicts", "gate", "what-to-do", "advice", "chart-divergent-cases"}) {
    CAPTURE(id);
    REQUIRE(box.count(id));
    CHECK(box[id][0] >= 0);
    CHECK(box[id][1] <= screen);
  }
  REQUIRE(box.count("attribution"));
  CHECK(box["attribution"][0] > box["advice"][1]);
  CHECK(box["charts"][0] < box["attribution"][0]);  // the other charts too come before the attribution tables
  CHECK(box["page"][1] <= box["page"][2]);           // nothing wider than the window

  // At 800 px wide nothing is cut: no table reaches past the window, the page does not scroll sideways.
  auto narrow = layout(dir, html, "800,800", "narrow");
  REQUIRE(narrow.count("page"));
  CHECK(narrow["page"][1] <= 800);
  CHECK(narrow["cut"][0] == 0);
  MESSAGE("first screen: " << png.string());
}
