// How reports show token and completion text (display_text), and the token texts a report carries
// for the ids at first divergences (record_token_text). See include/repro/audit/analysis.hpp.
#include <fmt/core.h>

#include <map>
#include <set>

#include "repro/audit/analysis.hpp"

namespace repro {

namespace {
// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when it is not one.
size_t utf8_len(const std::string& s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong, surrogate
  return n;
}
}  // namespace

std::string display_text(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = utf8_len(s, i);
    if (n == 0) {
      o += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (n == 1) {
      switch (c) {
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        case '\\': o += "\\\\"; break;
        default:
          if (c < 0x20 || c == 0x7F) o += fmt::format("\\x{:02x}", c);
          else o += static_cast<char>(c);
      }
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1 controls
      o += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]) & 0xFF);
    } else {
      o.append(s, i, n);
    }
    i += n;
  }
  return o;
}

namespace {
std::set<int> divergence_ids(const AuditReport& r) {
  std::set<int> ids;
  for (const auto& c : r.cases) {
    for (const auto& k : c.clusters)
      if (!k.majority) {
        if (k.majority_token >= 0) ids.insert(k.majority_token);
        if (k.cluster_token >= 0) ids.insert(k.cluster_token);
      }
    if (c.drift_size.reference_token >= 0) ids.insert(c.drift_size.reference_token);
    if (c.drift_size.divergent_token >= 0) ids.insert(c.drift_size.divergent_token);
  }
  return ids;
}
}  // namespace

void record_endpoint_token_text(AuditReport& r) {
  std::map<int, std::string> pieces;
  for (const auto& c : r.completions)
    if (c.tokens_known && !c.token_pieces.empty() && c.token_pieces.size() == c.tokens.size())
      for (size_t i = 0; i < c.tokens.size(); ++i) pieces.emplace(c.tokens[i], c.token_pieces[i]);
  if (pieces.empty()) return;
  for (int id : divergence_ids(r))
    if (auto it = pieces.find(id); it != pieces.end() && !r.token_text.count(std::to_string(id)))
      r.token_text[std::to_string(id)] = display_text(it->second);
}

void record_token_text(AuditReport& r, const std::function<std::string(int)>& piece) {
  for (int id : divergence_ids(r)) r.token_text[std::to_string(id)] = display_text(piece(id));
}

}  // namespace repro
