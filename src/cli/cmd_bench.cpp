// `repro-audit bench`: what batch invariance costs in throughput on this machine, with statistics.
// For each model and thread count it measures, every op table of the device side by side
// (repro/bench/tables.hpp: today default and batch-invariant):
//   decode   per batch size: a real batch (the probe "Once upon a time" in the middle of filler
//            prompts, every sequence greedy for --max-tokens tokens, EOS ignored so the batch stays
//            full) is prefilled in one step, then the generated tokens of the following steps are
//            timed: decode tokens/s = batch * (max_tokens - 1) / decode time.
//   prefill  per prompt length (--prompt-lengths): one sequence's prompt in one forward step,
//            prompt tokens/s = length / time of that step.
// as llama.cpp's batched-bench separates them. Every cell is warmed up (--warmup runs, not counted)
// and measured --repeats times, the tables interleaved run by run (rotating which goes first) so a
// change of machine load hits all of them; it prints mean, standard deviation and min-max and
// flags a cell whose coefficient of variation exceeds --noise-cv. It validates first: every table
// but the default one (the batch-invariant probe) must be bit-identical (tokens and logits SHA-256)
// at every batch size, thread count and run; the default mode's divergence from batch 1 is
// reported, not asserted. Before the cells it measures this machine's ceilings at each thread count
// (memory bandwidth by a STREAM-style triad, compute peak by OpenBLAS sgemm; repro/bench/ceilings.hpp)
// and prints every cell's mean as a share of the lower of its two ceilings
// (repro/bench/perf_model.hpp); --no-ceilings skips that.
// The measuring is the bench layer's (repro/bench/local.hpp); this file has the flags and the tables
// it prints. With --endpoint it measures OpenAI-compatible servers under load instead
// (bench_endpoint.cpp).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "repro/bench/local.hpp"
#include "repro/bench/speculative.hpp"
#include "repro/cli/bench.hpp"
#include "repro/cli/commands.hpp"
#include "repro/cli/flags.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/device.hpp"
#include "repro/model/default_model.hpp"

namespace repro::cli {

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

void BenchRuns::finish(bool any_noisy, const std::string& load_end, const nlohmann::json& result) const {
  if (any_noisy)
    fmt::print("* noisy: coefficient of variation above {:.0f}% (load average now {}); rerun or raise --repeats\n",
               noise_cv * 100, load_end.empty() ? "unknown" : load_end);
  if (!json.empty()) write_file_atomic(json, result.dump(2) + "\n");
}

namespace {

struct BenchOptions : EndpointBenchOptions {
  EngineFlags engine;  // --model (repeatable) --tokenizer --device --threads (a list) --precision
  std::string batch_sizes = "1,8,32,64";
  std::string prompt_lengths = "128,512";
  std::string modes;       // empty: every table of the device that batches (bench::bench_tables)
  bool no_prefill = false;
  double min_time = 0;
  bool no_ceilings = false;
  int triad_mib = 256;     // per triad array
  int sgemm_size = 1024;   // n of the n x n x n sgemm
  int ceiling_repeats = 5;
  std::string speculative;  // --speculative LIST: decode with and without each, side by side
  CLI::App* app = nullptr;
  bool given(const char* flag) const { return app->count(flag) > 0; }
};

constexpr const char* kSynth100m = "synth:100m";

// "412.3 mem" and "41%/38%" (each table's share of the ceiling, default first).
std::string ceiling_cell(const bench::Ceiling& c) { return fmt::format("{:.1f} {}", c.tokens_per_s, c.kind); }
std::string share_cell(const std::vector<bench::Stats>& stats, const bench::Ceiling& c) {
  std::string out;
  for (const auto& st : stats) out += fmt::format("{}{:.0f}%", out.empty() ? "" : "/", st.mean / c.tokens_per_s * 100);
  return out;
}

// The tables `bench` prints as it measures (the JSON is the bench layer's).
class LocalPrinter : public bench::LocalObserver {
 public:
  explicit LocalPrinter(const BenchOptions& o) : o_(o) {}

