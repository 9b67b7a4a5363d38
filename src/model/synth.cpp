// Seeded synthetic Llama models (GGUF v3) with a small valid SentencePiece-BPE tokenizer.
// Bit-identical output for the same options on every machine: integer PRNG, and floats made only
// by exact operations (a 24-bit integer scaled by a power of two; f16 by integer rounding).
#include "repro/model/synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "repro/common/dtype.hpp"
#include "repro/common/error.hpp"
#include "repro/common/rng.hpp"
#include "repro/common/quant.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

// =====================================================================================
// Tokenizer
// =====================================================================================

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

std::vector<std::string> single_pieces() {
  std::vector<std::string> s = {kSpace};
  for (char c = 'a'; c <= 'z'; ++c) s.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) s.emplace_back(1, c);
  for (char c = '0'; c <= '9'; ++c) s.emplace_back(1, c);
  for (char c : std::string(".,!?'\"-:;()")) s.emplace_back(1, c);
  return s;
}

// Common words of simple English stories, most frequent first, so that text tokenizes into
// sensible pieces even with a small vocabulary.
const char* const kWords[] = {
    "the", "and", "a", "to", "was", "he", "she", "it", "of", "in", "they", "her", "his", "said", "with",
    "you", "on", "that", "is", "for", "day", "big", "little", "time", "there", "one", "up", "so", "had",
    "were", "not", "but", "play", "what", "happy", "saw", "very", "Once", "upon", "named", "girl", "boy",
    "friend", "mom", "dog", "cat", "tree", "sun", "loved", "wanted", "help", "home", "want", "all", "be",
    "can", "we", "go", "at", "an", "do", "me", "my", "went", "like", "good", "fun", "ball", "toy", "park",
    "The", "She", "He", "They", "Lily", "Tom", "Ben", "Sue", "bird", "red", "blue", "look", "made", "new",
    "out", "this", "when", "then", "them", "would", "could", "about", "too", "how", "did", "are", "have",
};

}  // namespace

int synth_min_vocab() { return 3 + 256 + static_cast<int>(single_pieces().size()); }

TokenizerData synth_tokenizer(int vocab_size) {
  constexpr int kMaxVocab = 1 << 18;
  if (vocab_size < synth_min_vocab() || vocab_size > kMaxVocab)
    throw UsageError("--vocab " + std::to_string(vocab_size) + " is out of range: a synthetic tokenizer needs " +
                     std::to_string(synth_min_vocab()) + ".." + std::to_string(kMaxVocab) +
                     " tokens (3 special + 256 bytes + single characters, then merges)");
  TokenizerData d;
  d.model = "llama";
  d.pre = "default";
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_bos = true;
  d.add_space_prefix = true;
  std::set<std::string> seen;
  int normal_rank = 0;
  auto add = [&](const std::string& piece, TokenType type) {
    if (static_cast<int>(d.tokens.size()) >= vocab_size || !seen.insert(piece).second) return;
    d.tokens.push_back(piece);
    d.types.push_back(static_cast<int>(type));
    // Normal pieces score 0, -1, -2, ...: earlier (more common) merges win.
    d.scores.push_back(type == TokenType::Normal ? -static_cast<float>(normal_rank++) : 0.0f);
  };
  add("<unk>", TokenType::Unknown);
  add("<s>", TokenType::Control);
  add("</s>", TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, TokenType::Byte);
  }
  const size_t first_normal = d.tokens.size();
  for (const auto& s : single_pieces()) add(s, TokenType::Normal);
  // Words: every prefix of "▁word" joins the previous prefix (an existing piece) and one character
  // (an existing piece), so BPE can reach the whole word by merges.
  for (const char* w : kWords) {
    std::string piece = kSpace;
    for (const char* c = w; *c; ++c) {
      piece += *c;
      add(piece, TokenType::Normal);
    }
  }
  // Fill the rest: each normal piece, in order, joined with each letter in English frequency order.
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (size_t i = first_normal; static_cast<int>(d.tokens.size()) < vocab_size; ++i)
    for (char c : letters) add(d.tokens[i] + c, TokenType::Normal);
  return d;
}

