// The one result structure every report writer reads (JSON, Markdown, HTML, JUnit, terminal).
// The runner fills `completions`; analyze() fills `cases`, `throughput` and `summary`.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace repro {

inline constexpr const char* kReportSchema = "repro-audit/report/v1";

// One decoding configuration of the plan. id is stable and readable: "greedy", "t0.8-p0.95-k40".
struct DecodingConfig {
  std::string id;
  double temperature = 0;
  double top_p = 1;
  int top_k = 0;
  int max_tokens = 32;
};

// One completion: a probe run in one batch context (local) or at one concurrency level (remote).
struct Completion {
  std::string prompt_id;
  std::string decoding_id;
  std::string mode;               // local: "default" / "batch-invariant"; remote: endpoint label
  std::string precision;          // local: activation precision "f32" / "bf16" / "f16"; remote: empty
  // context
  int batch_size = 1;             // local: sequences in the batch at the start; remote: concurrency
  int position = 0;               // local: probe's row in the batch
  std::string filler_set;         // id of the filler draw, e.g. "f3"
  std::vector<std::string> filler_ids;
  int mate_join_step = 0;         // local: the last batch mate joined after this many probe steps (0: with all)
  int mate_prompt_delta = 0;      // local: tokens added to the last batch mate's prompt
  // local: "" the drawn batch mates; "other": the same batch (sizes, positions, prompt and decode
  // lengths) with other token contents (--isolation): kernels see the same shapes, so any difference
  // from the drawn batch is leakage between rows, not rounding
  std::string mate_contents;
  int tp = 1;                     // local: simulated tensor-parallel size (docs/ENGINE.md)
  std::string allreduce;          // local: its all-reduce order, "ring" / "tree"; "" at TP 1 and 2
  std::string device;             // local, run --devices: the device it ran on ("cpu" / "cuda"); "" without the axis
  std::string speculative;        // local, run --speculative: "off", "ngram:3", "draft:FILE:4"; "" without the axis
  // Speculative decoding of the probe (GenResult::spec): tokens drafted, drafted tokens accepted, and
  // the decode steps that verified at least one; 0 without speculation.
  int spec_drafted = 0, spec_accepted = 0, spec_verify_steps = 0;
  uint64_t seed = 0;
  int repeat = 0;
  std::string cache_state;        // remote: "cold" / "warm"; empty otherwise
  // output
  bool tokens_known = true;
  std::vector<int> tokens;
  std::string text;
  std::vector<float> logprobs;    // chosen-token logprobs, empty when unknown
  // endpoints that return token ids and logprobs: each token's text piece as the logprobs named it (one
  // per token id); empty otherwise. The reports show divergent tokens as this text (token_text).
  std::vector<std::string> token_pieces;
  std::string logits_sha256;      // local: final step's logits bits; empty when unknown
  // per step (local engine; empty when unknown): top-2 logit margin, absolute and relative, and the
  // top_k most likely tokens with their logprobs, flattened step by step (top_ids[t * top_k + j])
  std::vector<float> margins, margins_rel;
  int top_k = 0;                  // entries per step in top_ids / top_logprobs (0: none recorded)
  std::vector<int> top_ids;
  std::vector<float> top_logprobs;
  // local engine on a mixture of experts: the probe's routing trace, per generated step (as tokens)
  // and per layer. routing[t][l]: the experts the router chose for the row whose logits chose token
  // t, in the router's order (highest gate value first); routing_margins[t][l]: that route's top-k
  // margin, the k-th chosen expert's gate value minus the best unchosen one's, in gate units (the
  // softmax probability or sigmoid of the router logit, before the top-k weights are normalised;
  // repro/engine/moe.hpp). Empty for a dense model; for endpoints, routing only with --routed-experts on a
  // server that returns it, and margins never (a server sends no gate values); margins also when every
  // expert is chosen (no route can flip).
  std::vector<std::vector<std::vector<int>>> routing;
  std::vector<std::vector<float>> routing_margins;
  // Derived by analyze() (src/audit/routing.cpp), never written: "same" when every (step, layer) over
  // the common token prefix with the case's reference completion chose the reference's expert set,
  // "flipped" when one did not, "" without traces on both. The factor tables tabulate it.
  std::string routing_vs_reference;
  // Never written: why an endpoint's routed experts could not be read (--routed-experts), for the
  // run's one note per endpoint; "" when read or when none came.
  std::string routing_error;
  std::string finish_reason;
  double latency_s = 0;
  double ttft_s = 0;              // remote streaming: time to first token
  double tokens_per_s = 0;
  // local: the whole cell's work: tokens generated by the probe and its batch mates together, and the
  // wall time of that batch (deterministic mode: the same requests decoded one after another, each
  // alone). The trade-off table's throughput comes from these; 0 when unknown (remote, older reports).
  int64_t batch_tokens = 0;
  double batch_seconds = 0;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // remote response metadata
  std::string system_fingerprint, response_model, response_id;
  int64_t created = 0;
  // remote: the response headers that report it was served from a cache ("x-cache: HIT", "age: 31";
  // see repro/audit/response_cache.hpp), joined by "; "; empty when none did
  std::string cache_header;
  // remote: co-batching evidence of this request (probes only). Its send, first byte and last byte
  // in seconds since its concurrency level started (monotonic clock; -1 unknown); how many other
  // requests of the run were in flight during its lifetime: fewest and most at any moment and the
  // time-weighted mean; the largest batch its decoding shared as the server reported it in the
  // response (repro-audit serve's extension field; -1 when the server does not say).
  double send_s = -1, first_byte_s = -1, last_byte_s = -1;
  int others_min = -1, others_max = -1;
  double others_mean = -1;
  int server_max_batch = -1;
  // failures are recorded, never counted as completions or divergence
  std::string error;              // non-empty: failed (cause)
  int attempts = 1;
  // structured output (plan json_schema): whether `text` conforms to the schema (unset without one),
  // and validation with retry (--retry-invalid): `retries` extra requests were made because earlier
  // answers did not conform; `text`/`tokens` are the last answer's, `first_text`/`first_tokens` the
  // first answer's (empty when retries == 0), `retry_tokens` the tokens generated by the discarded ones
  std::optional<bool> schema_valid;
  int retries = 0;
  int64_t retry_tokens = 0;
  std::string first_text;
  std::vector<int> first_tokens;
  // a merged report of shards run with --replicate-shards: the host (shard) that ran it; empty otherwise
  std::string host;
};

