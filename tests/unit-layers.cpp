// The layer order of docs/ARCHITECTURE.md, checked on the sources: a file of a layer includes public
// headers (repro/<layer>/...) of its own layer and the layers below it only.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Each layer and the layers it uses directly (CMakeLists.txt links the same edges).
const std::map<std::string, std::vector<std::string>> kUses = {
    {"common", {}},
    {"tokenizer", {"common"}},
    {"chat", {"common"}},
    {"model", {"tokenizer", "chat"}},
    {"kernels", {"common"}},
    {"structured", {"tokenizer"}},
    {"engine", {"model", "kernels", "structured"}},
    {"openai", {"common"}},
    {"remote", {"openai"}},
    {"audit", {"engine", "remote"}},
    {"report", {"audit"}},
    {"bench", {"audit"}},
    {"compliance", {"report"}},
    {"serve", {"engine", "openai"}},
    {"cli", {"compliance", "report", "bench", "serve"}},
};

std::set<std::string> reachable(const std::string& layer) {
  std::set<std::string> out{layer};
  std::vector<std::string> todo{layer};
  while (!todo.empty()) {
    const std::string l = todo.back();
    todo.pop_back();
    for (const auto& d : kUses.at(l))
      if (out.insert(d).second) todo.push_back(d);
  }
  return out;
}

// The <layer> of every `#include "repro/<layer>/..."` line of `text`.
std::vector<std::string> included_layers(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || line.compare(i, 7, "include") != 0) continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string::npos || line.compare(i, 7, "\"repro/") != 0) continue;
    const size_t start = i + 7, slash = line.find('/', start);
    if (slash != std::string::npos) out.push_back(line.substr(start, slash - start));
  }
  return out;
}

}  // namespace

TEST_CASE("layers: every file includes headers of its own layer and the layers below it only") {
  const fs::path root(REPRO_SOURCE_DIR);
  int files = 0;
  for (const auto& [layer, uses] : kUses) {
    const std::set<std::string> allowed = reachable(layer);
    const std::vector<fs::path> dirs = {root / (layer == "kernels" ? "kernels" : "src/" + layer),
                                        root / "include/repro" / layer};
    for (const auto& dir : dirs) {
      REQUIRE_MESSAGE(fs::is_directory(dir), dir.string());
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        const std::string ext = e.path().extension().string();
        if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh") continue;
        std::ifstream in(e.path());
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        ++files;
        for (const std::string& used : included_layers(text)) {
          INFO(e.path().string(), " includes repro/", used, "/");
          CHECK_MESSAGE(kUses.count(used) == 1, "an unknown layer: add it to docs/ARCHITECTURE.md and this table");
          CHECK_MESSAGE(allowed.count(used) == 1, "a layer may use only the layers below it (docs/ARCHITECTURE.md)");
        }
      }
    }
  }
  CHECK(files > 100);
}
