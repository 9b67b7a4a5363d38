// repro::load_model: GGUF (v2/v3, architectures llama (dense or with experts), qwen2, qwen3, qwen2moe, qwen3moe) and llama2.c legacy checkpoints, into the
// Model of include/repro/model.hpp (GGUF matrices stay in their stored type, memory-mapped). The format is chosen by the file's magic bytes, not by its
// extension. Every hyper-parameter is bounded and every tensor shape is checked against the config
// before any weight is copied.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "repro/common/mapped_file.hpp"
#include "repro/model/dtype.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/model.hpp"
#include "repro/tokenizer/tokenizer.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

static_assert(std::endian::native == std::endian::little, "model files are little-endian; so must the host be");

// Upper bounds on hyper-parameters. They are far above any Llama model and keep a forged header
// from driving huge allocations (weights are also bounded by the file size; the KV cache is not).
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxContext = 1 << 22;
constexpr int64_t kMaxExperts = 1 << 12;

const char* kSupportedFormats =
    "supported: GGUF v2/v3 (architectures llama, qwen2, qwen3, qwen2moe, qwen3moe) and llama2.c legacy .bin "
    "checkpoints";

// The GGUF architectures the forward pass runs, and what each adds to the Llama block.
struct ArchSpec {
  const char* name;
  bool neox;      // RoPE on halves (i, i + n/2) rather than adjacent pairs
  bool qkv_bias;  // attn_q/k/v.bias required (llama: optional, used when present)
  bool qk_norm;   // attn_q_norm / attn_k_norm: RMSNorm of each query and key head before RoPE
  // Mixture of experts: 0 dense only; 1 experts when <arch>.expert_count > 0 (llama: Mixtral);
  // 2 always (expert_count required).
  int moe;
  bool shared_expert;  // ffn_{gate,up,down}_shexp and its sigmoid gate ffn_gate_inp_shexp (qwen2moe)
  bool norm_topk;      // the k selected router weights are divided by their sum
  const char* family;
};
constexpr ArchSpec kArchs[] = {
    {"llama", false, false, false, 1, false, true, "Llama 1/2/3, Mistral, Mixtral, TinyLlama, SmolLM, stories260K"},
    {"qwen2", true, true, false, 0, false, false, "Qwen2, Qwen2.5"},
    {"qwen3", true, false, true, 0, false, false, "Qwen3 dense"},
    {"qwen2moe", true, true, false, 2, true, false, "Qwen1.5-MoE, Qwen2-MoE"},
    {"qwen3moe", true, false, true, 2, false, true, "Qwen3-MoE"},
};
std::string supported_archs() {
  std::string s;
  for (const auto& a : kArchs) s += std::string(s.empty() ? "" : "; ") + a.name + " (" + a.family + ")";
  return s;
}

