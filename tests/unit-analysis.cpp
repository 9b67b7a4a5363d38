// Analysis on constructed inputs: every metric of include/repro/analysis.hpp.
#include <doctest/doctest.h>

#include <cmath>

#include "repro/audit/analysis.hpp"
#include "repro/audit/runner.hpp"
#include "repro/report/report.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

using namespace repro;

namespace {

Completion mk(const std::string& prompt, const std::string& mode, std::vector<int> tokens, const std::string& text,
              int batch_size = 1) {
  Completion c;
  c.prompt_id = prompt;
  c.decoding_id = "greedy";
  c.mode = mode;
  c.tokens = std::move(tokens);
  c.text = text;
  c.batch_size = batch_size;
  c.completion_tokens = static_cast<int>(c.tokens.size());
  c.latency_s = 0.1;
  return c;
}

const CaseResult& find_case(const AuditReport& r, const std::string& prompt, const std::string& mode) {
  for (const auto& c : r.cases)
    if (c.prompt_id == prompt && c.mode == mode) return c;
  FAIL("case not found: " << prompt << " " << mode);
  return r.cases.front();
}

}  // namespace

TEST_CASE("tokens are hashed as int32 little-endian") {
  // bytes 01 00 00 00 ff ff ff ff
  CHECK(tokens_sha256({1, -1}) == sha256_hex(std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8)));
  CHECK(tokens_sha256({}) == sha256_hex(""));
}

TEST_CASE("clusters, unique count, majority with tie-break by earliest first member, TARr") {
  AuditReport r;
  // B first, then A twice, B again, C: A and B tie at 2, B's first member is earlier -> majority B
  r.completions = {mk("p", "default", {2}, "B"), mk("p", "default", {1}, "A"), mk("p", "default", {1}, "A"),
                   mk("p", "default", {2}, "B"), mk("p", "default", {3}, "C")};
  analyze(r);
  REQUIRE(r.cases.size() == 1);
  const auto& c = r.cases[0];
  CHECK(c.n == 5);
  CHECK(c.unique == 3);
  CHECK_FALSE(c.tarr);
  REQUIRE(c.clusters.size() == 3);
  CHECK(c.clusters[0].text == "B");
  CHECK(c.clusters[0].majority);
  CHECK(c.clusters[0].members == std::vector<int>{0, 3});
  CHECK(c.clusters[0].hash == tokens_sha256({2}));
  CHECK(c.clusters[1].text == "A");
  CHECK(c.clusters[1].count == 2);
  CHECK_FALSE(c.clusters[1].majority);
  CHECK(c.clusters[2].text == "C");
  CHECK(c.divergent);

  // the larger cluster wins regardless of order
  r.completions.push_back(mk("p", "default", {1}, "A"));
  analyze(r);
  CHECK(r.cases[0].clusters[0].text == "A");
  CHECK(r.cases[0].clusters[0].count == 3);

  AuditReport same;
  for (int i = 0; i < 4; ++i) same.completions.push_back(mk("p", "default", {5, 6}, "x y"));
  analyze(same);
  CHECK(same.cases[0].unique == 1);
  CHECK(same.cases[0].tarr);
  CHECK_FALSE(same.cases[0].divergent);
  CHECK(same.cases[0].clusters[0].first_divergence_token == -1);
}

TEST_CASE("cases are grouped by prompt, decoding and mode; errors are counted but excluded") {
  AuditReport r;
  r.completions = {mk("p1", "default", {1}, "a"), mk("p1", "batch-invariant", {1}, "a"),
                   mk("p2", "default", {1}, "a"), mk("p1", "default", {1}, "a")};
  Completion bad = mk("p1", "default", {9}, "zzz");
  bad.error = "timeout";
  r.completions.push_back(bad);
  Completion sampled = mk("p1", "default", {1}, "a");
  sampled.decoding_id = "t0.8";
  r.completions.push_back(sampled);
  analyze(r);
  REQUIRE(r.cases.size() == 4);
  const auto& c = find_case(r, "p1", "default");
  CHECK(c.decoding_id == "greedy");
  CHECK(c.n == 2);
  CHECK(c.errors == 1);
  CHECK(c.unique == 1);
  CHECK(c.tarr);
  CHECK(r.summary.completions == 5);
  CHECK(r.summary.errors == 1);
  CHECK(r.summary.cases == 4);
}