  void start(const bench::LocalConfig& cfg, const bench::LocalSetup& s) override {
    fmt::print("repro-audit bench: CPU AVX2+FMA {}, OPENBLAS_CORETYPE={}, max-tokens {}, warm-up {}, {} runs per "
               "cell (modes interleaved), load average {}\n",
               s.avx2_fma ? "yes" : "no", s.openblas_coretype.value_or("(unset)"), cfg.max_tokens, cfg.warmup,
               cfg.repeats, s.load_average.empty() ? "unknown" : s.load_average);
    precision_ = cfg.precision;
    device_ = cfg.device;
  }

  void tables(const std::vector<bench::BenchTable>& tables) override {
    tables_ = tables;
    for (const auto& t : tables)
      fmt::print("  {}: {}, {}, precision {}\n", t.info.name, t.info.isa, t.info.library, precision_name(precision_));
  }

  void ceilings(const bench::MachineCeilings* m) override {
    if (!m) {
      fmt::print("ceilings: not measured (they are the CPU's; --device {})\n", device_name(device_));
      return;
    }
    fmt::print("ceilings, best of {} after a warm-up: memory = STREAM-style triad a[i] = b[i] + s*c[i] over 3 x {} "
               "MiB of doubles (24 bytes per element: 2 reads + 1 write; the write-allocate read is not counted), "
               "compute = OpenBLAS sgemm {} x {} x {} (2 n^3 flops)\n",
               o_.ceiling_repeats, o_.triad_mib, o_.sgemm_size, o_.sgemm_size, o_.sgemm_size);
    for (const auto& c : m->per_threads)
      fmt::print("  {} thread{}: memory {:.1f} GB/s, compute {:.1f} GFLOP/s\n", c.threads, c.threads == 1 ? "" : "s",
                 c.gb_per_s, c.gflop_per_s);
    have_ceilings_ = !m->per_threads.empty();
  }

  void model(const bench::ModelInfo& m) override {
    const ModelConfig& c = m.config;
    fmt::print("\nmodel {} (dim {}, layers {}, heads {}/{}, hidden {}, vocab {}, context {}{})\n", m.name, c.dim,
               c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size, c.context_length,
               c.is_moe() ? fmt::format(", experts {} of {}", c.n_experts_used, c.n_experts) : "");
    if (!have_ceilings_) return;
    const bench::ModelCosts& costs = m.costs;
    const size_t llc = m.last_level_cache_bytes;
    fmt::print("performance model: {:.1f} MiB of matmul weights read per step{}, {:.1f} MFLOP per token in the "
               "matmuls, KV cache {} bytes per position{}\n",
               static_cast<double>(costs.weight_bytes()) / (1 << 20),
               c.is_moe() ? " at batch 1 (the k experts of one token; a batch reads up to every expert)" : "",
               2.0 * static_cast<double>(costs.layer_matmul_params + costs.classifier_params) / 1e6,
               costs.kv_bytes_per_position,
               llc > 0 && static_cast<size_t>(costs.weight_bytes()) < llc
                   ? fmt::format(" (smaller than the {} MiB last-level cache: DRAM bandwidth need not bound "
                                 "this model, a share above 100% can happen)",
                                 llc >> 20)
                   : "");
  }

  void decode_start(int t, const bench::MachineCeiling* mc) override {
    fmt::print("decode, {} thread{}: generated tokens/s after the prefill step, mean ±stddev [min-max]\n", t,
               t == 1 ? "" : "s");
    fmt::print("{:>6}{}  {}{}\n", "batch", mode_columns(),
               mc ? fmt::format("{:>16} {:>{}}  ", "ceiling tok/s", share_label(), share_width()) : "",
               "default probe vs batch 1");
  }

