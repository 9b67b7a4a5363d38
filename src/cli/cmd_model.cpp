// `repro-audit model info FILE` and `repro-audit model synth --out FILE`: inspect a model file, and
// write a seeded synthetic one (bit-identical for the same options on every machine).
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "repro/common/error.hpp"
#include "repro/model/model.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"

namespace repro::cli {

namespace {

struct ModelInfoOptions {
  std::string file, tokenizer, chat_template;
  bool json = false;
};

struct ModelSynthOptions {
  std::string out;
  SynthOptions synth;
  bool untied = false;
};

int run_model_info(const ModelInfoOptions& o) {
  EngineFlags ef;
  ef.tokenizer = o.tokenizer;
  ef.chat_template = o.chat_template;
  auto m = ef.load(o.file);
  const ModelConfig& c = m->config;
  const ChatTemplate& ct = m->chat_template;
  std::string ct_line = ct.name == "unknown" ? "cannot be interpreted (" + ct.problem + "); messages need --chat-template"
                        : ct.name == "jinja" ? "Jinja, interpreted"
                                             : ct.name + " (built-in format)";
  ct_line += " (" + ct.origin + (ct.sha256.empty() ? "" : ", sha256 " + ct.sha256.substr(0, 16)) + ")";
  const Tokenizer& tok = *m->tokenizer;
  // The end-of-generation set, and the tokenizer settings a missing key left to their defaults.
  nlohmann::json eog = nlohmann::json::array();
  std::string eog_line;
  for (int id : tok.eog()) {
    eog.push_back({{"id", id}, {"text", tok.token_text(id)}});
    eog_line += fmt::format("{}{} {}", eog_line.empty() ? "" : ", ", id, printable(tok.token_text(id)));
  }
  if (eog_line.empty()) eog_line = tok.eos() >= 0 ? fmt::format("{} (EOS)", tok.eos()) : "none";
  auto defaulted = [&](const char* key) {
    for (const auto& k : tok.defaulted())
      if (k == key) return true;
    return false;
  };
  auto setting = [&](const char* key, const std::string& value) {
    return defaulted(key) ? value + " (defaulted for " + tok.defaults_for() + "; the file has no key)" : value;
  };
  if (o.json) {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [k, v] : m->tensor_types) types[k] = v;
    nlohmann::json j = {
        {"path", m->path},
        {"format", m->format},
        {"sha256", m->file_sha256},
        {"architecture", c.arch},
        {"dim", c.dim},
        {"hidden_dim", c.hidden_dim},
        {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"head_dim", c.head_dim()},
        {"vocab_size", c.vocab_size},
        {"context_length", c.context_length},
        {"rope_dim", c.rope_dim},
        {"rope_theta", c.rope_theta},
        {"rope_type", c.rope_neox ? "neox" : "normal"},
        {"rope_freq_scale", c.rope_freq_scale},
        {"rope_freq_factors", !m->rope_freqs.empty()},
        {"rms_eps", c.rms_eps},
        {"tied_output", m->output.empty()},
        {"tensor_types", types},
        {"tokenizer",
         {{"kind", tok.kind()},
          {"vocab_size", tok.vocab_size()},
          {"bos", tok.bos()},
          {"eos", tok.eos()},
          {"add_bos", tok.adds_bos()},
          {"add_eos", tok.adds_eos()},
          {"eog", eog},
          {"defaulted", tok.defaulted()},
          {"defaults_for", tok.defaults_for()},
          {"normalizer", tok.normalizer().empty() ? "none" : tok.normalizer()},
          {"normalizer_origin", tok.normalizer_origin()}}},
        {"n_params", m->n_params},
        {"memory", {{"mapped_bytes", m->mapped_bytes}, {"owned_bytes", m->owned_bytes},
                    {"total_bytes", m->mapped_bytes + m->owned_bytes}}},
        {"chat_template", {{"name", ct.name}, {"origin", ct.origin}}},
    };
    if (c.is_moe())
      j["experts"] = {{"count", c.n_experts},
                      {"used", c.n_experts_used},
                      {"hidden_dim", c.expert_hidden_dim},
                      {"shared_hidden_dim", c.shared_hidden_dim},
                      {"gating", c.gating == MoeGating::Softmax ? "softmax" : "sigmoid"},
                      {"norm_topk", c.norm_topk}};
    if (!ct.sha256.empty()) j["chat_template"]["sha256"] = ct.sha256;
    if (ct.name == "unknown") j["chat_template"]["problem"] = ct.problem;
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));  // invalid UTF-8 -> U+FFFD
    return kExitOk;
  }
  std::string types;
  for (const auto& [k, v] : m->tensor_types) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", k, v);
  fmt::print("file:            {}\n", m->path);
  fmt::print("format:          {}\n", m->format);
  fmt::print("sha256:          {}\n", m->file_sha256);
  fmt::print("architecture:    {}\n", c.arch);
  fmt::print("dim:             {}\n", c.dim);
  fmt::print("hidden_dim:      {}\n", c.hidden_dim);
  fmt::print("layers:          {}\n", c.n_layers);
  if (c.is_moe())
    fmt::print("experts:         {} per layer, {} per token ({} wide; {} gating, top-k weights {}){}\n", c.n_experts,
               c.n_experts_used, c.expert_hidden_dim, c.gating == MoeGating::Softmax ? "softmax" : "sigmoid",
               c.norm_topk ? "normalised" : "as gated",
               c.shared_hidden_dim > 0 ? fmt::format(", shared expert {} wide", c.shared_hidden_dim) : "");
  fmt::print("heads:           {} (kv heads {}, head size {})\n", c.n_heads, c.n_kv_heads, c.head_dim());
  fmt::print("vocab:           {}\n", c.vocab_size);
  fmt::print("context_length:  {}\n", c.context_length);
  fmt::print("rope:            {}, theta {}, {} dims per head{}{}\n", c.rope_neox ? "neox" : "normal", c.rope_theta,
             c.rope_dim, c.rope_freq_scale != 1.0f ? fmt::format(", linear scale {}", c.rope_freq_scale) : "",
             m->rope_freqs.empty() ? "" : ", frequency factors (rope_freqs)");
  fmt::print("rms_eps:         {}\n", c.rms_eps);
  fmt::print("output:          {}\n", m->output.empty() ? "tied to token_embd" : "separate");
  fmt::print("tensor types:    {}\n", types);
  fmt::print("tokenizer:       {}, {} tokens, bos {}, eos {}\n", tok.kind(), tok.vocab_size(), tok.bos(), tok.eos());
  if (defaulted("bos_token_id")) fmt::print("bos_token_id:    {}\n", setting("bos_token_id", std::to_string(tok.bos())));
  if (defaulted("eos_token_id")) fmt::print("eos_token_id:    {}\n", setting("eos_token_id", std::to_string(tok.eos())));
  fmt::print("add_bos_token:   {}\n", setting("add_bos_token", tok.adds_bos() ? "true" : "false"));
  fmt::print("add_eos_token:   {}\n", setting("add_eos_token", tok.adds_eos() ? "true" : "false"));
  fmt::print("eog tokens:      {}\n", eog_line);
  fmt::print("normalizer:      {}{}\n", tok.normalizer().empty() ? "none" : tok.normalizer() == "nfc" ? "NFC" : tok.normalizer(),
             tok.normalizer_origin().empty() ? "" : " (" + tok.normalizer_origin() + ")");
  fmt::print("parameters:      {}\n", m->n_params);
  fmt::print("weights memory:  {:.1f} MiB in memory: {:.1f} MiB mapped from the file in their stored types, {:.1f} MiB owned f32\n",
             (m->mapped_bytes + m->owned_bytes) / 1048576.0, m->mapped_bytes / 1048576.0, m->owned_bytes / 1048576.0);
  fmt::print("chat template:   {}\n", ct_line);
  return kExitOk;
}

