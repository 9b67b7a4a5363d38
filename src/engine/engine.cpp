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
  int prefill_row = -1;    // this step's first prompt row while prefilling (the prompt's routing trace)
  int last_token = -1;
  std::string text;
  JsonState json;                // structured output: the automaton's state
  std::vector<char> allowed;     // ... and this step's token mask
  std::vector<float> masked;     // ... and the constrained logits
  GenResult result;
  Clock::time_point start;
  // speculative decoding
  std::vector<int> draft;                      // this step's drafted tokens
  std::vector<std::vector<TokenProb>> draft_q;  // ... and the draft model's distributions (T > 0)
  int d_slot = -1;                             // the draft model's KV slot
  int d_past = 0;                              // positions in the draft model's cache
  std::string reason = "length";               // why it finished
};

// Tokens of the sequence so far: the prompt and every generated token.
std::vector<int> context_of(const Seq& s) {
  std::vector<int> ctx = s.req.prompt;
  ctx.insert(ctx.end(), s.result.tokens.begin(), s.result.tokens.end());
  return ctx;
}
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
  std::vector<int> logit_src;  // this step's logit rows: the index of each in `rows`

  bool alone;  // the table decodes one request at a time
  std::unique_ptr<Forward> dfwd;  // the draft model's forward pass (draft:FILE:K)
  std::vector<TokenRow> drows;

  Impl(const Model& m, EngineOptions o) : model(m), opts(o), fwd(m, checked(m, o)), alone(fwd.describe().requests_alone) {
    if (opts.speculative.kind == DraftKind::Model) {
      EngineOptions d = opts;
      d.tp = 1;  // the draft's bits only decide what is drafted, never the output
      d.speculative = {};
      dfwd = std::make_unique<Forward>(*opts.speculative.draft, d);
    }
  }
  static const EngineOptions& checked(const Model& m, const EngineOptions& o);
  bool take(Seq& s, const float* lg, int drafted, const std::vector<TokenProb>* q, bool* accepted,
            std::function<void(int, int, float, const std::vector<TokenLogprob>&)>& on_token);
  void draft_tokens();
};

// The speculative setting, checked before anything is allocated.
const EngineOptions& Engine::Impl::checked(const Model& m, const EngineOptions& o) {
  const Speculative& sp = o.speculative;
  if (!sp.on()) return o;
  if (o.device != Device::Cpu)
    throw UsageError("--speculative is not implemented on --device " + std::string(device_name(o.device)) +
                     "; use --device cpu or --speculative off");
  if (sp.width < 1 || sp.width > kMaxDraftWidth)
    throw UsageError("--speculative: the draft width " + std::to_string(sp.width) + " is out of range; use 1 to " +
                     std::to_string(kMaxDraftWidth));
  if (sp.kind == DraftKind::Model) {
    if (!sp.draft) throw std::logic_error("engine: draft:FILE:K without a loaded draft model");
    check_draft_vocabulary(m, *sp.draft, sp.draft_file);
  }
  return o;
}

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
  if (impl_->dfwd) s->d_slot = impl_->dfwd->acquire_slot(need);
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
      if ((*it)->d_slot >= 0) impl_->dfwd->release_slot((*it)->d_slot);
      list->erase(it);  // the remaining sequences keep their order
      return true;
    }
  }
  return false;
}

