#include "repro/audit/batch_context.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

#include "repro/audit/plan.hpp"
#include "repro/common/error.hpp"
#include "repro/common/rng.hpp"

namespace repro {

const std::vector<std::string>& filler_pool() {
  static const std::vector<std::string> pool = {
      "Once upon a time there was a little dog",
      "The sun was shining and the birds",
      "Tom and Anna went to the park",
      "There was a big red ball in the garden",
      "One day, a girl named Sue found a box",
      "The cat liked to sleep on the mat",
      "In a small town, there lived an old man",
      "Ben had a toy car that he loved",
      "It was a cold and rainy day",
      "Mia wanted to bake a cake for her mom",
      "The little fish swam in the blue sea",
      "A bird sat on the tree and sang",
      "Lily and her friend played with blocks",
      "The farmer had a cow, a pig and a hen",
      "Max was scared of the dark",
      "Summarize the following text in one sentence:",
      "Translate to French: the weather is nice today.",
      "Write a haiku about autumn leaves.",
      "What is 17 times 23? Answer:",
      "List three colors of the rainbow:",
      "def fibonacci(n):",
      "The capital of France is",
      "Q: Why is the sky blue?\nA:",
      "Dear team, thank you for",
  };
  return pool;
}

std::string other_contents_text(const std::string& filler) {
  std::vector<std::string> words, gaps;  // gaps[i] precedes words[i]; gaps.back() trails
  std::string cur, gap;
  for (char ch : filler) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\t';
    if (space && !cur.empty()) {
      words.push_back(cur);
      cur.clear();
    }
    if (space) {
      gap += ch;
    } else {
      if (cur.empty()) {
        gaps.push_back(gap);
        gap.clear();
      }
      cur += ch;
    }
  }
  if (!cur.empty()) words.push_back(cur);
  if (words.size() < 2) return filler;
  std::string out = gaps.empty() ? "" : gaps[0];
  for (size_t i = 0; i < words.size(); ++i) out += (i > 0 ? gaps[i] : "") + words[words.size() - 1 - i];
  return out + gap;
}

namespace {
uint64_t next_u64(uint64_t& s) { return rng::splitmix64_next(s); }
// story_tokens, remembered: a plan asks for the same batch-mate prompt in many cells.
std::vector<int> mate_story(uint64_t seed, int n, const Tokenizer& tok) {
  static std::mutex mu;
  static std::map<std::tuple<const Tokenizer*, uint64_t, int>, std::vector<int>> memo;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(&tok, seed, n);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  if (memo.size() > 64) memo.clear();
  return memo[key] = story_tokens(seed, n, tok);
}
}  // namespace

FillerDraw draw_fillers(int count, uint64_t seed, int probe_max_tokens) {
  FillerDraw d;
  uint64_t s = seed ^ 0x5EEDF111E5ull;
  const auto& pool = filler_pool();
  for (int i = 0; i < count; ++i) {
    size_t k = next_u64(s) % pool.size();
    d.ids.push_back("pool:" + std::to_string(k));
    d.prompts.push_back(pool[k]);
    d.max_tokens.push_back(1 + static_cast<int>(next_u64(s) % static_cast<uint64_t>(2 * std::max(1, probe_max_tokens))));
  }
  return d;
}

BatchRun run_in_batch(Engine& engine, const GenRequest& probe, const BatchContext& ctx) {
  if (ctx.batch_size < 1) throw UsageError("--batch-size must be at least 1");
  if (ctx.position < 0 || ctx.position >= ctx.batch_size)
    throw UsageError("--position " + std::to_string(ctx.position) + " is outside the batch of " +
                     std::to_string(ctx.batch_size) + "; use 0.." + std::to_string(ctx.batch_size - 1));
  if (engine.busy()) throw std::logic_error("run_in_batch: engine already has sequences");
  BatchRun run;
  run.fillers = draw_fillers(ctx.batch_size - 1, ctx.filler_seed, probe.params.max_tokens);
  const Model& m = engine.model();
  const int ctx_len = m.config.context_length;
  auto start = std::chrono::steady_clock::now();
  int64_t before = engine.generated_tokens();
  int probe_handle = -1;
  std::vector<int> filler_handles;
  const int mate = ctx.batch_size - 2;  // the last filler
  GenRequest late;                     // the last batch mate when it joins late
  bool late_pending = false;
  for (int i = 0, f = 0; i < ctx.batch_size; ++i) {
    if (i == ctx.position) {
      probe_handle = engine.submit(probe);
      continue;
    }
    GenRequest r;
    const bool is_mate = f == mate;
    if (is_mate && (ctx.mate_prompt_tokens > 0 || ctx.mate_prompt_delta > 0)) {
      // One source text per base length (deltas up to 255 cut the same ids), so prompts that differ
      // in length by one token share every other token.
      const int base = std::max(0, ctx.mate_prompt_tokens);
      const int src_len = std::max(1, base) + (ctx.mate_prompt_delta / 256 + 1) * 256;
      const std::vector<int> src = mate_story(1000000 + ctx.filler_seed, src_len, *m.tokenizer);
      if (base > 0) {
        r.prompt.assign(src.begin(), src.begin() + base + ctx.mate_prompt_delta);
      } else {
        r.prompt = m.tokenizer->encode(run.fillers.prompts[f], true);
        r.prompt.insert(r.prompt.end(), src.begin() + 1, src.begin() + 1 + ctx.mate_prompt_delta);  // after its BOS
      }
    } else {
      r.prompt = m.tokenizer->encode(run.fillers.prompts[f], true);
    }
    r.params.max_tokens = std::max(1, std::min(run.fillers.max_tokens[f], ctx_len - static_cast<int>(r.prompt.size())));
    r.params.stop_at_eos = false;  // fillers keep the batch at its size for their drawn length
    r.params.seed = ctx.filler_seed + static_cast<uint64_t>(f);
    if (ctx.other_contents && r.prompt.size() > 1) {  // same length, other tokens; the first (BOS) kept
      const std::vector<int> other =
          mate_story(2000000 + ctx.filler_seed + static_cast<uint64_t>(f), static_cast<int>(r.prompt.size()) + 1,
                     *m.tokenizer);
      for (size_t k = 1; k < r.prompt.size(); ++k) r.prompt[k] = other[std::min(k, other.size() - 1)];
      r.params.seed += 0x9E3779B9ull;
    }
    ++f;
    if (is_mate && ctx.mate_join_step > 0) {
      late = std::move(r);
      late_pending = true;
      continue;
    }
    filler_handles.push_back(engine.submit(std::move(r)));
  }
  for (int steps = 0; engine.busy() || late_pending; ++steps) {
    if (late_pending && (steps >= ctx.mate_join_step || !engine.busy())) {
      filler_handles.push_back(engine.submit(std::move(late)));
      late_pending = false;
    }
    engine.step();
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.generated_tokens = engine.generated_tokens() - before;
  run.probe = engine.take_result(probe_handle);
  for (int h : filler_handles) engine.take_result(h);
  return run;
}

}  // namespace repro
