// One case of an analysed run: clusters, majority, first divergences, families, the bitwise tier,
// answers and factor tables (see include/repro/audit/cases.hpp and docs/REPORT-SCHEMA.md).
#include "repro/audit/cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>

#include "repro/audit/factors.hpp"
#include "repro/common/util.hpp"

namespace repro {

// ============================================================================ building blocks

std::string tokens_sha256(const std::vector<int>& tokens) {
  std::string bytes(tokens.size() * 4, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[i]);
    bytes[4 * i + 0] = static_cast<char>(v & 0xff);
    bytes[4 * i + 1] = static_cast<char>((v >> 8) & 0xff);
    bytes[4 * i + 2] = static_cast<char>((v >> 16) & 0xff);
    bytes[4 * i + 3] = static_cast<char>((v >> 24) & 0xff);
  }
  return sha256_hex(bytes);
}

int edit_distance_bounded(const std::vector<int>& av, const std::vector<int>& bv, int max_dist) {
  const int* a = av.data();
  const int* b = bv.data();
  int n = static_cast<int>(av.size()), m = static_cast<int>(bv.size());
  // strip common prefix and suffix: they never change the distance
  while (n > 0 && m > 0 && *a == *b) ++a, ++b, --n, --m;
  while (n > 0 && m > 0 && a[n - 1] == b[m - 1]) --n, --m;
  if (max_dist < 0) return 0 == n + m ? 0 : max_dist + 1;
  if (std::abs(n - m) > max_dist) return max_dist + 1;
  if (n == 0) return m;
  if (m == 0) return n;
  const int k = std::min(max_dist, std::max(n, m));
  const int big = k + 1;
  std::vector<int> prev(m + 1, big), cur(m + 1, big);
  for (int j = 0; j <= std::min(m, k); ++j) prev[j] = j;
  for (int i = 1; i <= n; ++i) {
    int lo = std::max(1, i - k), hi = std::min(m, i + k);
    std::fill(cur.begin(), cur.end(), big);
    if (i <= k) cur[0] = i;
    int row_min = cur[0];
    int ai = a[i - 1];
    for (int j = lo; j <= hi; ++j) {
      int v = prev[j - 1] + (ai == b[j - 1] ? 0 : 1);
      v = std::min(v, prev[j] + 1);
      v = std::min(v, cur[j - 1] + 1);
      if (v > big) v = big;
      cur[j] = v;
      row_min = std::min(row_min, v);
    }
    if (row_min > k) return max_dist + 1;  // every path already exceeds the bound
    std::swap(prev, cur);
  }
  return prev[m] > k ? max_dist + 1 : prev[m];
}

double normalized_edit_distance(const std::vector<int>& a, const std::vector<int>& b) {
  size_t mx = std::max(a.size(), b.size());
  if (mx == 0) return 0;
  int d = edit_distance_bounded(a, b, static_cast<int>(mx));
  return static_cast<double>(d) / static_cast<double>(mx);
}

// ============================================================================ cases

std::vector<std::string> plan_strings(const AuditReport& r, const char* key) {
  std::vector<std::string> out;
  if (!r.plan.is_object() || !r.plan.contains(key) || !r.plan[key].is_array()) return out;
  for (const auto& e : r.plan[key])
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

bool is_remote_completion(const Completion& c) {
  return !c.cache_state.empty() || !c.response_id.empty() || !c.system_fingerprint.empty() ||
         !c.response_model.empty() || !c.cache_header.empty();
}

std::string output_hash(const Completion& c) {
  return c.tokens_known ? tokens_sha256(c.tokens) : sha256_hex(c.text);
}

namespace {

// The sequence compared by edit distance: token ids, or the text's bytes when ids are unknown.
std::vector<int> edit_sequence(const Completion& c) {
  if (c.tokens_known) return c.tokens;
  std::vector<int> v(c.text.size());
  for (size_t i = 0; i < c.text.size(); ++i) v[i] = static_cast<unsigned char>(c.text[i]);
  return v;
}

// Fingerprint of the bitwise tier: the final logits hash and the logprob bits.
std::string bit_fingerprint(const Completion& c) {
  std::string s = c.logits_sha256;
  s.push_back('|');
  s.append(reinterpret_cast<const char*>(c.logprobs.data()), c.logprobs.size() * sizeof(float));
  return s;
}

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(int n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
  }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) p[std::max(a, b)] = std::min(a, b);
  }
};