namespace {

// =====================================================================================
// Weights
// =====================================================================================

// splitmix64 (include/repro/common/rng.hpp): a tiny integer PRNG with well-mixed output.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() { return rng::splitmix64_next(s); }
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Uniform in [-2^-k, 2^-k) where 4^k >= fan_in, i.e. scale about 1/sqrt(fan_in). Each tensor has
// its own stream (seed, name), so changing one shape leaves the other tensors' values alone.
std::vector<float> random_tensor(uint64_t seed, const std::string& name, size_t n, int64_t fan_in) {
  int k = 0;
  while ((int64_t{1} << (2 * k)) < fan_in) ++k;
  SplitMix64 rng{seed ^ fnv1a(name)};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    int32_t m = static_cast<int32_t>(rng.next() >> 40) - (1 << 23);  // 24-bit signed integer
    v[i] = std::ldexp(static_cast<float>(m), -23 - k);               // exact: power-of-two scaling
  }
  return v;
}

// --type names and their block formats and GGUF general.file_type numbers (llama.cpp's enum:
// ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_Q4_K_M 15,
// MOSTLY_Q5_K_S 16, MOSTLY_Q6_K 18, MOSTLY_BF16 32). A mixed type (q4_k_m) names the format of most
// matrices; matrix_format picks the others.
struct SynthType {
  const char* name;
  quant::Format format;
  uint32_t file_type;
  bool mixed = false;
};
constexpr SynthType kSynthTypes[] = {
    {"f32", quant::Format::F32, 0},   {"f16", quant::Format::F16, 1},   {"bf16", quant::Format::BF16, 32},
    {"q8_0", quant::Format::Q8_0, 7}, {"q4_0", quant::Format::Q4_0, 2}, {"q4_k", quant::Format::Q4_K, 14},
    {"q5_k", quant::Format::Q5_K, 16}, {"q6_k", quant::Format::Q6_K, 18}, {"q4_k_m", quant::Format::Q4_K, 15, true},
};

const SynthType* find_type(const std::string& name) {
  for (const auto& t : kSynthTypes)
    if (name == t.name) return &t;
  return nullptr;
}

// Whether layer i of n gets the wider type in a Q4_K_M file, as llama-quantize decides it for
// attn_v and ffn_down: the first and the last eighth of the layers, and every third layer between.
bool more_bits_layer(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The format of matrix `name` (of layer `layer`, -1 outside the layers; n_layers in all). One
// format for a plain --type. q4_k_m mixes as llama-quantize writes Q4_K_M: Q6_K for the classifier
// (output.weight, or token_embd.weight when it is tied) and for attn_v and ffn_down (the experts'
// too) of the layers more_bits_layer picks; Q4_K for everything else.
quant::Format matrix_format(const SynthOptions& o, const std::string& name, int layer, int n_layers) {
  const SynthType* t = find_type(o.type);
  if (!t->mixed) return t->format;
  const bool classifier = name == "output.weight" || (o.tied && name == "token_embd.weight");
  const bool widened = layer >= 0 && more_bits_layer(layer, n_layers) &&
                       (name.find("attn_v.weight") != std::string::npos || name.find("ffn_down") != std::string::npos);
  return classifier || widened ? quant::Format::Q6_K : t->format;
}

// A matrix [out][in] (ne = [in, out]), or `experts` of them stacked (ne = [in, out, experts]: the
// 3-D expert tensors), in the format matrix_format picks.
void add_matrix(gguf::Writer& w, const SynthOptions& o, const std::string& name, uint64_t in, uint64_t out,
                uint64_t experts = 0, int layer = -1) {
  const uint64_t rows = out * std::max<uint64_t>(experts, 1);
  std::vector<uint64_t> ne = {in, out};
  if (experts > 0) ne.push_back(experts);
  std::vector<float> v = random_tensor(o.seed, name, static_cast<size_t>(in * rows), static_cast<int64_t>(in));
  const quant::Format f = matrix_format(o, name, layer, o.n_layers);
  if (f == quant::Format::F32) return w.add_f32(name, ne, v);
  // Row by row: each row (in elements) is whole blocks (checked by synth_model).
  const size_t rb = quant::row_bytes(f, static_cast<int64_t>(in));
  std::string data(rb * rows, '\0');
  for (uint64_t r = 0; r < rows; ++r)
    quant::quantize_row(f, v.data() + r * in, reinterpret_cast<uint8_t*>(data.data()) + r * rb,
                        static_cast<int64_t>(in));
  w.add_tensor(name, ne, gguf::from_quant_format(f), std::move(data));
}

void check(bool ok, const std::string& msg) {
  if (!ok) throw UsageError(msg);
}

}  // namespace