  void decode_row(const bench::DecodeRow& r) override {
    const std::string ceiling_cols =
        r.ceiling ? fmt::format("{:>16} {:>{}}  ", ceiling_cell(r.ceiling->limit),
                                share_cell(r.stats, r.ceiling->limit), share_width())
                  : "";
    std::string differs;
    for (size_t m = 0; m < tables_.size(); ++m)
      if (!tables_[m].baseline() && !r.probe_same[m]) differs += "  " + upper(tables_[m].key) + " PROBE DIFFERS";
    fmt::print("{:>6}{}  {}{}{}\n", r.batch_size, cells(r.stats, r.ratio), ceiling_cols, r.default_note, differs);
    std::fflush(stdout);
  }

  void prefill_start(int t, const bench::MachineCeiling* mc) override {
    fmt::print("prefill, {} thread{}: prompt tokens/s of one sequence, mean ±stddev [min-max]\n", t,
               t == 1 ? "" : "s");
    fmt::print("{:>6}{}{}\n", "prompt", mode_columns(),
               mc ? fmt::format("  {:>16} {:>{}}", "ceiling tok/s", share_label(), share_width()) : "");
  }

  void prefill_row(const bench::PrefillRow& r) override {
    const std::string ceiling_cols =
        r.ceiling ? fmt::format("  {:>16} {:>{}}", ceiling_cell(r.ceiling->limit),
                                share_cell(r.stats, r.ceiling->limit), share_width())
                  : "";
    fmt::print("{:>6}{}{}\n", r.prompt_tokens, cells(r.stats, r.ratio), ceiling_cols);
    std::fflush(stdout);
  }

  void validation(const bench::Validation& v) override {
    for (size_t m = 0; m < tables_.size(); ++m)
      if (!tables_[m].baseline())
        fmt::print("validation: {} probe {} across batch sizes {} and threads {} (logits sha256 {}...)\n",
                   mode_name(tables_[m].mode), v.identical[m] ? "bit-identical" : "NOT identical", o_.batch_sizes,
                   o_.engine.threads, v.sha[m].substr(0, 16));
  }

  void note(const std::string& line) override { fmt::print(stderr, "{}\n", line); }

 private:
  static std::string upper(std::string s) {
    for (char& ch : s) ch = static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
    return s;
  }
  // " default batch-invariant inv/default": a column per table, then its ratio to the default one.
  std::string mode_columns() const {
    std::string out;
    for (const auto& t : tables_) out += fmt::format(" {:>32}", mode_name(t.mode));
    for (const auto& t : tables_)
      if (!t.baseline()) out += fmt::format(" {:>{}}", ratio_label(t), ratio_width(t));
    return out;
  }
  // "inv/default"; a ratio column is at least 12 wide, a share column 13 ("share d/inv").
  static std::string ratio_label(const bench::BenchTable& t) { return t.short_name + "/default"; }
  static size_t ratio_width(const bench::BenchTable& t) { return std::max<size_t>(12, ratio_label(t).size()); }
  size_t share_width() const { return std::max<size_t>(13, share_label().size()); }
  std::string share_label() const {
    std::string out = "share ";
    for (size_t m = 0; m < tables_.size(); ++m) out += (m ? "/" : "") + tables_[m].short_name;
    return out;
  }
  std::string cells(const std::vector<bench::Stats>& stats, const std::vector<double>& ratio) const {
    std::string out;
    for (const auto& st : stats) out += fmt::format(" {:>32}", bench::stats_cell(st, o_.noise_cv));
    for (size_t m = 0; m < tables_.size(); ++m)
      if (!tables_[m].baseline())
        out += fmt::format(" {:>{}.2f}", ratio[m], ratio_width(tables_[m]));
    return out;
  }

