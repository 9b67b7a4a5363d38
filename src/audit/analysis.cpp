// Analysis of an audit run: see include/repro/analysis.hpp and docs/REPORT-SCHEMA.md.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "repro/audit/analysis.hpp"

#include <pcre2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "repro/audit/drift_size.hpp"
#include "repro/audit/factors.hpp"
#include "repro/audit/stats.hpp"
#include "repro/engine/json_schema.hpp"
#include "repro/audit/tradeoff.hpp"
#include "repro/audit/response_cache.hpp"
#include "repro/audit/variants.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
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

// ---------------------------------------------------------------------------- answer extractor

AnswerExtractor::AnswerExtractor(const std::string& regex, const std::string& json_path) {
  if (!regex.empty()) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(), PCRE2_UTF, &err,
                                   &off, nullptr);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UsageError("--answer-regex '" + regex + "': " + reinterpret_cast<char*>(msg) + " at offset " +
                       std::to_string(off) + "; fix the PCRE2 pattern");
    }
    re_ = re;
  }
  if (!json_path.empty()) {
    for (const auto& text : split_json_paths(json_path)) {
      path_texts_.push_back(text);
      paths_.push_back(parse_json_path(text));
    }
  }
}

std::vector<std::string> split_json_paths(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  int depth = 0;
  for (char c : list) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      if (depth > 0) quote = c;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']') {
      depth = std::max(0, depth - 1);
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  for (const auto& p : out)
    if (p.empty())
      throw UsageError("--answer-json-path '" + list + "': empty path in the list; give paths like $.a.b or a.b, "
                       "comma-separated");
  return out;
}

std::vector<AnswerExtractor::Step> AnswerExtractor::parse_json_path(const std::string& given) {
  auto bad = [&](const std::string& why) {
    return UsageError("--answer-json-path '" + given + "': " + why +
                      "; use a simple path like $.answer, $.choices[0].text or answer.value");
  };
  // "a.b" is "$.a.b"; "[0]" is "$[0]"
  const std::string path = given[0] == '$' ? given : given[0] == '[' ? "$" + given : "$." + given;
  std::vector<Step> steps;
  size_t i = 1;
  while (i < path.size()) {
    char c = path[i];
    if (c == '.') {
      size_t j = i + 1;
      while (j < path.size() && path[j] != '.' && path[j] != '[') ++j;
      if (j == i + 1) throw bad("empty key after '.' at offset " + std::to_string(i));
      steps.push_back({false, path.substr(i + 1, j - i - 1), 0});
      i = j;
    } else if (c == '[') {
      size_t j = path.find(']', i);
      if (j == std::string::npos) throw bad("missing ']' after offset " + std::to_string(i));
      std::string inner = path.substr(i + 1, j - i - 1);
      if (inner.size() >= 2 && (inner.front() == '"' || inner.front() == '\'') && inner.back() == inner.front()) {
        steps.push_back({false, inner.substr(1, inner.size() - 2), 0});
      } else {
        if (inner.empty() || inner.find_first_not_of("0123456789") != std::string::npos)
          throw bad("index '" + inner + "' is not a non-negative integer");
        steps.push_back({true, "", static_cast<size_t>(std::stoull(inner))});
      }
      i = j + 1;
    } else {
      throw bad(std::string("unexpected '") + c + "' at offset " + std::to_string(i));
    }
  }
  return steps;
}

namespace {
nlohmann::json normalized_numbers(const nlohmann::json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
    return v;
  }
  if (v.is_array()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : v) a.push_back(normalized_numbers(e));
    return a;
  }
  if (v.is_object()) {
    nlohmann::json o = nlohmann::json::object();
    for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = normalized_numbers(it.value());
    return o;
  }
  return v;
}
}  // namespace