TEST_CASE("first divergence in tokens and characters, with tokens and logprobs there") {
  AuditReport r;
  Completion a = mk("p", "default", {1, 2, 3, 4}, "a b c d");
  a.logprobs = {-0.1f, -0.2f, -0.3f, -0.4f};
  Completion b = mk("p", "default", {1, 2, 5}, "a b e", 8);
  b.logprobs = {-0.1f, -0.2f, -1.5f};
  Completion pre = mk("p", "default", {1, 2}, "a b", 16);  // a prefix of the majority: ended early
  r.completions = {a, a, b, pre};
  analyze(r);
  const auto& c = r.cases[0];
  REQUIRE(c.clusters.size() == 3);
  const Cluster& m = c.clusters[0];
  CHECK(m.majority);
  CHECK(m.first_divergence_token == -1);
  CHECK(m.first_divergence_char == -1);
  // clusters of one: ordered by hash
  const Cluster* cb = nullptr;
  const Cluster* cp = nullptr;
  for (const auto& k : c.clusters) {
    if (k.text == "a b e") cb = &k;
    if (k.text == "a b") cp = &k;
  }
  REQUIRE(cb != nullptr);
  REQUIRE(cp != nullptr);
  CHECK(cb->first_divergence_token == 2);
  CHECK(cb->first_divergence_char == 4);
  CHECK(cb->majority_token == 3);
  CHECK(cb->cluster_token == 5);
  REQUIRE(cb->majority_logprob.has_value());
  REQUIRE(cb->cluster_logprob.has_value());
  CHECK(*cb->majority_logprob == -0.3f);
  CHECK(*cb->cluster_logprob == -1.5f);
  CHECK(cp->first_divergence_token == 2);
  CHECK(cp->first_divergence_char == 3);
  CHECK(cp->majority_token == 3);
  CHECK(cp->cluster_token == -1);
  CHECK(cp->majority_logprob.has_value());
  CHECK_FALSE(cp->cluster_logprob.has_value());

  // text-only completions (remote without ids): hash of the text, character divergence only
  AuditReport t;
  Completion x = mk("p", "ep", {}, "hello world");
  x.tokens_known = false;
  Completion y = x;
  y.text = "hello there";
  t.completions = {x, x, y};
  analyze(t);
  const auto& tc = t.cases[0];
  REQUIRE(tc.clusters.size() == 2);
  CHECK(tc.clusters[0].hash == sha256_hex("hello world"));
  CHECK(tc.clusters[1].first_divergence_token == -1);
  CHECK(tc.clusters[1].first_divergence_char == 6);
}

TEST_CASE("edit distance: exact, banded, early exit") {
  std::vector<int> kitten{'k', 'i', 't', 't', 'e', 'n'}, sitting{'s', 'i', 't', 't', 'i', 'n', 'g'};
  CHECK(edit_distance_bounded(kitten, sitting, 10) == 3);
  CHECK(edit_distance_bounded(kitten, sitting, 3) == 3);
  CHECK(edit_distance_bounded(kitten, sitting, 2) == 3);  // over the bound: bound + 1
  CHECK(edit_distance_bounded(kitten, sitting, 1) == 2);
  CHECK(edit_distance_bounded({}, {}, 0) == 0);
  CHECK(edit_distance_bounded({1, 2, 3}, {}, 5) == 3);
  CHECK(edit_distance_bounded({1, 2, 3}, {1, 2, 3}, 0) == 0);
  CHECK(normalized_edit_distance(kitten, sitting) == doctest::Approx(3.0 / 7));
  // brute-force cross-check on pseudo-random sequences
  uint32_t s = 12345;
  auto rnd = [&] { return (s = s * 1103515245u + 12345u) >> 16; };
  for (int t = 0; t < 200; ++t) {
    std::vector<int> a(rnd() % 12), b(rnd() % 12);
    for (auto& v : a) v = static_cast<int>(rnd() % 3);
    for (auto& v : b) v = static_cast<int>(rnd() % 3);
    std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
    for (size_t i = 1; i <= a.size(); ++i)
      for (size_t j = 1; j <= b.size(); ++j)
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
    int exact = d[a.size()][b.size()];
    for (int k = 0; k <= 12; ++k) {
      int got = edit_distance_bounded(a, b, k);
      if (exact <= k)
        CHECK(got == exact);
      else
        CHECK(got == k + 1);
    }
  }
}

