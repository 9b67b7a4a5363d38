// The audit plan: prompts x decoding configs x modes (or endpoints) x batch contexts x repeats.
// Options are vectors; expand_plan() turns them into cells in loops.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"
#include "repro/tokenizer/tokenizer.hpp"

namespace repro {

struct Prompt {
  std::string id;        // stable: given id / custom_id, else "p-" + first 10 hex of SHA-256(text)
  std::string text;      // rendered text (chat messages through repro::render_chat)
  // Chat form when given (remote chat endpoints use it as is). Chat data keeps the prompts file's
  // key order (ordered_json), which the chat template sees (see repro/chat/chat.hpp, ChatExtras).
  nlohmann::ordered_json messages;
  // Prompt variants (prompts file {"task", "variant", ...}): the task this prompt is a variant of and
  // the variant's name; both empty for a plain prompt. Reports compare variants per task.
  std::string task, variant;
  // Chat prompts: `tools` and `chat_template_kwargs` of the prompts-file line (null when absent),
  // given to the chat template (and sent to remote chat endpoints).
  nlohmann::ordered_json tools = nullptr, chat_template_kwargs = nullptr;
};

// Every knob of a run; a profile sets some, flags override. Validated by validate_plan().
struct PlanOptions {
  std::string profile = "quick";
  std::string profile_digest;             // SHA-256 of the profile file's bytes
  std::vector<Prompt> prompts;
  int max_tokens = 32;
  int repeats = 2;
  std::vector<std::string> modes = {"default", "batch-invariant"};
  std::vector<std::string> precisions = {"f32"};          // activation precisions: f32 | bf16 | f16
  std::vector<int> batch_sizes = {1, 8};
  // Simulated tensor parallelism (docs/ENGINE.md): TP sizes and all-reduce orders, factors of every
  // batch context like the batch size. TP 1 and 2 run once (no sum at 1; x_0 + x_1 either way at 2)
  // and record no all-reduce; from TP 4 on each order runs.
  std::vector<int> tp_sizes = {1};
  std::vector<std::string> allreduces = {"ring"};
  // The cross-device tier (run --devices cpu,cuda): every batch context runs on each device, and
  // each completion off the first device is compared with its twin on it. Empty: the engine's
  // --device only, no axis.
  std::vector<std::string> devices;
  // Speculative decoding as an audit axis (run --speculative off,ngram:3,draft:FILE:4): every batch
  // context runs with each setting, and each completion with speculation is compared with its twin
  // without it ("off", put first when the list lacks it). Empty: no axis, no speculation.
  std::vector<std::string> speculative;
  std::vector<std::string> positions = {"first", "last"};  // first | middle | last | <int>
  int filler_sets = 2;
  uint64_t filler_seed = 1;
  // Long and mixed contexts (the `long` profile):
  int prompt_tokens = 0;                   // > 0 and no prompts given: generated prompts of >= this many tokens
  int generated_prompts = 3;               // how many prompt_tokens generates
  std::vector<int> mate_join_steps = {0};  // the last batch mate joins after this many probe steps
  std::vector<int> mate_prompt_deltas = {0};  // tokens added to the last batch mate's prompt
  std::string long_context_model;          // used instead when the model's context is too short ("" = none)
  std::vector<double> temperatures = {0.0};
  std::vector<double> top_ps = {1.0};
  std::vector<int> top_ks = {0};
  std::vector<uint64_t> seeds = {1};
  int threads = 1;
  std::vector<std::string> formats = {"json", "md", "html", "junit"};
  Thresholds thresholds;
  std::string answer_regex, answer_json_path;
  // structured output: a JSON Schema (null: none; {"type":"json_object"}: any JSON object), the file
  // it came from (for messages; empty from a profile or a report), and validation with retry
  nlohmann::json json_schema;
  std::string json_schema_file;
  int retry_invalid = 0;
  // remote
  std::vector<int> concurrency = {1, 8};
  bool cache_probe = true;
  bool seed_probe = false;
  // endpoints: ask for the experts a mixture of experts routed each token to (docs/REMOTE.md)
  bool routed_experts = false;
  bool isolation = false;         // local: every batch context again with other batch-mate contents        // per endpoint and API: is the seed honoured at T > 0? (seed_probe.hpp)
  // Chat message content that spells a control token of the model's chat template opens a turn of
  // its own; refused unless allowed (local engine only).
  bool allow_control_tokens = false;
  // Completion prompts (text, not messages) match control-token text verbatim (encode_special), as
  // Hugging Face, vLLM's /v1/completions and llama.cpp's server do; off: it is encoded as text.
  bool parse_special = false;
  // Scale-out (repro/audit/shards.hpp): "K/N" runs the cases of shard K of N ("" = the whole plan;
  // "auto" is resolved from the scheduler's variables before the run); replicate_shards runs every
  // case on every shard, so the merge compares the hosts.
  std::string shard;
  bool replicate_shards = false;
};

// A built-in profile (embedded from profiles/*.json at build time) or a JSON file.
struct ProfileSource {
  std::string name;     // "quick" or the path
  std::string text;     // the JSON text
};
std::vector<std::string> builtin_profile_names();
ProfileSource find_profile(const std::string& name_or_path);   // UsageError lists the built-in names
// Applies a profile's keys over `o`. Unknown keys or bad values: UsageError naming the file, the key
// and the allowed values.
void apply_profile(const ProfileSource& src, PlanOptions& o);
// The report's "plan" block: profile, prompt_ids and every option of the plan option table
// (repro/audit/plan_options.hpp) under its report key.
// `remote`: a run against endpoints, whose plan block leaves out the local-only options
// (PlanOption::local_only).
nlohmann::json plan_to_json(const PlanOptions& o, bool remote = false);
// Restores the plan a report was made with (for --resume): every option from the plan block, through
// the same checks as a profile; the prompts' texts from report.prompts. UsageError when a key is
// missing or invalid.
PlanOptions plan_from_report(const AuditReport& report);
// The prompts a report holds, in plan order (plan.prompt_ids; without them, the ids of `prompts` in
// order): each with its text, its chat messages (plan.prompt_messages) and its task and variant
// (prompt_variants). An id without a text is left out; plan_from_report refuses such a report.
std::vector<Prompt> report_prompts(const AuditReport& report);
// One of them by id, as report_prompts gives it; nullopt when the report holds no text for the id.
std::optional<Prompt> report_prompt(const AuditReport& report, const std::string& id);
// Every option's valid range (error names the flag), prompts present, and what the local engine
// can hold (context_length: -1 when unknown, i.e. remote).
void validate_plan(const PlanOptions& o, int context_length);

// Prompt sources. UsageError names the file and line.
// .txt (one per line), .jsonl ({id, prompt|messages}, optionally grouped as variants of a task:
// {task, variant, prompt|messages}; without an id a variant's id is "<task>/<variant>"), batch API.
// A variant without a task, a task without a variant, or a (task, variant) pair given twice is an
// error naming the file and line.
std::vector<Prompt> prompts_from_file(const std::string& path);
Prompt prompt_from_text(const std::string& text);
std::string prompt_id_for(const std::string& text);
// The built-in prompts used when neither the profile nor the flags give any.
std::vector<Prompt> builtin_prompts();

// Where the plan's JSON Schema came from, for messages: "--json-schema 'FILE'" or "json_schema".
std::string json_schema_where(const PlanOptions& o);
// The schema to compile (json_object as {"type":"object"}); null when the plan has none.
nlohmann::json json_schema_of(const PlanOptions& o);

// Generated long prompts (plan option prompt_tokens). The text is a children's story of simple
// sentences drawn by a splitmix64 generator: story_text(seed, n) is the first n sentences of the
// story of `seed`, the same on every machine. Prompt i (0-based) of generated_prompts() is the
// shortest prefix, in whole sentences, of the story of seed i + 1 that the tokenizer turns into at
// least min_tokens tokens (BOS included), so the same model always gets the same prompts.
std::string story_text(uint64_t seed, int sentences);
std::vector<Prompt> generated_prompts(int count, int min_tokens, const Tokenizer& tok);
// The long prompts for endpoints (no local tokenizer to count tokens with): `count` prompts, each the
// shipped long text (long_prompt_text) followed by its own question, so they share the long prefix.
std::vector<Prompt> endpoint_long_prompts(int count);
// Exactly n token ids (BOS first) of the story of `seed`: the prompt of a long batch mate.
std::vector<int> story_tokens(uint64_t seed, int n, const Tokenizer& tok);

// The decoding configs of the plan: greedy once; each sampled (T, top_p, top_k) once per seed,
// with the seed in the id ("t0.8-p0.95-k40-s1"), so a case holds runs that should be identical.
struct DecodingCell {
  DecodingConfig cfg;
  uint64_t seed = 0;
};
std::vector<DecodingCell> decoding_cells(const PlanOptions& o);

// One local batch context.
struct ContextCell {
  int batch_size;
  int position;
  int filler_set;       // index; filler seed = filler_seed + filler_set
  int mate_join_step = 0;     // the last batch mate joins after this many steps of the probe
  int mate_prompt_delta = 0;  // tokens added to its prompt
  bool other_contents = false;  // the batch mates' tokens replaced, shapes kept (--isolation)
  int tp = 1;                   // simulated tensor-parallel size
  std::string allreduce;        // its all-reduce order ("" at TP 1 and 2, where the orders agree)
  std::string device;           // run --devices: "cpu" / "cuda"; "" without the axis (the engine's --device)
  std::string speculative;      // run --speculative: "off", "ngram:3", "draft:FILE:4"; "" without the axis
};
// Batch contexts: batch sizes x distinct resolved positions x filler sets x mate join steps x mate
// prompt deltas (batch size 1: one, without batch mates) x TP sizes x all-reduce orders (one at TP
// 1 and 2) x devices (run --devices) x speculative settings (run --speculative). A numeric position a batch size cannot
// hold (position >= batch size) is skipped for that batch size (see skipped_positions).
std::vector<ContextCell> context_cells(const PlanOptions& o);

// The numeric --positions a batch size of the sweep cannot hold, per batch size above 1 (batch size
// 1 always runs the prompt alone, at position 0). Local runs record them in the report's plan block
// ("positions_skipped"); validate_plan refuses a position no batch size holds and a batch size that
// holds none of the positions.
struct SkippedPositions {
  int batch_size = 0;
  std::vector<int> positions;
};
std::vector<SkippedPositions> skipped_positions(const PlanOptions& o);

}  // namespace repro