std::string canonical_answer(const nlohmann::json& v) {
  // nlohmann::json keeps object keys sorted; numbers with an integral value print as integers.
  return normalized_numbers(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

AnswerExtractor::~AnswerExtractor() {
  if (re_) pcre2_code_free(static_cast<pcre2_code*>(re_));
}

std::optional<std::string> AnswerExtractor::extract(const std::string& text) const {
  if (re_) {
    auto* re = static_cast<pcre2_code*>(re_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, nullptr);
    std::optional<std::string> out;
    if (rc > 0) {
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      int group = (rc > 1 && ov[2] != PCRE2_UNSET) ? 1 : 0;
      out = text.substr(ov[2 * group], ov[2 * group + 1] - ov[2 * group]);
    }
    pcre2_match_data_free(md);
    return out;
  }
  if (!paths_.empty()) {
    nlohmann::json j;
    if (!parse_json(text, j)) return std::nullopt;  // not JSON, or nested past the limit: no answer
    if (paths_.size() == 1) {
      const nlohmann::json* v = lookup(j, paths_[0]);
      if (!v) return std::nullopt;
      return v->is_string() ? v->get<std::string>() : canonical_answer(*v);
    }
    nlohmann::json all = nlohmann::json::array();  // several paths: the answer is all their values
    for (const auto& p : paths_) {
      const nlohmann::json* v = lookup(j, p);
      if (!v) return std::nullopt;
      all.push_back(*v);
    }
    return canonical_answer(all);
  }
  return std::nullopt;
}

const nlohmann::json* AnswerExtractor::lookup(const nlohmann::json& j, const std::vector<Step>& path) {
  const nlohmann::json* cur = &j;
  for (const auto& s : path) {
    if (s.index) {
      if (!cur->is_array() || s.pos >= cur->size()) return nullptr;
      cur = &(*cur)[s.pos];
    } else {
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(s.key);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    }
  }
  return cur;
}

std::vector<std::optional<std::string>> AnswerExtractor::fields(const std::string& text) const {
  std::vector<std::optional<std::string>> out(paths_.size());
  if (paths_.empty()) return out;
  nlohmann::json j;
  if (!parse_json(text, j)) return out;
  for (size_t i = 0; i < paths_.size(); ++i)
    if (const nlohmann::json* v = lookup(j, paths_[i])) out[i] = canonical_answer(*v);
  return out;
}

// ============================================================================ analysis

namespace {

bool is_remote(const Completion& c) {
  return !c.cache_state.empty() || !c.response_id.empty() || !c.system_fingerprint.empty() ||
         !c.response_model.empty() || !c.cache_header.empty();
}

std::string output_hash(const Completion& c) {
  return c.tokens_known ? tokens_sha256(c.tokens) : sha256_hex(c.text);
}

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

struct CaseKey {
  std::string prompt, decoding, mode, precision;
  bool operator<(const CaseKey& o) const {
    return std::tie(prompt, decoding, mode, precision) < std::tie(o.prompt, o.decoding, o.mode, o.precision);
  }
};

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
  for (int ci : members) remote = remote || is_remote(all[ci]);
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

// Structured output of one case: the schema-valid rate (final answers and first answers), the
// agreement of the parsed JSON in canonical form, the same before retries, and the retries' cost.
void analyze_structured(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members) {
  StructuredCase sc;
  int valid = 0, valid_first = 0;
  std::set<std::string> json_final, json_first, raw_first;
  int invalid_final = 0, invalid_first = 0;
  for (int ci : members) {
    const Completion& c = all[ci];
    const bool ok = c.schema_valid.value_or(false);
    valid += ok;
    valid_first += ok && c.retries == 0;
    sc.retries += c.retries;
    sc.retry_tokens += c.retry_tokens;
    const bool retried = c.retries > 0;
    const std::string& first_text = retried ? c.first_text : c.text;
    raw_first.insert(retried ? (c.tokens_known ? tokens_sha256(c.first_tokens) : sha256_hex(c.first_text))
                             : output_hash(c));
    auto canon = [](const std::string& text, std::set<std::string>& seen, int& invalid) {
      nlohmann::json j;
      if (!parse_json(text, j))
        ++invalid;
      else
        seen.insert(canonical_answer(j));
    };
    canon(c.text, json_final, invalid_final);
    canon(first_text, json_first, invalid_first);
  }
  const int n = static_cast<int>(members.size());
  sc.valid = wilson(valid, n);
  sc.valid_first = wilson(valid_first, n);
  sc.json_unique = static_cast<int>(json_final.size());
  sc.json_invalid = invalid_final;
  sc.tara_json = n > 0 && invalid_final == 0 && json_final.size() == 1;
  sc.tarr_first = n > 0 && raw_first.size() == 1;
  sc.tara_json_first = n > 0 && invalid_first == 0 && json_first.size() == 1;
  cr.structured = sc;
}

// Per-field agreement of every --answer-json-path path over the case's completions.
void analyze_fields(CaseResult& cr, const std::vector<Completion>& all, const std::vector<int>& members,
                    const AnswerExtractor& extractor) {
  const auto& paths = extractor.field_paths();
  cr.fields.clear();
  if (paths.empty()) return;
  std::vector<std::map<std::string, int>> counts(paths.size());
  std::vector<int> missing(paths.size(), 0);
  for (int ci : members) {
    auto vals = extractor.fields(all[ci].text);
    for (size_t i = 0; i < paths.size(); ++i) {
      if (vals[i])
        counts[i][*vals[i]]++;
      else
        missing[i]++;
    }
  }
  const int n = static_cast<int>(members.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    FieldAgreement f;
    f.path = paths[i];
    f.unique = static_cast<int>(counts[i].size());
    f.missing = missing[i];
    int top = 0;
    for (const auto& [v, k] : counts[i]) top = std::max(top, k);
    f.majority = wilson(top, n);
    f.agree = n > 0 && f.missing == 0 && f.unique == 1;
    cr.fields.push_back(std::move(f));
  }
}

// Structured output over a mode's cases (after retries and before).
void summarize_structured(ModeSummary& ms, const std::vector<CaseResult>& cases, const std::vector<Completion>& all) {
  StructuredSummary st;
  int valid = 0, valid_first = 0, n = 0, ncases = 0, tarr = 0, tarr_first = 0, tj = 0, tj_first = 0;
  std::vector<int> field_agree;
  for (const auto& cr : cases) {
    if (cr.mode != ms.mode || cr.precision != ms.precision || !cr.structured || cr.n == 0) continue;
    const StructuredCase& sc = *cr.structured;
    valid += sc.valid.k;
    valid_first += sc.valid_first.k;
    n += sc.valid.n;
    ++ncases;
    tarr += cr.tarr;
    tarr_first += sc.tarr_first;
    tj += sc.tara_json;
    tj_first += sc.tara_json_first;
    st.retries += sc.retries;
    st.retry_tokens += sc.retry_tokens;
    if (st.fields.empty())
      for (const auto& f : cr.fields) st.fields.push_back(FieldRate{f.path, {}});
    field_agree.resize(st.fields.size(), 0);
    for (size_t i = 0; i < cr.fields.size() && i < field_agree.size(); ++i) field_agree[i] += cr.fields[i].agree;
  }
  for (const auto& c : all)
    if (c.error.empty() && c.mode == ms.mode && c.precision == ms.precision && c.schema_valid) {
      st.requests++;
      st.tokens += c.completion_tokens > 0 ? c.completion_tokens : static_cast<int64_t>(c.tokens.size());
    }
  st.valid = wilson(valid, n);
  st.valid_first = wilson(valid_first, n);
  st.tarr = wilson(tarr, ncases);
  st.tarr_first = wilson(tarr_first, ncases);
  st.tara_json = wilson(tj, ncases);
  st.tara_json_first = wilson(tj_first, ncases);
  for (size_t i = 0; i < st.fields.size(); ++i) st.fields[i].agree = wilson(field_agree[i], ncases);
  ms.structured = st;
}

}  // namespace

void analyze(AuditReport& r) {
  AnswerExtractor extractor(r.answer_regex, r.answer_json_path);
  // Structured output: whether each answer conforms to the plan's schema, checked here from its text
  // (the same check the runner's --retry-invalid used), so a report read back is analysed the same.
  std::unique_ptr<JsonSchema> schema;
  if (r.plan.is_object() && r.plan.contains("json_schema") && r.plan["json_schema"].is_object())
    schema = std::make_unique<JsonSchema>(schema_of(r.plan["json_schema"]), "the report's plan json_schema");
  for (auto& c : r.completions) {
    c.schema_valid.reset();
    if (schema && c.error.empty()) c.schema_valid = schema->validate(c.text);
  }
  const auto& all = r.completions;

  // ---- group by (prompt, decoding, mode, precision), in order of first appearance
  std::vector<std::string> hashes(all.size());
  std::map<CaseKey, int> case_of;
  std::vector<std::vector<int>> members;
  r.cases.clear();
  std::vector<std::string> mode_order;
  std::vector<std::string> label_order;  // "default (f32)", "default (bf16)": the cross-mode tables' rows
  bool any_remote = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const Completion& c = all[i];
    CaseKey key{c.prompt_id, c.decoding_id, c.mode, c.precision};
    auto [it, added] = case_of.emplace(key, static_cast<int>(r.cases.size()));
    if (added) {
      CaseResult cr;
      cr.prompt_id = c.prompt_id;
      cr.decoding_id = c.decoding_id;
      cr.mode = c.mode;
      cr.precision = c.precision;
      if (auto p = r.prompts.find(c.prompt_id); p != r.prompts.end()) cr.prompt_text = p->second;
      r.cases.push_back(std::move(cr));
      members.emplace_back();
      if (std::find(mode_order.begin(), mode_order.end(), c.mode) == mode_order.end()) mode_order.push_back(c.mode);
      std::string label = mode_label(c.mode, c.precision);
      if (std::find(label_order.begin(), label_order.end(), label) == label_order.end()) label_order.push_back(label);
    }
    any_remote = any_remote || is_remote(c);
    if (!c.error.empty()) {
      r.cases[it->second].errors++;
      continue;
    }
    hashes[i] = output_hash(c);
    members[it->second].push_back(static_cast<int>(i));
  }
  for (size_t k = 0; k < r.cases.size(); ++k) {
    analyze_case(r.cases[k], all, members[k], hashes, extractor);
    analyze_drift_size(r.cases[k], all, members[k], r.fragile_margin);  // src/audit/drift_size.cpp
    r.cases[k].structured.reset();
    if (schema) analyze_structured(r.cases[k], all, members[k]);
    analyze_fields(r.cases[k], all, members[k], extractor);
    // Where a case diverged: the command that replays each cluster's first member alone.
    if (r.cases[k].clusters.size() > 1 || (r.cases[k].tara && !*r.cases[k].tara))
      for (auto& cl : r.cases[k].clusters)
        if (!cl.members.empty()) cl.repro_command = repro_command(r, all[cl.members[0]]);
  }

  // ---- cross-mode tables: per (prompt, decoding), which outputs each mode (at each precision) produced
  r.cross_mode.clear();
  if (label_order.size() > 1) {
    std::map<std::pair<std::string, std::string>, std::vector<int>> groups;
    std::vector<std::pair<std::string, std::string>> group_order;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].error.empty()) continue;
      auto key = std::make_pair(all[i].prompt_id, all[i].decoding_id);
      auto [it, added] = groups.try_emplace(key);
      if (added) group_order.push_back(key);
      it->second.push_back(static_cast<int>(i));
    }
    for (const auto& key : group_order) {
      const auto& g = groups[key];
      std::map<std::string, int> total;
      for (int i : g) total[hashes[i]]++;
      CrossModeTable x;
      x.prompt_id = key.first;
      x.decoding_id = key.second;
      for (const auto& [h, n] : total) x.hashes.push_back(h);
      std::stable_sort(x.hashes.begin(), x.hashes.end(),
                       [&](const std::string& a, const std::string& b) { return total[a] > total[b]; });
      std::map<std::string, int> col;
      for (size_t c = 0; c < x.hashes.size(); ++c) col[x.hashes[c]] = static_cast<int>(c);
      x.table.factor = any_remote ? "endpoint" : "mode";
      for (const auto& m : label_order) {
        std::vector<int> row(x.hashes.size(), 0);
        bool present = false;
        for (int i : g)
          if (mode_label(all[i].mode, all[i].precision) == m) row[col[hashes[i]]]++, present = true;
        if (!present) continue;
        x.table.values.push_back(m);
        x.table.counts.push_back(row);
      }
      if (x.table.values.size() < 2) continue;
      bool single = true;
      for (const auto& row : x.table.counts)
        single = single && std::count_if(row.begin(), row.end(), [](int v) { return v > 0; }) == 1;
      x.table.explains = x.hashes.size() > 1 && single;
      r.cross_mode.push_back(std::move(x));
    }
  }

  // ---- throughput: rows given by the runner (measured wall time) are kept; otherwise computed per
  // (mode, batch size) as sum of generated tokens / sum of completion latencies, each completion one
  // measurement of the cell's statistics
  if (r.throughput.empty()) {
    std::map<std::tuple<std::string, std::string, int>, ThroughputRow> rows;
    for (const auto& c : all) {
      if (!c.error.empty()) continue;
      auto& row = rows[{c.mode, c.precision, c.batch_size}];
      row.mode = c.mode;
      row.precision = c.precision;
      row.batch_size = c.batch_size;
      add_throughput_run(row, c.completion_tokens > 0 ? c.completion_tokens : static_cast<int64_t>(c.tokens.size()),
                         c.latency_s);  // one measurement per completion
    }
    for (const auto& m : mode_order)
      for (auto& [k, row] : rows)
        if (std::get<0>(k) == m) r.throughput.push_back(row);
  }
  for (auto& row : r.throughput) {
    if (row.seconds > 0 && row.tokens > 0) row.tokens_per_s = static_cast<double>(row.tokens) / row.seconds;
    row.ratio_vs_default.reset();
  }
  std::string base_mode;
  for (const auto& row : r.throughput)
    if (row.mode == "default") base_mode = "default";
  if (base_mode.empty() && !r.throughput.empty()) base_mode = r.throughput[0].mode;
  for (auto& row : r.throughput) {
    for (const auto& b : r.throughput)
      if (b.mode == base_mode && b.precision == row.precision && b.batch_size == row.batch_size && b.tokens_per_s > 0)
        row.ratio_vs_default = row.tokens_per_s / b.tokens_per_s;
  }

  // ---- per-case verdicts, per-mode summaries, the gate
  for (const auto& row : r.throughput)
    if (std::find(mode_order.begin(), mode_order.end(), row.mode) == mode_order.end()) mode_order.push_back(row.mode);
  compute_verdicts(r, mode_order);
  // Drift size against the reference context, per mode and precision (src/audit/drift_size.cpp).
  for (auto& ms : r.summary.modes) summarize_drift_size(ms, r.cases);
  if (schema)
    for (auto& ms : r.summary.modes) summarize_structured(ms, r.cases, all);
  // The trade-off table: each approach's speed relative to default and its reproducibility (tradeoff.cpp).
  compute_tradeoff(r);
  analyze_variants(r);        // prompt variants per variant and per task (src/audit/variants.cpp)
  analyze_response_cache(r);  // signs of replayed cached responses per endpoint (src/audit/response_cache.cpp)
}

