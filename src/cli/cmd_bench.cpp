// `repro-audit bench`: what batch invariance costs in throughput on this machine, with statistics.
// For each model and thread count it measures, in both modes side by side:
//   decode   per batch size: a real batch (the probe "Once upon a time" in the middle of filler
//            prompts, every sequence greedy for --max-tokens tokens, EOS ignored so the batch stays
//            full) is prefilled in one step, then the generated tokens of the following steps are
//            timed: decode tokens/s = batch * (max_tokens - 1) / decode time.
//   prefill  per prompt length (--prompt-lengths): one sequence's prompt in one forward step,
//            prompt tokens/s = length / time of that step.
// as llama.cpp's batched-bench separates them. Every cell is warmed up (--warmup runs, not counted)
// and measured --repeats times, the two modes interleaved run by run (alternating which goes
// first) so a change of machine load hits both; it prints mean, standard deviation and min-max and
// flags a cell whose coefficient of variation exceeds --noise-cv. It validates first: the
// batch-invariant probe must be bit-identical (tokens and logits SHA-256) at every batch size,
// thread count and run; the default mode's divergence from batch 1 is reported, not asserted.
// Before the cells it measures this machine's ceilings at each thread count (memory bandwidth by a
// STREAM-style triad, compute peak by OpenBLAS sgemm; repro/kernels/ceilings.hpp) and prints every
// cell's mean as a share of the lower of its two ceilings (repro/engine/perf_model.hpp);
// --no-ceilings skips that.
// With --endpoint it measures OpenAI-compatible servers under load instead (bench_endpoint.cpp).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "repro/audit/batch_context.hpp"
#include "repro/engine/engine.hpp"
#include "repro/engine/perf_model.hpp"
#include "repro/common/error.hpp"
#include "repro/kernels/ceilings.hpp"
#include "repro/kernels/backends.hpp"
#include "repro/model/model.hpp"
#include "repro/model/default_model.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"
#include "repro/cli/bench.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"

namespace repro::cli {

Stats summarize(std::vector<double> runs) {
  Stats st;
  st.runs = std::move(runs);
  if (st.runs.empty()) return st;
  double sum = 0;
  for (double v : st.runs) sum += v;
  st.mean = sum / static_cast<double>(st.runs.size());
  double ss = 0;
  for (double v : st.runs) ss += (v - st.mean) * (v - st.mean);
  st.stddev = st.runs.size() > 1 ? std::sqrt(ss / static_cast<double>(st.runs.size() - 1)) : 0.0;
  st.min = *std::min_element(st.runs.begin(), st.runs.end());
  st.max = *std::max_element(st.runs.begin(), st.runs.end());
  st.cv = st.mean > 0 ? st.stddev / st.mean : 0.0;
  return st;
}

nlohmann::json stats_json(const Stats& st, double noise_cv) {
  return {{"mean", st.mean}, {"stddev", st.stddev}, {"min", st.min},         {"max", st.max},
          {"cv", st.cv},     {"runs", st.runs},     {"noisy", st.cv > noise_cv}};
}

std::string stats_cell(const Stats& st, double noise_cv) {
  return fmt::format("{:.1f} ±{:.1f} [{:.1f}-{:.1f}]{}", st.mean, st.stddev, st.min, st.max,
                     st.cv > noise_cv ? "*" : "");
}

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

void BenchRuns::check() const {
  if (repeats < 2) throw UsageError("--repeats must be at least 2 (a spread needs two measurements)");
  if (warmup < 0) throw UsageError("--warmup must be 0 or more");
  if (!(noise_cv > 0)) throw UsageError("--noise-cv must be above 0, e.g. 0.1 for 10%");
}

std::string load_average() {
  std::string s;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f)) s = trim(buf);
    std::fclose(f);
  }
  return s;
}