// A two-sample test of sampled outputs (src/audit/distribution.cpp): do the completions of one
// context (a concurrency level, a baseline) come from the same distribution as the reference's?
// MMD with a prefix kernel over token sequences, p-value by permutation.
struct DistributionTest {
  std::string factor;             // "concurrency" (against concurrency 1), "baseline" (canary / --baseline)
  std::string value;              // the context compared ("8", or "this run")
  std::string reference;          // the reference context ("1", or "baseline")
  int n_reference = 0, n_other = 0;
  double statistic = 0;           // unbiased MMD^2 estimate (may be slightly negative)
  double p_value = 1;             // permutation p-value
  double effect = 0;              // MMD (biased estimate, square root), 0..1
  bool differs = false;           // p_value < alpha
  std::string note;               // why no test ran (too few samples), empty otherwise
};

// A cluster of identical outputs within one case.
struct Cluster {
  std::string hash;               // SHA-256 of token ids (int32 LE), or of the text when ids unknown
  int count = 0;
  bool majority = false;
  std::vector<int> members;       // indices into AuditReport::completions
  std::string text;               // the cluster's completion text
  std::vector<int> tokens;
  // first divergence from the majority (-1 for the majority itself)
  int first_divergence_token = -1;
  int first_divergence_char = -1;
  int majority_token = -1, cluster_token = -1;     // ids at that index (-1 = ended / unknown)
  std::optional<float> majority_logprob, cluster_logprob;
  int family = 0;                 // families by normalised token edit distance; majority's is 0
  double distance_to_majority = 0; // normalised token edit distance in [0, 1]
  int bit_variants = 1;           // distinct logits/logprob fingerprints inside this token cluster
  std::optional<std::string> answer;  // extracted answer (when an extractor is configured and it matched)
  std::string repro_command;      // divergent local cases: `repro-audit generate ...` replaying the first member
};

// Which factor a divergence follows: for each factor value, how many members fall in each cluster.
struct FactorTable {
  std::string factor;             // "batch_size", "position", "filler_set", "mate_join_step", "mate_prompt_delta",
                                  // "seed", "concurrency", "endpoint", "host"
  std::vector<std::string> values;
  std::vector<std::vector<int>> counts;  // [value][cluster index]
  bool explains = false;          // every value maps to exactly one cluster and >1 cluster exists
};

// Across modes (or endpoints) for one (prompt, decoding): which outputs each mode produced.
struct CrossModeTable {
  std::string prompt_id, decoding_id;
  FactorTable table;              // factor "mode" (local) or "endpoint" (remote); counts[mode][output]
  std::vector<std::string> hashes;  // the table's columns: output hashes, most frequent first
};

// k of n with its Wilson score interval at 95% (see repro/audit/stats.hpp).
struct Rate {
  int k = 0;
  int n = 0;
  double lo = 0, hi = 0;
};

// Drift against the reference context, per value of one factor: how many completions differ from the
// reference bitwise (logits hash, logprob bits or tokens) and in tokens, and the largest per-step
// |delta logprob| of chosen tokens over the common prefix.
struct DriftFactor {
  std::string factor;             // "batch_size", "position", "filler_set", "seed", "repeat", "cache_state", "precision", "host"
  std::vector<std::string> values;
  std::vector<int> n, bit_differ, token_differ;     // per value
  std::vector<double> max_dlogprob;                 // per value (0 when nothing was comparable)
};

