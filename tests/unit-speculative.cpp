// ctest-labels: model
// Speculative decoding on the real stories260K model (../shared/models): a verified draft is a
// (k+1)-row pass of one sequence, not k one-row passes, and the batch-invariant kernels fix every
// output element's order by the reduction length alone, so in batch-invariant and deterministic
// modes greedy output with speculation equals output without it bit for bit (token ids, per-step
// logprobs, final-logits hash), for every draft width, n-gram and draft-model drafts, batch sizes up
// to 64, every position in the batch, sequences joining while others verify, f32 and bf16. Default
// mode is measured and printed, not asserted.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/model.hpp"
#include "repro/model/synth.hpp"
#include "test_util.hpp"

using namespace repro;

namespace {

// Story openings and text that repeats (where prompt lookup drafts well).
const char* const kPrompts[] = {
    "Once upon a time",
    "Tom and Anna went to the park. Tom and Anna",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "One day, a little girl named Lily found a needle in her room.",
    "Lily said, \"I want to play.\" Mom said, \"You can play.\" Lily said,",
    "The sun was hot. The dog was happy. The bird",
    "Ben had a red ball. He liked his red ball. One day, the red ball",
    "Sue",
};
constexpr int kNPrompts = sizeof(kPrompts) / sizeof(kPrompts[0]);

struct Models {
  std::shared_ptr<const Model> target, draft;  // the same file, loaded twice: its own draft
};

const Models* models() {
  static std::unique_ptr<Models> m = []() -> std::unique_ptr<Models> {
    auto dir = test::shared_models();
    if (dir.empty()) return nullptr;
    const std::string path = (dir / "stories260K.gguf").string();
    return std::make_unique<Models>(Models{load_model(path), load_model(path)});
  }();
  return m.get();
}

#define REQUIRE_STORIES(var)                                                             \
  const Models* var = models();                                                          \
  if (!var) {                                                                            \
    MESSAGE("SKIPPED: ../shared/models/stories260K.gguf not found beside the checkout"); \
    return;                                                                              \
  }

GenRequest request(const Model& m, int i, float temperature = 0) {
  GenRequest r;
  r.prompt = m.tokenizer->encode(kPrompts[i % kNPrompts], true);
  r.params.max_tokens = 24 + 7 * (i % 5);  // sequences leave the batch at different steps
  r.params.temperature = temperature;
  r.params.top_k = temperature > 0 ? 40 : 0;
  r.params.seed = 1000 + static_cast<uint64_t>(i);
  return r;
}

EngineOptions options(Mode mode, Precision p, Speculative sp = {}) {
  EngineOptions o;
  o.mode = mode;
  o.threads = 1;
  o.precision = p;
  o.speculative = std::move(sp);
  return o;
}

Speculative spec(DraftKind kind, int width, const Models& ms) {
  Speculative s;
  s.kind = kind;
  s.width = width;
  if (kind == DraftKind::Model) {
    s.draft_file = ms.draft->path;
    s.draft = ms.draft;
  }
  return s;
}

// Requests 0..batch-1, the first `early` submitted at once and the rest after two steps (their prefill
// rows then share a step with the others' verify rows). Results in request order.
std::vector<GenResult> run(const Model& m, const EngineOptions& o, int batch, int early, float temperature = 0) {
  Engine e(m, o);
  std::vector<int> handles;
  for (int i = 0; i < early; ++i) handles.push_back(e.submit(request(m, i, temperature)));
  for (int s = 0; s < 2 && e.busy(); ++s) e.step();
  for (int i = early; i < batch; ++i) handles.push_back(e.submit(request(m, i, temperature)));
  while (e.busy()) e.step();
  std::vector<GenResult> out;
  for (int h : handles) out.push_back(e.take_result(h));
  return out;
}

bool same_bits(const GenResult& a, const GenResult& b) {
  return a.tokens == b.tokens && a.logits_sha256 == b.logits_sha256 && a.text == b.text &&
         a.finish_reason == b.finish_reason && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0;
}

}  // namespace