std::string synth_archs() { return "llama, qwen2, qwen3, qwen2moe, qwen3moe"; }

namespace {

// The Jinja templates synth writes (the markers chat.cpp recognises, in the shape the published
// templates of each family have), their special tokens, and their end-of-turn token.
struct SynthChat {
  const char* name;
  const char* jinja;
  std::vector<std::string> specials;
  const char* eot;  // nullptr: keep </s>
};
const std::vector<SynthChat>& synth_chats() {
  static const std::vector<SynthChat> k = {
      {"chatml",
       "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
       "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
       {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}, "<|im_end|>"},
      {"llama3",
       "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
       "message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
       "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
       "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
       {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "<|eot_id|>"},
      {"llama3.1",
       "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
       "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set "
       "messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}{{- "
       "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- "
       "\"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}{%- for message in "
       "messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
       "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- "
       "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
       {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "<|eot_id|>"},
      {"mistral",
       "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
       "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
       "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
       "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
       "are supported!') }}{% endif %}{% endfor %}",
       {}, nullptr},
      {"mistral-v1",
       "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set "
       "loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for "
       "message in loop_messages %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{- "
       "raise_exception('user and assistant messages must alternate after the system message') }}{%- endif %}{%- if "
       "message['role'] == 'user' %}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + "
       "'\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- "
       "endif %}{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}{%- else %}{{- "
       "raise_exception('only user and assistant messages after the system message') }}{%- endif %}{%- endfor %}",
       {}, nullptr},
      {"mistral-v3",
       "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set "
       "loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{%- if not tools is "
       "defined %}{%- set tools = none %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if "
       "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{- raise_exception('user and assistant messages must "
       "alternate after the system message') }}{%- endif %}{%- if message['role'] == 'user' %}{%- if tools is not none "
       "and loop.last %}{{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}{%- if "
       "loop.last and system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + "
       "'[/INST]' }}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- elif message['role'] == "
       "'assistant' %}{{- ' ' + message['content'] | trim + eos_token }}{%- else %}{{- raise_exception('only user and "
       "assistant messages after the system message') }}{%- endif %}{%- endfor %}",
       {"[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"}, nullptr},
      {"mistral-v3-tekken",
       "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set "
       "loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{%- if not tools is "
       "defined %}{%- set tools = none %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if "
       "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{- raise_exception('user and assistant messages must "
       "alternate after the system message') }}{%- endif %}{%- if message['role'] == 'user' %}{%- if tools is not none "
       "and loop.last %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}{%- if loop.last "
       "and system_message is defined %}{{- '[INST]' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}{%- "
       "else %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}{{- "
       "message['content'] + eos_token }}{%- else %}{{- raise_exception('only user and assistant messages after the "
       "system message') }}{%- endif %}{%- endfor %}",
       {"[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"}, nullptr},
      {"mistral-v7",
       "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{- '[INST] ' + "
       "message['content'] + '[/INST]' }}{%- elif message['role'] == 'system' %}{{- '[SYSTEM_PROMPT] ' + "
       "message['content'] + '[/SYSTEM_PROMPT]' }}{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] "
       "+ eos_token }}{%- else %}{{- raise_exception('only user, system and assistant messages') }}{%- endif %}{%- endfor "
       "%}",
       {"[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"}, nullptr},
      {"llama2",
       "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set "
       "loop_messages = messages[1:] %}{%- else %}{%- set system_message = false %}{%- set loop_messages = messages %}{%- "
       "endif %}{%- for message in loop_messages %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{- "
       "raise_exception('user and assistant messages must alternate') }}{%- endif %}{%- if loop.index0 == 0 and "
       "system_message != false %}{%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
       "message['content'] %}{%- else %}{%- set content = message['content'] %}{%- endif %}{%- if message['role'] == "
       "'user' %}{{- bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{%- elif message['role'] == 'assistant' %}"
       "{{- ' ' + content.strip() + ' ' + eos_token }}{%- endif %}{%- endfor %}",
       {}, nullptr},
  };
  return k;
}

std::string synth_chat_names() {
  std::string s;
  for (const auto& c : synth_chats()) s += std::string(s.empty() ? "" : ", ") + c.name;
  return s;
}

}  // namespace

std::string synth_types() {
  std::string s;
  for (const auto& t : kSynthTypes) s += std::string(s.empty() ? "" : ", ") + t.name;
  return s;
}

std::string synth_model(const SynthOptions& o) {
  // ---- options ----
  check(o.arch == "llama" || o.arch == "qwen2" || o.arch == "qwen3" || o.arch == "qwen2moe" || o.arch == "qwen3moe",
        "--arch '" + o.arch + "' is not supported; supported: " + synth_archs());
  // What each architecture adds to the Llama block.
  const bool qkv_bias = o.arch == "qwen2" || o.arch == "qwen2moe", qk_norm = o.arch == "qwen3" || o.arch == "qwen3moe";
  const bool moe_arch = o.arch == "qwen2moe" || o.arch == "qwen3moe", shared_expert = o.arch == "qwen2moe";
  const bool neox = o.arch != "llama";
  check(!moe_arch || o.n_experts > 0,
        "--arch " + o.arch + " is a mixture of experts: give --experts E and --experts-used K");
  check(moe_arch || o.arch == "llama" || o.n_experts == 0,
        "--experts: architecture " + o.arch + " has no experts; use --arch llama (Mixtral), qwen2moe or qwen3moe");
  check(o.n_experts >= 0 && o.n_experts <= 256, "--experts " + std::to_string(o.n_experts) + " is out of range (0..256)");
  check(o.n_experts == 0 || (o.n_experts_used >= 1 && o.n_experts_used <= o.n_experts),
        "--experts-used " + std::to_string(o.n_experts_used) + " must be 1..--experts (" + std::to_string(o.n_experts) +
            "): a token is routed to that many of the layer's experts");
  check(o.n_experts > 0 || o.n_experts_used == 0, "--experts-used needs --experts E");
  const uint64_t E = static_cast<uint64_t>(o.n_experts);
  const SynthChat* chat = nullptr;
  for (const auto& c : synth_chats())
    if (o.chat_template == c.name) chat = &c;
  check(o.chat_template.empty() || chat,
        "--chat-template '" + o.chat_template + "' is not one synth writes; supported: " + synth_chat_names());
  check(o.normalizer.empty() || o.normalizer == "nfc" || o.normalizer == "none",
        "--normalizer '" + o.normalizer + "' is not supported; supported: nfc, none");
  check(!o.rope_freqs || o.arch == "llama", "--rope-freqs is a Llama 3 feature: use it with --arch llama");
  check(o.dim >= 2 && o.dim <= 16384, "--dim " + std::to_string(o.dim) + " is out of range (2..16384)");
  check(o.hidden_dim >= 1 && o.hidden_dim <= 65536, "--hidden " + std::to_string(o.hidden_dim) + " is out of range (1..65536)");
  check(o.n_layers >= 1 && o.n_layers <= 256, "--layers " + std::to_string(o.n_layers) + " is out of range (1..256)");
  if (o.head_dim == 0)
    check(o.n_heads >= 1 && o.dim % o.n_heads == 0 && (o.dim / o.n_heads) % 2 == 0,
          "--heads " + std::to_string(o.n_heads) + " must divide --dim " + std::to_string(o.dim) +
              " into heads of an even size (RoPE rotates pairs), or give --head-dim");
  else
    check(o.n_heads >= 1 && o.n_heads <= 1024 && o.head_dim >= 2 && o.head_dim <= 1024 && o.head_dim % 2 == 0,
          "--head-dim " + std::to_string(o.head_dim) + " must be even and 2..1024 (RoPE rotates pairs), with --heads 1..1024");
  check(o.n_kv_heads >= 1 && o.n_heads % o.n_kv_heads == 0,
        "--kv-heads " + std::to_string(o.n_kv_heads) + " must divide --heads " + std::to_string(o.n_heads));
  check(o.context_length >= 1 && o.context_length <= (1 << 20),
        "--context " + std::to_string(o.context_length) + " is out of range (1..1048576)");
  check(find_type(o.type) != nullptr, "--type '" + o.type + "' is not supported; supported: " + synth_types());
  {
    // Every matrix row (--dim or --hidden elements) is whole blocks of the type.
    const int be = quant::block_of(find_type(o.type)->format).elems;
    const int qd = (o.head_dim ? o.head_dim : o.dim / o.n_heads) * o.n_heads;
    check(o.dim % be == 0 && o.hidden_dim % be == 0,
          "--type " + o.type + " stores rows in blocks of " + std::to_string(be) + " elements: --dim (" +
              std::to_string(o.dim) + ") and --hidden (" + std::to_string(o.hidden_dim) + ") must be multiples of " +
              std::to_string(be));
    check(qd % be == 0, "--type " + o.type + " stores rows in blocks of " + std::to_string(be) +
                            " elements: --heads x --head-dim (" + std::to_string(qd) + ") must be a multiple of " +
                            std::to_string(be));
  }
  const uint64_t dim = o.dim, hid = o.hidden_dim, L = o.n_layers, voc = o.vocab_size;
  const uint64_t hd = o.head_dim ? static_cast<uint64_t>(o.head_dim) : dim / o.n_heads;
  const uint64_t kv = hd * o.n_kv_heads, qd = hd * o.n_heads;
  TokenizerData tok = synth_tokenizer(o.vocab_size);
  if (chat) {
    // The template's special tokens replace the last pieces of the vocabulary (control tokens).
    check(tok.tokens.size() >= synth_min_vocab() + chat->specials.size(),
          "--vocab " + std::to_string(o.vocab_size) + " leaves no room for the chat template's special tokens; use --vocab " +
              std::to_string(synth_min_vocab() + chat->specials.size()) + " or more");
    for (size_t i = 0; i < chat->specials.size(); ++i) {
      const size_t id = tok.tokens.size() - chat->specials.size() + i;
      tok.tokens[id] = chat->specials[i];
      tok.types[id] = static_cast<int>(TokenType::Control);
      tok.scores[id] = 0.0f;
      if (chat->eot && chat->specials[i] == chat->eot) tok.eos_id = static_cast<int>(id);
    }
  }
  const uint64_t ffn_params = E == 0 ? 3 * hid * dim
                                     : E * dim + 3 * E * hid * dim + (shared_expert ? dim + 3 * hid * dim : 0);
  uint64_t n_params = voc * dim * (o.tied ? 1 : 2) + dim +
                      L * (2 * dim + 2 * qd * dim + 2 * kv * dim + ffn_params + (qkv_bias ? qd + 2 * kv : 0) +
                           (qk_norm ? 2 * hd : 0));
  check(n_params <= (uint64_t{1} << 31),
        "the model would have " + std::to_string(n_params) + " parameters; synth supports at most 2^31 "
        "(reduce --dim, --hidden, --layers or --vocab)");

  // ---- metadata ----
  gguf::Writer w;
  using gguf::Value;
  using gguf::ValueType;
  auto u32 = [](uint64_t v) { return Value::u(ValueType::UINT32, v); };
  const std::string a = o.arch + ".";
  w.add("general.architecture", Value::string(o.arch));
  w.add("general.name", Value::string("repro-audit synth"));
  w.add("general.file_type", u32(find_type(o.type)->file_type));
  w.add("repro.synth.seed", Value::u(ValueType::UINT64, o.seed));
  w.add(a + "context_length", u32(o.context_length));
  w.add(a + "embedding_length", u32(dim));
  w.add(a + "feed_forward_length", u32(hid));
  w.add(a + "block_count", u32(L));
  w.add(a + "attention.head_count", u32(o.n_heads));
  w.add(a + "attention.head_count_kv", u32(o.n_kv_heads));
  if (E > 0) {
    w.add(a + "expert_count", u32(E));
    w.add(a + "expert_used_count", u32(o.n_experts_used));
    if (moe_arch) w.add(a + "expert_feed_forward_length", u32(hid));
    if (shared_expert) w.add(a + "expert_shared_feed_forward_length", u32(hid));
  }
  if (qk_norm || o.head_dim) {
    w.add(a + "attention.key_length", u32(hd));
    w.add(a + "attention.value_length", u32(hd));
  }
  w.add(a + "rope.dimension_count", u32(hd));
  w.add(a + "rope.freq_base", Value::real(ValueType::FLOAT32, neox ? 1000000.0 : 10000.0));
  w.add(a + "attention.layer_norm_rms_epsilon", Value::real(ValueType::FLOAT32, neox ? 1e-6 : 1e-5));
  w.add("tokenizer.ggml.model", Value::string(tok.model));
  w.add("tokenizer.ggml.pre", Value::string(tok.pre));
  w.add("tokenizer.ggml.tokens", Value::string_array(tok.tokens));
  w.add("tokenizer.ggml.scores", Value::f32_array(tok.scores));
  w.add("tokenizer.ggml.token_type", Value::i32_array(std::vector<int32_t>(tok.types.begin(), tok.types.end())));
  w.add("tokenizer.ggml.unknown_token_id", u32(tok.unk_id));
  w.add("tokenizer.ggml.bos_token_id", u32(tok.bos_id));
  w.add("tokenizer.ggml.eos_token_id", u32(tok.eos_id));
  w.add("tokenizer.ggml.add_bos_token", Value::boolean(tok.add_bos));
  w.add("tokenizer.ggml.add_space_prefix", Value::boolean(tok.add_space_prefix));
  // The normalization, when asked for (the project's key; tokenizer_normalizer in tokenizer.hpp).
  if (!o.normalizer.empty()) w.add("repro.tokenizer.normalizer", Value::string(o.normalizer));
  if (chat) w.add("tokenizer.chat_template", Value::string(chat->jinja));

  // ---- tensors (GGUF ne = [in, out]); norm weights are 1.0 but qwen3's head norms ----
  const std::vector<float> ones(static_cast<size_t>(dim), 1.0f);
  // A vector near `base`: base + a seeded value in [-1/2, 1/2) (exact: a 24-bit integer over 2^24).
  auto vec = [&](const std::string& name, uint64_t n, float base) {
    std::vector<float> v = random_tensor(o.seed, name, static_cast<size_t>(n), 4);
    for (float& x : v) x += base;
    w.add_f32(name, {n}, v);
  };
  add_matrix(w, o, "token_embd.weight", dim, voc);  // [vocab][dim]
  w.add_f32("output_norm.weight", {dim}, ones);
  if (!o.tied) add_matrix(w, o, "output.weight", dim, voc);
  if (o.rope_freqs) {
    // Llama 3.1-style divisors: 1 for the fast pairs, rising to 8 for the slow ones.
    std::vector<float> f(static_cast<size_t>(hd / 2));
    for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(f.size());
    w.add_f32("rope_freqs.weight", {hd / 2}, f);
  }
  for (uint64_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_f32(p + "attn_norm.weight", {dim}, ones);
    add_matrix(w, o, p + "attn_q.weight", dim, qd, 0, static_cast<int>(l));
    add_matrix(w, o, p + "attn_k.weight", dim, kv, 0, static_cast<int>(l));
    add_matrix(w, o, p + "attn_v.weight", dim, kv, 0, static_cast<int>(l));
    if (qkv_bias) {
      vec(p + "attn_q.bias", qd, 0.0f);
      vec(p + "attn_k.bias", kv, 0.0f);
      vec(p + "attn_v.bias", kv, 0.0f);
    }
    if (qk_norm) {
      vec(p + "attn_q_norm.weight", hd, 1.0f);
      vec(p + "attn_k_norm.weight", hd, 1.0f);
    }
    add_matrix(w, o, p + "attn_output.weight", qd, dim, 0, static_cast<int>(l));
    w.add_f32(p + "ffn_norm.weight", {dim}, ones);
    if (E > 0) {
      // The router [E][dim] in F32; the experts as 3-D tensors [E][out][in].
      w.add_f32(p + "ffn_gate_inp.weight", {dim, E},
                random_tensor(o.seed, p + "ffn_gate_inp.weight", static_cast<size_t>(dim * E), static_cast<int64_t>(dim)));
      add_matrix(w, o, p + "ffn_gate_exps.weight", dim, hid, E, static_cast<int>(l));
      add_matrix(w, o, p + "ffn_down_exps.weight", hid, dim, E, static_cast<int>(l));
      add_matrix(w, o, p + "ffn_up_exps.weight", dim, hid, E, static_cast<int>(l));
      if (shared_expert) {
        w.add_f32(p + "ffn_gate_inp_shexp.weight", {dim},
                  random_tensor(o.seed, p + "ffn_gate_inp_shexp.weight", static_cast<size_t>(dim), static_cast<int64_t>(dim)));
        add_matrix(w, o, p + "ffn_gate_shexp.weight", dim, hid, 0, static_cast<int>(l));
        add_matrix(w, o, p + "ffn_down_shexp.weight", hid, dim, 0, static_cast<int>(l));
        add_matrix(w, o, p + "ffn_up_shexp.weight", dim, hid, 0, static_cast<int>(l));
      }
      continue;
    }
    add_matrix(w, o, p + "ffn_gate.weight", dim, hid, 0, static_cast<int>(l));
    add_matrix(w, o, p + "ffn_down.weight", hid, dim, 0, static_cast<int>(l));
    add_matrix(w, o, p + "ffn_up.weight", dim, hid, 0, static_cast<int>(l));
  }
  return w.serialize();
}

void write_synth_model(const SynthOptions& opts, const std::string& path) {
  write_file_atomic(path, synth_model(opts));
}

// ---------------------------------------------------------------- named synthesized models

namespace {
SynthOptions spec_options(int dim, int hidden, int layers, int heads, int vocab, int context, const char* type) {
  SynthOptions o;
  o.seed = 1;
  o.dim = dim;
  o.hidden_dim = hidden;
  o.n_layers = layers;
  o.n_heads = heads;
  o.n_kv_heads = heads;
  o.vocab_size = vocab;
  o.context_length = context;
  o.type = type;
  return o;
}
}  // namespace

const std::vector<SynthSpec>& synth_specs() {
  static const std::vector<SynthSpec> specs = {
      {"synth:100m", "bench-synth-100m-v1-seed1.gguf",
       "~110M parameters: dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000, context 1024, f16 weights",
       spec_options(768, 2048, 12, 12, 32000, 1024, "f16")},
      {"synth:100m-long", "synth-100m-long-v1-seed1.gguf",
       "synth:100m with a context of 4096 tokens",
       spec_options(768, 2048, 12, 12, 32000, 4096, "f16")},
      {"synth:long", "synth-long-v1-seed1.gguf",
       "~0.9M parameters with a long context: dim 128, 4 layers, 2 heads, hidden 384, vocab 512, context 4096, "
       "f32 weights",
       spec_options(128, 384, 4, 2, 512, 4096, "f32")},
  };
  return specs;
}

std::string synth_spec_names() {
  std::string s;
  for (const auto& sp : synth_specs()) s += (s.empty() ? "" : ", ") + std::string(sp.name);
  return s;
}

bool is_synth_spec(const std::string& model) { return model.rfind("synth:", 0) == 0; }

const SynthSpec& find_synth_spec(const std::string& model) {
  for (const auto& sp : synth_specs())
    if (model == sp.name) return sp;
  throw UsageError("--model '" + model + "': unknown synthesized model; the names are " + synth_spec_names() +
                   " (or write one with `repro-audit model synth --out FILE` and pass the file)");
}

std::string resolve_model_spec(const std::string& model) {
  if (!is_synth_spec(model)) return model;
  const SynthSpec& sp = find_synth_spec(model);
  std::filesystem::path dir = cache_dir();
  std::filesystem::path p = dir / sp.file;
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec)) return p.string();
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create the cache directory '" + dir.string() + "': " + ec.message() +
                     "; set REPRO_AUDIT_CACHE to a writable directory or pass --model FILE");
  std::fprintf(stderr, "note: writing the synthesized model %s to %s (once)\n", sp.name, p.string().c_str());
  write_synth_model(sp.options, p.string());  // tmp + rename: a concurrent first use never sees a partial file
  return p.string();
}

}  // namespace repro