// Size of the drift of one case against its reference completion: the reference context (batch 1,
// position 0, first filler draw, first repeat; remote: concurrency 1), or the nearest context run.
struct DriftSize {
  int reference = -1;             // index into AuditReport::completions; -1: no completions
  std::string reference_context;  // "batch 1, position 0, repeat 0" / "concurrency 1, repeat 0"
  int compared = 0;               // completions compared with the reference (itself excluded)
  int bit_differ = 0;             // differing bitwise: tokens, final logits hash or logprob bits
  int token_differ = 0;           // differing in tokens
  int steps_compared = 0;         // chosen-token logprob pairs over the common prefixes
  std::optional<double> max_dlogprob, mean_dlogprob;   // per-step |delta logprob|; unset without logprobs
  // first token divergence from the reference (the earliest over all completions)
  int first_divergence = -1;      // step; -1 when no completion's tokens differ
  int first_divergence_completion = -1;               // index into AuditReport::completions
  int reference_token = -1, divergent_token = -1;     // ids at that step (-1 = ended)
  std::optional<double> topk_kl;  // largest top-k KL(reference || other) at the first divergent step
  std::optional<int> fragile;     // reference steps with relative top-2 margin < fragile_margin
  std::optional<double> min_margin_rel;               // smallest relative top-2 margin of the reference
  // the reference's top-2 logit margin (absolute, relative) at the first divergent step: how near a
  // tie the token that flipped was; unset without a token divergence or recorded margins
  std::optional<double> flip_margin, flip_margin_rel;
  std::string status;             // "reproducible", "bit-divergent", "reproducible here, fragile", "token-divergent"
  std::vector<DriftFactor> factors;  // factors that vary inside the case
};

// Per-field agreement of one JSON path (--answer-json-path) over a case's completions.
struct FieldAgreement {
  std::string path;               // as given: "$.a.b" or "a.b"
  bool agree = false;             // every completion has the field and all values are equal (canonical JSON)
  int unique = 0;                 // distinct values among the completions that have it
  int missing = 0;                // completions without the field (not JSON, or the path is absent)
  Rate majority;                  // completions holding the most common value, of all n
};

// Structured output of one case (only when the plan has a JSON Schema).
struct StructuredCase {
  Rate valid;                     // completions whose (final) output conforms to the schema
  Rate valid_first;               // completions whose first answer conformed (before any retry)
  bool tara_json = false;         // all N outputs parse as JSON and are equal in canonical form
  int json_unique = 0;            // distinct canonical JSON values among the outputs that parse
  int json_invalid = 0;           // outputs that do not parse as JSON
  // before retries: the first answers (equal to the above when no retry happened)
  bool tarr_first = false;
  bool tara_json_first = false;
  int retries = 0;                // extra requests made because an answer did not conform
  int64_t retry_tokens = 0;       // tokens generated by the discarded answers
};

// Routing of one case's completions against its reference completion (a mixture of experts on the
// local engine; src/audit/routing.cpp), over the common token prefix of each (through the step where
// the tokens first differ: that step's routes saw the same inputs as the reference's).
struct RoutingDivergence {
  int completion = -1;            // index into AuditReport::completions
  int step = 0, layer = 0;        // its first (step, layer) whose expert set differs from the reference's
  int token_divergence = -1;      // its first step whose token differs from the reference's (-1: none)
};
struct CaseRouting {
  int reference = -1;             // index into AuditReport::completions (the drift-size reference)
  int compared = 0;               // completions compared (with a trace; the reference excluded)
  int token_diverged = 0;         // of those, the ones whose tokens differ from the reference
  int pairs = 0, flips = 0;       // (step, layer) pairs compared, and those whose expert set differs
  std::vector<int> layer_pairs, layer_flips;  // the same per layer
  std::optional<int> fragile;     // reference (step, layer) routes whose top-k margin < fragile_margin
  std::optional<double> min_margin;  // the reference's smallest top-k margin (gate units)
  std::vector<RoutingDivergence> divergences;  // one per completion with a flip, in report order
};