TEST_CASE("speculative: --speculative text forms and the errors that name the flag") {
  CHECK(parse_speculative("off").kind == DraftKind::Off);
  const Speculative n = parse_speculative("ngram:3");
  CHECK(n.kind == DraftKind::Ngram);
  CHECK(n.width == 3);
  CHECK(speculative_name(n) == "ngram:3");
  const Speculative d = parse_speculative("draft:synth:100m:4");  // FILE may hold colons
  CHECK(d.kind == DraftKind::Model);
  CHECK(d.draft_file == "synth:100m");
  CHECK(d.width == 4);
  CHECK(speculative_name(d) == "draft:synth:100m:4");
  CHECK(parse_speculative("ngram:32").width == 32);
  CHECK_THROWS_WITH_AS(parse_speculative("ngram:0"),
                       "--speculative 'ngram:0': the draft width 0 is out of range; use off, ngram:K or draft:FILE:K "
                       "with K from 1 to 32",
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_speculative("draft:d.gguf:33"),
                       "--speculative 'draft:d.gguf:33': the draft width 33 is out of range; use off, ngram:K or "
                       "draft:FILE:K with K from 1 to 32",
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_speculative("ngram:x"), doctest::Contains("the draft width 'x' is not a number"), UsageError);
  CHECK_THROWS_WITH_AS(parse_speculative("draft:4"), doctest::Contains("give the draft model and the width"), UsageError);
  CHECK_THROWS_WITH_AS(parse_speculative("eagle:3"), doctest::Contains("unknown kind of draft"), UsageError);
}

TEST_CASE("speculative: the n-gram draft continues the latest earlier occurrence of the longest suffix") {
  // suffix [7 8] occurred at 1..2, followed by 9 4 7 8
  CHECK(ngram_draft({3, 7, 8, 9, 4, 7, 8}, 3) == std::vector<int>{9, 4, 7});
  // past the end of the context, the text again with the match's period (4 here)
  CHECK(ngram_draft({3, 7, 8, 9, 4, 7, 8}, 8) == std::vector<int>{9, 4, 7, 8, 9, 4, 7, 8});
  // a one-token loop is drafted the whole width ahead
  CHECK(ngram_draft({2, 5, 5, 5, 5}, 6) == std::vector<int>{5, 5, 5, 5, 5, 5});
  // the longest match wins over a later, shorter one: [1 2 3] at 0 (followed by 5) beats [2 3] at 6
  CHECK(ngram_draft({1, 2, 3, 5, 0, 0, 2, 3, 6, 1, 2, 3}, 1) == std::vector<int>{5});
  // the latest of equal matches: [4 4] at 3 (followed by 9), not at 0 (followed by 8)
  CHECK(ngram_draft({4, 4, 8, 4, 4, 9, 4, 4}, 1) == std::vector<int>{9});
  CHECK(ngram_draft({1, 2, 3, 4, 1}, 4).empty());  // a one-token match is below the minimum
  CHECK(ngram_draft({5}, 4).empty());
}

TEST_CASE("speculative: a draft model with another vocabulary, or on --device cuda, is refused naming the flag") {
  REQUIRE_STORIES(ms);
  auto dir = test::scratch_dir("speculative-vocab");
  EngineOptions o = options(Mode::BatchInvariant, Precision::F32, spec(DraftKind::Model, 4, *ms));
  for (int vocab : {600, 512}) {  // another size; the same size with other token texts
    CAPTURE(vocab);
    SynthOptions so;
    so.vocab_size = vocab;
    const std::string path = (dir / ("v" + std::to_string(vocab) + ".gguf")).string();
    write_synth_model(so, path);
    o.speculative.draft = std::shared_ptr<const Model>(load_model(path));
    o.speculative.draft_file = path;
    const std::string head = "--speculative: the draft model " + path + " and the model " +
                             ms->target->path + " have other vocabularies (";
    const std::string why = vocab == 600 ? "600 vs 512 tokens" : "token ";
    CHECK_THROWS_WITH_AS(Engine(*ms->target, o), doctest::Contains((head + why).c_str()), UsageError);
    CHECK_THROWS_WITH_AS(Engine(*ms->target, o), doctest::Contains("); use a draft model with the target's tokenizer"),
                         UsageError);
  }
  EngineOptions c = options(Mode::BatchInvariant, Precision::F32, spec(DraftKind::Ngram, 3, *ms));
  c.device = Device::Cuda;
  CHECK_THROWS_WITH_AS(Engine(*ms->target, c),
                       "--speculative is not implemented on --device cuda; use --device cpu or --speculative off",
                       UsageError);
}