FactorTable make_table(const std::string& factor, const std::vector<std::string>& value_of_member,
                       const std::vector<int>& cluster_of_member, int nclusters) {
  FactorTable t;
  t.factor = factor;
  std::set<std::string> uniq(value_of_member.begin(), value_of_member.end());
  t.values.assign(uniq.begin(), uniq.end());
  sort_factor_values(factor, t.values, FactorUse::Clusters);
  std::map<std::string, int> idx;
  for (size_t i = 0; i < t.values.size(); ++i) idx[t.values[i]] = static_cast<int>(i);
  t.counts.assign(t.values.size(), std::vector<int>(nclusters, 0));
  for (size_t m = 0; m < value_of_member.size(); ++m) t.counts[idx[value_of_member[m]]][cluster_of_member[m]]++;
  bool all_single = true;
  for (const auto& row : t.counts) {
    int nz = 0;
    for (int c : row) nz += c > 0;
    if (nz != 1) all_single = false;
  }
  t.explains = nclusters > 1 && all_single;
  return t;
}

}  // namespace

void analyze_case(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                  const std::vector<std::string>& hashes, const AnswerExtractor& extractor) {
  cr.n = static_cast<int>(members.size());
  cr.clusters.clear();
  cr.factors.clear();
  cr.no_answer = false;
  if (members.empty()) {
    cr.unique = 0;
    cr.tarr = false;
    cr.bit_unique = 0;
    if (extractor.configured()) cr.tara = false;
    return;
  }
  // ---- clusters by output hash, in order of first member
  std::unordered_map<std::string, int> by_hash;
  std::vector<Cluster> cl;
  std::vector<int> cluster_of(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    int ci = members[m];
    auto [it, added] = by_hash.emplace(hashes[ci], static_cast<int>(cl.size()));
    if (added) {
      Cluster c;
      c.hash = hashes[ci];
      c.text = all[ci].text;
      c.tokens = all[ci].tokens_known ? all[ci].tokens : std::vector<int>{};
      cl.push_back(std::move(c));
    }
    cl[it->second].count++;
    cl[it->second].members.push_back(ci);
    cluster_of[m] = it->second;
  }
  // ---- majority: largest, ties by earliest first member (clusters are in first-member order)
  int maj = 0;
  for (size_t i = 1; i < cl.size(); ++i)
    if (cl[i].count > cl[maj].count) maj = static_cast<int>(i);
  // ---- order: majority first, then count desc, hash asc
  std::vector<int> order(cl.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    if ((x == maj) != (y == maj)) return x == maj;
    if (cl[x].count != cl[y].count) return cl[x].count > cl[y].count;
    return cl[x].hash < cl[y].hash;
  });
  std::vector<int> rank(cl.size());
  for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int>(r);
  std::vector<Cluster> sorted;
  sorted.reserve(cl.size());
  for (int o : order) sorted.push_back(std::move(cl[o]));
  cl = std::move(sorted);
  for (auto& c : cluster_of) c = rank[c];
  cl[0].majority = true;

  cr.unique = static_cast<int>(cl.size());
  cr.tarr = cr.unique == 1;

  // ---- first divergence vs the majority (token index, byte offset, tokens and logprobs there)
  const Completion& mrep = all[cl[0].members[0]];
  for (size_t i = 1; i < cl.size(); ++i) {
    Cluster& c = cl[i];
    const Completion& rep = all[c.members[0]];
    if (rep.tokens_known && mrep.tokens_known) {
      const auto& a = mrep.tokens;
      const auto& b = rep.tokens;
      size_t k = 0;
      while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
      c.first_divergence_token = static_cast<int>(k);
      c.majority_token = k < a.size() ? a[k] : -1;
      c.cluster_token = k < b.size() ? b[k] : -1;
      if (k < mrep.logprobs.size()) c.majority_logprob = mrep.logprobs[k];
      if (k < rep.logprobs.size()) c.cluster_logprob = rep.logprobs[k];
    }
    const auto& ta = mrep.text;
    const auto& tb = rep.text;
    size_t k = 0;
    while (k < ta.size() && k < tb.size() && ta[k] == tb[k]) ++k;
    c.first_divergence_char = static_cast<int>(k);
  }

  // ---- families: single linkage over normalised edit distance <= kFamilyThreshold
  std::vector<std::vector<int>> seqs(cl.size());
  for (size_t i = 0; i < cl.size(); ++i) seqs[i] = edit_sequence(all[cl[i].members[0]]);
  UnionFind uf(static_cast<int>(cl.size()));
  for (size_t i = 0; i < cl.size(); ++i) {
    for (size_t j = i + 1; j < cl.size(); ++j) {
      if (uf.find(static_cast<int>(i)) == uf.find(static_cast<int>(j))) continue;
      size_t mx = std::max(seqs[i].size(), seqs[j].size());
      int k = static_cast<int>(std::floor(kFamilyThreshold * static_cast<double>(mx) + 1e-9));
      if (edit_distance_bounded(seqs[i], seqs[j], k) <= k) uf.unite(static_cast<int>(i), static_cast<int>(j));
    }
  }
  std::map<int, int> fam_id;  // root -> family number, in cluster order; the majority's family is 0
  for (size_t i = 0; i < cl.size(); ++i) {
    int r = uf.find(static_cast<int>(i));
    auto it = fam_id.find(r);
    if (it == fam_id.end()) it = fam_id.emplace(r, static_cast<int>(fam_id.size())).first;
    cl[i].family = it->second;
    cl[i].distance_to_majority = i == 0 ? 0.0 : normalized_edit_distance(seqs[0], seqs[i]);
  }

  // ---- bitwise tier: distinct (logits hash, logprob bits) fingerprints inside each token cluster
  cr.bit_unique = 0;
  for (auto& c : cl) {
    std::set<std::string> fps;
    for (int ci : c.members) fps.insert(bit_fingerprint(all[ci]));
    c.bit_variants = static_cast<int>(fps.size());
    cr.bit_unique += c.bit_variants;
  }
  cr.bit_divergent = cr.unique == 1 && cr.bit_unique > 1;

  // ---- answers (TARa): per cluster (identical outputs have identical text)
  cr.tara.reset();
  cr.answer_unique = 0;
  cr.answer_missing = 0;
  if (extractor.configured()) {
    std::set<std::optional<std::string>> answers;
    for (auto& c : cl) {
      c.answer = extractor.extract(c.text);
      answers.insert(c.answer);
      if (!c.answer) cr.answer_missing += c.count;
    }
    cr.answer_unique = static_cast<int>(answers.size());
    // all N answers present and identical
    cr.tara = cr.answer_unique == 1 && cr.answer_missing == 0;
  }
  // identical outputs none of which holds an answer: nothing to compare, not a divergence
  cr.no_answer = extractor.configured() && cr.unique == 1 && cr.answer_missing == cr.n;

  // ---- factor tables: cluster membership per factor value (only factors that vary)
  bool remote = false;
  for (int ci : members) remote = remote || is_remote_completion(all[ci]);
  auto add_factors = [&](const auto& ids) {
    for (FactorId id : ids) {
      const Factor& f = factor(id);
      std::vector<std::string> vals(members.size());
      for (size_t m = 0; m < members.size(); ++m) vals[m] = f.value(all[members[m]]);
      bool varies = false;
      for (const auto& v : vals) varies = varies || v != vals[0];
      if (varies) cr.factors.push_back(make_table(f.name, vals, cluster_of, static_cast<int>(cl.size())));
    }
  };
  if (remote)
    add_factors(kCaseFactorsRemote);
  else
    add_factors(kCaseFactorsLocal);

  cr.clusters = std::move(cl);
}

}  // namespace repro
