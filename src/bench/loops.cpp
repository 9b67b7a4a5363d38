// The decode and prefill runs of the local bench (repro/bench/loops.hpp).
#include "repro/bench/loops.hpp"

#include <chrono>
#include <cstdint>
#include <utility>

#include "repro/audit/batch_context.hpp"

namespace repro::bench {

std::vector<GenRequest> make_batch(const Model& model, const std::string& probe, int batch, int max_tokens) {
  const auto& pool = filler_pool();
  std::vector<GenRequest> reqs(batch);
  for (int i = 0; i < batch; ++i) {
    const std::string& text = i == batch / 2 ? probe : pool[(static_cast<size_t>(i) * 7 + 3) % pool.size()];
    reqs[i].prompt = model.tokenizer->encode(text, true);
    reqs[i].params.max_tokens = max_tokens;
    reqs[i].params.stop_at_eos = false;
    reqs[i].params.logprobs = false;  // decode as a production engine does: no vocabulary-wide log-softmax
  }
  return reqs;
}

std::vector<int> long_prompt(const Model& model, int length) {
  std::vector<int> text_tokens;
  for (const auto& f : filler_pool()) {
    std::vector<int> t = model.tokenizer->encode(f + " ", false);
    text_tokens.insert(text_tokens.end(), t.begin(), t.end());
  }
  std::vector<int> p = model.tokenizer->encode("", true);
  if (p.empty()) p.push_back(text_tokens.empty() ? 0 : text_tokens.front());
  for (size_t i = 0; static_cast<int>(p.size()) < length; ++i) p.push_back(text_tokens[i % text_tokens.size()]);
  p.resize(static_cast<size_t>(length));
  return p;
}

DecodeRun decode_once(Engine& engine, const std::vector<GenRequest>& reqs) {
  using Clock = std::chrono::steady_clock;
  std::vector<int> handles;
  for (const auto& r : reqs) handles.push_back(engine.submit(r));
  engine.step();  // prefill of every sequence + the first token
  const int64_t before = engine.generated_tokens();
  const auto t0 = Clock::now();
  while (engine.busy()) engine.step();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t tokens = engine.generated_tokens() - before;
  DecodeRun run;
  run.tok_s = s > 0 ? static_cast<double>(tokens) / s : 0.0;
  for (size_t i = 0; i < handles.size(); ++i) {
    GenResult r = engine.take_result(handles[i]);
    if (i == reqs.size() / 2) {
      run.probe_tokens = std::move(r.tokens);
      run.probe_sha = r.logits_sha256;
    }
  }
  return run;
}

double prefill_once(Engine& engine, const GenRequest& req) {
  using Clock = std::chrono::steady_clock;
  const int h = engine.submit(req);
  const auto t0 = Clock::now();
  engine.step();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  while (engine.busy()) engine.step();
  engine.take_result(h);
  return s > 0 ? static_cast<double>(req.prompt.size()) / s : 0.0;
}

}  // namespace repro::bench