int run_model_synth(const ModelSynthOptions& o) {
  SynthOptions s = o.synth;
  s.tied = !o.untied;
  std::string bytes = synth_model(s);
  write_file_atomic(o.out, bytes);
  if (o.out != "-")
    fmt::print(stderr, "wrote {} ({} bytes, sha256 {})\n", o.out, bytes.size(), sha256_hex(bytes));
  return kExitOk;
}

}  // namespace

void setup_model(CLI::App& parent, Runner& runner) {
  auto* sub = parent.add_subcommand("model", "Inspect model files and write seeded synthetic models");
  sub->require_subcommand(1);

  auto info_opts = std::make_shared<ModelInfoOptions>();
  auto* info = sub->add_subcommand(
      "info", "Architecture, hyper-parameters, tensor types, tokenizer, parameter count and SHA-256 of a model file");
  info->add_option("file", info_opts->file, "GGUF (v2/v3: llama, qwen2, qwen3, qwen2moe, qwen3moe) or llama2.c .bin checkpoint")->required();
  info->add_option("--tokenizer", info_opts->tokenizer,
                   "llama2.c tokenizer .bin (default: tok<vocab>.bin or tokenizer.bin beside the checkpoint)");
  info->add_option("--chat-template", info_opts->chat_template,
                   "show this chat template instead of the model's: " + chat_template_names() + ", or a Jinja file");
  info->add_flag("--json", info_opts->json, "print JSON");
  info->callback([&runner, info_opts] { runner = [info_opts] { return run_model_info(*info_opts); }; });

  auto synth_opts = std::make_shared<ModelSynthOptions>();
  SynthOptions& s = synth_opts->synth;
  auto* synth = sub->add_subcommand(
      "synth", "Write a GGUF llama, qwen2, qwen3, qwen2moe or qwen3moe model (--experts: a mixture of experts) with seeded random weights and a small tokenizer "
               "(bit-identical everywhere)");
  synth->add_option("--out", synth_opts->out, "output file ('-' for stdout)")->required();
  synth->add_option("--arch", s.arch, "architecture: " + synth_archs())->capture_default_str();
  synth->add_option("--seed", s.seed, "PRNG seed")->capture_default_str();
  synth->add_option("--dim", s.dim, "embedding length")->capture_default_str();
  synth->add_option("--hidden", s.hidden_dim, "feed-forward length")->capture_default_str();
  synth->add_option("--layers", s.n_layers, "number of blocks")->capture_default_str();
  synth->add_option("--heads", s.n_heads, "attention heads")->capture_default_str();
  synth->add_option("--kv-heads", s.n_kv_heads, "KV heads (GQA)")->capture_default_str();
  synth->add_option("--head-dim", s.head_dim, "head size (0: dim / heads; written as attention.key_length)")
      ->capture_default_str();
  synth->add_option("--vocab", s.vocab_size, "vocabulary size (at least " + std::to_string(synth_min_vocab()) + ")")
      ->capture_default_str();
  synth->add_option("--context", s.context_length, "context length")->capture_default_str();
  synth->add_option("--type", s.type, "weight matrix type: " + synth_types())->capture_default_str();
  synth->add_option("--chat-template", s.chat_template,
                    "write a tokenizer.chat_template and its special tokens: chatml, llama3, llama3.1, mistral, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, llama2");
  synth->add_flag("--rope-freqs", s.rope_freqs, "llama: write a Llama 3.1-style rope_freqs tensor");
  synth->add_option("--normalizer", s.normalizer,
                    "write the key repro.tokenizer.normalizer: nfc | none (text normalized before the split, as "
                    "`model info` shows; default: no key, the pre-tokenizer decides)");
  synth->add_option("--experts", s.n_experts,
                    "experts per layer (a mixture of experts: --arch llama (Mixtral), qwen2moe, qwen3moe; 0: dense)")
      ->capture_default_str();
  synth->add_option("--experts-used", s.n_experts_used, "experts each token is routed to (top-k), 1..--experts")
      ->capture_default_str();
  synth->add_flag("--untied", synth_opts->untied, "store a separate output.weight instead of tying it to token_embd");
  synth->callback([&runner, synth_opts] { runner = [synth_opts] { return run_model_synth(*synth_opts); }; });
}

}  // namespace repro::cli