// ============================================================================ repro command

namespace {
std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char ch : s) o += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return o + "'";
}
}  // namespace

std::string repro_command(const AuditReport& r, const Completion& c) {
  if (is_remote(c) || !r.environment.is_object() || !r.plan.is_object()) return "";
  auto model = r.environment.find("model");
  if (model == r.environment.end() || !model->is_object() || !model->contains("path") || !(*model)["path"].is_string())
    return "";
  auto prompt = r.prompts.find(c.prompt_id);
  if (prompt == r.prompts.end()) return "";
  std::string device = "cpu";
  if (auto e = r.environment.find("engine"); e != r.environment.end() && e->is_object())
    device = e->value("device", "cpu");
  const int threads = r.plan.value("threads", 1);
  const int max_tokens = r.plan.value("max_tokens", 32);
  const auto fs = r.plan.find("filler_seed");
  const uint64_t filler_seed = fs != r.plan.end() && fs->is_number_integer() && *fs >= 0 ? fs->get<uint64_t>() : 1;
  uint64_t set = 0;
  if (c.filler_set.size() > 1 && c.filler_set[0] == 'f') set = std::stoull(c.filler_set.substr(1));
  std::string cmd = "repro-audit generate --model " + shell_quote((*model)["path"].get<std::string>());
  if (model->contains("tokenizer_path") && (*model)["tokenizer_path"].is_string())
    cmd += " --tokenizer " + shell_quote((*model)["tokenizer_path"].get<std::string>());
  cmd += " --mode " + c.mode + " --precision " + (c.precision.empty() ? "f32" : c.precision) + " --device " + device +
         " --threads " + std::to_string(threads) + " --prompt " + shell_quote(prompt->second) +
         " --max-tokens " + std::to_string(max_tokens);
  // Sampled decoding ids read "t0.8-p0.95-k40-s1" (see decoding_cells): temperature, top-p, top-k, seed.
  if (c.decoding_id != "greedy") {
    for (const auto& part : split(c.decoding_id, '-')) {
      if (part.size() < 2) continue;
      const std::string v = part.substr(1);
      if (part[0] == 't') cmd += " --temperature " + v;
      if (part[0] == 'p') cmd += " --top-p " + v;
      if (part[0] == 'k') cmd += " --top-k " + v;
    }
    cmd += " --seed " + std::to_string(c.seed);
  }
  cmd += " --batch-size " + std::to_string(c.batch_size) + " --position " + std::to_string(c.position);
  if (c.batch_size > 1) {
    cmd += " --filler-seed " + std::to_string(filler_seed + set);
    if (c.mate_join_step > 0) cmd += " --mate-join-step " + std::to_string(c.mate_join_step);
    if (c.mate_prompt_delta > 0) cmd += " --mate-prompt-delta " + std::to_string(c.mate_prompt_delta);
    const int mate_tokens = r.plan.value("prompt_tokens", 0);
    if (mate_tokens > 0) cmd += " --mate-prompt-tokens " + std::to_string(mate_tokens);
  }
  return cmd + " --json";
}