struct CaseResult {
  std::string prompt_id;
  std::string prompt_text;
  std::string decoding_id;
  std::string mode;
  std::string precision;          // local: activation precision; remote: empty
  int n = 0;                      // completions (errors excluded)
  int errors = 0;
  int unique = 0;                 // token-level unique outputs
  bool tarr = false;              // all N raw outputs identical
  std::optional<bool> tara;       // identical after the answer extractor (when configured)
  int answer_unique = 0;
  bool bit_divergent = false;     // identical tokens but differing logprobs / logits hashes
  int bit_unique = 0;             // unique (tokens, logits hash, logprobs) fingerprints
  std::vector<Cluster> clusters;  // majority first, then by count desc, hash asc
  std::vector<FactorTable> factors;
  bool failed = false;            // counts against the thresholds
  bool divergent = false;         // unique > 1, or TARa false with answers found (an extractor is configured)
  int answer_missing = 0;         // completions where the extractor found no answer
  bool no_answer = false;         // extractor configured, unique == 1 and no completion has an answer:
                                  // "no answer", neither divergent nor an agreement of answers
  DriftSize drift_size;              // size of the drift against the reference context
  std::optional<StructuredCase> structured;  // plan with a JSON Schema only
  std::vector<FieldAgreement> fields;        // one per --answer-json-path path (empty without)
  // --isolation: batch contexts run twice, with the drawn batch mates and with other contents at the
  // same shapes; pairs compared, and pairs whose probe output differs (tokens or bits): leakage
  int isolation_pairs = 0, isolation_leaks = 0;
  // sampled cases whose outputs vary (the seed does not control them): each context against the
  // reference context, as distributions (empty otherwise)
  std::vector<DistributionTest> distribution;
  // a mixture of experts on the local engine: routing against the reference (unset without traces)
  std::optional<CaseRouting> routing;
};

struct ThroughputRow {
  std::string mode;
  std::string precision;          // local: activation precision; remote: empty
  int batch_size = 1;             // or concurrency for remote
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;         // tokens / seconds over all the cell's measurements
  // Throughput relative to default at this batch size (repro/audit/tradeoff.hpp, speed_ratio): the mean
  // over the row's cells of each cell's tokens/s / the baseline's mean tokens/s in the same context, and
  // the standard deviation of those ratios; unset when no cell had a baseline to compare with.
  std::optional<double> ratio_vs_default;
  std::optional<double> ratio_sd;
  // The cell's measurements one by one (local: each batched run; remote: each concurrency level's
  // probe stream): how many, and the mean, sample standard deviation and range of their tokens/s.
  int runs = 0;                   // 0: not recorded (a report written before these fields existed)
  double mean_tokens_per_s = 0, stddev_tokens_per_s = 0, min_tokens_per_s = 0, max_tokens_per_s = 0;
};

// A cell is noisy when its measurements' coefficient of variation (stddev / mean) is above this.
inline constexpr double kNoisyCv = 0.10;

// Drift of one mode (or endpoint) over its cases.
struct ModeDriftSize {
  Rate bit_differ;                // completions differing bitwise from their case's reference
  Rate token_differ;              // completions differing in tokens
  Rate token_divergent_cases;     // cases where some completion's tokens differ from the reference
  std::optional<double> max_dlogprob, mean_dlogprob;  // per-step |delta logprob| of chosen tokens
  std::optional<double> max_topk_kl;                  // largest top-k KL at a first divergent step
  std::optional<double> max_flip_margin;              // the widest top-2 logit margin a flip crossed
  int fragile = 0;                // fragile steps over the cases' references
  int fragile_cases = 0;          // cases "reproducible here, fragile"
  std::vector<DriftFactor> factors;   // summed over the mode's cases
  std::string finding;            // one line, plain language
};

// Agreement of one JSON path over a mode's cases.
struct FieldRate {
  std::string path;
  Rate agree;                     // cases where every completion has the field with one value
};

// Structured output over one mode's (endpoint's) cases: after retries and before, side by side.
struct StructuredSummary {
  Rate valid, valid_first;        // completions conforming to the schema: final / first answers
  Rate tarr, tarr_first;          // cases whose N raw outputs are identical
  Rate tara_json, tara_json_first;  // cases whose N outputs are one JSON value (canonical form)
  std::vector<FieldRate> fields;
  int64_t requests = 0;           // first requests (one per completion)
  int64_t retries = 0;            // extra requests made by --retry-invalid
  int64_t tokens = 0;             // tokens of the kept answers
  int64_t retry_tokens = 0;       // tokens of the discarded answers
};

// One row of the trade-off table: an approach to reproducibility, its measured throughput relative to
// default and its measured reproducibility, on the same prompts in the same run (src/audit/tradeoff.cpp).
// Approaches: "default", "batch-invariant", "deterministic" (greedy cases of that mode) and
// "controlled sampling" (sampled cases, T > 0 with a fixed seed replayed, in default mode). A row
// whose approach the run did not include has measured = false and its note says why; its numbers
// are left empty, never estimated.
struct TradeoffRow {
  std::string approach;
  std::string mode;               // the engine mode it ran in
  std::string decoding;           // "greedy" / "sampled, seed replayed"
  std::string precision;          // the activation precision the row measures (the run's first)
  std::string speculative;        // run --speculative: the setting of a speculation row ("" for the others)
  bool measured = false;
  std::string note;               // how it was measured, or why it was not
  int cases = 0;                  // (prompt, decoding) cases of the approach
  int n_min = 0, n_max = 0;       // completions per case: the N of TARr@N
  Rate tarr;                      // cases whose N raw outputs are identical
  std::optional<Rate> tara;       // cases whose N extracted answers are identical (with an extractor)
  Rate token_differ;              // completions differing in tokens from their case's reference
  Rate bit_differ;                // completions differing bitwise from their case's reference
  std::optional<double> max_dlogprob, mean_dlogprob;  // drift size: per-step |delta logprob|
  // Throughput relative to default: one measurement per cell (prompt, batch context, repeat) =
  // the approach's batch tokens/s / default greedy's mean tokens/s in the same context.
  int speed_n = 0;
  std::optional<double> speed_mean, speed_sd, speed_min, speed_max;
  double tokens_per_s = 0;        // the approach's batch tokens / batch seconds over its cells
};

