// `repro-audit bench`: what batch invariance costs in throughput on this machine. For each model,
// thread count and batch size it decodes a real batch (the probe "Once upon a time" in the middle
// of filler prompts, every sequence greedy for --max-tokens tokens, EOS ignored so the batch stays
// full) in both modes, side by side in the same run, and prints generated tokens/s per mode and
// the ratio batch-invariant / default. It validates first: both modes must produce the tokens, and
// the batch-invariant probe must be bit-identical (tokens and logits SHA-256) at every batch size
// and thread count; the default mode's divergence is reported, not asserted.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "repro/audit/batch_context.hpp"
#include "repro/engine/engine.hpp"
#include "repro/common/error.hpp"
#include "repro/kernels/kernels.hpp"
#include "repro/model/model.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"

namespace repro::cli {

namespace {

struct BenchOptions {
  EngineFlags engine;  // --model (repeatable) --tokenizer --device --threads (a list) --precision
  std::string batch_sizes = "1,8,32,64";
  int max_tokens = 64;
  int repeats = 3;
  double min_time = 0.5;
  std::string prompt = "Once upon a time";
  std::string json;  // optional JSON output file ('-' = stdout)
};

constexpr const char* kSynth100m = "synth:100m";

std::vector<int> parse_int_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  for (const std::string& part : split(s, ',')) {
    std::string t = trim(part);
    char* end = nullptr;
    long v = std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || v < 1 || v > 4096)
      throw UsageError(std::string(flag) + " '" + s + "': expected a comma-separated list of integers in 1..4096, e.g. 1,8,32");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError(std::string(flag) + " is empty: give at least one value, e.g. 1,8");
  return out;
}


// The ~100M-parameter synthetic Llama (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000),
// written once into the cache directory (bit-identical everywhere for the same options).
std::string synth_100m_path() {
  SynthOptions o;
  o.seed = 1;
  o.dim = 768;
  o.hidden_dim = 2048;
  o.n_layers = 12;
  o.n_heads = 12;
  o.n_kv_heads = 12;
  o.vocab_size = 32000;
  o.context_length = 1024;
  o.type = "f16";
  std::filesystem::path dir = cache_dir();
  std::filesystem::path p = dir / "bench-synth-100m-v1-seed1.gguf";
  std::error_code ec;
  if (std::filesystem::exists(p, ec)) return p.string();
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create the cache directory '" + dir.string() + "': " + ec.message() +
                     "; set REPRO_AUDIT_CACHE to a writable directory or pass --model");
  fmt::print(stderr, "bench: writing the synthetic ~100M model to {} (once)\n", p.string());
  write_synth_model(o, p.string());
  return p.string();
}

struct Measure {
  double tok_s = 0;
  int64_t tokens = 0;
  std::vector<int> probe_tokens;
  std::string probe_sha;
};

// One batch: the probe at row batch/2 among batch-1 fillers, all max_tokens long.
std::vector<GenRequest> make_batch(const Model& model, const std::string& probe, int batch, int max_tokens) {
  const auto& pool = filler_pool();
  std::vector<GenRequest> reqs(batch);
  for (int i = 0; i < batch; ++i) {
    const std::string& text = i == batch / 2 ? probe : pool[(static_cast<size_t>(i) * 7 + 3) % pool.size()];
    reqs[i].prompt = model.tokenizer->encode(text, true);
    reqs[i].params.max_tokens = max_tokens;
    reqs[i].params.stop_at_eos = false;
  }
  return reqs;
}

