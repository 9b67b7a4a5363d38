// write_reports and --format parsing: which formats exist, where each is written.
#include <filesystem>
#include <system_error>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {
struct FormatInfo {
  const char* name;
  const char* file;
  std::string (*render)(const AuditReport&);
};
const FormatInfo kFormats[] = {
    {"json", "report.json", to_json},
    {"md", "report.md", to_markdown},
    {"markdown", "report.md", to_markdown},
    {"html", "report.html", to_html},
    {"junit", "report.junit.xml", to_junit},
};
const char* kAllowed = "json, md, html, junit (optionally FORMAT=PATH, '-' for stdout)";

const FormatInfo* find_format(const std::string& name) {
  for (const auto& f : kFormats)
    if (name == f.name) return &f;
  return nullptr;
}
}  // namespace

std::vector<std::string> parse_formats(const std::string& csv) {
  std::vector<std::string> out;
  for (auto& part : split(csv, ',')) {
    std::string f = trim(part);
    if (f.empty()) continue;
    std::string name = f.substr(0, f.find('='));
    if (!find_format(name))
      throw UsageError("--format: unknown format '" + name + "'; allowed: " + kAllowed);
    out.push_back(f);
  }
  if (out.empty()) throw UsageError("--format: no format given; allowed: " + std::string(kAllowed));
  return out;
}

std::vector<std::string> write_reports(const AuditReport& r, const std::string& out_dir,
                                       const std::vector<std::string>& formats) {
  // Every format is rendered from the JSON document (written, then read back), so Markdown, HTML
  // and JUnit say exactly what report.json says (text that is not valid UTF-8 shows as U+FFFD in
  // all of them), and `verify` can check them by rendering them again from report.json.
  const std::string json_text = to_json(r);
  const AuditReport doc = from_json(json_text, "report.json (in memory)");
  std::vector<std::string> written;
  bool dir_made = false;
  for (const auto& spec : formats) {
    size_t eq = spec.find('=');
    std::string name = spec.substr(0, eq);
    const FormatInfo* f = find_format(name);
    if (!f) throw UsageError("--format: unknown format '" + name + "'; allowed: " + kAllowed);
    std::string path;
    if (eq != std::string::npos) {
      path = spec.substr(eq + 1);
      if (path.empty()) throw UsageError("--format " + spec + ": empty path; give FORMAT=PATH or '-' for stdout");
    } else if (out_dir == "-") {
      path = "-";
    } else {
      if (out_dir.empty()) throw UsageError("--out: empty directory; give a directory or '-' for stdout");
      if (!dir_made) {
        std::error_code ec;
        std::filesystem::create_directories(out_dir, ec);
        if (ec || !std::filesystem::is_directory(out_dir))
          throw UsageError("--out '" + out_dir + "': cannot create directory (" +
                           (ec ? ec.message() : std::string("a file is in the way")) +
                           "); choose a writable directory");
        dir_made = true;
      }
      path = (std::filesystem::path(out_dir) / f->file).string();
    }
    write_file_atomic(path, std::string(f->name) == "json" ? json_text : f->render(doc));
    written.push_back(path);
  }
  return written;
}

}  // namespace repro