TEST_CASE("families by normalised token edit distance (single linkage, threshold 0.2)") {
  AuditReport r;
  std::vector<int> base{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int> near = base;
  near[9] = 99;  // distance 0.1 from the majority: same family
  std::vector<int> far{50, 51, 52, 53, 54, 55, 56, 57, 58, 59};
  std::vector<int> far2 = far;
  far2[0] = 70;  // 0.1 from `far`: linked to it, not to the majority
  std::vector<int> chain = far2;
  chain[1] = 71;  // 0.1 from far2, 0.2 from far: single linkage keeps it in far's family
  r.completions = {mk("p", "m", base, "base"), mk("p", "m", base, "base"), mk("p", "m", base, "base"),
                   mk("p", "m", near, "near"), mk("p", "m", far, "far"),   mk("p", "m", far, "far"),
                   mk("p", "m", far2, "far2"), mk("p", "m", chain, "chain")};
  analyze(r);
  const auto& c = r.cases[0];
  REQUIRE(c.clusters.size() == 5);
  auto get = [&](const std::string& t) -> const Cluster& {
    for (const auto& k : c.clusters)
      if (k.text == t) return k;
    FAIL("no cluster " << t);
    return c.clusters[0];
  };
  CHECK(get("base").family == 0);
  CHECK(get("near").family == 0);
  CHECK(get("far").family == 1);
  CHECK(get("far2").family == 1);
  CHECK(get("chain").family == 1);
  CHECK(get("base").distance_to_majority == 0.0);
  CHECK(get("near").distance_to_majority == doctest::Approx(0.1));
  CHECK(get("far").distance_to_majority == doctest::Approx(1.0));
  CHECK(get("far").first_divergence_token == 0);
}

TEST_CASE("bitwise tier: identical tokens with different logits or logprob bits") {
  AuditReport r;
  Completion a = mk("p", "default", {1, 2}, "a b");
  a.logits_sha256 = "aaaa";
  a.logprobs = {-0.5f, -0.25f};
  Completion b = a;
  b.logits_sha256 = "bbbb";
  Completion c = a;
  c.logprobs[1] = std::nextafter(-0.25f, 0.0f);  // one ulp
  r.completions = {a, a, b, c};
  analyze(r);
  const auto& k = r.cases[0];
  CHECK(k.unique == 1);
  CHECK(k.tarr);
  CHECK(k.bit_unique == 3);
  CHECK(k.bit_divergent);
  CHECK(k.clusters[0].bit_variants == 3);
  CHECK_FALSE(k.divergent);
  REQUIRE(r.summary.modes.size() == 1);
  CHECK(r.summary.modes[0].bit_divergent_share == 1.0);

  AuditReport same;
  same.completions = {a, a};
  analyze(same);
  CHECK(same.cases[0].bit_unique == 1);
  CHECK_FALSE(same.cases[0].bit_divergent);
}

TEST_CASE("TARa with a regex: first capture group, or the whole match") {
  AuditReport r;
  r.answer_regex = "answer: (\\d+)";
  r.completions = {mk("p", "m", {1}, "answer: 42 because"), mk("p", "m", {2}, "so the answer: 42, since"),
                   mk("q", "m", {1}, "answer: 42"), mk("q", "m", {2}, "answer: 7"),
                   mk("s", "m", {1}, "answer: 1"), mk("s", "m", {2}, "no idea")};
  analyze(r);
  const auto& p = find_case(r, "p", "m");
  CHECK(p.unique == 2);
  CHECK_FALSE(p.tarr);
  REQUIRE(p.tara.has_value());
  CHECK(*p.tara);
  CHECK(p.answer_unique == 1);
  CHECK(p.clusters[0].answer == std::optional<std::string>("42"));
  CHECK(p.divergent);  // raw outputs differ (divergent = unique > 1 or TARa false)
  const auto& q = find_case(r, "q", "m");
  CHECK_FALSE(*q.tara);
  CHECK(q.answer_unique == 2);
  CHECK(q.divergent);
  const auto& s = find_case(r, "s", "m");
  CHECK_FALSE(*s.tara);
  CHECK(s.answer_missing == 1);

  AuditReport w;
  w.answer_regex = "[0-9]+";
  w.completions = {mk("p", "m", {1}, "x 12 y"), mk("p", "m", {2}, "z 12")};
  analyze(w);
  CHECK(*w.cases[0].tara);
  CHECK(w.cases[0].clusters[0].answer == std::optional<std::string>("12"));

  AuditReport none;
  none.completions = {mk("p", "m", {1}, "a")};
  analyze(none);
  CHECK_FALSE(none.cases[0].tara.has_value());

  AuditReport bad;
  bad.answer_regex = "(unclosed";
  bad.completions = {mk("p", "m", {1}, "a")};
  CHECK_THROWS_WITH_AS(analyze(bad), doctest::Contains("--answer-regex '(unclosed'"), UsageError);
}

TEST_CASE("TARa with a JSON path") {
  AnswerExtractor x("", "$.a.b[1]");
  CHECK(x.extract(R"({"a":{"b":[7,"eight"]}})") == std::optional<std::string>("eight"));
  CHECK(x.extract(R"({"a":{"b":[7,{"k":1}]}})") == std::optional<std::string>("{\"k\":1}"));
  CHECK_FALSE(x.extract(R"({"a":{"b":[7]}})").has_value());
  CHECK_FALSE(x.extract("not json").has_value());
  AnswerExtractor q("", "$[\"my key\"]");
  CHECK(q.extract(R"({"my key": 3.5})") == std::optional<std::string>("3.5"));

  AuditReport r;
  r.answer_json_path = "$.answer";
  r.completions = {mk("p", "m", {1}, R"({"answer": "yes", "why": "a"})"),
                   mk("p", "m", {2}, R"( {"why": "b", "answer": "yes"} )"), mk("q", "m", {1}, R"({"answer": 1})"),
                   mk("q", "m", {2}, "{\"answer\": 1")};  // truncated JSON: no answer
  analyze(r);
  CHECK(*find_case(r, "p", "m").tara);
  CHECK_FALSE(*find_case(r, "q", "m").tara);
  CHECK(find_case(r, "q", "m").answer_missing == 1);

  CHECK_THROWS_WITH_AS(AnswerExtractor("", "$a"), doctest::Contains("--answer-json-path '$a': unexpected 'a' at offset 1"),
                       UsageError);
  // without the leading "$." the path means the same
  CHECK(AnswerExtractor("", "answer").extract(R"({"answer": "yes"})") == std::optional<std::string>("yes"));
  CHECK_THROWS_AS(AnswerExtractor("", "$.a[x]"), UsageError);
  CHECK_THROWS_AS(AnswerExtractor("", "$.a[0"), UsageError);
}

TEST_CASE("factor tables: membership per value, and which factor explains the clusters") {
  AuditReport r;
  auto add = [&](int bs, int pos, const std::string& filler, std::vector<int> toks) {
    Completion c = mk("p", "default", std::move(toks), "t", bs);
    c.position = pos;
    c.filler_set = filler;
    c.seed = 7;
    r.completions.push_back(c);
  };
  add(2, 0, "f1", {1});
  add(2, 1, "f2", {1});
  add(16, 0, "f1", {2});
  add(16, 1, "f2", {2});
  add(16, 0, "f3", {2});
  analyze(r);
  const auto& c = r.cases[0];
  REQUIRE(c.clusters.size() == 2);
  CHECK(c.clusters[0].tokens == std::vector<int>{2});
  // seed does not vary: no table for it
  REQUIRE(c.factors.size() == 3);
  const FactorTable& bs = c.factors[0];
  CHECK(bs.factor == "batch_size");
  CHECK(bs.values == std::vector<std::string>{"2", "16"});  // numeric order
  CHECK(bs.counts == std::vector<std::vector<int>>{{0, 2}, {3, 0}});
  CHECK(bs.explains);
  CHECK(c.factors[1].factor == "position");
  CHECK(c.factors[1].values == std::vector<std::string>{"0", "1"});
  CHECK(c.factors[1].counts == std::vector<std::vector<int>>{{2, 1}, {1, 1}});
  CHECK_FALSE(c.factors[1].explains);
  CHECK(c.factors[2].factor == "filler_set");
  CHECK_FALSE(c.factors[2].explains);  // f1 and f2 see both outputs

  // remote completions get concurrency / cache_state tables
  AuditReport rr;
  for (int conc : {1, 1, 8, 8}) {
    Completion c2 = mk("p", "vllm", {conc == 1 ? 1 : 2}, "t", conc);
    c2.response_id = "chatcmpl-1";
    c2.cache_state = conc == 1 ? "cold" : "warm";
    rr.completions.push_back(c2);
  }
  analyze(rr);
  const auto& rc = rr.cases[0];
  REQUIRE(rc.factors.size() == 2);
  CHECK(rc.factors[0].factor == "concurrency");
  CHECK(rc.factors[0].explains);
  CHECK(rc.factors[1].factor == "cache_state");
  CHECK(rc.factors[1].values == std::vector<std::string>{"cold", "warm"});
}

TEST_CASE("cross-mode tables show which outputs each mode produced") {
  AuditReport r;
  r.completions = {mk("p", "default", {1}, "a"), mk("p", "default", {1}, "a"),
                   mk("p", "batch-invariant", {2}, "b"), mk("p", "batch-invariant", {2}, "b"),
                   mk("q", "default", {1}, "a"), mk("q", "batch-invariant", {1}, "a")};
  analyze(r);
  REQUIRE(r.cross_mode.size() == 2);
  const auto& x = r.cross_mode[0];
  CHECK(x.prompt_id == "p");
  CHECK(x.table.factor == "mode");
  CHECK(x.table.values == std::vector<std::string>{"default", "batch-invariant"});
  CHECK(x.hashes.size() == 2);
  CHECK(x.table.explains);
  CHECK_FALSE(r.cross_mode[1].table.explains);
  CHECK(r.cross_mode[1].hashes.size() == 1);
}

TEST_CASE("throughput per mode and batch size, ratio against default") {
  AuditReport r;
  auto add = [&](const std::string& mode, int bs, int tokens, double secs) {
    Completion c = mk("p", mode, std::vector<int>(tokens, 1), "x", bs);
    c.latency_s = secs;
    c.tokens_per_s = tokens / secs;
    r.completions.push_back(c);
  };
  add("batch-invariant", 1, 100, 2.0);
  add("default", 1, 100, 1.0);
  add("default", 1, 100, 1.0);
  add("default", 8, 100, 0.5);
  add("batch-invariant", 8, 100, 0.625);
  analyze(r);
  REQUIRE(r.throughput.size() == 4);
  // modes in order of first appearance, batch sizes ascending
  CHECK(r.throughput[0].mode == "batch-invariant");
  CHECK(r.throughput[0].batch_size == 1);
  CHECK(r.throughput[0].tokens == 100);
  CHECK(r.throughput[0].tokens_per_s == doctest::Approx(50));
  CHECK(*r.throughput[0].ratio_vs_default == doctest::Approx(0.5));
  CHECK(*r.throughput[1].ratio_vs_default == doctest::Approx(0.8));
  CHECK(r.throughput[2].mode == "default");
  CHECK(r.throughput[2].tokens == 200);
  CHECK(r.throughput[2].tokens_per_s == doctest::Approx(100));
  CHECK(*r.throughput[2].ratio_vs_default == doctest::Approx(1.0));
  const auto& bi = r.summary.modes[0];
  CHECK(bi.mode == "batch-invariant");
  // one ratio per cell against default's mean in the same context (0.5 at batch 1, 0.8 at batch 8): their
  // mean and sample standard deviation, the same definition as the rows' and the trade-off table's
  CHECK(bi.throughput_ratio_n == 2);
  CHECK(*bi.throughput_ratio == doctest::Approx(0.65));
  CHECK(*bi.throughput_ratio_sd == doctest::Approx(std::sqrt(2 * 0.15 * 0.15)));
  // without default in the run (the ci profile gates batch-invariant alone): not measured, never 1.00x
  AuditReport alone;
  for (const auto& c : r.completions)
    if (c.mode == "batch-invariant") alone.completions.push_back(c);
  analyze(alone);
  REQUIRE(alone.summary.modes.size() == 1);
  CHECK(!alone.summary.modes[0].throughput_ratio.has_value());
  CHECK(alone.summary.modes[0].throughput_ratio_n == 0);
  for (const auto& t : alone.throughput) CHECK(!t.ratio_vs_default.has_value());

  // rows given by the runner (measured wall time) are kept; ratios filled in
  AuditReport g;
  g.completions = {mk("p", "ep-a", {1}, "x"), mk("p", "ep-b", {1}, "x")};
  g.environment = {{"endpoints", {{{"label", "ep-a"}}, {{"label", "ep-b"}}}}};
  for (auto& c : g.completions) {  // endpoint completions: the probe's own tokens/s is the cell's rate
    c.response_id = "id-" + c.mode;
    c.batch_size = 4;
    c.tokens_per_s = c.mode == "ep-a" ? 200 : 150;
  }
  g.throughput = {{"ep-a", "", 4, 400, 2.0, 0, std::nullopt, std::nullopt}, {"ep-b", "", 4, 300, 2.0, 0, std::nullopt, std::nullopt}};
  analyze(g);
  REQUIRE(g.throughput.size() == 2);
  CHECK(g.throughput[0].tokens_per_s == doctest::Approx(200));
  CHECK(*g.throughput[0].ratio_vs_default == doctest::Approx(1.0));  // no "default": the first endpoint
  CHECK(*g.throughput[1].ratio_vs_default == doctest::Approx(0.75));
}

TEST_CASE("verdict and exit code follow the thresholds per mode") {
  AuditReport base;
  // default: 2 cases, 1 divergent; batch-invariant: 2 cases, reproducible
  base.completions = {mk("p", "default", {1}, "a"),         mk("p", "default", {2}, "b"),
                      mk("q", "default", {1}, "a"),         mk("q", "default", {1}, "a"),
                      mk("p", "batch-invariant", {1}, "a"), mk("p", "batch-invariant", {1}, "a"),
                      mk("q", "batch-invariant", {1}, "a"), mk("q", "batch-invariant", {1}, "a")};
  auto run = [&](Thresholds t) {
    AuditReport r = base;
    r.thresholds = t;
    analyze(r);
    return r;
  };
  AuditReport strict = run({});
  CHECK(strict.summary.verdict == "divergent");
  CHECK(exit_code_for(strict) == kExitDivergent);
  CHECK(strict.summary.divergent_cases == 1);
  CHECK(strict.summary.max_unique == 2);
  REQUIRE(strict.summary.modes.size() == 2);
  CHECK(strict.summary.modes[0].mode == "default");
  CHECK(strict.summary.modes[0].verdict == "divergent");
  CHECK(strict.summary.modes[0].tarr_rate == 0.5);
  CHECK(strict.summary.modes[0].mean_unique == 1.5);
  CHECK(strict.summary.modes[1].verdict == "reproducible");
  CHECK(find_case(strict, "p", "default").failed);

  Thresholds only_bi;
  only_bi.modes = {"batch-invariant"};
  AuditReport r1 = run(only_bi);
  CHECK(r1.summary.verdict == "reproducible");
  CHECK(exit_code_for(r1) == kExitOk);
  CHECK_FALSE(r1.summary.modes[0].gated);
  CHECK_FALSE(find_case(r1, "p", "default").failed);
  CHECK(find_case(r1, "p", "default").divergent);

  Thresholds tolerant;
  tolerant.max_divergent = 1;
  tolerant.min_tarr = 0.5;
  CHECK(run(tolerant).summary.verdict == "reproducible");
  tolerant.min_tarr = 0.6;  // TARr 0.5 < 0.6
  CHECK(run(tolerant).summary.verdict == "divergent");

  // error rate over the threshold -> "errors", exit 3
  AuditReport e = base;
  Completion f = mk("p", "batch-invariant", {}, "");
  f.error = "HTTP 500";
  e.completions.push_back(f);
  e.thresholds.modes = {"batch-invariant"};
  analyze(e);
  CHECK(e.summary.verdict == "errors");
  CHECK(exit_code_for(e) == kExitBackend);
  e.thresholds.max_error_rate = 0.25;  // 1 of 5
  analyze(e);
  CHECK(e.summary.verdict == "reproducible");

  AuditReport i = base;
  i.summary.interrupted = true;
  analyze(i);
  CHECK(i.summary.verdict == "interrupted");
  CHECK(exit_code_for(i) == kExitInterrupted);
}

TEST_CASE("analyze is idempotent") {
  AuditReport r;
  r.answer_regex = "(a)";
  r.completions = {mk("p", "default", {1, 2}, "a b"), mk("p", "default", {1, 3}, "a c", 8),
                   mk("p", "batch-invariant", {1, 2}, "a b")};
  analyze(r);
  auto cases = r.cases.size();
  auto tp = r.throughput.size();
  auto clusters = r.cases[0].clusters.size();
  analyze(r);
  CHECK(r.cases.size() == cases);
  CHECK(r.throughput.size() == tp);
  CHECK(r.cases[0].clusters.size() == clusters);
  auto pts = unique_by_batch(r);
  REQUIRE(pts.size() == 3);
  CHECK(pts[0].mode == "default");
  CHECK(pts[0].batch_size == 1);
  CHECK(pts[0].mean_unique == 1.0);
  CHECK(pts[1].batch_size == 8);
  CHECK(pts[1].off_majority_share == 1.0);  // the tie goes to the earlier bs-1 output
}

TEST_CASE("every mode gets a verdict by one rule; the gate is separate; errors never count as divergence") {
  AuditReport base;
  base.completions = {mk("p", "default", {1}, "a"), mk("p", "default", {2}, "b"),
                      mk("p", "batch-invariant", {1}, "a"), mk("p", "batch-invariant", {1}, "a")};
  base.thresholds.modes = {"batch-invariant"};
  AuditReport r = base;
  analyze(r);
  REQUIRE(r.summary.modes.size() == 2);
  // not gated, yet its verdict is computed like any other (not hard-coded "reproducible")
  CHECK(r.summary.modes[0].verdict == "divergent");
  CHECK(r.summary.modes[0].gate == "not gated");
  CHECK(r.summary.modes[1].verdict == "reproducible");
  CHECK(r.summary.modes[1].gate == "pass");
  CHECK(r.summary.verdict == "reproducible");

  // a case whose requests all failed is neither divergent nor reproducible, and is not in the TARr rate
  AuditReport e = base;
  for (int i = 0; i < 3; ++i) {
    Completion f = mk("q", "batch-invariant", {}, "");
    f.error = "http_5xx: HTTP 500: injected (after 1 attempt)";
    e.completions.push_back(f);
  }
  e.thresholds.max_error_rate = 0.9;
  analyze(e);
  const CaseResult& q = find_case(e, "q", "batch-invariant");
  CHECK(q.n == 0);
  CHECK_FALSE(q.divergent);
  CHECK(q.failed);
  CHECK(e.summary.modes[1].tarr_rate == 1.0);
  CHECK(e.summary.modes[1].divergent_cases == 0);
  CHECK(e.summary.modes[1].error_rate == doctest::Approx(0.6));
  CHECK(e.summary.verdict == "reproducible");  // 60% errors tolerated by 0.9: not "divergent"
  e.thresholds.max_error_rate = 0.5;
  analyze(e);
  CHECK(e.summary.verdict == "errors");
  CHECK(exit_code_for(e) == kExitBackend);
  auto kinds = error_kinds(e);
  REQUIRE(kinds.size() == 1);
  CHECK(kinds[0].kind == "HTTP 500");
  CHECK(kinds[0].count == 3);
  CHECK(kinds[0].first == "HTTP 500: injected");

  // requests of fillers (recorded per endpoint by the runner) count too
  AuditReport f = base;
  f.environment["remote_stats"]["batch-invariant"] = {{"requests", 40}, {"failed", 10}};
  analyze(f);
  CHECK(f.summary.modes[1].requests == 40);
  CHECK(f.summary.modes[1].error_rate == doctest::Approx(0.25));
  CHECK(f.summary.verdict == "errors");

  // a gated mode the plan names but that never ran: "not run", and the run is an error
  AuditReport n = base;
  n.completions.resize(2);  // default only
  n.plan = {{"modes", {"default", "batch-invariant"}}};
  analyze(n);
  REQUIRE(n.summary.modes.size() == 2);
  CHECK(n.summary.modes[1].verdict == "not run");
  CHECK(n.summary.modes[1].gate == "fail");
  CHECK(n.summary.verdict == "errors");

  // no gated mode at all: nothing was checked, so it cannot pass
  AuditReport none = base;
  none.thresholds.modes = {"deterministic"};
  analyze(none);
  CHECK(none.summary.verdict == "errors");

  // drift from a --baseline is part of the verdict
  AuditReport d = base;
  d.baseline = BaselineResult{};
  d.baseline->drifted = true;
  analyze(d);
  CHECK(d.summary.verdict == "drift");
  CHECK(exit_code_for(d) == kExitDivergent);
}

TEST_CASE("check_gate_modes: unknown gate modes are usage errors with a close match") {
  CHECK_NOTHROW(check_gate_modes({"a", "b"}, {"a", "b", "c"}, "--gate-modes"));
  CHECK_NOTHROW(check_gate_modes({}, {"a"}, "--gate-modes"));
  CHECK_THROWS_WITH_AS(check_gate_modes({"batch-invariant"}, {"default"}, "--gate-modes"),
                       "--gate-modes: 'batch-invariant' is not a mode or endpoint label of this run; this run has "
                       "default; name one of them in --gate-modes",
                       UsageError);
  CHECK_THROWS_WITH_AS(check_gate_modes({"batch-invarient"}, {"default", "batch-invariant"}, "--gate-modes"),
                       doctest::Contains("(did you mean 'batch-invariant'?)"), UsageError);
}

TEST_CASE("progress line: ETA from tokens to generate, the cell running and divergent cases so far") {
  ProgressState p;
  p.total_cells = 10;
  p.total_work = 1000;
  p.done_cells = 2;
  p.done_work = 100;       // two cells, but only 10% of the tokens
  p.measured_work = 100;
  p.measured_seconds = 2;  // 50 tokens/s: 900 tokens left -> 18 s
  p.elapsed_s = 2;
  p.current = "default bf16 batch 16";
  p.divergent_cases = 3;
  std::string line = progress_line(p);
  CAPTURE(line);
  CHECK(line.find("2/10 cells, 10% of tokens") != std::string::npos);
  CHECK(line.find("ETA 18s") != std::string::npos);  // a cell count would say 8 s
  CHECK(line.find("default bf16 batch 16") != std::string::npos);
  CHECK(line.find("divergent cases: 3") != std::string::npos);
  // cells resumed from a report (not measured) give no rate yet
  p.measured_work = 0;
  p.measured_seconds = 0;
  CHECK(progress_line(p).find("ETA --") != std::string::npos);
}

TEST_CASE("divergent local cases carry the generate command of each cluster; the reports print it") {
  AuditReport r;
  r.environment = {{"model", {{"path", "/models/it's.gguf"}}}, {"engine", {{"device", "cpu"}}}};
  r.plan = {{"threads", 2}, {"max_tokens", 8}, {"filler_seed", 10}};
  r.prompts["p"] = "Once upon a time";
  r.prompts["q"] = "Lily";
  Completion a = mk("p", "default", {1, 2}, "ab"), b = mk("p", "default", {1, 3}, "ac", 8);
  a.precision = b.precision = "bf16";
  b.position = 7;
  b.filler_set = "f2";
  Completion s = mk("q", "default", {4}, "d", 4);
  s.decoding_id = "t0.8-p0.95-k40-s3";
  s.seed = 3;
  s.filler_set = "f0";
  r.completions = {a, b, s, s};
  analyze(r);
  const CaseResult& p = find_case(r, "p", "default");
  REQUIRE(p.clusters.size() == 2);
  CHECK(p.clusters[0].repro_command ==
        "repro-audit generate --model '/models/it'\\''s.gguf' --mode default --precision bf16 --device cpu "
        "--threads 2 --prompt 'Once upon a time' --max-tokens 8 --batch-size 1 --position 0 --json");
  CHECK(p.clusters[1].repro_command ==
        "repro-audit generate --model '/models/it'\\''s.gguf' --mode default --precision bf16 --device cpu "
        "--threads 2 --prompt 'Once upon a time' --max-tokens 8 --batch-size 8 --position 7 --filler-seed 12 --json");
  CHECK(repro_command(r, s) ==
        "repro-audit generate --model '/models/it'\\''s.gguf' --mode default --precision f32 --device cpu --threads 2 "
        "--prompt 'Lily' --max-tokens 8 --temperature 0.8 --top-p 0.95 --top-k 40 --seed 3 --batch-size 4 "
        "--position 0 --filler-seed 10 --json");
  // a reproducible case carries none
  CHECK(find_case(r, "q", "default").clusters[0].repro_command.empty());
  // remote completions: none
  Completion remote = a;
  remote.response_id = "x";
  CHECK(repro_command(r, remote).empty());
  CHECK(to_markdown(r).find("```sh\n# c1 (majority)\nrepro-audit generate --model") != std::string::npos);
  CHECK(to_html(r).find("<pre class=\"repro\"># c1 (majority)\nrepro-audit generate --model &#39;/models/it&#39;") !=
        std::string::npos);
}