Measure measure(const Model& model, Mode mode, int threads, const std::vector<GenRequest>& reqs,
                const BenchOptions& o) {
  Engine engine(model, EngineOptions{mode, threads, o.engine.device_value(), o.engine.precision_value()});
  Measure m;
  double total = 0;
  for (int rep = 0; rep < std::max(1, o.repeats); ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<GenResult> res = engine.generate(reqs);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t tokens = 0;
    for (const auto& r : res) tokens += static_cast<int64_t>(r.tokens.size());
    const GenResult& probe = res[reqs.size() / 2];
    if (rep == 0) {
      m.tokens = tokens;
      m.probe_tokens = probe.tokens;
      m.probe_sha = probe.logits_sha256;
    } else if (probe.tokens != m.probe_tokens || probe.logits_sha256 != m.probe_sha) {
      throw BackendError(std::string("bench: the ") + mode_name(mode) +
                         " engine gave different bits for the same batch on a rerun; the engine is not deterministic");
    }
    m.tok_s = std::max(m.tok_s, s > 0 ? static_cast<double>(tokens) / s : 0.0);
    total += s;
    if (total >= o.min_time) break;
  }
  return m;
}

int run_bench(const BenchOptions& o) {
  const std::vector<int> batches = parse_int_list(o.batch_sizes, "--batch-sizes");
  const std::vector<int> threads = o.engine.thread_counts();
  const Device device = o.engine.device_value();
  const Precision precision = o.engine.precision_value();
  if (o.max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  if (o.repeats < 1) throw UsageError("--repeats must be at least 1");

  std::vector<std::string> models = o.engine.models;
  if (models.empty()) {
    models.push_back(default_model_path());  // the embedded stories260K
    models.push_back(kSynth100m);
  }

  const char* core = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("repro-audit bench: CPU AVX2+FMA {}, OPENBLAS_CORETYPE={}, max-tokens {}, best of up to {} runs\n",
             kernels::cpu_has_avx2_fma() ? "yes" : "no", core ? core : "(unset)", o.max_tokens, o.repeats);
  // Each op table says what it runs (validates the device before any model is loaded).
  nlohmann::json tables = nlohmann::json::array();
  for (Mode m : {Mode::Default, Mode::BatchInvariant}) {
    const kernels::OpsInfo info = kernels::make_ops(device, m, threads.front())->describe();
    fmt::print("  {}: {}, {}, precision {}\n", info.name, info.isa, info.library, precision_name(precision));
    tables.push_back(to_json(info));
  }
  nlohmann::json jout = {{"max_tokens", o.max_tokens},
                         {"avx2_fma", kernels::cpu_has_avx2_fma()},
                         {"openblas_coretype", core ? core : ""},
                         {"device", device_name(device)},
                         {"precision", precision_name(precision)},
                         {"op_tables", tables},
                         {"rows", nlohmann::json::array()}};
  bool all_ok = true;
  for (const std::string& spec : models) {
    const std::string path = spec == kSynth100m ? synth_100m_path() : spec;
    auto model = load_model(path, o.engine.tokenizer);
    const ModelConfig& c = model->config;
    const std::string name = std::filesystem::path(path).filename().string();
    const int probe_len = static_cast<int>(model->tokenizer->encode(o.prompt, true).size());
    int max_tokens = o.max_tokens;
    int longest_prompt = probe_len;
    for (const auto& f : filler_pool())
      longest_prompt = std::max(longest_prompt, static_cast<int>(model->tokenizer->encode(f, true).size()));
    if (longest_prompt + max_tokens > c.context_length) {
      max_tokens = std::max(1, c.context_length - longest_prompt);
      fmt::print(stderr, "bench: {}: --max-tokens lowered to {} to fit the context length {}\n", name, max_tokens,
                 c.context_length);
    }
    fmt::print("\nmodel {} (dim {}, layers {}, heads {}/{}, hidden {}, vocab {})\n", name, c.dim, c.n_layers,
               c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size);
    fmt::print("{:>7} {:>6} {:>16} {:>18} {:>12}  {}\n", "threads", "batch", "default tok/s", "invariant tok/s",
               "inv/default", "default probe vs batch 1");
    std::vector<int> ref_tokens;
    std::string ref_sha;
    bool inv_ok = true;
    for (int t : threads) {
      std::string default_sha1;  // default probe at batch 1 for this thread count
      for (int b : batches) {
        const auto reqs = make_batch(*model, o.prompt, b, max_tokens);
        Measure d = measure(*model, Mode::Default, t, reqs, o);
        Measure inv = measure(*model, Mode::BatchInvariant, t, reqs, o);
        if (static_cast<int>(d.probe_tokens.size()) != max_tokens || static_cast<int>(inv.probe_tokens.size()) != max_tokens)
          throw BackendError("bench: " + name + ": a mode produced fewer tokens than --max-tokens");
        if (ref_sha.empty()) {
          ref_tokens = inv.probe_tokens;
          ref_sha = inv.probe_sha;
        }
        const bool same = inv.probe_tokens == ref_tokens && inv.probe_sha == ref_sha;
        inv_ok = inv_ok && same;
        if (default_sha1.empty() && b == 1) default_sha1 = d.probe_sha;
        std::string dnote = default_sha1.empty() || b == 1 ? "-" : d.probe_sha == default_sha1 ? "same bits" : "differs";
        fmt::print("{:>7} {:>6} {:>16.1f} {:>18.1f} {:>12.2f}  {}{}\n", t, b, d.tok_s, inv.tok_s,
                   d.tok_s > 0 ? inv.tok_s / d.tok_s : 0.0, dnote, same ? "" : "  INVARIANT PROBE DIFFERS");
        std::fflush(stdout);
        jout["rows"].push_back({{"model", name},
                                {"threads", t},
                                {"batch_size", b},
                                {"default_tokens_per_s", d.tok_s},
                                {"invariant_tokens_per_s", inv.tok_s},
                                {"ratio", d.tok_s > 0 ? inv.tok_s / d.tok_s : 0.0},
                                {"invariant_probe_identical", same},
                                {"default_probe_same_as_batch1", b == 1 || d.probe_sha == default_sha1}});
      }
    }
    fmt::print("validation: batch-invariant probe {} across batch sizes {} and threads {} (logits sha256 {}...)\n",
               inv_ok ? "bit-identical" : "NOT identical", o.batch_sizes, o.engine.threads, ref_sha.substr(0, 16));
    all_ok = all_ok && inv_ok;
  }
  jout["invariant_validated"] = all_ok;
  if (!o.json.empty()) write_file_atomic(o.json, jout.dump(2) + "\n");
  if (!all_ok) {
    fmt::print(stderr, "error: batch-invariant mode gave different bits across batch sizes or threads\n");
    return kExitBackend;
  }
  return kExitOk;
}

}  // namespace

void setup_bench(CLI::App& parent, Runner& runner) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = parent.add_subcommand(
      "bench", "Tokens/s of default vs batch-invariant mode per batch size and thread count (validated first)");
  EngineFlagSpec spec;
  spec.model_repeatable = true;
  spec.mode = false;  // both modes, side by side
  spec.threads_list = true;
  spec.model_help =
      "Model file (repeatable; 'synth:100m' = the synthesized ~100M model; default: the embedded "
      "stories260K and synth:100m)";
  o->engine.threads = "1,2";
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--batch-sizes", o->batch_sizes, "Comma-separated batch sizes")->capture_default_str();
  sub->add_option("--max-tokens", o->max_tokens, "Tokens each sequence generates")->capture_default_str();
  sub->add_option("--repeats", o->repeats, "Best of up to this many runs per cell")->capture_default_str();
  sub->add_option("--min-time", o->min_time, "Stop repeating a cell after this many seconds")->capture_default_str();
  sub->add_option("--prompt", o->prompt, "Probe prompt")->capture_default_str();
  sub->add_option("--json", o->json, "Also write the table as JSON to this file ('-' = stdout)");
  sub->callback([o, &runner] { runner = [o] { return run_bench(*o); }; });
}

}  // namespace repro::cli