// Checks the relations between hyper-parameters that the forward pass relies on.
void validate_config(const ModelConfig& c, const std::string& what) {
  auto range = [&](int64_t v, int64_t lo, int64_t hi, const char* name) {
    if (v < lo || v > hi)
      throw UsageError(what + ": " + name + " = " + std::to_string(v) + " is out of range (" + std::to_string(lo) +
                       ".." + std::to_string(hi) + "); the file is corrupt or not a Llama model");
  };
  range(c.dim, 1, kMaxDim, "dim (embedding length)");
  range(c.hidden_dim, 1, kMaxHidden, "hidden_dim (feed-forward length)");
  range(c.n_layers, 1, kMaxLayers, "n_layers (block count)");
  range(c.n_heads, 1, kMaxHeads, "n_heads");
  range(c.n_kv_heads, 1, c.n_heads, "n_kv_heads");
  range(c.vocab_size, 1, kMaxVocab, "vocab_size");
  range(c.context_length, 1, kMaxContext, "context_length");
  // Heads split dim evenly (unless the file gives the head size), and query heads share KV heads
  // in equal groups (GQA).
  if (c.head_size > 0) range(c.head_size, 2, kMaxDim, "head size (attention.key_length)");
  if (c.head_size == 0 && c.dim % c.n_heads != 0)
    throw UsageError(what + ": dim " + std::to_string(c.dim) + " is not a multiple of n_heads " +
                     std::to_string(c.n_heads) + "; the file is corrupt");
  if (c.n_heads % c.n_kv_heads != 0)
    throw UsageError(what + ": n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                     std::to_string(c.n_kv_heads) + "; the file is corrupt");
  // RoPE rotates pairs of dimensions inside each head.
  if (c.rope_dim < 2 || c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim())
    throw UsageError(what + ": rope dimension count " + std::to_string(c.rope_dim) +
                     " must be even and at most the head size " + std::to_string(c.head_dim()));
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    throw UsageError(what + ": rope theta must be a positive number");
  if (!(std::isfinite(c.rope_freq_scale) && c.rope_freq_scale > 0))
    throw UsageError(what + ": rope scaling factor must be a positive number");
  if (!(std::isfinite(c.rms_eps) && c.rms_eps >= 0)) throw UsageError(what + ": RMSNorm epsilon must be >= 0");
}

std::string shape_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// =====================================================================================
// GGUF
// =====================================================================================

class GgufLoader {
 public:
  GgufLoader(const gguf::File& f, const std::string& path, std::shared_ptr<const MappedFile> file = nullptr)
      : f_(f), what_("GGUF file '" + path + "'"), file_(std::move(file)) {}

  const gguf::Value* find(const std::string& key) const { return f_.find(key); }

  // An integer key; `required` keys that are absent are an error naming the key.
  int64_t get_int(const std::string& key, int64_t def, bool required) const {
    const gguf::Value* v = f_.find(key);
    if (!v) {
      if (required)
        throw UsageError(what_ + ": missing metadata key '" + key + "', which architecture " + arch_ + " needs");
      return def;
    }
    int64_t out = 0;
    if (!v->get_int(out))
      throw UsageError(what_ + ": metadata key '" + key + "' has type " + gguf::value_type_name(v->type) +
                       "; expected an integer");
    return out;
  }
  double get_float(const std::string& key, double def) const {
    const gguf::Value* v = f_.find(key);
    if (!v) return def;
    if (v->is_float()) return v->f;
    int64_t i = 0;
    if (v->get_int(i)) return static_cast<double>(i);
    throw UsageError(what_ + ": metadata key '" + key + "' has type " + gguf::value_type_name(v->type) +
                     "; expected a number");
  }
  std::string get_string(const std::string& key, const std::string& def) const {
    const gguf::Value* v = f_.find(key);
    if (!v) return def;
    if (v->type != gguf::ValueType::STRING)
      throw UsageError(what_ + ": metadata key '" + key + "' has type " + gguf::value_type_name(v->type) +
                       "; expected a string");
    return v->str;
  }
  bool get_bool(const std::string& key, bool def) const {
    const gguf::Value* v = f_.find(key);
    if (!v) return def;
    int64_t i = 0;
    if (!v->get_int(i)) throw UsageError(what_ + ": metadata key '" + key + "' must be a bool");
    return i != 0;
  }
  // An array key with `count` elements of the given kind (or absent: nullptr).
  const gguf::Value* get_array(const std::string& key, int64_t count, bool strings) const {
    const gguf::Value* v = f_.find(key);
    if (!v) return nullptr;
    if (v->type != gguf::ValueType::ARRAY || (strings != (v->elem_type == gguf::ValueType::STRING)))
      throw UsageError(what_ + ": metadata key '" + key + "' must be an array of " + (strings ? "strings" : "numbers"));
    if (count >= 0 && v->count != static_cast<uint64_t>(count))
      throw UsageError(what_ + ": metadata key '" + key + "' has " + std::to_string(v->count) +
                       " entries but the model has " + std::to_string(count) + " tokens; the file is corrupt");
    return v;
  }

  const gguf::TensorInfo& tensor(const std::string& name, const std::vector<uint64_t>& ne) const {
    const gguf::TensorInfo* t = f_.tensor(name);
    if (!t)
      throw UsageError(what_ + ": tensor '" + name + "' is missing; architecture " + arch_ + " needs token_embd, "
                       "output_norm and blk.N.{" + needs_ + "}");
    // The forward pass indexes weights by the config; a tensor of another shape would be read out
    // of bounds or silently misinterpreted.
    if (t->ne != ne)
      throw UsageError(what_ + ": tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected " + shape_str(ne) +
                       " from the hyper-parameters; the file is corrupt or not a standard " + arch_ + " model");
    return *t;
  }

  // The tensor, shape [ne[1]][ne[0]]. A matrix stays in its stored type, read in place from the
  // mapped file (no copy; the Tensor keeps the mapping alive); a vector (a norm gain) is
  // dequantized to F32, which the norm kernels read.
  Tensor load(Model& m, const std::string& name, const std::vector<uint64_t>& ne) const {
    const gguf::TensorInfo& t = tensor(name, ne);
    loaded_.insert(name);
    m.tensor_types[gguf::tensor_type_name(t.type)]++;
    m.n_params += static_cast<int64_t>(t.n_elements);
    const int rows = ne.size() > 1 ? static_cast<int>(ne[1]) : 1, cols = static_cast<int>(ne[0]);
    quant::Format qf;
    if (file_ && ne.size() > 1 && gguf::to_quant_format(t.type, qf)) {
      Tensor w;
      w.dtype = qf;
      w.rows = rows;
      w.cols = cols;
      w.data = f_.data(t);
      w.storage = std::shared_ptr<const void>(file_, w.data);
      m.mapped_bytes += static_cast<int64_t>(t.n_bytes);
      return w;
    }
    m.owned_bytes += static_cast<int64_t>(t.n_elements) * 4;
    return Tensor::from_f32(gguf::dequantize(f_, t), rows, cols);
  }

  // A 3-D tensor of n_experts stacked matrices (ne = [cols, rows, n_experts]) as one Tensor per
  // expert, each a view of its contiguous [rows][cols] slice (mapped in place, as load()).
  std::vector<Tensor> load_experts(Model& m, const std::string& name, const std::vector<uint64_t>& ne) const {
    const gguf::TensorInfo& t = tensor(name, ne);
    loaded_.insert(name);
    m.tensor_types[gguf::tensor_type_name(t.type)]++;
    m.n_params += static_cast<int64_t>(t.n_elements);
    const int cols = static_cast<int>(ne[0]), rows = static_cast<int>(ne[1]), n = static_cast<int>(ne[2]);
    std::vector<Tensor> out(static_cast<size_t>(n));
    quant::Format qf;
    if (file_ && gguf::to_quant_format(t.type, qf)) {
      const size_t bytes = quant::row_bytes(qf, cols) * static_cast<size_t>(rows);
      for (int e = 0; e < n; ++e) {
        Tensor& w = out[static_cast<size_t>(e)];
        w.dtype = qf;
        w.rows = rows;
        w.cols = cols;
        w.data = f_.data(t) + static_cast<size_t>(e) * bytes;
        w.storage = std::shared_ptr<const void>(file_, w.data);
      }
      m.mapped_bytes += static_cast<int64_t>(t.n_bytes);
      return out;
    }
    const std::vector<float> all = gguf::dequantize(f_, t);
    const size_t per = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    for (int e = 0; e < n; ++e)
      out[static_cast<size_t>(e)] = Tensor::from_f32(
          std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(e * per),
                             all.begin() + static_cast<std::ptrdiff_t>((e + 1) * per)),
          rows, cols);
    m.owned_bytes += static_cast<int64_t>(t.n_elements) * 4;
    return out;
  }

  const std::string& what() const { return what_; }
  bool loaded(const std::string& name) const { return loaded_.count(name) != 0; }
  // The architecture, and the block tensors it needs, for messages about missing tensors.
  void set_arch(const std::string& arch, const std::string& needs) {
    arch_ = arch;
    needs_ = needs;
  }

 private:
  const gguf::File& f_;
  std::string what_;
  std::string arch_ = "llama";
  std::string needs_ = "attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up";
  std::shared_ptr<const MappedFile> file_;
  mutable std::set<std::string> loaded_;  // names load() has read
};