TEST_CASE("speculative: greedy output equals the output without it, bit for bit, in batch-invariant and deterministic "
          "modes (widths 1..8, n-gram and draft model, batch sizes up to 64, f32 and bf16)") {
  REQUIRE_STORIES(ms);
  const Model& m = *ms->target;
  // (batch size, requests submitted at the start): width w uses kBatches[w - 1]
  const int kBatches[8][2] = {{1, 1}, {2, 1}, {7, 7}, {64, 40}, {3, 2}, {16, 16}, {33, 20}, {8, 5}};
  for (Mode mode : {Mode::BatchInvariant, Mode::Deterministic})
    for (Precision p : {Precision::F32, Precision::BF16}) {
      CAPTURE(std::string(mode_name(mode)));
      CAPTURE(std::string(precision_name(p)));
      // deterministic decodes every request alone, one after another: the batch only sets the queue,
      // so 8 requests show what 64 would (and keep the test short)
      const int cap = mode == Mode::Deterministic ? 8 : 64;
      const std::vector<GenResult> ref = run(m, options(mode, p), cap, cap);  // no speculation
      for (DraftKind kind : {DraftKind::Ngram, DraftKind::Model}) {
        SpecStats total;
        for (int w = 1; w <= 8; ++w) {
          const Speculative sp = spec(kind, w, *ms);
          CAPTURE(speculative_name(sp));
          const int batch = std::min(kBatches[w - 1][0], cap), early = std::min(kBatches[w - 1][1], batch);
          CAPTURE(batch);
          const std::vector<GenResult> got = run(m, options(mode, p, sp), batch, early);
          for (int i = 0; i < batch; ++i) {
            CAPTURE(i);  // the request's position in the batch
            REQUIRE(!got[i].tokens.empty());
            CHECK(same_bits(got[i], ref[i]));
            CHECK(got[i].spec.accepted <= got[i].spec.drafted);
            total.drafted += got[i].spec.drafted;
            total.accepted += got[i].spec.accepted;
            total.verify_steps += got[i].spec.verify_steps;
          }
        }
        MESSAGE(std::string(mode_name(mode)) << " " << std::string(precision_name(p)) << " " << (kind == DraftKind::Ngram ? "ngram" : "draft")
                                << ": drafted " << total.drafted << ", accepted " << total.accepted << " in "
                                << total.verify_steps << " verify steps");
        CHECK(total.accepted > 0);
        if (kind == DraftKind::Ngram) {
          CHECK(total.accepted < total.drafted);  // some drafts rejected: the rollback path ran
        } else {
          // the model is its own draft, through the same invariant kernels: every draft is accepted
          CHECK(total.accepted == total.drafted);
        }
      }
    }
}