// ============================================================================ benchmark

double bench_analysis(int completions, int tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AuditReport r;
  const int per_case = 100;
  const int batch_sizes[] = {1, 4, 16, 64};
  r.completions.reserve(completions);
  std::vector<int> base(tokens);
  for (int i = 0; i < completions; ++i) {
    int case_id = i / per_case;
    int rep = i % per_case;
    bool def = case_id % 2 == 0;
    if (rep == 0) {
      std::mt19937_64 cr(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(case_id / 2 + 1)));
      for (auto& t : base) t = static_cast<int>(cr() % 32000);
    }
    Completion c;
    c.prompt_id = "p" + std::to_string(case_id / 2);
    c.decoding_id = "greedy";
    c.mode = def ? "default" : "batch-invariant";
    c.batch_size = batch_sizes[rep % 4];
    c.position = rep % 3;
    c.filler_set = "f" + std::to_string(rep % 5);
    c.repeat = rep;
    c.tokens = base;
    if (def && c.batch_size >= 16) {
      // divergence: from a batch-size-dependent point on, a different continuation
      int at = tokens / 2 + (c.batch_size == 16 ? 0 : 7) + static_cast<int>(rng() % 2);
      for (int t = std::min(at, tokens); t < tokens; ++t) c.tokens[t] = static_cast<int>((c.tokens[t] * 31 + at) % 32000);
    }
    c.logprobs.assign(tokens, -0.5f);
    c.logits_sha256 = def ? std::to_string(c.batch_size) : "x";
    c.text.reserve(tokens * 4);
    for (int t : c.tokens) c.text += std::to_string(t % 1000) + " ";
    c.completion_tokens = tokens;
    c.latency_s = 0.001 * tokens * (def ? 1.0 : 1.4);
    r.completions.push_back(std::move(c));
  }
  auto t0 = std::chrono::steady_clock::now();
  analyze(r);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace repro
