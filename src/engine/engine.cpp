// The engine: continuous batching over the forward pass. Sequences join (prefill) at the next step
// after submit(), decode one token per step, and leave the batch when they finish. On a table that
// decodes requests alone (OpsInfo::requests_alone: the deterministic mode) a sequence joins only
// when the batch is empty, so every request runs as a batch of 1, in submission order.
#include "repro/engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/forward.hpp"
#include "repro/structured/json_schema.hpp"

namespace repro {

namespace {
using Clock = std::chrono::steady_clock;

struct Seq {
  int handle;
  GenRequest req;
  int slot = -1;           // KV slot of the op table, held from submit() to finish
  int n_past = 0;          // positions in the cache
  bool prefilled = false;
  int last_token = -1;
  std::string text;
  JsonState json;                // structured output: the automaton's state
  std::vector<char> allowed;     // ... and this step's token mask
  std::vector<float> masked;     // ... and the constrained logits
  GenResult result;
  Clock::time_point start;
};
}  // namespace

struct Engine::Impl {
  const Model& model;
  EngineOptions opts;
  Forward fwd;
  std::vector<std::unique_ptr<Seq>> active;   // batch order = position in batch
  std::vector<std::unique_ptr<Seq>> pending;  // join at the next step
  std::map<int, GenResult> finished;
  int next_handle = 0;
  int64_t generated = 0;
  std::vector<TokenRow> rows;

  bool alone;  // the table decodes one request at a time