TokenizerData gguf_tokenizer(const GgufLoader& g, int vocab) {
  TokenizerData d;
  const std::string& what = g.what();
  if (!g.find("tokenizer.ggml.model"))
    throw UsageError(what + ": no tokenizer (metadata key 'tokenizer.ggml.model' is missing); this tool needs the "
                     "tokenizer embedded in the GGUF, as llama.cpp's converters write it");
  d.model = g.get_string("tokenizer.ggml.model", "llama");
  if (d.model != "llama" && d.model != "gpt2")
    throw UsageError(what + ": tokenizer model '" + d.model + "' is not supported; supported: llama (SentencePiece BPE), "
                     "gpt2 (byte-level BPE)");
  d.pre = g.get_string("tokenizer.ggml.pre", "default");
  const gguf::Value* tokens = g.get_array("tokenizer.ggml.tokens", vocab, true);
  if (!tokens) throw UsageError(what + ": metadata key 'tokenizer.ggml.tokens' is missing; the tokenizer needs it");
  d.tokens = tokens->strs;
  if (const gguf::Value* s = g.get_array("tokenizer.ggml.scores", vocab, false)) {
    d.scores.resize(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) {
      double x = 0;
      int64_t xi = 0;
      if (s->float_at(static_cast<uint64_t>(i), x)) {
        d.scores[i] = static_cast<float>(x);
      } else if (s->int_at(static_cast<uint64_t>(i), xi)) {
        d.scores[i] = static_cast<float>(xi);
      } else {
        throw UsageError(what + ": 'tokenizer.ggml.scores' must hold numbers");
      }
    }
  }
  if (const gguf::Value* t = g.get_array("tokenizer.ggml.token_type", vocab, false)) {
    d.types.resize(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) {
      int64_t x = 0;
      if (!t->int_at(static_cast<uint64_t>(i), x) || x < 0 || x > 6)
        throw UsageError(what + ": 'tokenizer.ggml.token_type' entry " + std::to_string(i) +
                         " is not a token type (0..6)");
      d.types[i] = static_cast<int>(x);
    }
  }
  if (const gguf::Value* mg = g.get_array("tokenizer.ggml.merges", -1, true)) d.merges = mg->strs;
  // Special ids: absent or all-ones (llama.cpp's "none", 4294967295) mean "no such token".
  auto special = [&](const std::string& key) {
    int64_t id = g.get_int(key, -1, false);
    if (id == -1 || id == 0xffffffffLL) return -1;
    if (id < 0 || id >= vocab)
      throw UsageError(what + ": '" + key + "' = " + std::to_string(id) + " is not a token id (vocab " +
                       std::to_string(vocab) + "); the file is corrupt");
    return static_cast<int>(id);
  };
  d.bos_id = special("tokenizer.ggml.bos_token_id");
  d.eos_id = special("tokenizer.ggml.eos_token_id");
  d.unk_id = special("tokenizer.ggml.unknown_token_id");
  d.eot_id = special("tokenizer.ggml.eot_token_id");
  d.eom_id = special("tokenizer.ggml.eom_token_id");
  // Absent keys take the defaults of the tokenizer model and pre-tokenizer (tokenizer_defaults).
  const TokenizerDefaults def = tokenizer_defaults(d.model, d.pre);
  d.defaults_for = def.origin;
  auto default_id = [&](const char* key, const char* name, int& id, int value) {
    if (g.find(key) || value < 0 || value >= vocab) return;
    id = value;
    d.defaulted.emplace_back(name);
  };
  default_id("tokenizer.ggml.bos_token_id", "bos_token_id", d.bos_id, def.bos_id);
  default_id("tokenizer.ggml.eos_token_id", "eos_token_id", d.eos_id, def.eos_id);
  auto flag = [&](const char* key, const char* name, bool value) {
    if (g.find(key)) return g.get_bool(key, value);
    d.defaulted.emplace_back(name);
    return value;
  };
  d.add_bos = flag("tokenizer.ggml.add_bos_token", "add_bos_token", def.add_bos);
  d.add_eos = flag("tokenizer.ggml.add_eos_token", "add_eos_token", def.add_eos);
  d.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix", d.model == "llama");
  d.space_is_plain = false;
  // Normalization: the project's key when present, else the pre-tokenizer's (tokenizer_normalizer).
  if (g.find("repro.tokenizer.normalizer")) {
    const std::string n = g.get_string("repro.tokenizer.normalizer", "");
    if (n != "nfc" && n != "none")
      throw UsageError(what + ": 'repro.tokenizer.normalizer' is '" + n + "'; it must be \"nfc\" or \"none\"");
    d.normalizer = n == "nfc" ? "nfc" : "";
    d.normalizer_origin = "key repro.tokenizer.normalizer";
  } else {
    d.normalizer = tokenizer_normalizer(d.model, d.pre);
    d.normalizer_origin = d.model == "gpt2" ? "pre-tokenizer " + d.pre : "tokenizer model " + d.model;
  }
  return d;
}