namespace {

struct BenchOptions : EndpointBenchOptions {
  EngineFlags engine;  // --model (repeatable) --tokenizer --device --threads (a list) --precision
  std::string batch_sizes = "1,8,32,64";
  std::string prompt_lengths = "128,512";
  bool no_prefill = false;
  double min_time = 0;
  bool no_ceilings = false;
  int triad_mib = 256;     // per triad array
  int sgemm_size = 1024;   // n of the n x n x n sgemm
  int ceiling_repeats = 5;
  CLI::App* app = nullptr;
  bool given(const char* flag) const { return app->count(flag) > 0; }
};

constexpr const char* kSynth100m = "synth:100m";



// This machine's ceilings at one thread count.
struct MachineCeiling {
  int threads = 0;
  double gb_per_s = 0, gflop_per_s = 0;
};

// Measures the ceilings at every thread count, prints them, and returns them with their JSON.
std::vector<MachineCeiling> measure_ceilings(const BenchOptions& o, const std::vector<int>& threads,
                                             nlohmann::json& jout) {
  const size_t array_bytes = static_cast<size_t>(o.triad_mib) << 20;
  const auto triad = kernels::measure_triad(threads, array_bytes, o.ceiling_repeats);
  const auto sgemm = kernels::measure_sgemm(threads, o.sgemm_size, o.ceiling_repeats);
  fmt::print("ceilings, best of {} after a warm-up: memory = STREAM-style triad a[i] = b[i] + s*c[i] over 3 x {} MiB "
             "of doubles (24 bytes per element: 2 reads + 1 write; the write-allocate read is not counted), "
             "compute = OpenBLAS sgemm {} x {} x {} (2 n^3 flops)\n",
             o.ceiling_repeats, o.triad_mib, o.sgemm_size, o.sgemm_size, o.sgemm_size);
  std::vector<MachineCeiling> out;
  nlohmann::json per = nlohmann::json::array();
  for (size_t i = 0; i < threads.size(); ++i) {
    const MachineCeiling m{threads[i], triad[i].gb_per_s, sgemm[i].gflop_per_s};
    fmt::print("  {} thread{}: memory {:.1f} GB/s, compute {:.1f} GFLOP/s\n", m.threads, m.threads == 1 ? "" : "s",
               m.gb_per_s, m.gflop_per_s);
    per.push_back({{"threads", m.threads},
                   {"triad_gb_per_s", m.gb_per_s},
                   {"triad_runs", triad[i].runs},
                   {"sgemm_gflop_per_s", m.gflop_per_s},
                   {"sgemm_runs", sgemm[i].runs}});
    out.push_back(m);
  }
  const size_t llc = kernels::last_level_cache_bytes();
  jout["ceilings"] = {{"last_level_cache_bytes", llc},
                      {"triad_array_bytes", array_bytes},
                      {"triad_bytes_per_element", 24},
                      {"sgemm_size", o.sgemm_size},
                      {"repeats", o.ceiling_repeats},
                      {"per_threads", per}};
  return out;
}

const MachineCeiling* ceiling_for(const std::vector<MachineCeiling>& cs, int threads) {
  for (const auto& c : cs)
    if (c.threads == threads) return &c;
  return nullptr;
}

// "412.3 mem" and "41%/38%" (default / batch-invariant share of the ceiling).
std::string ceiling_cell(const Ceiling& c) { return fmt::format("{:.1f} {}", c.tokens_per_s, c.kind); }
std::string share_cell(double d, double inv) { return fmt::format("{:.0f}%/{:.0f}%", d * 100, inv * 100); }

// The model's numbers and the ceiling of one row, for its JSON.
void add_ceiling_json(nlohmann::json& row, const StepCost& cost, const Ceiling& c, double d_mean, double inv_mean) {
  row["weight_bytes_per_step"] = cost.weight_bytes;
  row["kv_bytes_per_step"] = cost.kv_bytes;
  row["flops_per_token"] = cost.flops_per_token;
  row["memory_ceiling_tokens_per_s"] = c.memory_tokens_per_s;
  row["compute_ceiling_tokens_per_s"] = c.compute_tokens_per_s;
  row["ceiling_tokens_per_s"] = c.tokens_per_s;
  row["ceiling_kind"] = c.kind;
  row["default_share_of_ceiling"] = c.tokens_per_s > 0 ? d_mean / c.tokens_per_s : 0.0;
  row["invariant_share_of_ceiling"] = c.tokens_per_s > 0 ? inv_mean / c.tokens_per_s : 0.0;
}

// One batch: the probe at row batch/2 among batch-1 fillers, all max_tokens long.
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

// A prompt of exactly `length` tokens: BOS, then the filler texts' tokens, cycled.
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

// One decode run: the batch joins, its prefill step is not timed, the remaining steps are.
struct DecodeRun {
  double tok_s = 0;
  std::vector<int> probe_tokens;
  std::string probe_sha;
};

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

// One prefill run: a single sequence's prompt in one forward step (its first token included).
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

// Runs measure(mode) warmup times per mode (not counted), then `repeats` times per mode with the
// modes interleaved, alternating which goes first; stops early (at least 3 runs) past min_time.
template <typename F>
void interleaved(const BenchOptions& o, F&& measure) {
  for (int w = 0; w < o.warmup; ++w)
    for (int m = 0; m < 2; ++m) measure(m, false);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int rep = 0; rep < o.repeats; ++rep) {
    const int first = rep % 2;
    measure(first, true);
    measure(1 - first, true);
    if (o.min_time > 0 && rep + 1 >= 3 && std::chrono::duration<double>(Clock::now() - t0).count() >= o.min_time)
      break;
  }
}