// Signs that an endpoint replayed cached responses (repro/audit/response_cache.hpp): a response cache
// hides nondeterminism instead of removing it. Counted over the endpoint's successful completions.
struct ResponseCacheSigns {
  int completions = 0;
  int header_hits = 0;            // a response header reported a cache hit
  int repeated_ids = 0;           // same response id and output as an earlier completion of the case
  int fast_replays = 0;           // near-zero latency (kFastReplayShare / kFastReplayGapS) with a repeated output
  Rate replayed;                  // completions with any of the three signs
  std::vector<std::string> headers;   // distinct cache-hit header lines seen (at most 5)
  std::string finding;            // one line; empty when nothing points to a cache
};

// Co-batching evidence of one endpoint at one concurrency level, over every probe the level sent
// (all prompts and decoding configs): did the probe really share the server with other requests?
struct CoBatchLevel {
  int concurrency = 1;
  bool control = false;           // the concurrency-1 reference: the probe alone, every filler idle
  int probes = 0;                 // probes with client timing
  int others_min = 0;             // fewest other requests in flight during any probe's lifetime
  int others_max = 0;             // most other requests in flight at once during a probe
  double others_mean = 0;         // time-weighted mean over a probe's lifetime, averaged over probes
  std::string server_source;      // where the server-side figures came from; empty: none
  std::string server_status = "unknown";  // "known", or "unknown: <why>"
  std::optional<double> server_running_max, server_running_mean;  // requests the server ran at once
  int server_samples = 0;
  std::optional<int> response_max_batch;  // largest batch a probe's decoding shared (response field)
  bool co_batched = false;
  std::string evidence;           // one line: why the level is or is not co-batched
  // --isolation's second arm (fillers with other contents): filler texts whose prompt token counts
  // the server reported in both forms, and how many of those counts were equal.
  int isolation_fillers = 0, isolation_same_tokens = 0;
};

// What the endpoint says it is (preflight): engine, version and determinism posture.
struct EndpointPosture {
  std::string engine = "unknown";  // "vllm", "sglang", "llama.cpp", "tgi", "ollama", "repro-audit", "unknown"
  std::string version;            // empty: unknown
  std::string deterministic = "unknown";     // deterministic mode: "on" / "off" / "unknown"
  std::string batch_invariance = "unknown";  // "claimed" / "not claimed" / "unknown"
  std::vector<std::string> sources;  // what told us: "GET /version", "header server: llama.cpp", ...
  nlohmann::json info;            // the fields the info routes returned that matter here
  std::string system_fingerprint; // the tiny request's, when the API returns one
  std::vector<std::string> findings;  // plain-language lines
};

// Whether the endpoint honours `seed` on one API path (--seed-probe).
struct SeedProbeResult {
  std::string api;                // "completions" / "chat"
  std::string result = "unknown"; // "honoured" / "ignored" / "unknown"
  int same_pairs = 0, same_equal = 0;      // the same seed sent twice: pairs, pairs with equal outputs
  int diff_pairs = 0, diff_distinct = 0;   // different seeds: pairs, pairs with different outputs
  int errors = 0;
  std::string detail;             // one line
};

// The remote evidence of one endpoint: posture, co-batching per level, seed probes.
struct EndpointEvidence {
  std::string endpoint;           // the endpoint label
  EndpointPosture posture;
  std::vector<CoBatchLevel> levels;   // by concurrency
  std::vector<SeedProbeResult> seeds;
  bool verified = false;          // some level (not the control) was co-batched
  std::string finding;            // one line when not verified
};

// Several endpoints serving one model compared as a panel, per case (prompt, decoding): each
// endpoint's most frequent output against the panel's majority output.
struct PanelMember {
  std::string endpoint;
  std::string hash;               // the endpoint's most frequent output
  bool agrees = false;            // equal to the panel's majority output
  int first_divergence = -1;      // first token (or character, tokens unknown) where it leaves the majority
  bool by_char = false;           // first_divergence counts characters
  int completions = 0;
};
struct PanelCase {
  std::string prompt_id, decoding_id;
  std::string majority_hash;
  int agreeing = 0;
  std::vector<PanelMember> members;
};