  Impl(const Model& m, EngineOptions o) : model(m), opts(o), fwd(m, o), alone(fwd.describe().requests_alone) {}
};

Engine::Engine(const Model& model, EngineOptions opts) : impl_(std::make_unique<Impl>(model, opts)) {}
Engine::~Engine() = default;

int Engine::submit(GenRequest req) {
  const ModelConfig& c = impl_->model.config;
  if (req.prompt.empty()) throw UsageError("empty prompt: give at least one token (a BOS is added to text prompts)");
  if (req.params.max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  for (int t : req.prompt)
    if (t < 0 || t >= c.vocab_size) throw UsageError("prompt token id " + std::to_string(t) + " is outside the vocabulary");
  int need = static_cast<int>(req.prompt.size()) + req.params.max_tokens;
  if (need > c.context_length)
    throw UsageError("prompt (" + std::to_string(req.prompt.size()) + " tokens) + --max-tokens (" +
                     std::to_string(req.params.max_tokens) + ") exceeds the model's context length " +
                     std::to_string(c.context_length) + "; shorten the prompt or lower --max-tokens");
  auto s = std::make_unique<Seq>();
  s->handle = impl_->next_handle++;
  s->req = std::move(req);
  s->slot = impl_->fwd.acquire_slot(need);
  s->result.prompt_tokens = static_cast<int>(s->req.prompt.size());
  s->start = Clock::now();
  int h = s->handle;
  impl_->pending.push_back(std::move(s));
  return h;
}

bool Engine::busy() const { return !impl_->active.empty() || !impl_->pending.empty(); }
int Engine::active() const { return static_cast<int>(impl_->active.size() + impl_->pending.size()); }
const Model& Engine::model() const { return impl_->model; }
const EngineOptions& Engine::options() const { return impl_->opts; }
kernels::OpsInfo Engine::describe() const { return impl_->fwd.describe(); }

GenResult Engine::beam_search(const std::vector<int>& prompt, int width, int max_tokens) {
  return repro::beam_search(impl_->fwd, impl_->model, prompt, width, max_tokens);
}
int64_t Engine::generated_tokens() const { return impl_->generated; }

const GenResult& Engine::result(int handle) const {
  auto it = impl_->finished.find(handle);
  if (it == impl_->finished.end()) throw std::logic_error("engine: result of an unfinished sequence");
  return it->second;
}

GenResult Engine::take_result(int handle) {
  auto it = impl_->finished.find(handle);
  if (it == impl_->finished.end()) throw std::logic_error("engine: result of an unfinished sequence");
  GenResult r = std::move(it->second);
  impl_->finished.erase(it);
  return r;
}

bool Engine::cancel(int handle) {
  for (auto* list : {&impl_->pending, &impl_->active}) {
    auto it = std::find_if(list->begin(), list->end(), [&](const std::unique_ptr<Seq>& s) { return s->handle == handle; });
    if (it != list->end()) {
      if ((*it)->slot >= 0) impl_->fwd.release_slot((*it)->slot);  // its KV slot goes back to the pool
      list->erase(it);  // the remaining sequences keep their order
      return true;
    }
  }
  return false;
}

std::vector<int> Engine::step() {
  Impl& I = *impl_;
  if (!I.alone) {
    for (auto& s : I.pending) I.active.push_back(std::move(s));
    I.pending.clear();
  } else if (I.active.empty() && !I.pending.empty()) {  // alone: the next request joins an empty batch
    I.active.push_back(std::move(I.pending.front()));
    I.pending.erase(I.pending.begin());
  }
  if (I.active.empty()) return {};

  // ---- rows of this step: the whole prompt of each new sequence, one token of each other ----
  I.rows.clear();
  for (auto& s : I.active) {
    if (!s->prefilled) {
      const auto& p = s->req.prompt;
      for (size_t i = 0; i < p.size(); ++i)
        I.rows.push_back({s->slot, p[i], static_cast<int>(i), i + 1 == p.size()});
    } else {
      I.rows.push_back({s->slot, s->last_token, s->n_past, true});
    }
  }
  const float* logits = I.fwd.run(I.rows);

  // ---- choose each sequence's next token; finished sequences leave the batch ----
  const int vocab = I.model.config.vocab_size;
  const Tokenizer* tok = I.model.tokenizer.get();
  std::vector<int> done;
  std::vector<std::unique_ptr<Seq>> still;
  int j = 0;
  for (auto& s : I.active) {
    const float* lg = logits + static_cast<size_t>(j++) * vocab;
    s->n_past += s->prefilled ? 1 : static_cast<int>(s->req.prompt.size());
    s->prefilled = true;
    const DecodeParams& p = s->req.params;
    const int t = static_cast<int>(s->result.tokens.size());
    bool finish = false;
    std::string reason = "length";
    const float* choose = lg;  // the logits the token is chosen from
    if (p.json_schema && tok) {
      const JsonSchema& js = p.json_schema->schema;
      int n = p.json_schema->trie->allowed(js, s->json, s->allowed);
      if (js.complete(s->json)) {  // a complete document may end at any end-of-generation token
        for (int id : tok->eog())
          if (!s->allowed[static_cast<size_t>(id)]) {
            s->allowed[static_cast<size_t>(id)] = 1;
            ++n;
          }
        if (tok->eog().empty() && tok->eos() >= 0 && !s->allowed[static_cast<size_t>(tok->eos())]) {
          s->allowed[static_cast<size_t>(tok->eos())] = 1;
          ++n;
        }
      }
      if (n == 0) {
        finish = true;
        reason = js.complete(s->json) ? "stop" : "schema";  // complete without an EOG token, or a dead end
      } else {
        s->masked.assign(lg, lg + vocab);
        for (int i = 0; i < vocab; ++i)
          if (!s->allowed[static_cast<size_t>(i)]) s->masked[static_cast<size_t>(i)] = std::numeric_limits<float>::lowest();
        choose = s->masked.data();
      }
    }
    if (!finish) {
      const int next = sample_token(choose, vocab, p, t);
      float lp = 0;
      if (p.logprobs || p.top_logprobs > 0) {
        s->result.steps.push_back(step_stats(choose, vocab, next, &lp));  // lp: token_logprob, same bits
        s->result.logprobs.push_back(lp);
      }
      s->result.tokens.push_back(next);
      if (p.top_logprobs > 0) s->result.top_logprobs.push_back(top_logprobs(choose, vocab, p.top_logprobs));
      s->last_token = next;
      ++I.generated;
      if (on_token) {
        static const std::vector<TokenLogprob> kNone;
        on_token(s->handle, next, lp, p.top_logprobs > 0 ? s->result.top_logprobs.back() : kNone);
      }
      // A generated end-of-generation token (EOS, end of turn, a --stop-token: Tokenizer::eog())
      // ends the sequence; so does a generated BOS (a new document begins: the TinyStories models
      // separate stories with BOS).
      const bool eos = tok && (tok->is_eog(next) || (next == tok->bos() && tok->bos() >= 0));
      if (eos && (p.stop_at_eos || p.json_schema)) {
        finish = true;
        reason = "stop";
      } else {
        if (tok) s->text += tok->piece(next);
        if (p.json_schema && tok) p.json_schema->schema.feed(s->json, tok->piece(next));  // allowed, so it feeds
        for (const auto& stop : p.stop) {
          if (stop.empty()) continue;
          size_t at = s->text.find(stop);
          if (at != std::string::npos) {
            s->text.resize(at);
            finish = true;
            reason = "stop";
            break;
          }
        }
      }
    }
    if (!finish && static_cast<int>(s->result.tokens.size()) >= p.max_tokens) finish = true;
    if (finish) {
      s->result.finish_reason = reason;
      s->result.text = s->text;
      s->result.logits_sha256 = sha256_hex(lg, sizeof(float) * vocab);
      s->result.latency_s = std::chrono::duration<double>(Clock::now() - s->start).count();
      done.push_back(s->handle);
      I.fwd.release_slot(s->slot);
      s->slot = -1;
      I.finished.emplace(s->handle, std::move(s->result));
    } else {
      still.push_back(std::move(s));
    }
  }
  I.active = std::move(still);
  return done;
}

std::vector<GenResult> Engine::generate(const std::vector<GenRequest>& reqs) {
  std::vector<int> handles;
  for (const auto& r : reqs) handles.push_back(submit(r));
  while (busy()) step();
  std::vector<GenResult> out;
  for (int h : handles) out.push_back(take_result(h));
  return out;
}

}  // namespace repro