std::unique_ptr<Model> load_gguf(const std::shared_ptr<const MappedFile>& file) {
  const MappedFile& mf = *file;
  const std::string& path = mf.path();
  gguf::File f = gguf::parse_gguf(mf.data(), mf.size(), path);
  GgufLoader g(f, path, file);
  const std::string& what = g.what();

  // ---- architecture and hyper-parameters ----
  std::string arch = g.get_string("general.architecture", "");
  if (arch.empty())
    throw UsageError(what + ": metadata key 'general.architecture' is missing; supported: " + supported_archs());
  const ArchSpec* spec = nullptr;
  for (const auto& a : kArchs)
    if (arch == a.name) spec = &a;
  if (!spec)
    throw UsageError(what + ": architecture '" + arch + "' is not supported; supported: " + supported_archs());
  {
    std::string needs = "attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up";
    if (spec->qkv_bias) needs += ", attn_q.bias, attn_k.bias, attn_v.bias";
    if (spec->qk_norm) needs += ", attn_q_norm, attn_k_norm";
    g.set_arch(arch, needs);
  }
  auto m = std::make_unique<Model>();
  ModelConfig& c = m->config;
  c.arch = arch;
  c.rope_neox = spec->neox;
  // Every hyper-parameter key is prefixed with the architecture ("qwen2.embedding_length").
  // Read as int64 and range-checked by validate_config before narrowing, so a forged 2^40 does
  // not wrap into a plausible int.
  const std::string pre = arch + ".";
  auto key_int = [&](const char* key, int64_t def, bool required, int64_t hi) {
    int64_t v = g.get_int(pre + key, def, required);
    if (v < 1 || v > hi)
      throw UsageError(what + ": '" + pre + key + "' = " + std::to_string(v) + " is out of range (1.." +
                       std::to_string(hi) + "); the file is corrupt");
    return static_cast<int>(v);
  };
  c.dim = key_int("embedding_length", 0, true, kMaxDim);
  c.hidden_dim = key_int("feed_forward_length", 0, true, kMaxHidden);
  c.n_layers = key_int("block_count", 0, true, kMaxLayers);
  c.n_heads = key_int("attention.head_count", 0, true, kMaxHeads);
  c.n_kv_heads = key_int("attention.head_count_kv", c.n_heads, false, kMaxHeads);
  c.context_length = key_int("context_length", 2048, false, kMaxContext);
  // The head size: attention.key_length when given (Qwen3 heads are wider than dim / n_heads).
  if (g.find(pre + "attention.key_length")) {
    c.head_size = key_int("attention.key_length", 0, true, kMaxDim);
    const int vlen = key_int("attention.value_length", c.head_size, false, kMaxDim);
    if (vlen != c.head_size)
      throw UsageError(what + ": '" + pre + "attention.value_length' (" + std::to_string(vlen) + ") differs from '" +
                       pre + "attention.key_length' (" + std::to_string(c.head_size) +
                       "); heads with different key and value sizes are not supported");
  }
  const int head_default = c.head_size > 0 ? c.head_size : (c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 1);
  c.rope_dim = key_int("rope.dimension_count", head_default, false, kMaxDim);
  c.rope_theta = static_cast<float>(g.get_float(pre + "rope.freq_base", 10000.0));
  c.rms_eps = static_cast<float>(g.get_float(pre + "attention.layer_norm_rms_epsilon", 1e-5));
  // RoPE scaling: none, linear (positions divided by the factor), or Llama 3's per-frequency
  // divisors stored as the rope_freqs tensor. YaRN and LongRoPE change attention itself: refused.
  const std::string scaling = g.get_string(pre + "rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = g.get_float(pre + "rope.scaling.factor", 1.0);
    if (!(factor > 0)) throw UsageError(what + ": '" + pre + "rope.scaling.factor' must be positive");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && !(scaling == "llama3" && f.tensor("rope_freqs.weight"))) {
    throw UsageError(what + ": RoPE scaling '" + scaling + "' ('" + pre +
                     "rope.scaling.type') is not supported; supported: none, linear, and Llama 3's rope_freqs tensor");
  }

  // Mixture of experts: expert_count experts per layer, expert_used_count of them per token.
  const int64_t n_expert = g.get_int(pre + "expert_count", 0, spec->moe == 2);
  if (n_expert != 0 && spec->moe == 0)
    throw UsageError(what + ": '" + pre + "expert_count' = " + std::to_string(n_expert) + ", but architecture " + arch +
                     " has no experts; mixture-of-experts files are llama (Mixtral), qwen2moe or qwen3moe");
  if (n_expert < 0 || n_expert > kMaxExperts || (spec->moe == 2 && n_expert < 1))
    throw UsageError(what + ": '" + pre + "expert_count' = " + std::to_string(n_expert) + " is out of range (1.." +
                     std::to_string(kMaxExperts) + "); the file is corrupt");
  if (n_expert > 0) {
    c.n_experts = static_cast<int>(n_expert);
    const int64_t used = g.get_int(pre + "expert_used_count", 0, true);
    if (used > n_expert)
      throw UsageError(what + ": '" + pre + "expert_used_count' = " + std::to_string(used) + " is larger than '" + pre +
                       "expert_count' = " + std::to_string(n_expert) +
                       "; a token cannot be routed to more experts than the layer has");
    if (used < 1)
      throw UsageError(what + ": '" + pre + "expert_used_count' = " + std::to_string(used) +
                       " is out of range (1..expert_count); the file is corrupt");
    c.n_experts_used = static_cast<int>(used);
    // llama (Mixtral) experts are feed_forward_length wide; qwen2moe/qwen3moe give their own width
    // (without it llama.cpp takes feed_forward_length / expert_used_count).
    c.expert_hidden_dim = arch == "llama" ? c.hidden_dim
                                          : key_int("expert_feed_forward_length", std::max(1, c.hidden_dim / c.n_experts_used),
                                                    false, kMaxHidden);
    if (spec->shared_expert)
      c.shared_hidden_dim = key_int("expert_shared_feed_forward_length", c.hidden_dim, false, kMaxHidden);
    const int64_t gating = g.get_int(pre + "expert_gating_func", 1, false);
    if (gating == 1)
      c.gating = MoeGating::Softmax;
    else if (gating == 2)
      c.gating = MoeGating::Sigmoid;
    else
      throw UsageError(what + ": '" + pre + "expert_gating_func' = " + std::to_string(gating) +
                       " is not a gating function this tool runs; supported: 1 (softmax), 2 (sigmoid)");
    c.norm_topk = g.get_bool(pre + "expert_weights_norm", spec->norm_topk);
    std::string needs = "attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate_inp, ffn_gate_exps, "
                        "ffn_up_exps, ffn_down_exps";
    if (spec->qkv_bias) needs += ", attn_q.bias, attn_k.bias, attn_v.bias";
    if (spec->qk_norm) needs += ", attn_q_norm, attn_k_norm";
    if (spec->shared_expert) needs += ", ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp";
    g.set_arch(arch, needs);
  }

  // Vocabulary size comes from the embedding table (ne = [dim, vocab]).
  const gguf::TensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb) throw UsageError(what + ": tensor 'token_embd.weight' is missing; architecture " + arch + " needs it");
  if (emb->ne.size() != 2 || emb->ne[1] > static_cast<uint64_t>(kMaxVocab))
    throw UsageError(what + ": tensor 'token_embd.weight' has shape " + shape_str(emb->ne) + ", expected [dim, vocab]");
  c.vocab_size = static_cast<int>(emb->ne[1]);
  validate_config(c, what);

  // ---- weights ----
  const uint64_t dim = c.dim, hid = c.hidden_dim, kv = c.kv_dim(), qd = c.q_dim(), voc = c.vocab_size,
                 hd = c.head_dim();
  m->token_embd = g.load(*m, "token_embd.weight", {dim, voc});             // [vocab][dim]
  m->output_norm = g.load(*m, "output_norm.weight", {dim});                // [dim]
  if (f.tensor("output.weight")) m->output = g.load(*m, "output.weight", {dim, voc});  // [vocab][dim]
  if (f.tensor("rope_freqs.weight")) {  // [rope_dim / 2] frequency divisors (Llama 3.1)
    Tensor rf = g.load(*m, "rope_freqs.weight", {static_cast<uint64_t>(c.rope_dim / 2)});
    m->rope_freqs.assign(rf.f32(), rf.f32() + rf.size());
    for (float x : m->rope_freqs)
      if (!(std::isfinite(x) && x > 0))
        throw UsageError(what + ": tensor 'rope_freqs.weight' holds " + std::to_string(x) +
                         "; RoPE frequency factors must be positive numbers");
  }
  m->layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = m->layers[static_cast<size_t>(l)];
    L.attn_norm = g.load(*m, p + "attn_norm.weight", {dim});      // [dim]
    L.wq = g.load(*m, p + "attn_q.weight", {dim, qd});            // [q_dim][dim]
    L.wk = g.load(*m, p + "attn_k.weight", {dim, kv});            // [kv_dim][dim]
    L.wv = g.load(*m, p + "attn_v.weight", {dim, kv});            // [kv_dim][dim]
    L.wo = g.load(*m, p + "attn_output.weight", {qd, dim});       // [dim][q_dim]
    // Biases: required by qwen2, used when present in llama files.
    if (spec->qkv_bias || f.tensor(p + "attn_q.bias")) L.bq = g.load(*m, p + "attn_q.bias", {qd});
    if (spec->qkv_bias || f.tensor(p + "attn_k.bias")) L.bk = g.load(*m, p + "attn_k.bias", {kv});
    if (spec->qkv_bias || f.tensor(p + "attn_v.bias")) L.bv = g.load(*m, p + "attn_v.bias", {kv});
    if (spec->qk_norm) {
      L.q_norm = g.load(*m, p + "attn_q_norm.weight", {hd});      // [head_dim]
      L.k_norm = g.load(*m, p + "attn_k_norm.weight", {hd});      // [head_dim]
    }
    L.ffn_norm = g.load(*m, p + "ffn_norm.weight", {dim});        // [dim]
    if (!c.is_moe()) {
      L.w_gate = g.load(*m, p + "ffn_gate.weight", {dim, hid});   // [hidden][dim]
      L.w_down = g.load(*m, p + "ffn_down.weight", {hid, dim});   // [dim][hidden]
      L.w_up = g.load(*m, p + "ffn_up.weight", {dim, hid});       // [hidden][dim]
      continue;
    }
    const uint64_t ne = c.n_experts, eh = c.expert_hidden_dim, sh = c.shared_hidden_dim;
    L.router = g.load(*m, p + "ffn_gate_inp.weight", {dim, ne});                  // [n_experts][dim]
    L.exp_gate = g.load_experts(*m, p + "ffn_gate_exps.weight", {dim, eh, ne});   // n_experts x [eh][dim]
    L.exp_up = g.load_experts(*m, p + "ffn_up_exps.weight", {dim, eh, ne});       // n_experts x [eh][dim]
    L.exp_down = g.load_experts(*m, p + "ffn_down_exps.weight", {eh, dim, ne});   // n_experts x [dim][eh]
    if (spec->shared_expert) {
      L.shexp_router = g.load(*m, p + "ffn_gate_inp_shexp.weight", {dim});       // [1][dim]
      L.shexp_gate = g.load(*m, p + "ffn_gate_shexp.weight", {dim, sh});         // [sh][dim]
      L.shexp_up = g.load(*m, p + "ffn_up_shexp.weight", {dim, sh});             // [sh][dim]
      L.shexp_down = g.load(*m, p + "ffn_down_shexp.weight", {sh, dim});         // [dim][sh]
    }
  }
  // A tensor the architecture does not use would be silently ignored: name it instead.
  for (const auto& t : f.tensors)
    if (!g.loaded(t.name))
      throw UsageError(what + ": tensor '" + t.name + "' is not part of architecture " + arch +
                       " as this tool runs it (a variant that is not supported, e.g. experts stored one tensor "
                       "per expert, as llama.cpp's old Mixtral files do)");

  // ---- tokenizer ----
  TokenizerData td = gguf_tokenizer(g, c.vocab_size);
  try {
    m->tokenizer = make_tokenizer(td);
  } catch (const UsageError& e) {
    throw UsageError(what + ": tokenizer: " + e.what());
  }
  // ---- chat template: a Jinja program, parsed here and interpreted per prompt (repro/chat/chat.hpp) ----
  const std::string tmpl = g.get_string("tokenizer.chat_template", "");
  if (!tmpl.empty()) m->chat_template = chat_template_from_jinja(tmpl, "GGUF tokenizer.chat_template");
  m->chat_template.eos_token = td.eos_id >= 0 ? td.tokens[static_cast<size_t>(td.eos_id)] : "";
  m->chat_template.bos_token = td.bos_id >= 0 ? td.tokens[static_cast<size_t>(td.bos_id)] : "";
  m->chat_template.tokenizer_adds_bos = m->tokenizer->adds_bos();
  m->format = "GGUF v" + std::to_string(f.version);
  return m;
}