// Per mode/endpoint headline: reproducibility next to throughput relative to default.
// Simulated tensor parallelism against TP 1 (run --tp; src/audit/tp_axis.cpp): one row per TP size
// and all-reduce order of a mode and precision. Each completion at that size is compared with its
// twin at TP 1: the same prompt, decoding, batch context (size, position, batch mates), seed and
// repeat.
struct TpRow {
  int tp = 1;
  std::string allreduce;            // "" at TP 1 and 2 (the orders add alike there)
  Rate bit_differ;                  // completions whose bits differ from the twin (tokens, logprob bits, logits hash)
  Rate token_differ;                // completions whose tokens differ
  Rate greedy_token_differ;         // the same over greedy completions only (n = 0: none ran)
  int64_t tokens = 0;               // generated tokens of the compared completions
  int64_t tokens_changed = 0;       // of those, the tokens from each completion's first divergent one on
  std::optional<double> max_dlogprob;  // largest |delta logprob| of chosen tokens over the common prefix
};

// The cross-device tier (run --devices cpu,cuda; src/audit/device_axis.cpp): one row per device
// other than the plan's first (the verifier, normally the CPU) for a mode and precision. Each
// completion on that device is compared with its twin on the first device: the same prompt,
// decoding, batch context, TP size, seed and repeat.
struct DeviceRow {
  std::string device;               // "cuda"
  std::string against;              // the first device of --devices: "cpu"
  Rate bit_differ;                  // completions whose bits differ from the twin (tokens, logprob bits, logits hash)
  Rate token_differ;                // completions whose tokens differ
  // The first completion that differs (in the plan's order): where, and its first differing step
  // (the first token whose id or logprob bits differ; the logits hash alone: -1).
  std::string first_diff;           // "prompt p-..., greedy, batch 8 at position 7: step 3"; "" when none
  std::optional<double> max_dlogprob;  // largest |delta logprob| of chosen tokens over the common prefix
};

// Speculative decoding as an audit axis (run --speculative; src/audit/spec_axis.cpp): one row per
// setting other than off for a mode and precision. Each greedy completion with speculation is
// compared with its twin without it: the same prompt, decoding, batch context, TP size, device, seed
// and repeat.
struct SpecRow {
  std::string speculative;          // "ngram:3", "draft:FILE:4"
  Rate bit_differ;                  // greedy completions whose bits differ from the twin
  Rate token_differ;                // greedy completions whose tokens differ (they fork)
  // Fork positions: the first step whose token differs from the twin's, over the forking completions
  std::optional<int> fork_first;    // the earliest
  std::optional<double> fork_median;
  std::string first_diff;           // where the first differing completion is (plan order); "" when none
  std::optional<double> max_dlogprob;  // largest |delta logprob| of chosen tokens over the common prefix
  // The probes' speculation, over every completion of the setting (greedy and sampled)
  int64_t drafted = 0, accepted = 0, verify_steps = 0;
  std::optional<double> acceptance;       // accepted / drafted
  std::optional<double> tokens_per_verify;  // (accepted + verify steps) / verify steps
  // Sampled completions against their twins: at T > 0 the acceptance test draws from its own streams
  // of the seed, so they may differ in any mode; counted apart, never in the greedy figures.
  Rate sampled_token_differ;
};

// Routing over one mode's cases (a mixture of experts on the local engine; src/audit/routing.cpp):
// each completion's routing trace against its case's reference completion.
struct RoutingSummary {
  int completions = 0;            // completions compared (references excluded)
  Rate flips;                     // (step, layer) pairs whose expert set differs, of the pairs compared
  std::vector<Rate> layers;       // the same per layer
  int flipped = 0;                // completions with at least one flip
  int token_diverged = 0;         // completions whose tokens differ from the reference
  // of those, the completions whose first flip comes at or before the first token divergence, and
  // of these the ones where it is at that same step
  int flip_first = 0, flip_same_step = 0;
  // reference routes whose top-k margin is below the report's fragile_margin; unset when no reference
  // carries margins (endpoints: a server sends no gate values)
  std::optional<int> fragile;
  std::optional<double> min_margin;  // the smallest top-k margin of the references (gate units)
  std::string first_flip;         // "prompt p-..., greedy, batch 8 at position 7: step 3, layer 1"; "" when none
};

