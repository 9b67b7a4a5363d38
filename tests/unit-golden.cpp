// ctest-labels: model
// Golden tests on the real stories260K model (../shared/models): exact greedy tokens from both
// containers, identical bits on reload, and batch invariance on a real trained model.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "repro/audit/batch_context.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/model/default_model.hpp"
#include "test_util.hpp"

using namespace repro;

static const std::vector<int> kGolden30 = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
                                           337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432};

static GenResult greedy30(const Model& m, Mode mode, int batch = 1, int pos = 0) {
  Engine e(m, {mode, 1});
  GenRequest r;
  r.prompt = m.tokenizer->encode("Once upon a time", true);
  r.params.max_tokens = 30;
  return run_in_batch(e, r, {batch, pos, 1}).probe;
}

TEST_CASE("stories260K: greedy from 'Once upon a time' gives the verified 30 ids, from GGUF and from .bin") {
  REPRO_REQUIRE_MODELS(dir);
  auto gguf = load_model((dir / "stories260K.gguf").string());
  auto bin = load_model((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  CHECK(gguf->tokenizer->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(bin->tokenizer->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  for (Mode mode : {Mode::BatchInvariant, Mode::Default}) {
    CAPTURE(mode_name(mode));
    GenResult a = greedy30(*gguf, mode), b = greedy30(*bin, mode);
    CHECK(a.tokens == kGolden30);
    CHECK(b.tokens == kGolden30);
    CHECK(a.logits_sha256 == b.logits_sha256);  // same weights, same kernels: same bits
    CHECK(a.text == ", there was a little girl named Lily. She loved to play outside in the park. One day,");
  }
}

TEST_CASE("stories260K: reload and rerun gives identical bits; batch-invariant mode is invariant to the batch") {
  REPRO_REQUIRE_MODELS(dir);
  auto m1 = load_model((dir / "stories260K.gguf").string());
  auto m2 = load_model((dir / "stories260K.gguf").string());
  GenResult a = greedy30(*m1, Mode::BatchInvariant), b = greedy30(*m2, Mode::BatchInvariant);
  CHECK(a.tokens == b.tokens);
  CHECK(a.logits_sha256 == b.logits_sha256);
  CHECK(std::memcmp(a.logprobs.data(), b.logprobs.data(), sizeof(float) * a.logprobs.size()) == 0);
  for (int batch : {2, 7, 16, 33, 64}) {
    GenResult r = greedy30(*m1, Mode::BatchInvariant, batch, batch - 1);
    CAPTURE(batch);
    CHECK(r.tokens == a.tokens);
    CHECK(r.logits_sha256 == a.logits_sha256);
  }
}

// ---- the embedded default model (no ../shared needed: it is inside the binary) ----

TEST_CASE("embedded default model: pinned stories260K bytes, byte-identical to ../shared/models when present") {
  const std::string_view bytes = default_model_bytes();
  CHECK(bytes.size() == 1185376);
  CHECK(sha256_hex(bytes) == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
  auto dir = test::shared_models();
  if (dir.empty()) {
    MESSAGE("SKIPPED (comparison only): ../shared/models/stories260K.gguf not found beside the checkout");
    return;
  }
  CHECK(read_file((dir / "stories260K.gguf").string()) == bytes);
}

TEST_CASE("embedded default model: generate/run without --model write it to the cache once and produce English") {
  auto cache = test::scratch_dir("embedded-model-cache");
  const std::string env = "REPRO_AUDIT_CACHE='" + cache.string() + "' ";
  auto r = test::run_shell(env + "'" + test::binary() + "' generate --prompt 'Once upon a time' --max-tokens 30");
  CHECK(r.code == 0);
  CHECK(r.output.find("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                      "One day,") != std::string::npos);
  const auto cached = cache / "stories260K-270cba1bd510.gguf";
  REQUIRE(std::filesystem::exists(cached));
  CHECK(sha256_file(cached.string()) == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");

  // A damaged cache file (truncated, or same size with other bytes) is replaced, never used.
  std::filesystem::resize_file(cached, 1000);
  r = test::run_shell(env + "'" + test::binary() + "' generate --prompt 'Once upon a time' --max-tokens 5");
  CHECK(r.code == 0);
  CHECK(std::filesystem::file_size(cached) == 1185376);
  {
    std::string b = read_file(cached.string());
    b[b.size() - 1] ^= 1;
    write_file_atomic(cached.string(), b);
  }
  r = test::run_shell(env + "'" + test::binary() + "' generate --prompt 'Once upon a time' --max-tokens 30");
  CHECK(r.code == 0);
  CHECK(r.output.find("named Lily") != std::string::npos);
  CHECK(sha256_file(cached.string()) == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
}
