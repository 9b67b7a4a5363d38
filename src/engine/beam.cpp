// Beam search: the beams of one prompt decode together as one real batch of `width` rows.
// Score = sum of chosen-token log-probabilities (no length normalisation); ties are broken by
// parent beam index, then token id, so the result is a pure function of the logits.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "repro/engine/engine.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/forward.hpp"

namespace repro {

namespace {
struct Beam {
  int slot = -1;  // KV slot while the beam is live; -1 once it is done
  std::vector<int> tokens;
  std::vector<float> logprobs;
  double score = 0;
  bool done = false;
  std::string logits_sha256;
};
struct Candidate {
  double score;
  int parent;
  int token;  // -1: the parent itself, already finished
  float logprob;
};
}  // namespace

GenResult beam_search(const Model& model, EngineOptions opts, const std::vector<int>& prompt, int width,
                      int max_tokens) {
  Engine engine(model, opts);
  return engine.beam_search(prompt, width, max_tokens);
}

GenResult beam_search(Forward& fwd, const Model& model, const std::vector<int>& prompt, int width, int max_tokens) {
  const ModelConfig& c = model.config;
  if (width < 1) throw UsageError("--beam-width must be at least 1");
  if (prompt.empty()) throw UsageError("empty prompt: give at least one token");
  if (max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  const int need = static_cast<int>(prompt.size()) + max_tokens;
  if (need > c.context_length)
    throw UsageError("prompt + --max-tokens exceeds the model's context length " + std::to_string(c.context_length));
  auto start = std::chrono::steady_clock::now();
  const int vocab = c.vocab_size;
  const Tokenizer* tok = model.tokenizer.get();

  std::vector<Beam> beams(1);
  beams[0].slot = fwd.acquire_slot(need);
  // Every slot this search holds goes back to the pool however it ends.
  struct Release {
    Forward& fwd;
    std::vector<Beam>& beams;
    ~Release() {
      for (auto& b : beams)
        if (b.slot >= 0) fwd.release_slot(b.slot);
    }
  } release{fwd, beams};
  std::vector<TokenRow> rows;
  for (size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({beams[0].slot, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
  const float* logits = fwd.run(rows);
  int pos = static_cast<int>(prompt.size());

  for (int step = 0; step < max_tokens; ++step) {
    // candidates: each live beam extended by its top-`width` tokens; each finished beam as is
    std::vector<Candidate> cand;
    int j = 0;
    for (int b = 0; b < static_cast<int>(beams.size()); ++b) {
      if (beams[b].done) {
        cand.push_back({beams[b].score, b, -1, 0});
        continue;
      }
      const float* lg = logits + static_cast<size_t>(j++) * vocab;
      std::vector<int> idx(vocab);
      for (int i = 0; i < vocab; ++i) idx[i] = i;
      int k = std::min(width, vocab);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int a, int bb) { return lg[a] > lg[bb] || (lg[a] == lg[bb] && a < bb); });
      for (int i = 0; i < k; ++i) {
        float lp = token_logprob(lg, vocab, idx[i]);
        cand.push_back({beams[b].score + lp, b, idx[i], lp});
      }
      beams[b].logits_sha256 = sha256_hex(lg, sizeof(float) * vocab);
    }
    std::sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.parent != b.parent) return a.parent < b.parent;
      return a.token < b.token;
    });
    cand.resize(std::min<size_t>(cand.size(), static_cast<size_t>(width)));
    std::vector<Beam> next;
    for (const auto& cd : cand) {
      Beam nb = beams[cd.parent];
      nb.slot = -1;
      if (cd.token >= 0) {
        nb.tokens.push_back(cd.token);
        nb.logprobs.push_back(cd.logprob);
        nb.score = cd.score;
        if (tok && (tok->is_eog(cd.token) || cd.token == tok->bos())) nb.done = true;
      }
      if (!nb.done) {  // a live beam continues from its parent's cache: positions 0..pos-1
        nb.slot = fwd.acquire_slot(need);
        fwd.copy_slot(nb.slot, beams[cd.parent].slot, pos);
      }
      next.push_back(std::move(nb));
    }
    for (auto& b : beams)
      if (b.slot >= 0) fwd.release_slot(b.slot);
    beams = std::move(next);
    bool all_done = std::all_of(beams.begin(), beams.end(), [](const Beam& b) { return b.done; });
    if (all_done || step + 1 == max_tokens) break;
    rows.clear();
    for (auto& b : beams)
      if (!b.done) rows.push_back({b.slot, b.tokens.back(), pos, true});
    logits = fwd.run(rows);
    ++pos;
  }
  const Beam& best = beams.front();
  GenResult r;
  r.tokens = best.tokens;
  r.logprobs = best.logprobs;
  r.finish_reason = best.done ? "stop" : "length";
  r.logits_sha256 = best.logits_sha256;
  r.prompt_tokens = static_cast<int>(prompt.size());
  if (tok)
    for (int t : r.tokens) r.text += tok->piece(t);
  r.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace repro