struct ModeSummary {
  std::string mode;
  std::string precision;          // local: one row per (mode, precision); remote: empty
  int cases = 0;
  int divergent_cases = 0;
  int no_answer_cases = 0;        // cases with no_answer true
  double tarr_rate = 0;           // share of cases with TARr = true
  double mean_unique = 0;
  double bit_divergent_share = 0;
  // Throughput relative to default (repro/audit/tradeoff.hpp, speed_ratio): mean and standard deviation of
  // the per-cell ratios over the mode's greedy cells (its sampled ones when it ran no greedy case), and
  // how many cells; unset: not measured (no baseline ran in the same contexts).
  std::optional<double> throughput_ratio;
  std::optional<double> throughput_ratio_sd;
  int throughput_ratio_n = 0;
  int errors = 0;
  bool gated = true;              // the thresholds apply to this mode
  ModeDriftSize drift_size;              // drift against the reference context, over the mode's cases
  std::string verdict;  // "reproducible" / "no answer" / "divergent" / "errors" / "not run" (same rule for
                        // every mode)
  // ---- request accounting and the gate (see include/repro/audit/verdict.hpp)
  std::string gate;               // "pass" / "fail" / "not gated"
  int64_t requests = 0;           // requests finished: probes (+ fillers for remote endpoints)
  int64_t failed_requests = 0;    // of those, failed after retries
  double error_rate = 0;          // failed_requests / requests (0 when none)
  std::optional<StructuredSummary> structured;  // plan with a JSON Schema only
  std::optional<ResponseCacheSigns> response_cache;  // endpoints only
  // --isolation: context pairs (drawn batch mates / other contents, same shapes) whose probe output
  // differs, over the mode's cases; and its one-line finding
  Rate isolation;
  std::string isolation_finding;
  // run --tp: the TP sizes against TP 1, and their one-line finding (which sizes agree bit for bit,
  // the share of completions and tokens that change, the drift size)
  std::vector<TpRow> tp;
  std::string tp_finding;
  // run --devices: each device against the first, and the one-line finding ("cross-device (cuda
  // against cpu): identical in 96 of 96 completions")
  std::vector<DeviceRow> devices;
  std::string device_finding;
  // run --speculative: each setting against off; which settings give the same greedy tokens
  // everywhere (groups, off's first; settings with no greedy completions are left out); one line.
  std::vector<SpecRow> speculative;
  std::vector<std::vector<std::string>> spec_groups;
  std::string spec_finding;
  // a mixture of experts on the local engine: routing against the cases' references, and the one-line
  // finding ("routing, default (f32): 12% of (step, layer) pairs flip against the reference; ...")
  std::optional<RoutingSummary> routing;
  std::string routing_finding;
};

// How reports name a mode run at a precision: "default (bf16)"; the mode alone without a precision.
inline std::string mode_label(const std::string& mode, const std::string& precision) {
  return precision.empty() ? mode : mode + " (" + precision + ")";
}

// Default --max-error-rate: 5% of an endpoint's requests (probes and fillers) may fail after retries.
inline constexpr double kDefaultMaxErrorRate = 0.05;

struct Thresholds {
  int max_divergent = 0;          // cases allowed to diverge (per mode)
  double min_tarr = 1.0;          // minimum share of cases with TARr (per mode)
  std::vector<std::string> modes; // modes the gate applies to; empty = all
  double max_error_rate = kDefaultMaxErrorRate;  // share of failed requests (probes + fillers) tolerated per mode
};

struct Summary {
  int cases = 0;
  int divergent_cases = 0;
  int max_unique = 0;
  int completions = 0;
  int errors = 0;
  std::string verdict;  // "reproducible" / "no answer" / "divergent" / "errors" / "drift" / "interrupted"
  bool interrupted = false;
  std::vector<ModeSummary> modes;
  // run --tp: per precision and TP size, what changing TP from 1 does in each mode, one line:
  // "changing TP 1 -> 4 changes 37% of greedy completions at bf16 (default); 0 with tp-invariant"
  std::vector<std::string> tp_findings;
  // run --devices: a device of the axis that did not run (no CUDA device here), one line each:
  // "cross-device: cuda not checked: no CUDA device (...)"
  std::vector<std::string> device_findings;
};

// `run --baseline FILE`: the golden report this run was compared with, and what changed.
struct BaselineResult {
  std::string file;
  std::string report_sha256;      // the golden report's recorded digest
  bool digest_ok = false;         // its content matches that digest
  bool drifted = false;
  std::vector<std::string> config_changes;  // model / profile digests, plan fields that differ
  std::vector<std::string> changes;         // one line per changed, added or removed case, verdict change
};

// Prompt variants (layer 3): a prompts file's {"task", "variant", "prompt"|"messages"} records.
struct PromptVariant {
  std::string prompt_id, task, variant;
};

// Reproducibility of one prompt variant (or of a whole task, variant empty) over its cases: every
// decoding config x mode (or endpoint) x precision the plan ran the variant's prompt in.
struct VariantResult {
  std::string task, variant;
  std::string prompt_id;          // the variant's prompt (empty for a task's row)
  int cases = 0;
  int completions = 0;
  int errors = 0;
  Rate tarr;                      // cases whose N raw outputs are all identical (TARr@N)
  std::optional<Rate> tara;       // cases whose N answers agree (TARa@N); only with an answer extractor
  Rate token_differ;              // completions differing in tokens from their case's reference
  Rate bit_differ;                // completions differing bitwise from their case's reference
  double mean_unique = 0;         // distinct outputs per case
  int rank = 0;                   // 1 = most reproducible variant of its task (0 on a task's row)
};

// The variants of one task compared: the most reproducible one and whether the ranking is significant.
struct TaskVariants {
  std::string task;
  VariantResult overall;          // the task over all its variants
  std::vector<VariantResult> variants;  // in the prompts file's order
  std::string best;               // the most reproducible variant
  bool significant = false;       // best's token_differ interval is disjoint from every other variant's
  std::string finding;            // one line, plain language
};