// With --endpoint: the endpoint load bench, after refusing the flags that only set up the local
// engine (and, without it, the flags that only mean something for endpoints).
int run_bench_remote(const BenchOptions& o) {
  for (const char* f : {"--model", "--tokenizer", "--device", "--threads", "--precision", "--batch-sizes",
                        "--prompt-lengths", "--no-prefill", "--min-time", "--no-ceilings", "--triad-mib",
                        "--sgemm-size"})
    if (o.given(f))
      throw UsageError(std::string(f) + " sets up the local engine; drop it with --endpoint (the server under load "
                       "has its own model and threads)");
  return run_bench_endpoints(o);
}

int run_bench(const BenchOptions& o) {
  if (!o.remote.endpoints.empty()) return run_bench_remote(o);
  for (const char* f : {"--concurrency", "--requests", "--api-model", "--api", "--provider", "--api-key-env",
                        "--api-key-file", "--ca-cert", "--extra-body", "--stream", "--max-retries", "--timeout",
                        "--verbose"})
    if (o.given(f))
      throw UsageError(std::string(f) + " is for a server under load: give --endpoint URL, or drop it to bench the "
                       "local engine");
  const std::vector<int> batches = parse_int_list(o.batch_sizes, "--batch-sizes");
  const std::vector<int> lengths = o.no_prefill ? std::vector<int>{} : parse_int_list(o.prompt_lengths, "--prompt-lengths");
  const std::vector<int> threads = o.engine.thread_counts();
  const Device device = o.engine.device_value();
  const Precision precision = o.engine.precision_value();
  if (o.max_tokens < 2) throw UsageError("--max-tokens must be at least 2 (the first token comes from the prefill step)");
  o.check();
  if (o.triad_mib < 1 || o.triad_mib > 16384)
    throw UsageError("--triad-mib must be in 1..16384 (MiB per array; well above the last-level cache, e.g. 256)");
  if (o.sgemm_size < 16 || o.sgemm_size > 8192) throw UsageError("--sgemm-size must be in 16..8192, e.g. 1024");

  std::vector<std::string> models = o.engine.models;
  if (models.empty()) {
    models.push_back(default_model_path());  // the embedded stories260K
    models.push_back(kSynth100m);
  }

  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const std::string load_start = load_average();
  fmt::print("repro-audit bench: CPU AVX2+FMA {}, OPENBLAS_CORETYPE={}, max-tokens {}, warm-up {}, {} runs per "
             "cell (modes interleaved), load average {}\n",
             kernels::cpu_has_avx2_fma() ? "yes" : "no", core ? core : "(unset)", o.max_tokens, o.warmup, o.repeats,
             load_start.empty() ? "unknown" : load_start);
  // Each op table says what it runs (validates the device before any model is loaded).
  nlohmann::json tables = nlohmann::json::array();
  const Mode modes[2] = {Mode::Default, Mode::BatchInvariant};
  for (Mode m : modes) {
    const kernels::OpsInfo info = kernels::make_ops(device, m, threads.front())->describe();
    fmt::print("  {}: {}, {}, precision {}\n", info.name, info.isa, info.library, precision_name(precision));
    tables.push_back(to_json(info));
  }
  nlohmann::json jout = {{"max_tokens", o.max_tokens},
                         {"warmup", o.warmup},
                         {"repeats", o.repeats},
                         {"noise_cv", o.noise_cv},
                         {"avx2_fma", kernels::cpu_has_avx2_fma()},
                         {"openblas_coretype", core ? core : ""},
                         {"device", device_name(device)},
                         {"precision", precision_name(precision)},
                         {"load_average_start", load_start},
                         {"op_tables", tables},
                         {"rows", nlohmann::json::array()},
                         {"prefill_rows", nlohmann::json::array()}};
  // The ceilings are this CPU's: a cell on another device gets none.
  std::vector<MachineCeiling> ceilings;
  if (!o.no_ceilings && device == Device::Cpu) ceilings = measure_ceilings(o, threads, jout);
  else if (!o.no_ceilings)
    fmt::print("ceilings: not measured (they are the CPU's; --device {})\n", device_name(device));
  bool all_ok = true, any_noisy = false;
  for (const std::string& spec : models) {
    const std::string path = resolve_model_spec(spec);
    auto model = load_model(path, o.engine.tokenizer);
    const ModelConfig& c = model->config;
    const std::string name = std::filesystem::path(path).filename().string();
    const int probe_len = static_cast<int>(model->tokenizer->encode(o.prompt, true).size());
    const ModelCosts costs = model_costs(*model);
    int max_tokens = o.max_tokens;
    int longest_prompt = probe_len;
    for (const auto& f : filler_pool())
      longest_prompt = std::max(longest_prompt, static_cast<int>(model->tokenizer->encode(f, true).size()));
    if (longest_prompt + max_tokens > c.context_length) {
      max_tokens = std::max(2, c.context_length - longest_prompt);
      fmt::print(stderr, "bench: {}: --max-tokens lowered to {} to fit the context length {}\n", name, max_tokens,
                 c.context_length);
    }
    fmt::print("\nmodel {} (dim {}, layers {}, heads {}/{}, hidden {}, vocab {}, context {})\n", name, c.dim,
               c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size, c.context_length);
    std::vector<int> ref_tokens;
    std::string ref_sha;
    bool inv_ok = true;
    if (!ceilings.empty()) {
      const size_t llc = kernels::last_level_cache_bytes();
      fmt::print("performance model: {:.1f} MiB of matmul weights read per step, {:.1f} MFLOP per token in the "
                 "matmuls, KV cache {} bytes per position{}\n",
                 static_cast<double>(costs.weight_bytes()) / (1 << 20),
                 2.0 * static_cast<double>(costs.layer_matmul_params + costs.classifier_params) / 1e6,
                 costs.kv_bytes_per_position,
                 llc > 0 && static_cast<size_t>(costs.weight_bytes()) < llc
                     ? fmt::format(" (smaller than the {} MiB last-level cache: DRAM bandwidth need not bound "
                                   "this model, a share above 100% can happen)",
                                   llc >> 20)
                     : "");
    }
    for (int t : threads) {
      const MachineCeiling* mc = ceiling_for(ceilings, t);
      std::unique_ptr<Engine> engines[2];
      for (int m = 0; m < 2; ++m)
        engines[m] = std::make_unique<Engine>(*model, EngineOptions{modes[m], t, device, precision});

      // ---- decode ----
      fmt::print("decode, {} thread{}: generated tokens/s after the prefill step, mean ±stddev [min-max]\n", t,
                 t == 1 ? "" : "s");
      fmt::print("{:>6} {:>32} {:>32} {:>12}  {}{}\n", "batch", "default", "batch-invariant", "inv/default",
                 mc ? fmt::format("{:>16} {:>13}  ", "ceiling tok/s", "share d/inv") : "",
                 "default probe vs batch 1");
      std::string default_sha1;  // default probe at batch 1 for this thread count
      for (int b : batches) {
        const auto reqs = make_batch(*model, o.prompt, b, max_tokens);
        std::vector<double> runs[2];
        DecodeRun first[2];
        bool have[2] = {false, false};
        interleaved(o, [&](int m, bool counted) {
          DecodeRun r = decode_once(*engines[m], reqs);
          if (static_cast<int>(r.probe_tokens.size()) != max_tokens)
            throw BackendError("bench: " + name + ": the " + mode_name(modes[m]) +
                               " engine produced fewer tokens than --max-tokens");
          if (!have[m]) {
            first[m] = r;
            have[m] = true;
          } else if (r.probe_tokens != first[m].probe_tokens || r.probe_sha != first[m].probe_sha) {
            throw BackendError(std::string("bench: the ") + mode_name(modes[m]) +
                               " engine gave different bits for the same batch on a rerun; the engine is not "
                               "deterministic");
          }
          if (counted) runs[m].push_back(r.tok_s);
        });
        const Stats d = summarize(runs[0]), inv = summarize(runs[1]);
        any_noisy = any_noisy || d.cv > o.noise_cv || inv.cv > o.noise_cv;
        if (ref_sha.empty()) {
          ref_tokens = first[1].probe_tokens;
          ref_sha = first[1].probe_sha;
        }
        const bool same = first[1].probe_tokens == ref_tokens && first[1].probe_sha == ref_sha;
        inv_ok = inv_ok && same;
        if (default_sha1.empty() && b == 1) default_sha1 = first[0].probe_sha;
        const std::string dnote = default_sha1.empty() || b == 1 ? "-"
                                  : first[0].probe_sha == default_sha1 ? "same bits"
                                                                       : "differs";
        const double ratio = d.mean > 0 ? inv.mean / d.mean : 0.0;
        std::vector<int> prompt_lengths;
        for (const auto& rq : reqs) prompt_lengths.push_back(static_cast<int>(rq.prompt.size()));
        const StepCost cost = decode_cost(costs, prompt_lengths, max_tokens);
        const Ceiling lim = mc ? ceiling_of(cost, mc->gb_per_s, mc->gflop_per_s) : Ceiling{};
        const std::string ceiling_cols =
            mc ? fmt::format("{:>16} {:>13}  ", ceiling_cell(lim),
                             share_cell(d.mean / lim.tokens_per_s, inv.mean / lim.tokens_per_s))
               : "";
        fmt::print("{:>6} {:>32} {:>32} {:>12.2f}  {}{}{}\n", b, stats_cell(d, o.noise_cv), stats_cell(inv, o.noise_cv),
                   ratio, ceiling_cols, dnote, same ? "" : "  INVARIANT PROBE DIFFERS");
        std::fflush(stdout);
        nlohmann::json row = {{"model", name},
                                {"threads", t},
                                {"batch_size", b},
                                {"decode_tokens", static_cast<int64_t>(b) * (max_tokens - 1)},
                                {"default_tokens_per_s", d.mean},
                                {"invariant_tokens_per_s", inv.mean},
                                {"default", stats_json(d, o.noise_cv)},
                                {"invariant", stats_json(inv, o.noise_cv)},
                                {"ratio", ratio},
                                {"invariant_probe_identical", same},
                                {"default_probe_same_as_batch1", b == 1 || first[0].probe_sha == default_sha1}};
        if (mc) add_ceiling_json(row, cost, lim, d.mean, inv.mean);
        jout["rows"].push_back(std::move(row));
      }

      // ---- prefill ----
      if (lengths.empty()) continue;
      fmt::print("prefill, {} thread{}: prompt tokens/s of one sequence, mean ±stddev [min-max]\n", t,
                 t == 1 ? "" : "s");
      fmt::print("{:>6} {:>32} {:>32} {:>12}{}\n", "prompt", "default", "batch-invariant", "inv/default",
                 mc ? fmt::format("  {:>16} {:>13}", "ceiling tok/s", "share d/inv") : "");
      for (int len0 : lengths) {
        const int len = std::min(len0, c.context_length - 1);
        if (len != len0)
          fmt::print(stderr, "bench: {}: prompt length {} lowered to {} to fit the context length {}\n", name, len0,
                     len, c.context_length);
        GenRequest req;
        req.prompt = long_prompt(*model, len);
        req.params.max_tokens = 1;
        req.params.stop_at_eos = false;
        req.params.logprobs = false;
        std::vector<double> runs[2];
        interleaved(o, [&](int m, bool counted) {
          const double v = prefill_once(*engines[m], req);
          if (counted) runs[m].push_back(v);
        });
        const Stats d = summarize(runs[0]), inv = summarize(runs[1]);
        any_noisy = any_noisy || d.cv > o.noise_cv || inv.cv > o.noise_cv;
        const double ratio = d.mean > 0 ? inv.mean / d.mean : 0.0;
        const StepCost cost = prefill_cost(costs, len);
        const Ceiling lim = mc ? ceiling_of(cost, mc->gb_per_s, mc->gflop_per_s) : Ceiling{};
        const std::string ceiling_cols =
            mc ? fmt::format("  {:>16} {:>13}", ceiling_cell(lim),
                             share_cell(d.mean / lim.tokens_per_s, inv.mean / lim.tokens_per_s))
               : "";
        fmt::print("{:>6} {:>32} {:>32} {:>12.2f}{}\n", len, stats_cell(d, o.noise_cv), stats_cell(inv, o.noise_cv),
                   ratio, ceiling_cols);
        std::fflush(stdout);
        nlohmann::json row = {{"model", name},
                              {"threads", t},
                              {"prompt_tokens", len},
                              {"default", stats_json(d, o.noise_cv)},
                              {"invariant", stats_json(inv, o.noise_cv)},
                              {"ratio", ratio}};
        if (mc) add_ceiling_json(row, cost, lim, d.mean, inv.mean);
        jout["prefill_rows"].push_back(std::move(row));
      }
    }
    fmt::print("validation: batch-invariant probe {} across batch sizes {} and threads {} (logits sha256 {}...)\n",
               inv_ok ? "bit-identical" : "NOT identical", o.batch_sizes, o.engine.threads, ref_sha.substr(0, 16));
    all_ok = all_ok && inv_ok;
  }
  const std::string load_end = load_average();
  if (any_noisy)
    fmt::print("* noisy: coefficient of variation above {:.0f}% (load average now {}); rerun or raise --repeats\n",
               o.noise_cv * 100, load_end.empty() ? "unknown" : load_end);
  jout["load_average_end"] = load_end;
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
      "bench",
      "Decode and prefill tokens/s of default vs batch-invariant mode, with spread (validated first); with "
      "--endpoint, a server's requests/s and tokens/s at each concurrency");
  EngineFlagSpec spec;
  spec.model_repeatable = true;
  spec.mode = false;  // both modes, side by side
  spec.threads_list = true;
  spec.model_help =
      "Model file or synthesized model (repeatable; synth:100m = the synthesized ~100M model, see `run "
      "--help` for the other synth: names; default: the embedded stories260K and synth:100m)";
  o->engine.threads = "1,2";
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--batch-sizes", o->batch_sizes, "Comma-separated batch sizes (decode)")->capture_default_str();
  sub->add_option("--prompt-lengths", o->prompt_lengths, "Comma-separated prompt lengths in tokens (prefill)")
      ->capture_default_str();
  sub->add_flag("--no-prefill", o->no_prefill, "Measure decode only");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens each sequence generates (decode)")->capture_default_str();
  sub->add_option("--repeats", o->repeats, "Measured runs per cell and mode (at least 2)")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Runs per cell and mode before measuring (not counted)")
      ->capture_default_str();
  sub->add_option("--min-time", o->min_time,
                  "Stop measuring a cell after this many seconds once 3 runs are in (0 = always --repeats)")
      ->capture_default_str();
  sub->add_option("--noise-cv", o->noise_cv, "Flag a cell whose stddev / mean exceeds this")->capture_default_str();
  sub->add_option("--prompt", o->prompt, "Probe prompt")->capture_default_str();
  sub->add_option("--json", o->json, "Also write the tables as JSON to this file ('-' = stdout)");
  sub->add_flag("--no-ceilings", o->no_ceilings,
                "Skip measuring this machine's memory bandwidth and sgemm peak and the cells' share of them");
  sub->add_option("--triad-mib", o->triad_mib, "MiB per array of the memory-bandwidth triad (3 arrays)")
      ->capture_default_str();
  sub->add_option("--sgemm-size", o->sgemm_size, "n of the n x n x n sgemm that measures the compute peak")
      ->capture_default_str();
  // a server under load
  add_endpoint_flags(*sub, o->remote);
  sub->add_option("--concurrency", o->concurrency, "Comma-separated requests in flight (with --endpoint)")
      ->capture_default_str();
  sub->add_option("--requests", o->requests,
                  "Requests each concurrent stream sends per measured run (with --endpoint)")
      ->capture_default_str();
  o->app = sub;
  sub->callback([o, &runner] { runner = [o] { return run_bench(*o); }; });
}

}  // namespace repro::cli
