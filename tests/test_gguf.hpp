// GGUF files written by the tests: the small synthesized llama model with its metadata edited, e.g.
// its tokenizer replaced by a vocabulary the test builds (shared by the end-of-generation and
// added-token tests).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/synth.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

namespace repro::test {

// A byte-level BPE vocabulary of `vocab` tokens: `first` at id 0, byte b at id b + 1 (GPT-2's
// alphabet), the merges' results from id 257 in merge order, then `added` in order and normal filler
// tokens up to `vocab`.
inline TokenizerData bpe_vocab(const std::string& pre, const std::pair<std::string, TokenType>& first,
                               const std::vector<std::string>& merges,
                               const std::vector<std::pair<std::string, TokenType>>& added, int vocab, int bos,
                               int eos) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  auto add = [&](const std::string& t, TokenType type) {
    d.tokens.push_back(t);
    d.types.push_back(static_cast<int>(type));
  };
  add(first.first, first.second);
  for (int b = 0; b < 256; ++b) add(gpt2_char(b), TokenType::Normal);
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    add(m.substr(0, sp) + m.substr(sp + 1), TokenType::Normal);
  }
  for (const auto& [t, type] : added) add(t, type);
  for (int i = 0; static_cast<int>(d.tokens.size()) < vocab; ++i) add("<filler " + std::to_string(i) + ">", TokenType::Normal);
  d.merges = merges;
  d.bos_id = bos;
  d.eos_id = eos;
  return d;
}

// A small synthesized llama model of `vocab` tokens, its metadata keys filtered by `keep` and
// `extra` added; `forced`: a zero output norm (every logit 0, so greedy decoding emits token 0).
inline std::string edited_synth(int vocab, const std::function<bool(const std::string&)>& keep,
                                const std::function<void(gguf::Writer&)>& extra, bool forced) {
  SynthOptions o;
  o.dim = 16, o.hidden_dim = 24, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2, o.vocab_size = vocab;
  const std::string bytes = synth_model(o);
  gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "synth");
  gguf::Writer w;
  for (const auto& [k, v] : f.kv)
    if (keep(k)) w.add(k, v);
  if (extra) extra(w);
  for (const auto& t : f.tensors) {
    std::string data(reinterpret_cast<const char*>(f.data(t)), t.n_bytes);
    if (forced && t.name == "output_norm.weight") data.assign(data.size(), '\0');  // f32 zeros
    w.add_tensor(t.name, t.ne, t.type, std::move(data));
  }
  return w.serialize();
}

// That model with its tokenizer keys replaced by `tok` (a gpt2 vocabulary with merges, BOS and EOS
// ids; no add_bos_token, add_eos_token, eot_token_id, repro.tokenizer.normalizer keys unless `extra` adds them).
inline std::string bpe_model(const TokenizerData& tok, bool forced, const std::function<void(gguf::Writer&)>& extra = {}) {
  using gguf::Value;
  auto keys = [&](gguf::Writer& w) {
    w.add("tokenizer.ggml.model", Value::string(tok.model));
    w.add("tokenizer.ggml.pre", Value::string(tok.pre));
    w.add("tokenizer.ggml.tokens", Value::string_array(tok.tokens));
    w.add("tokenizer.ggml.token_type", Value::i32_array(std::vector<int32_t>(tok.types.begin(), tok.types.end())));
    w.add("tokenizer.ggml.merges", Value::string_array(tok.merges));
    w.add("tokenizer.ggml.bos_token_id", Value::u(gguf::ValueType::UINT32, static_cast<uint64_t>(tok.bos_id)));
    w.add("tokenizer.ggml.eos_token_id", Value::u(gguf::ValueType::UINT32, static_cast<uint64_t>(tok.eos_id)));
    if (extra) extra(w);
  };
  // Every tokenizer key goes, the project's own (repro.tokenizer.normalizer) too.
  return edited_synth(static_cast<int>(tok.tokens.size()),
                      [](const std::string& k) { return k.rfind("tokenizer.", 0) != 0 && k.rfind("repro.tokenizer.", 0) != 0; },
                      keys, forced);
}

// A synthesized file rewritten: metadata edited by `edit`, keys and tensors named in skip left out.
inline std::string edited(const SynthOptions& o, const std::function<void(gguf::Writer&)>& edit,
                   const std::vector<std::string>& skip) {
  const std::string bytes = synth_model(o);
  gguf::File f = gguf::parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "synth");
  auto skipped = [&](const std::string& n) { return std::find(skip.begin(), skip.end(), n) != skip.end(); };
  gguf::Writer w;
  for (const auto& [k, v] : f.kv)
    if (!skipped(k)) w.add(k, v);
  edit(w);
  for (const auto& t : f.tensors)
    if (!skipped(t.name))
      w.add_tensor(t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), t.n_bytes));
  return w.serialize();
}

}  // namespace repro::test