// One token of sequence s from its logits `lg` (a decode row, the last prompt row, or a verify row):
// the schema mask, the choice (drafted >= 0: the speculative acceptance of that drafted token, which
// sets *accepted), the logprob and step stats, the callback, and the end conditions. Returns true
// when the sequence finished (s.reason says why).
bool Engine::Impl::take(Seq& s, const float* lg, int drafted, const std::vector<TokenProb>* q, bool* accepted,
                        std::function<void(int, int, float, const std::vector<TokenLogprob>&)>& on_token) {
  const int vocab = model.config.vocab_size;
  const Tokenizer* tok = model.tokenizer.get();
  const DecodeParams& p = s.req.params;
  const int t = static_cast<int>(s.result.tokens.size());
  *accepted = false;
  const float* choose = lg;  // the logits the token is chosen from
  if (p.json_schema && tok) {
    const JsonSchema& js = p.json_schema->schema;
    int n = p.json_schema->trie->allowed(js, s.json, s.allowed);
    if (js.complete(s.json)) {  // a complete document may end at any end-of-generation token
      for (int id : tok->eog())
        if (!s.allowed[static_cast<size_t>(id)]) {
          s.allowed[static_cast<size_t>(id)] = 1;
          ++n;
        }
      if (tok->eog().empty() && tok->eos() >= 0 && !s.allowed[static_cast<size_t>(tok->eos())]) {
        s.allowed[static_cast<size_t>(tok->eos())] = 1;
        ++n;
      }
    }
    if (n == 0) {
      s.reason = js.complete(s.json) ? "stop" : "schema";  // complete without an EOG token, or a dead end
      return true;
    }
    s.masked.assign(lg, lg + vocab);
    for (int i = 0; i < vocab; ++i)
      if (!s.allowed[static_cast<size_t>(i)]) s.masked[static_cast<size_t>(i)] = std::numeric_limits<float>::lowest();
    choose = s.masked.data();
  }
  static const std::vector<TokenProb> kPointMass;
  const int next = drafted >= 0 ? speculative_token(choose, vocab, p, t, drafted, q ? *q : kPointMass, accepted)
                                : sample_token(choose, vocab, p, t);
  float lp = 0;
  if (p.logprobs || p.top_logprobs > 0) {
    s.result.steps.push_back(step_stats(choose, vocab, next, &lp));  // lp: token_logprob, same bits
    s.result.logprobs.push_back(lp);
  }
  s.result.tokens.push_back(next);
  if (p.top_logprobs > 0) s.result.top_logprobs.push_back(top_logprobs(choose, vocab, p.top_logprobs));
  s.last_token = next;
  ++generated;
  if (on_token) {
    static const std::vector<TokenLogprob> kNone;
    on_token(s.handle, next, lp, p.top_logprobs > 0 ? s.result.top_logprobs.back() : kNone);
  }
  // A generated end-of-generation token (EOS, end of turn, a --stop-token: Tokenizer::eog())
  // ends the sequence; so does a generated BOS (a new document begins: the TinyStories models
  // separate stories with BOS).
  const bool eos = tok && (tok->is_eog(next) || (next == tok->bos() && tok->bos() >= 0));
  if (eos && (p.stop_at_eos || p.json_schema)) {
    s.reason = "stop";
    return true;
  }
  if (tok) s.text += tok->piece(next);
  if (p.json_schema && tok) p.json_schema->schema.feed(s.json, tok->piece(next));  // allowed, so it feeds
  for (const auto& stop : p.stop) {
    if (stop.empty()) continue;
    size_t at = s.text.find(stop);
    if (at != std::string::npos) {
      s.text.resize(at);
      s.reason = "stop";
      return true;
    }
  }
  if (static_cast<int>(s.result.tokens.size()) >= p.max_tokens) {
    s.reason = "length";
    return true;
  }
  return false;
}

