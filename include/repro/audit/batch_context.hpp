// Running a probe inside a real batch: the probe decodes together with filler sequences drawn from
// a built-in pool by a seeded RNG, at a chosen position, and the batch shrinks as fillers finish.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "repro/engine/engine.hpp"

namespace repro {

struct BatchContext {
  int batch_size = 1;        // sequences at the start of the batch, probe included
  int position = 0;          // the probe's row among them (0-based)
  uint64_t filler_seed = 0;  // which fillers, and how long each decodes
  // The last batch mate (the last filler drawn; batch_size >= 2):
  int mate_join_step = 0;     // k > 0: it joins after the probe's k-th step, so its prefill runs in
                              // the same forward pass as the decode of the others (continuous batching)
  int mate_prompt_delta = 0;  // tokens added to its prompt (from the continuation of its text)
  int mate_prompt_tokens = 0; // > 0: its prompt is exactly this many tokens of the story of seed
                              // 1000000 + filler_seed (plan/story_tokens) before the delta; 0: its pool prompt
  // Every filler's prompt tokens after the first replaced by as many tokens of the story of seed
  // 2000000 + filler_seed + filler index, and its sampling seed changed: the batch keeps every shape
  // (sizes, positions, prompt and decode lengths) with other contents.
  bool other_contents = false;
};

struct FillerDraw {
  std::vector<std::string> ids;      // "pool:<index>"
  std::vector<std::string> prompts;
  std::vector<int> max_tokens;       // fillers finish at different steps (continuous batching)
};

// The built-in filler pool (short, varied English prompts).
const std::vector<std::string>& filler_pool();
// Endpoints, --isolation: a filler with other contents and (for word-level tokenizers, nearly
// always) the same token count: its words in reverse order, whitespace between them kept. The server's
// usage counts tell whether the counts really matched (CoBatchLevel::isolation_same_tokens).
std::string other_contents_text(const std::string& filler);
// count fillers drawn from the pool with a seeded RNG; lengths in [1, 2 * probe_max_tokens].
FillerDraw draw_fillers(int count, uint64_t seed, int probe_max_tokens);

struct BatchRun {
  GenResult probe;
  FillerDraw fillers;
  int64_t generated_tokens = 0;  // probe + fillers
  double seconds = 0;            // wall time of the whole batch
};

// Decodes the probe at ctx.position among ctx.batch_size - 1 fillers, to the end of the batch.
// A late batch mate (mate_join_step k > 0) joins the batch at the end, after k steps.
// Throws UsageError when position >= batch_size or batch_size < 1.
BatchRun run_in_batch(Engine& engine, const GenRequest& probe, const BatchContext& ctx);

}  // namespace repro