TEST_CASE("speculative: a draft model that is not the target (its weights in q4_0): rejected drafts roll back the "
          "draft's cache too, and the output keeps the target's bits") {
  // A synthesized target and the same seeded weights stored as Q4_0 as its draft: the same
  // vocabulary, logits close enough to agree often and differ sometimes.
  auto dir = test::scratch_dir("speculative-q4");
  SynthOptions so;
  so.seed = 11;
  so.dim = 64;
  so.hidden_dim = 128;
  so.n_layers = 2;
  const std::string target_path = (dir / "target.gguf").string(), draft_path = (dir / "draft.gguf").string();
  write_synth_model(so, target_path);
  so.type = "q4_0";
  write_synth_model(so, draft_path);
  const auto target = load_model(target_path);
  Models ms{nullptr, load_model(draft_path)};
  for (Precision p : {Precision::F32, Precision::BF16}) {
    CAPTURE(std::string(precision_name(p)));
    const std::vector<GenResult> ref = run(*target, options(Mode::BatchInvariant, p), 16, 16);
    SpecStats total;
    for (int w : {1, 2, 5, 8}) {
      CAPTURE(w);
      const std::vector<GenResult> got = run(*target, options(Mode::BatchInvariant, p, spec(DraftKind::Model, w, ms)),
                                             w == 8 ? 16 : w + 2, w == 8 ? 9 : 1);
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(got[i], ref[i]));
        total.drafted += got[i].spec.drafted;
        total.accepted += got[i].spec.accepted;
      }
    }
    MESSAGE("q4_0 draft of a synthetic target, " << std::string(precision_name(p)) << ": accepted " << total.accepted << " of "
                                                 << total.drafted << " drafted tokens");
    CHECK(total.accepted > 0);
    CHECK(total.accepted < total.drafted);
  }
}

TEST_CASE("speculative: sampling (T > 0) with a fixed seed is reproducible and batch-invariant; the model as its own "
          "draft accepts every drafted token") {
  REQUIRE_STORIES(ms);
  const Model& m = *ms->target;
  for (DraftKind kind : {DraftKind::Ngram, DraftKind::Model}) {
    const EngineOptions o = options(Mode::BatchInvariant, Precision::F32, spec(kind, 4, *ms));
    const std::vector<GenResult> alone = run(m, o, 1, 1, 0.8f);
    const std::vector<GenResult> again = run(m, o, 1, 1, 0.8f);
    const std::vector<GenResult> batch = run(m, o, 12, 6, 0.8f);
    CHECK(same_bits(alone[0], again[0]));
    CHECK(same_bits(alone[0], batch[0]));
    int drafted = 0, accepted = 0;
    for (const GenResult& r : batch) {
      drafted += r.spec.drafted;
      accepted += r.spec.accepted;
    }
    CHECK(drafted > 0);
    if (kind == DraftKind::Model) CHECK(accepted == drafted);  // q == p bit for bit: min(1, p/q) = 1
  }
}

TEST_CASE("speculative: default mode, measured: greedy output with speculation against without it (printed, not "
          "asserted)") {
  REQUIRE_STORIES(ms);
  const Model& m = *ms->target;
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const std::vector<GenResult> ref = run(m, options(Mode::Default, p), 16, 16);
    for (int w : {1, 3, 4, 8}) {
      const std::vector<GenResult> got = run(m, options(Mode::Default, p, spec(DraftKind::Ngram, w, *ms)), 16, 16);
      int tokens = 0, bits = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(!got[i].tokens.empty());
        tokens += got[i].tokens != ref[i].tokens;
        bits += !same_bits(got[i], ref[i]);
      }
      MESSAGE("default " << std::string(precision_name(p)) << " ngram:" << w << ": " << tokens << "/16 completions differ in tokens, "
                         << bits << "/16 in bits from the run without speculation");
    }
  }
}