// ---- drafts of this step (speculative decoding): up to K tokens per decoding sequence ----
// Never more than the sequence may still generate after its verify row's own token, so every verify
// row stays inside the KV slot submit() sized (prompt + max_tokens positions).
void Engine::Impl::draft_tokens() {
  const Speculative& sp = opts.speculative;
  std::vector<Seq*> drafting;
  std::vector<int> want;  // tokens to draft, per drafting sequence
  for (auto& s : active) {
    s->draft.clear();
    s->draft_q.clear();
    if (!s->prefilled) continue;
    const int left = s->req.params.max_tokens - static_cast<int>(s->result.tokens.size()) - 1;
    const int k = std::min(sp.width, left);
    if (k <= 0) continue;
    if (sp.kind == DraftKind::Ngram) {
      s->draft = ngram_draft(context_of(*s), k);
    } else {
      drafting.push_back(s.get());
      want.push_back(k);
    }
  }
  if (drafting.empty()) return;
  // The draft model: the first step feeds each sequence every token its draft cache lacks (its
  // prompt at first, then the tokens accepted since) and drafts one token from the last row; each
  // further step feeds the token just drafted. One batched forward step of the draft per token.
  const int vocab = model.config.vocab_size;
  std::vector<std::vector<int>> ctx(drafting.size());
  for (size_t i = 0; i < drafting.size(); ++i) ctx[i] = context_of(*drafting[i]);
  for (int it = 0;; ++it) {
    drows.clear();
    std::vector<size_t> owner;  // the drafting sequence of each logit row
    for (size_t i = 0; i < drafting.size(); ++i) {
      Seq& s = *drafting[i];
      if (it >= want[i]) continue;
      const int len = static_cast<int>(ctx[i].size());
      if (it == 0) {
        for (int pos = s.d_past; pos < len; ++pos) drows.push_back({s.d_slot, ctx[i][static_cast<size_t>(pos)], pos, pos + 1 == len});
      } else {
        drows.push_back({s.d_slot, s.draft.back(), len + it - 1, true});
      }
      owner.push_back(i);
    }
    if (drows.empty()) break;
    const float* lg = dfwd->run(drows);
    for (size_t r = 0; r < owner.size(); ++r) {
      Seq& s = *drafting[owner[r]];
      const float* row = lg + r * static_cast<size_t>(vocab);
      const DecodeParams& p = s.req.params;
      const int t = static_cast<int>(s.result.tokens.size()) + it;  // the step the token is drafted for
      if (p.temperature <= 0.0f) {
        s.draft.push_back(sample_token(row, vocab, p, t));
      } else {
        s.draft_q.push_back(sampling_distribution(row, vocab, p));
        s.draft.push_back(sample_draft_token(s.draft_q.back(), p, t));
      }
      s.d_past = static_cast<int>(ctx[owner[r]].size()) + it;  // positions fed so far
    }
  }
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
  if (I.opts.speculative.on()) I.draft_tokens();

  // ---- rows of this step: the whole prompt of each new sequence, one token of each other, and after
  // it the sequence's drafted tokens (verify rows: each gives the logits of the position after it) ----
  I.rows.clear();
  I.logit_src.clear();
  for (auto& s : I.active) {
    if (!s->prefilled) {
      const auto& p = s->req.prompt;
      s->prefill_row = static_cast<int>(I.rows.size());
      for (size_t i = 0; i < p.size(); ++i)
        I.rows.push_back({s->slot, p[i], static_cast<int>(i), i + 1 == p.size()});
      I.logit_src.push_back(static_cast<int>(I.rows.size()) - 1);
    } else {
      I.rows.push_back({s->slot, s->last_token, s->n_past, true});
      I.logit_src.push_back(static_cast<int>(I.rows.size()) - 1);
      for (size_t i = 0; i < s->draft.size(); ++i) {
        I.rows.push_back({s->slot, s->draft[i], s->n_past + 1 + static_cast<int>(i), true});
        I.logit_src.push_back(static_cast<int>(I.rows.size()) - 1);
      }
    }
  }
  const float* logits = I.fwd.run(I.rows);
  // The routing trace of a sequence that asked for it: the routes of the row whose logits chose the
  // token just taken (Forward::route holds this step's routes until the next run).
  const int layers = I.model.config.n_layers;
  auto trace = [&](Seq& s, size_t logit_row, size_t tokens_before) {
    if (!s.req.params.routing_trace || !I.model.config.is_moe() || s.result.tokens.size() == tokens_before) return;
    std::vector<Route> per_layer;
    per_layer.reserve(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l) per_layer.push_back(I.fwd.route(I.logit_src[logit_row], l));
    s.result.routing.push_back(std::move(per_layer));
  };
  // ... and, in its prefill step, the routes of its prompt rows before the last (GenResult::prompt_routing).
  for (auto& s : I.active) {
    if (s->prefilled || s->prefill_row < 0 || !s->req.params.routing_trace || !I.model.config.is_moe()) continue;
    const size_t n = s->req.prompt.size();
    for (size_t i = 0; i + 1 < n; ++i) {
      std::vector<Route> per_layer;
      per_layer.reserve(static_cast<size_t>(layers));
      for (int l = 0; l < layers; ++l) per_layer.push_back(I.fwd.route(s->prefill_row + static_cast<int>(i), l));
      s->result.prompt_routing.push_back(std::move(per_layer));
    }
  }

  // ---- choose each sequence's next tokens; finished sequences leave the batch ----
  // A verify row is taken only while the drafted token before it was accepted: the positions after
  // the first rejection hold K/V of tokens the sequence does not have, and the next step writes
  // over them before any row attends to them (n_past rolls back).
  const int vocab = I.model.config.vocab_size;
  std::vector<int> done;
  std::vector<std::unique_ptr<Seq>> still;
  size_t j = 0;
  for (auto& s : I.active) {
    const float* lg = logits + j * vocab;
    bool finish = false, accepted = false;
    if (!s->prefilled) {
      s->n_past += static_cast<int>(s->req.prompt.size());
      s->prefilled = true;
      const size_t before = s->result.tokens.size();
      finish = I.take(*s, lg, -1, nullptr, &accepted, on_token);
      trace(*s, j, before);
      ++j;
    } else {
      const size_t k = s->draft.size();
      size_t taken = 0;
      for (size_t i = 0; i <= k; ++i) {
        lg = logits + (j + i) * vocab;
        ++s->n_past;  // row i's token is the sequence's: its K/V stays
        const int drafted = i < k ? s->draft[i] : -1;
        const size_t before = s->result.tokens.size();
        finish = I.take(*s, lg, drafted, i < s->draft_q.size() ? &s->draft_q[i] : nullptr, &accepted, on_token);
        trace(*s, j + i, before);
        if (drafted >= 0 && accepted) ++taken;
        if (finish || drafted < 0 || !accepted) break;
      }
      if (k > 0) {
        s->result.spec.drafted += static_cast<int>(k);
        s->result.spec.accepted += static_cast<int>(taken);
        ++s->result.spec.verify_steps;
        // the draft model's cache keeps the drafted tokens that were accepted
        if (s->d_slot >= 0) s->d_past = std::min(s->d_past, s->n_past);
      }
      j += k + 1;
    }
    if (finish) {
      s->result.finish_reason = s->reason;
      s->result.text = s->text;
      s->result.logits_sha256 = sha256_hex(lg, sizeof(float) * vocab);
      s->result.latency_s = std::chrono::duration<double>(Clock::now() - s->start).count();
      done.push_back(s->handle);
      I.fwd.release_slot(s->slot);
      s->slot = -1;
      if (s->d_slot >= 0) I.dfwd->release_slot(s->d_slot);
      s->d_slot = -1;
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