// =====================================================================================
// llama2.c legacy checkpoint
// =====================================================================================
// Header: 7 x int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len); a
// negative vocab_size means the classifier is stored separately at the end. Then float32 arrays:
// token_embedding[vocab][dim], rms_att[L][dim], wq[L][dim][dim], wk[L][kv_dim][dim],
// wv[L][kv_dim][dim], wo[L][dim][dim], rms_ffn[L][dim], w1[L][hidden][dim], w2[L][dim][hidden],
// w3[L][hidden][dim], rms_final[dim], freq_cis_real[seq][head/2], freq_cis_imag[seq][head/2],
// (wcls[vocab][dim] when not shared).

constexpr size_t kL2cHeader = 28;

std::unique_ptr<Model> load_llama2c(const MappedFile& mf, const std::string& tokenizer_path) {
  const std::string& path = mf.path();
  // No magic to go by: the message says how the file was read, so a wrong file is recognisable.
  const std::string what = "model file '" + path + "' (no GGUF magic, read as a llama2.c checkpoint)";
  int32_t h[7];
  std::memcpy(h, mf.data(), sizeof h);
  auto m = std::make_unique<Model>();
  ModelConfig& c = m->config;
  c.arch = "llama";
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  bool shared = h[5] > 0;
  // -INT32_MIN overflows; it is out of range anyway.
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
  c.context_length = h[6];
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.rope_dim = (c.n_heads > 0 && c.dim % c.n_heads == 0) ? c.dim / c.n_heads : 0;
  validate_config(c, what);

  // All factors are bounded by validate_config, so these int64 products cannot overflow.
  const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kv = c.kv_dim(), voc = c.vocab_size;
  const int64_t head = c.head_dim(), seq = c.context_length;
  int64_t n_floats = voc * dim + L * dim + L * dim * dim + 2 * L * kv * dim + L * dim * dim + L * dim +
                     3 * L * hid * dim + dim + seq * head + (shared ? 0 : voc * dim);
  uint64_t expect = kL2cHeader + 4 * static_cast<uint64_t>(n_floats);
  // The weights are read straight from the file, so its size must be exactly what the header says.
  if (expect != mf.size())
    throw UsageError(what + ": the header (dim " + std::to_string(dim) + ", hidden " + std::to_string(hid) +
                     ", layers " + std::to_string(L) + ", heads " + std::to_string(c.n_heads) + "/" +
                     std::to_string(c.n_kv_heads) + ", vocab " + std::to_string(voc) + ", seq_len " +
                     std::to_string(seq) + ") implies " + std::to_string(expect) + " bytes but the file has " +
                     std::to_string(mf.size()) + "; the file is truncated or not a llama2.c legacy (version 0) "
                     "checkpoint; " + kSupportedFormats);

  const uint8_t* p = mf.data() + kL2cHeader;
  // [rows][cols] float32 from the file.
  auto take = [&](int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), p, static_cast<size_t>(n) * 4);
    p += n * 4;
    m->n_params += n;
    m->owned_bytes += n * 4;
    return Tensor::from_f32(std::move(v), static_cast<int>(rows), static_cast<int>(cols));
  };
  m->token_embd = take(voc, dim);
  m->layers.resize(static_cast<size_t>(L));
  // The file groups each weight kind over all layers.
  for (auto& l : m->layers) l.attn_norm = take(1, dim);
  for (auto& l : m->layers) l.wq = take(dim, dim);
  for (auto& l : m->layers) l.wk = take(kv, dim);
  for (auto& l : m->layers) l.wv = take(kv, dim);
  for (auto& l : m->layers) l.wo = take(dim, dim);
  for (auto& l : m->layers) l.ffn_norm = take(1, dim);
  for (auto& l : m->layers) l.w_gate = take(hid, dim);
  for (auto& l : m->layers) l.w_down = take(dim, hid);
  for (auto& l : m->layers) l.w_up = take(hid, dim);
  m->output_norm = take(1, dim);
  p += seq * head * 4;  // freq_cis_real + freq_cis_imag: RoPE tables, recomputed by the engine
  if (!shared) m->output = take(voc, dim);
  m->tensor_types["F32"] = 2 + 9 * L + (shared ? 0 : 1);

  // ---- tokenizer: the given file, else tok<vocab>.bin or tokenizer.bin beside the checkpoint ----
  std::string tok = tokenizer_path;
  if (tok.empty()) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    for (const std::string& name : {"tok" + std::to_string(voc) + ".bin", std::string("tokenizer.bin")}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(dir / name, ec)) {
        tok = (dir / name).string();
        break;
      }
    }
    if (tok.empty())
      throw UsageError(what + ": no tokenizer found (looked for tok" + std::to_string(voc) +
                       ".bin and tokenizer.bin beside it); pass the llama2.c tokenizer file with --tokenizer FILE");
  }
  m->tokenizer = make_tokenizer(read_llama2c_tokenizer(tok, c.vocab_size));
  m->format = "llama2.c";
  return m;
}

}  // namespace

