// The rules for what a vocabulary's special tokens mean (see repro/tokenizer/tokenizer.hpp): the
// defaults of absent GGUF keys, and the end-of-generation set. llama.cpp (src/llama-vocab.cpp) is
// the reference for both.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "repro/tokenizer/internal.hpp"
#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

TokenizerDefaults tokenizer_defaults(const std::string& model, const std::string& pre) {
  TokenizerDefaults d;
  if (model == "llama") {
    d.add_bos = true;
    d.bos_id = 1;
    d.eos_id = 2;
    d.origin = "tokenizer model llama";
    return d;
  }
  // Byte-level BPE: the pre-tokenizers whose models were trained with a BOS at the start.
  static const char* const kAddBos[] = {"llama3", "llama-v3", "llama-bpe",    "falcon3", "falcon-h1", "pixtral",
                                        "midm-2.0", "lfm2", "jina-v5-nano", "tekken",  "chameleon"};
  d.add_bos = std::any_of(std::begin(kAddBos), std::end(kAddBos), [&](const char* p) { return pre == p; });
  d.origin = model == "gpt2" ? "pre-tokenizer " + (pre.empty() ? std::string("default") : pre) : "tokenizer model " + model;
  return d;
}

std::string tokenizer_normalizer(const std::string& model, const std::string& pre) {
  // Pre-tokenizers whose Hugging Face tokenizer.json normalizes to NFC.
  static const char* const kNfc[] = {"qwen2"};
  if (model != "gpt2") return "";
  return std::any_of(std::begin(kNfc), std::end(kNfc), [&](const char* p) { return pre == p; }) ? "nfc" : "";
}

std::string nfc_normalize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto flush = [&](size_t b, size_t e) {
    if (b == e) return;
    bool ascii = true;
    for (size_t i = b; i < e; ++i) ascii = ascii && static_cast<unsigned char>(text[i]) < 0x80;
    if (ascii) {  // ASCII is its own NFC
      out.append(text.data() + b, e - b);
      return;
    }
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + b),
                                            static_cast<utf8proc_ssize_t>(e - b), &dst,
                                            static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n >= 0 && dst) out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    else out.append(text.data() + b, e - b);  // unreachable for well-formed runs; kept as it is
    std::free(dst);
  };
  size_t run = 0, i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    const size_t len = detail::utf8_char_len(text, i);
    if (b0 >= 0x80 && len == 1) {  // not well-formed: ends the run, kept as it is
      flush(run, i);
      out.push_back(text[i]);
      run = ++i;
      continue;
    }
    i += len;
  }
  flush(run, text.size());
  return out;
}

const std::vector<std::string>& end_of_turn_texts() {
  static const std::vector<std::string> k = {
      "<|eot_id|>",       // Llama 3: end of turn
      "<|eom_id|>",       // Llama 3.1: end of message (a tool call follows)
      "<|end_of_text|>",  // Llama 3 EOS; Granite
      "<|im_end|>",       // ChatML (Qwen, SmolLM, ...)
      "<|endoftext|>",    // GPT-2, Qwen, Phi
      "<|end|>",          // Phi 3; gpt-oss (harmony), unless <|return|> and <|call|> are there
      "<|return|>",       // gpt-oss: end of the final answer
      "<|call|>",         // gpt-oss: end of a tool call
      "<end_of_turn>",    // Gemma
      "<EOT>",            // CodeLlama infill
      "_<EOT>",           // CodeLlama infill, SentencePiece spelling
      "[EOT]",            // Kimi K2
      "[EOS]",            // Kimi K2
      "<end_of_utterance>",                                       // SmolDocling
      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // DeepSeek: <｜end▁of▁sentence｜>
  };
  return k;
}

std::vector<int> end_of_generation_ids(const TokenizerData& d) {
  std::set<int> ids;
  const int n = static_cast<int>(d.tokens.size());
  for (int id : {d.eos_id, d.eot_id, d.eom_id})
    if (id >= 0 && id < n) ids.insert(id);
  const auto& texts = end_of_turn_texts();
  int end = -1;
  bool has_return = false, has_call = false;
  for (size_t i = 0; i < d.tokens.size() && i < d.types.size(); ++i) {
    const auto t = static_cast<TokenType>(d.types[i]);
    if (t != TokenType::Control && t != TokenType::UserDefined) continue;
    const std::string& s = d.tokens[i];
    if (std::find(texts.begin(), texts.end(), s) == texts.end()) continue;
    ids.insert(static_cast<int>(i));
    if (s == "<|end|>") end = static_cast<int>(i);
    has_return = has_return || s == "<|return|>";
    has_call = has_call || s == "<|call|>";
  }
  if (has_return && has_call && end >= 0) ids.erase(end);
  return {ids.begin(), ids.end()};
}

void Tokenizer::add_eog(int id) {
  detail::check_id(id, vocab_size());
  if (eog_.empty() && eos() >= 0) eog_.push_back(eos());
  const auto at = std::lower_bound(eog_.begin(), eog_.end(), id);
  if (at == eog_.end() || *at != id) eog_.insert(at, id);
  instance_ = next_instance();  // caches of the old set (the vocabulary trie) are not reused
}

int Tokenizer::find_token(std::string_view text) const {
  const int n = vocab_size();
  for (int id = 0; id < n; ++id)
    if (token_text(id) == text) return id;
  if (text.empty()) return -1;
  for (int id = 0; id < n; ++id)
    if (piece(id) == text) return id;
  return -1;
}

}  // namespace repro