TEST_CASE("speculative: generate --speculative: one-line errors naming the flag (exit 2), and the same tokens as "
          "without it") {
  REQUIRE_STORIES(ms);
  const std::string model = "--model '" + ms->target->path + "' ";
  auto err = [](const test::CmdResult& r, const std::string& line) {
    CHECK(r.code == 2);
    CHECK(r.output == "error: " + line + "\n");
  };
  err(test::run_cli("generate " + model + "--speculative ngram:0"),
      "--speculative 'ngram:0': the draft width 0 is out of range; use off, ngram:K or draft:FILE:K with K from 1 to 32");
  err(test::run_cli("generate " + model + "--speculative ngram:33"),
      "--speculative 'ngram:33': the draft width 33 is out of range; use off, ngram:K or draft:FILE:K with K from 1 to 32");
  err(test::run_cli("generate " + model + "--speculative ngram:3 --device cuda"),
      "--speculative is not implemented on --device cuda; use --device cpu or --speculative off");
  err(test::run_cli("generate " + model + "--speculative ngram:3 --beam-width 2"),
      "--speculative drafts for sampled and greedy decoding, not for beam search; drop --beam-width or use "
      "--speculative off");
  auto dir = test::scratch_dir("speculative-cli");
  const std::string other = (dir / "v600.gguf").string();
  SynthOptions so;
  so.vocab_size = 600;
  write_synth_model(so, other);
  err(test::run_cli("generate " + model + "--speculative 'draft:" + other + ":4'"),
      "--speculative: the draft model " + other + " and the model " + ms->target->path +
          " have other vocabularies (600 vs 512 tokens); use a draft model with the target's tokenizer");
  // serve refuses the same settings before it listens
  err(test::run_cli("serve " + model + "--port 0 --speculative ngram:40"),
      "--speculative 'ngram:40': the draft width 40 is out of range; use off, ngram:K or draft:FILE:K with K from 1 to 32");
  // the same greedy tokens and final-logits hash with and without speculation
  const std::string gen = "generate " + model + "--prompt 'The cat sat on the mat. The cat sat on the mat. The cat' "
                          "--max-tokens 60 --json --speculative ";
  const auto off = test::run_cli(gen + "off"), ngram = test::run_cli(gen + "ngram:4"),
             draft = test::run_cli(gen + "'draft:" + ms->target->path + ":3'");
  REQUIRE(off.code == 0);
  REQUIRE(ngram.code == 0);
  REQUIRE(draft.code == 0);
  const auto a = nlohmann::json::parse(off.output), b = nlohmann::json::parse(ngram.output),
             c = nlohmann::json::parse(draft.output);
  for (const char* key : {"tokens", "logprobs", "logits_sha256", "text"}) {
    CAPTURE(key);
    CHECK(!a[key].empty());
    CHECK(b[key] == a[key]);
    CHECK(c[key] == a[key]);
  }
  CHECK(a["spec_drafted"] == 0);
  CHECK(b["spec_drafted"].get<int>() > 0);
  CHECK(c["spec_accepted"] == c["spec_drafted"]);  // its own draft
  CHECK(c["speculative"] == "draft:" + ms->target->path + ":3");
}

TEST_CASE("speculative: bench --speculative measures decode with and without it side by side and validates the bits") {
  REQUIRE_STORIES(ms);
  auto dir = test::scratch_dir("speculative-bench");
  const std::string json = (dir / "b.json").string();
  const auto r = test::run_cli("bench --model '" + ms->target->path +
                               "' --speculative ngram:3 --batch-sizes 1,3 --max-tokens 16 --repeats 2 --warmup 0 "
                               "--prompt 'The cat sat on the mat. The cat sat on the mat. The cat' --json '" + json + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(test::slurp(json));
  REQUIRE(j["rows"].size() == 4);  // default and batch-invariant, batch sizes 1 and 3
  for (const auto& row : j["rows"]) {
    CAPTURE(row.dump());
    CHECK(row["speculative"] == "ngram:3");
    CHECK(row["off"]["runs"].size() == 2);
    CHECK(row["on"]["runs"].size() == 2);
    CHECK(row["accepted"].get<int>() <= row["drafted"].get<int>());
    CHECK(row["drafted"].get<int>() > 0);
    if (row["mode"] == "batch-invariant") CHECK(row["same_bits"] == true);
  }
  const auto cuda = test::run_cli("bench --speculative ngram:3 --device cuda");
  CHECK(cuda.code == 2);
  CHECK(cuda.output == "error: --speculative is not implemented on --device cuda; use --device cpu\n");
  const auto off = test::run_cli("bench --speculative off");
  CHECK(off.code == 2);
  CHECK(off.output == "error: --speculative: give at least one of ngram:K or draft:FILE:K\n");
}