// The machine a shard ran on (repro/audit/shards.hpp): its host name and the SHA-256 of its environment
// record without the run's own parts (model path, endpoints, request statistics, input digests).
struct ShardHost {
  std::string hostname;
  std::string fingerprint;
};

// `run --shard K/N`: which part of the plan this report holds (src/audit/shards.cpp).
struct ShardInfo {
  std::string plan_sha256;        // plan_digest(): the plan block without "shard", and the prompts digest
  int index = 0;                  // K, 1-based
  int count = 0;                  // N
  bool replicate = false;         // --replicate-shards: every shard runs every case
  std::string scheduler;          // "flag", "slurm", "kubernetes", "gitlab", "aws-batch"
  std::string source;             // the flag or the variables K/N came from
  std::vector<std::string> cases; // the case ids this shard runs, in plan order
  ShardHost host;
};

// One shard report a merged report was made from.
struct MergedShard {
  int index = 0;
  std::string file;
  std::string report_sha256;      // the shard report's recorded digest
  std::string source;
  ShardHost host;
  std::string host_label;         // replicated shards: the completions' host value
  int cases = 0;                  // cases assigned
  int completions = 0;
};

// Replicated shards: one host's outputs against the reference host's (shard 1), context by context.
struct HostAgreement {
  std::string host;               // host label
  int cases = 0;                  // cases both ran
  int identical = 0;              // cases whose completions are bitwise identical to the reference's
  int token_differ = 0;           // cases where some completion's tokens differ
  int bit_differ = 0;             // cases with the same tokens but other logits or logprob bits
  std::string first_difference;   // where the first differing case (plan order) first differs; "" if none
};

// `report merge`: the shard reports this report was made from and the coverage check.
struct MergeInfo {
  std::string plan_sha256;
  int count = 0;                  // N
  bool replicate = false;
  bool complete = true;           // every shard present and every case of the plan ran
  std::vector<MergedShard> shards;
  std::vector<int> missing_shards;
  std::vector<std::string> missing_cases;
  std::vector<HostAgreement> hosts;  // replicated shards only
};

// What would change what the run found (src/audit/advice.cpp): one entry per remedy, derived from the
// findings; every writer renders the list as "What to do".
struct Advice {
  std::string about;              // the modes or endpoints it concerns ("default (bf16)", "vllm-a"); "" the run
  std::string action;             // what to change, one line
  std::string because;            // the finding of this run it answers
  std::string cost;               // its cost as measured in this run (with spread), "not measured: ...", or ""
  std::string limits;             // the documented limits of the remedy; "" when none apply
  std::string source;             // where the remedy and its limits are documented (URL); "" for this tool's own
};

struct AuditReport {
  std::string schema = kReportSchema;
  std::string created;            // ISO-8601 UTC
  std::string profile;
  nlohmann::json plan;            // the expanded plan's parameters, as run
  Thresholds thresholds;
  std::string answer_regex, answer_json_path;
  Summary summary;
  std::vector<CaseResult> cases;
  std::vector<ThroughputRow> throughput;
  std::vector<Completion> completions;
  nlohmann::json environment;     // tool version, commit, OS, CPU, threads, BLAS, model path/sha256, digests
  std::map<std::string, std::string> prompts;  // prompt_id -> text
  // prompt_id -> the token ids the local engine was given for it (rendered chat prompts and completion
  // prompts under the run's special-token rule); local runs only.
  nlohmann::json prompt_token_ids;  // an object (null when none)
  // Token id (decimal) -> the token's text as reports show it (display_text()), for the token ids at
  // first divergences; filled from the model's tokenizer by record_token_text() (local runs only).
  std::map<std::string, std::string> token_text;
  std::vector<CrossModeTable> cross_mode;      // filled by analyze() when >1 mode ran
  double fragile_margin = 1e-3;   // a step is fragile when its relative top-2 logit margin is below this
  std::optional<BaselineResult> baseline;      // set by `run --baseline`; drift makes the verdict "drift"
  std::vector<TradeoffRow> tradeoff;           // filled by analyze(): always the four approaches
  std::vector<PromptVariant> prompt_variants;  // prompts that are variants of a task (prompts file)
  std::vector<TaskVariants> variants;          // filled by analyze() when prompt_variants is not empty
  // remote runs: the runner records posture, co-batching levels and seed probes; analyze() decides
  // `verified` and the panel (two or more endpoints)
  std::vector<EndpointEvidence> evidence;
  std::vector<PanelCase> panel;
  std::optional<ShardInfo> shard;              // run --shard: the part of the plan this report holds
  std::optional<MergeInfo> merge;              // report merge: the shards it was made from
  std::vector<Advice> advice;                  // filled by analyze(): what to do about the findings
};

}  // namespace repro