  const BenchOptions& o_;
  Precision precision_ = Precision::F32;
  Device device_ = Device::Cpu;
  std::vector<bench::BenchTable> tables_;
  bool have_ceilings_ = false;
};

// With --endpoint: the endpoint load bench, after refusing the flags that only set up the local
// engine (and, without it, the flags that only mean something for endpoints).
int run_bench_remote(const BenchOptions& o) {
  for (const char* f : {"--model", "--tokenizer", "--device", "--threads", "--precision", "--modes", "--batch-sizes",
                        "--prompt-lengths", "--no-prefill", "--min-time", "--no-ceilings", "--triad-mib",
                        "--sgemm-size"})
    if (o.given(f))
      throw UsageError(std::string(f) + " sets up the local engine; drop it with --endpoint (the server under load "
                       "has its own model and threads)");
  return run_bench_endpoints(o);
}

// bench --speculative LIST: one model, one thread count (the first of bench's default list); per mode (default first, then --modes or
// batch-invariant) and batch size, decode tokens/s without and with each setting of the list.
int run_bench_speculative(const BenchOptions& o, const std::vector<int>& batches, const std::vector<int>& threads,
                          Device device, std::vector<Mode> modes, Precision precision) {
  if (o.engine.models.size() > 1) throw UsageError("--speculative measures one model: give --model once");
  if (threads.size() > 1 && o.given("--threads"))
    throw UsageError("--speculative measures one thread count: give --threads N");
  if (o.engine.tp != 1) throw UsageError("--speculative measures without tensor parallelism: drop --tp");
  if (device != Device::Cpu)
    throw UsageError("--speculative is not implemented on --device " + std::string(device_name(device)) +
                     "; use --device cpu");
  bench::SpecBenchConfig cfg;
  static_cast<bench::Runs&>(cfg) = o;
  cfg.threads = threads.front();
  cfg.device = device;
  cfg.precision = precision;
  cfg.batch_sizes = batches;
  if (modes.empty()) modes.push_back(Mode::BatchInvariant);
  cfg.modes.push_back(Mode::Default);
  for (Mode m : modes)
    if (m != Mode::Default) cfg.modes.push_back(m);
  const std::string path = o.engine.model().empty() ? default_model_path() : o.engine.model();
  auto model = o.engine.load(path);
  for (const std::string& part : split(o.speculative, ',')) {
    EngineOptions eo;
    eo.speculative = parse_speculative(trim(part), "--speculative");
    if (!eo.speculative.on()) continue;  // off is the column every setting is measured against
    EngineFlags draft_flags = o.engine;
    draft_flags.load_draft(eo);
    cfg.specs.push_back(eo.speculative);
  }
  if (cfg.specs.empty()) throw UsageError("--speculative: give at least one of ngram:K or draft:FILE:K");
  fmt::print("speculative decoding, {} threads {} precision {}: decode tokens/s without and with it (mean ±stddev "
             "[min-max]); acceptance = accepted / drafted\n",
             std::filesystem::path(path).filename().string(), cfg.threads, precision_name(precision));
  fmt::print("{:<16} {:<24} {:>5}  {:<28} {:<28} {:>6}  {:>10}  {:>10}  {}\n", "mode", "speculative", "batch", "off",
             "on", "ratio", "acceptance", "tok/verify", "bits");
  bool noisy = false;
  const nlohmann::json rows = bench::run_speculative_bench(*model, cfg, [&](const bench::SpecBenchRow& r) {
    noisy = noisy || r.off.cv > cfg.noise_cv || r.on.cv > cfg.noise_cv;
    const double acc = r.drafted > 0 ? static_cast<double>(r.accepted) / static_cast<double>(r.drafted) : 0;
    const double per = r.verify_steps > 0 ? static_cast<double>(r.accepted + r.verify_steps) / static_cast<double>(r.verify_steps) : 0;
    fmt::print("{:<16} {:<24} {:>5}  {:<28} {:<28} {:>5.2f}x  {:>10.2f}  {:>10.2f}  {}\n", r.mode, r.speculative,
               r.batch_size, bench::stats_cell(r.off, cfg.noise_cv), bench::stats_cell(r.on, cfg.noise_cv), r.ratio, acc,
               per, r.same_bits ? "same" : "differ");
    std::fflush(stdout);
  });
  nlohmann::json out = {{"kind", "speculative"},
                        {"model", path},
                        {"threads", cfg.threads},
                        {"precision", precision_name(precision)},
                        {"max_tokens", cfg.max_tokens},
                        {"prompt", cfg.prompt},
                        {"rows", rows}};
  o.finish(noisy, bench::load_average(), out);
  return kExitOk;
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
  std::vector<Mode> modes;
  if (!o.modes.empty())
    for (const std::string& m : split(o.modes, ',')) modes.push_back(parse_mode(trim(m), "--modes"));
  const Precision precision = o.engine.precision_value();
  if (o.max_tokens < 2) throw UsageError("--max-tokens must be at least 2 (the first token comes from the prefill step)");
  o.check();
  if (o.triad_mib < 1 || o.triad_mib > 16384)
    throw UsageError("--triad-mib must be in 1..16384 (MiB per array; well above the last-level cache, e.g. 256)");
  if (o.sgemm_size < 16 || o.sgemm_size > 8192) throw UsageError("--sgemm-size must be in 16..8192, e.g. 1024");

  if (!o.speculative.empty()) return run_bench_speculative(o, batches, threads, device, modes, precision);

  std::vector<std::string> models = o.engine.models;
  if (models.empty()) {
    // The embedded stories260K alone: about a minute. The ~100M synthesized model is opt-in (it takes
    // several minutes and writes a 220 MB file to the cache the first time); say so, never silently.
    models.push_back(default_model_path());
    fmt::print("note: measuring the embedded stories260K; add --model {} for a ~100M-parameter model (several "
               "minutes; writes a 220 MB model to {} once)\n", kSynth100m, cache_dir());
  }

  bench::LocalConfig cfg;
  static_cast<bench::Runs&>(cfg) = o;
  cfg.models = std::move(models);
  cfg.tokenizer = o.engine.tokenizer;
  cfg.threads = threads;
  cfg.device = device;
  cfg.precision = precision;
  cfg.tp = o.engine.tp;
  cfg.allreduce = o.engine.allreduce_value();
  cfg.modes = modes;
  cfg.batch_sizes = batches;
  cfg.prompt_lengths = lengths;
  cfg.min_time = o.min_time;
  cfg.ceilings = !o.no_ceilings;
  cfg.triad_mib = o.triad_mib;
  cfg.sgemm_size = o.sgemm_size;
  cfg.ceiling_repeats = o.ceiling_repeats;

  LocalPrinter printer(o);
  const bench::LocalResult res = bench::run_local(cfg, printer);
  o.finish(res.any_noisy, res.load_average_end, res.json);
  // A ring all-reduce from TP 4 on cuts its chunks from the whole step's buffer, so the order of a
  // row's sum depends on the batch (docs/ENGINE.md): expected of every mode but tp-invariant.
  const bool ring_varies = cfg.tp >= 4 && cfg.allreduce == AllReduce::Ring;
  bool failed = false;
  for (const std::string& mode : res.not_invariant) {
    if (ring_varies && mode != mode_name(Mode::TpInvariant)) {
      fmt::print(stderr, "note: {} mode gave different bits across batch sizes at --tp {} --allreduce ring, as a ring "
                         "all-reduce does (its chunks follow the batch); --allreduce tree keeps it batch-invariant\n",
                 mode, cfg.tp);
      continue;
    }
    fmt::print(stderr, "error: {} mode gave different bits across batch sizes or threads\n", mode);
    failed = true;
  }
  return failed ? kExitBackend : kExitOk;
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
  spec.mode = false;  // default and the --modes tables, side by side
  spec.threads_list = true;
  spec.tp = true;
  spec.model_help =
      "Model file or synthesized model (repeatable; synth:100m = the synthesized ~100M model, several minutes and a 220 MB file, see `run "
      "--help` for the other synth: names; default: the embedded stories260K)";
  o->engine.threads = "1,2";
  add_engine_flags(*sub, o->engine, spec);
  sub->add_option("--modes", o->modes,
                  "Comma-separated modes measured beside default, e.g. batch-invariant,deterministic (default: every "
                  "mode of the device that batches: batch-invariant)");
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
  sub->add_option("--speculative", o->speculative,
                  "Comma-separated speculative settings (ngram:K, draft:FILE:K): decode tokens/s without and with "
                  "each, side by side, per mode and batch size, with the acceptance rate; one model and thread count")
      ->type_name("LIST");
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