const float* Tensor::f32() const {
  if (dtype != DType::F32)
    throw std::logic_error(std::string("tensor of type ") + dtype_name(dtype) + " read as F32");
  return static_cast<const float*>(data);
}

Tensor Tensor::from_f32(std::vector<float> values, int rows, int cols) {
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  Tensor t;
  t.dtype = DType::F32;
  t.rows = rows;
  t.cols = cols;
  t.data = owned->data();
  t.storage = std::shared_ptr<const void>(owned, owned->data());
  return t;
}

std::unique_ptr<Model> load_model(const std::string& path, const std::string& tokenizer_path) {
  auto file = std::make_shared<const MappedFile>(path);
  const MappedFile& mf = *file;
  std::unique_ptr<Model> m;
  // The format is decided by the magic bytes; the extension is only a hint to people.
  if (mf.size() >= 4 && std::memcmp(mf.data(), "GGUF", 4) == 0) {
    m = load_gguf(file);
  } else if (mf.size() >= 4 && (std::memcmp(mf.data(), "ak42", 4) == 0 || std::memcmp(mf.data(), "24ka", 4) == 0)) {
    throw UsageError("model file '" + path + "' is a llama2.c checkpoint in the newer export format (magic 'ak42'), "
                     "which is not supported; export it with llama2.c export.py --version 0, or convert it to GGUF");
  } else if (mf.size() >= kL2cHeader) {
    // llama2.c legacy files have no magic: the header must describe exactly the file's size.
    m = load_llama2c(mf, tokenizer_path);
  } else {
    throw UsageError("model file '" + path + "' is too small (" + std::to_string(mf.size()) +
                     " bytes) to be a model; " + kSupportedFormats);
  }
  m->path = path;
  m->file_sha256 = sha256_file(path);
  return m;
}

}  // namespace repro
