// The replica panel: see include/repro/audit/panel.hpp.
#include "repro/audit/panel.hpp"

#include <algorithm>
#include <map>

#include "repro/audit/cases.hpp"

namespace repro {

void analyze_panel(AuditReport& r) {
  r.panel.clear();
  std::vector<std::string> endpoints;
  for (const auto& c : r.completions)
    if (is_remote_completion(c) && std::find(endpoints.begin(), endpoints.end(), c.mode) == endpoints.end())
      endpoints.push_back(c.mode);
  if (endpoints.size() < 2) return;
  // Per (prompt, decoding): each endpoint's case and its majority cluster.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::map<std::string, const CaseResult*>> cases;
  for (const auto& cr : r.cases) {
    auto key = std::make_pair(cr.prompt_id, cr.decoding_id);
    if (!cases.count(key)) order.push_back(key);
    cases[key][cr.mode] = &cr;
  }
  for (const auto& key : order) {
    PanelCase pc;
    pc.prompt_id = key.first;
    pc.decoding_id = key.second;
    const auto& per = cases[key];
    // Each endpoint's most frequent output: its case's majority cluster.
    std::map<std::string, int> votes;
    std::vector<std::string> first_seen;
    for (const auto& ep : endpoints) {
      auto it = per.find(ep);
      if (it == per.end() || it->second->clusters.empty()) continue;
      const std::string& h = it->second->clusters.front().hash;
      if (!votes.count(h)) first_seen.push_back(h);
      ++votes[h];
    }
    if (votes.empty()) continue;
    std::string best;
    for (const auto& h : first_seen)
      if (best.empty() || votes[h] > votes[best]) best = h;
    pc.majority_hash = best;
    const Cluster* majority = nullptr;
    for (const auto& ep : endpoints)
      if (auto it = per.find(ep); it != per.end() && !it->second->clusters.empty() &&
                                  it->second->clusters.front().hash == best)
        majority = &it->second->clusters.front();
    for (const auto& ep : endpoints) {
      PanelMember m;
      m.endpoint = ep;
      auto it = per.find(ep);
      if (it != per.end() && !it->second->clusters.empty()) {
        const Cluster& own = it->second->clusters.front();
        m.hash = own.hash;
        m.completions = it->second->n;
        m.agrees = own.hash == best;
        if (!m.agrees && majority) {
          if (!own.tokens.empty() && !majority->tokens.empty()) {
            const auto& a = own.tokens;
            const auto& b = majority->tokens;
            size_t i = 0;
            while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
            m.first_divergence = static_cast<int>(i);
          } else {
            const auto& a = own.text;
            const auto& b = majority->text;
            size_t i = 0;
            while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
            m.first_divergence = static_cast<int>(i);
            m.by_char = true;
          }
        }
      }
      pc.agreeing += m.agrees;
      pc.members.push_back(std::move(m));
    }
    r.panel.push_back(std::move(pc));
  }
}

}  // namespace repro
