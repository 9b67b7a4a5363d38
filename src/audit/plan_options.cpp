// The table of plan options (see include/repro/audit/plan_options.hpp) and the one check every
// value goes through, whether it comes from a flag, a profile or a report being resumed.
#include "repro/audit/plan_options.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "repro/audit/shards.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/engine/engine.hpp"
#include "repro/structured/json_schema.hpp"

namespace repro {

using nlohmann::json;

namespace {

bool int_in(const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
  }
  int64_t s = v.get<int64_t>();
  return s >= lo && s <= hi;
}
// A finite number in [lo, hi]; NaN and infinities never pass (NaN fails both comparisons).
bool num_in(const json& v, double lo, double hi) {
  if (!v.is_number()) return false;
  double d = v.get<double>();
  return d >= lo && d <= hi;
}
bool one_of(const json& v, std::initializer_list<const char*> names) {
  if (!v.is_string()) return false;
  for (const char* n : names)
    if (v.get<std::string>() == n) return true;
  return false;
}

// Report formats: NAME or NAME=PATH (report/formats.cpp writes them).
bool format_spec(const json& v) {
  if (!v.is_string()) return false;
  std::string s = v.get<std::string>();
  size_t eq = s.find('=');
  if (eq != std::string::npos && eq + 1 == s.size()) return false;
  return one_of(json(s.substr(0, eq)), {"json", "md", "markdown", "html", "junit"});
}

// off, ngram:K or draft:FILE:K with K from 1 to 32 (the draft file is read when the run starts).
bool speculative_setting(const json& v) {
  if (!v.is_string()) return false;
  try {
    parse_speculative(v.get<std::string>());
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

bool position(const json& v) {
  if (v.is_number_integer()) return int_in(v, 0, 1 << 20);
  if (!v.is_string()) return false;
  std::string s = v.get<std::string>();
  if (s == "first" || s == "middle" || s == "last") return true;
  return !s.empty() && s.size() <= 7 && s.find_first_not_of("0123456789") == std::string::npos;
}

// The plan's form of a schema: a response_format wrapper unwrapped, except json_object, which stays
// {"type":"json_object"} (endpoints get json_object mode; locally any JSON object).
json plan_schema(const json& v) {
  if (v.is_object() && v.value("type", json()) == "json_object") return json{{"type", "json_object"}};
  return v.is_null() ? v : schema_of(v);
}

template <class T>
std::vector<T> as_list(const json& v) {
  return v.get<std::vector<T>>();
}

}  // namespace

bool PlanOption::local_only() const {
  static const std::set<std::string> local = {"modes", "precisions", "batch_sizes", "tp_sizes", "allreduces", "devices", "speculative",
                                              "positions", "filler_sets",
                                              "filler_seed", "prompt_tokens", "generated_prompts", "mate_join_steps",
                                              "mate_prompt_deltas", "long_context_model", "threads"};
  return local.count(name) > 0;
}

// clang-format off
const std::vector<PlanOption>& plan_options() {
  static const std::vector<PlanOption> table = {
    {"max_tokens", OptionType::Int, "--max-tokens", "max_tokens", "max_tokens",
     "Tokens to generate per completion", true,
     [](const PlanOptions& o) { return json(o.max_tokens); },
     [](PlanOptions& o, const json& v) { o.max_tokens = v.get<int>(); },
     [](const json& v) { return int_in(v, 1, 1 << 20); }, "an integer from 1 to 1048576"},
    {"repeats", OptionType::Int, "-n,--repeats", "repeats", "repeats",
     "Repeats of every batch context", true,
     [](const PlanOptions& o) { return json(o.repeats); },
     [](PlanOptions& o, const json& v) { o.repeats = v.get<int>(); },
     [](const json& v) { return int_in(v, 1, 1000000); }, "an integer from 1 to 1000000"},
    {"modes", OptionType::TextList, "--modes", "modes", "modes",
     "Kernel modes, comma-separated: default,batch-invariant,deterministic,tp-invariant (deterministic decodes every "
     "request alone, one thread, reference kernels; tp-invariant also keeps its bits across TP sizes)", true,
     [](const PlanOptions& o) { return json(o.modes); },
     [](PlanOptions& o, const json& v) { o.modes = as_list<std::string>(v); },
     [](const json& v) { return one_of(v, {"default", "batch-invariant", "deterministic", "tp-invariant"}); },
     "default, batch-invariant, deterministic or tp-invariant"},
    {"precisions", OptionType::TextList, "--precisions", "precisions", "precisions",
     "Activation precisions, comma-separated: f32,bf16,f16 (each one a factor of the plan, like the modes)", true,
     [](const PlanOptions& o) { return json(o.precisions); },
     [](PlanOptions& o, const json& v) { o.precisions = as_list<std::string>(v); },
     [](const json& v) { return one_of(v, {"f32", "bf16", "f16"}); }, "f32, bf16 or f16"},
    {"batch_sizes", OptionType::IntList, "--batch-sizes", "batch_sizes", "batch_sizes",
     "Batch sizes, comma-separated (e.g. 1,8,32)", true,
     [](const PlanOptions& o) { return json(o.batch_sizes); },
     [](PlanOptions& o, const json& v) { o.batch_sizes = as_list<int>(v); },
     [](const json& v) { return int_in(v, 1, 4096); }, "integers from 1 to 4096"},
    {"tp_sizes", OptionType::IntList, "--tp", "tp", "tp",
     "Simulated tensor-parallel sizes, comma-separated: 1,2,4,8 (factors of every batch context, like the batch "
     "size; the model must divide into each: heads, KV heads, FFN hidden size)", true,
     [](const PlanOptions& o) { return json(o.tp_sizes); },
     [](PlanOptions& o, const json& v) { o.tp_sizes = as_list<int>(v); },
     [](const json& v) { return int_in(v, 1, 8) && (v.get<int>() & (v.get<int>() - 1)) == 0; }, "1, 2, 4 or 8"},
    {"allreduces", OptionType::TextList, "--allreduce", "allreduce", "allreduce",
     "All-reduce orders of --tp, comma-separated: ring,tree (each a factor from TP 4 on; TP 1 and 2 add alike)",
     true,
     [](const PlanOptions& o) { return json(o.allreduces); },
     [](PlanOptions& o, const json& v) { o.allreduces = as_list<std::string>(v); },
     [](const json& v) { return one_of(v, {"ring", "tree"}); }, "ring or tree"},
    {"devices", OptionType::TextList, "--devices", "devices", "devices",
     "The cross-device tier: devices to run every batch context on, comma-separated: cpu,cuda (each completion "
     "off the first device is compared with its twin on it; a device this machine lacks is skipped with a note; "
     "excludes --device)", true,
     [](const PlanOptions& o) { return json(o.devices); },
     [](PlanOptions& o, const json& v) { o.devices = as_list<std::string>(v); },
     [](const json& v) { return one_of(v, {"cpu", "cuda"}); }, "cpu or cuda", true},
    {"speculative", OptionType::TextList, "--speculative", "speculative", "speculative",
     "Speculative decoding as a factor: settings to run every batch context with, comma-separated: off, ngram:K "
     "(prompt lookup), draft:FILE:K (a draft model with the same vocabulary); K tokens drafted per step, 1 to 32. "
     "Each completion with speculation is compared with its twin without it (off is added first when missing)",
     true,
     [](const PlanOptions& o) { return json(o.speculative); },
     [](PlanOptions& o, const json& v) {
       o.speculative = as_list<std::string>(v);
       if (!o.speculative.empty() && std::find(o.speculative.begin(), o.speculative.end(), "off") == o.speculative.end())
         o.speculative.insert(o.speculative.begin(), "off");  // the reference every setting is compared with
     },
     speculative_setting, "off, ngram:K or draft:FILE:K with K from 1 to 32", true},
    {"positions", OptionType::TextList, "--positions", "positions", "positions",
     "Probe positions in the batch: first,middle,last or indices (an index no batch size holds is refused; one only "
     "the larger batch sizes hold is skipped for the smaller ones, with a note)", true,
     [](const PlanOptions& o) { return json(o.positions); },
     [](PlanOptions& o, const json& v) {
       o.positions.clear();
       for (const auto& e : v) o.positions.push_back(e.is_string() ? e.get<std::string>() : std::to_string(e.get<int>()));
     },
     position, "first, middle, last or a non-negative integer"},
    {"filler_sets", OptionType::Int, "--filler-sets", "filler_sets", "filler_sets",
     "Filler draws per batch context", true,
     [](const PlanOptions& o) { return json(o.filler_sets); },
     [](PlanOptions& o, const json& v) { o.filler_sets = v.get<int>(); },
     [](const json& v) { return int_in(v, 1, 10000); }, "an integer from 1 to 10000"},
    {"filler_seed", OptionType::UInt, "", "filler_seed", "filler_seed",
     "Seed of the filler draws (filler set i uses filler_seed + i)", true,
     [](const PlanOptions& o) { return json(o.filler_seed); },
     [](PlanOptions& o, const json& v) { o.filler_seed = v.get<uint64_t>(); },
     [](const json& v) { return v.is_number_unsigned(); }, "a non-negative integer"},
    {"prompt_tokens", OptionType::Int, "--prompt-tokens", "prompt_tokens", "prompt_tokens",
     "Without --prompt/--prompts: generate prompts of at least this many tokens from seeded story text (0 = the "
     "built-in prompts)", true,
     [](const PlanOptions& o) { return json(o.prompt_tokens); },
     [](PlanOptions& o, const json& v) { o.prompt_tokens = v.get<int>(); },
     [](const json& v) { return int_in(v, 0, 1 << 20); }, "an integer from 0 to 1048576"},
    {"generated_prompts", OptionType::Int, "--generated-prompts", "generated_prompts", "generated_prompts",
     "How many prompts --prompt-tokens generates (prompt i from the story of seed i + 1)", true,
     [](const PlanOptions& o) { return json(o.generated_prompts); },
     [](PlanOptions& o, const json& v) { o.generated_prompts = v.get<int>(); },
     [](const json& v) { return int_in(v, 1, 1000); }, "an integer from 1 to 1000"},
    {"mate_join_steps", OptionType::IntList, "--mate-join-steps", "mate_join_steps", "mate_join_steps",
     "Probe steps after which the last batch mate joins, comma-separated (0 = with the others; k > 0: its prefill "
     "shares a forward pass with the others' decode)", true,
     [](const PlanOptions& o) { return json(o.mate_join_steps); },
     [](PlanOptions& o, const json& v) { o.mate_join_steps = as_list<int>(v); },
     [](const json& v) { return int_in(v, 0, 1 << 20); }, "integers from 0 to 1048576"},
    {"mate_prompt_deltas", OptionType::IntList, "--mate-prompt-deltas", "mate_prompt_deltas", "mate_prompt_deltas",
     "Tokens added to the last batch mate's prompt, comma-separated (0,1: its prompt length changes by one token)", true,
     [](const PlanOptions& o) { return json(o.mate_prompt_deltas); },
     [](PlanOptions& o, const json& v) { o.mate_prompt_deltas = as_list<int>(v); },
     [](const json& v) { return int_in(v, 0, 4096); }, "integers from 0 to 4096"},
    {"long_context_model", OptionType::Text, "--long-context-model", "long_context_model", "long_context_model",
     "Model run instead when the chosen model's context is too short for the prompts (e.g. synth:long; empty = "
     "none: such a plan is refused)", true,
     [](const PlanOptions& o) { return json(o.long_context_model); },
     [](PlanOptions& o, const json& v) { o.long_context_model = v.get<std::string>(); },
     [](const json& v) { return v.is_string(); }, "a model file or synth:NAME"},
    {"temperatures", OptionType::NumberList, "--temperatures", "temperatures", "temperatures",
     "Temperatures, comma-separated (0 = greedy)", true,
     [](const PlanOptions& o) { return json(o.temperatures); },
     [](PlanOptions& o, const json& v) { o.temperatures = as_list<double>(v); },
     [](const json& v) { return num_in(v, 0, 10); }, "numbers from 0 to 10"},
    {"top_ps", OptionType::NumberList, "--top-p", "top_p", "top_p",
     "top-p values, comma-separated", true,
     [](const PlanOptions& o) { return json(o.top_ps); },
     [](PlanOptions& o, const json& v) { o.top_ps = as_list<double>(v); },
     [](const json& v) { return num_in(v, 0, 1) && v.get<double>() > 0; }, "numbers in (0, 1]"},
    {"top_ks", OptionType::IntList, "--top-k", "top_k", "top_k",
     "top-k values, comma-separated (0 = off)", true,
     [](const PlanOptions& o) { return json(o.top_ks); },
     [](PlanOptions& o, const json& v) { o.top_ks = as_list<int>(v); },
     [](const json& v) { return int_in(v, 0, 1 << 20); }, "integers from 0 to 1048576"},
    {"seeds", OptionType::UIntList, "--seeds", "seeds", "seeds",
     "Sampling seeds, comma-separated", true,
     [](const PlanOptions& o) { return json(o.seeds); },
     [](PlanOptions& o, const json& v) { o.seeds = as_list<uint64_t>(v); },
     [](const json& v) { return v.is_number_unsigned(); }, "non-negative integers"},
    // Its flag, --threads, is one of the engine flags shared by every engine subcommand (cli/flags).
    {"threads", OptionType::Int, "", "threads", "threads",
     "Engine threads", true,
     [](const PlanOptions& o) { return json(o.threads); },
     [](PlanOptions& o, const json& v) { o.threads = v.get<int>(); },
     [](const json& v) { return int_in(v, 1, 1024); }, "an integer from 1 to 1024"},
    {"thresholds.max_divergent", OptionType::Int, "--max-divergent", "thresholds.max_divergent",
     "thresholds.max_divergent", "Cases allowed to diverge per gated mode before exit 1", true,
     [](const PlanOptions& o) { return json(o.thresholds.max_divergent); },
     [](PlanOptions& o, const json& v) { o.thresholds.max_divergent = v.get<int>(); },
     [](const json& v) { return int_in(v, 0, 1 << 30); }, "an integer from 0 to 1073741824"},
    {"thresholds.min_tarr", OptionType::Number, "--min-tarr", "thresholds.min_tarr", "thresholds.min_tarr",
     "Minimum share of cases with TARr (all outputs identical) per gated mode", true,
     [](const PlanOptions& o) { return json(o.thresholds.min_tarr); },
     [](PlanOptions& o, const json& v) { o.thresholds.min_tarr = v.get<double>(); },
     [](const json& v) { return num_in(v, 0, 1); }, "a number from 0 to 1"},
    {"thresholds.modes", OptionType::TextList, "--gate-modes", "thresholds.modes", "thresholds.modes",
     "Modes or endpoint labels the thresholds apply to (default: the profile's locally, every endpoint remotely)", true,
     [](const PlanOptions& o) { return json(o.thresholds.modes); },
     [](PlanOptions& o, const json& v) { o.thresholds.modes = as_list<std::string>(v); },
     [](const json& v) { return v.is_string() && !v.get<std::string>().empty(); }, "mode or endpoint names", true},
    {"thresholds.max_error_rate", OptionType::Number, "--max-error-rate", "thresholds.max_error_rate",
     "thresholds.max_error_rate",
     "Share of failed requests (probes and fillers) per mode or endpoint tolerated before exit 3 (default 0.05)", true,
     [](const PlanOptions& o) { return json(o.thresholds.max_error_rate); },
     [](PlanOptions& o, const json& v) { o.thresholds.max_error_rate = v.get<double>(); },
     [](const json& v) { return num_in(v, 0, 1); }, "a number from 0 to 1"},
    {"answer_regex", OptionType::Text, "--answer-regex", "answer_regex", "answer_regex",
     "PCRE2 answer extractor for TARa (first group or whole match)", true,
     [](const PlanOptions& o) { return json(o.answer_regex); },
     [](PlanOptions& o, const json& v) { o.answer_regex = v.get<std::string>(); },
     [](const json& v) { return v.is_string(); }, "a string"},
    {"answer_json_path", OptionType::Text, "--answer-json-path", "answer_json_path", "answer_json_path",
     "JSON path answer extractor for TARa, e.g. $.answer or answer.value; several paths, comma-separated, "
     "also get per-field agreement", true,
     [](const PlanOptions& o) { return json(o.answer_json_path); },
     [](PlanOptions& o, const json& v) { o.answer_json_path = v.get<std::string>(); },
     [](const json& v) { return v.is_string(); }, "a string"},
    {"json_schema", OptionType::Json, "--json-schema", "json_schema", "json_schema",
     "Structured output: a JSON Schema file every answer must conform to (local: constrained decoding; "
     "endpoints: response_format); {\"type\":\"json_object\"} asks for any JSON object", true,
     [](const PlanOptions& o) { return o.json_schema; },
     [](PlanOptions& o, const json& v) { o.json_schema = plan_schema(v); },
     [](const json& v) { return v.is_null() || v.is_object(); }, "a JSON Schema object"},
    {"retry_invalid", OptionType::Int, "--retry-invalid", "retry_invalid", "retry_invalid",
     "Validation with retry: re-request an answer that does not conform to --json-schema up to this many times "
     "(sampled configs with the next seeds); reported separately", true,
     [](const PlanOptions& o) { return json(o.retry_invalid); },
     [](PlanOptions& o, const json& v) { o.retry_invalid = v.get<int>(); },
     [](const json& v) { return int_in(v, 0, 100); }, "an integer from 0 to 100"},
    {"formats", OptionType::TextList, "--format", "formats", "formats",
     "Report formats: json,md,html,junit (FORMAT=PATH writes one elsewhere)", true,
     [](const PlanOptions& o) { return json(o.formats); },
     [](PlanOptions& o, const json& v) { o.formats = as_list<std::string>(v); },
     format_spec, "report formats json, md, html or junit, each optionally as FORMAT=PATH"},
    {"concurrency", OptionType::IntList, "--concurrency", "concurrency", "concurrency",
     "Concurrency levels, comma-separated (e.g. 1,8,64,256)", true,
     [](const PlanOptions& o) { return json(o.concurrency); },
     [](PlanOptions& o, const json& v) { o.concurrency = as_list<int>(v); },
     [](const json& v) { return int_in(v, 1, 4096); }, "integers from 1 to 4096"},
    {"cache_probe", OptionType::Bool, "--no-cache-probe", "cache_probe", "cache_probe",
     "Skip the cold-versus-warm prefix-cache probe", false,
     [](const PlanOptions& o) { return json(o.cache_probe); },
     [](PlanOptions& o, const json& v) { o.cache_probe = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"isolation", OptionType::Bool, "--isolation", "isolation", "isolation",
     "Run every batch context again with batch mates of the same shapes (prompt and decode lengths, positions) "
     "but other token contents: any difference is leakage between rows, not rounding (endpoints: every level "
     "above concurrency 1 again with the fillers' words reversed)", true,
     [](const PlanOptions& o) { return json(o.isolation); },
     [](PlanOptions& o, const json& v) { o.isolation = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"seed_probe", OptionType::Bool, "--seed-probe", "seed_probe", "seed_probe",
     "Endpoints: check per API (completions, chat) that the seed is honoured at T > 0: the same seed twice gives "
     "the same output, different seeds different ones (on in the sampling profile)", true,
     [](const PlanOptions& o) { return json(o.seed_probe); },
     [](PlanOptions& o, const json& v) { o.seed_probe = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"routed_experts", OptionType::Bool, "--routed-experts", "routed_experts", "routed_experts",
     "Endpoints: ask each server for the experts a mixture of experts routed every token to (SGLang: "
     "return_routed_experts, server flag --enable-return-routed-experts; vLLM: server flag "
     "--enable-return-routed-experts) and compare the routes as local runs do; a server that returns none is "
     "reported as routing unknown (local runs on a mixture of experts always record routing)", true,
     [](const PlanOptions& o) { return json(o.routed_experts); },
     [](PlanOptions& o, const json& v) { o.routed_experts = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"allow_control_tokens", OptionType::Bool, "--allow-control-tokens", "allow_control_tokens",
     "allow_control_tokens",
     "Let chat message content hold the chat template's control-token text (e.g. <|im_start|>system), which "
     "becomes control tokens that open turns of their own; refused by default", true,
     [](const PlanOptions& o) { return json(o.allow_control_tokens); },
     [](PlanOptions& o, const json& v) { o.allow_control_tokens = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"parse_special", OptionType::Bool, "--parse-special", "parse_special", "parse_special",
     "Completion prompts match special-token text: <|im_start|> becomes that control token, as Hugging "
     "Face, vLLM's /v1/completions and llama.cpp's server encode it (default: encoded as text; user-defined "
     "tokens such as <think> are matched either way; with --endpoint use --endpoint-parse-special)", true,
     [](const PlanOptions& o) { return json(o.parse_special); },
     [](PlanOptions& o, const json& v) { o.parse_special = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
    {"shard", OptionType::Text, "--shard", "shard", "shard",
     "Run shard K of N of the plan (1-based, e.g. 2/4): the cases (prompt, decoding, mode, precision) whose hash "
     "falls on K; auto reads Slurm, Kubernetes (with --shard-count), GitLab or AWS Batch array variables. Merge the "
     "shard reports with `report merge`", true,
     [](const PlanOptions& o) { return json(o.shard); },
     [](PlanOptions& o, const json& v) { o.shard = v.get<std::string>(); },
     [](const json& v) {
       return v.is_string() && (v.get<std::string>().empty() || v.get<std::string>() == "auto" ||
                                parse_shard(v.get<std::string>()).count > 0);
     },
     "K/N with 1 <= K <= N (e.g. 2/4), or auto"},
    {"replicate_shards", OptionType::Bool, "--replicate-shards", "replicate_shards", "replicate_shards",
     "With --shard: every shard runs every case (the same plan on each machine of a fleet); the merged report "
     "compares the hosts as a factor", true,
     [](const PlanOptions& o) { return json(o.replicate_shards); },
     [](PlanOptions& o, const json& v) { o.replicate_shards = v.get<bool>(); },
     [](const json& v) { return v.is_boolean(); }, "true or false"},
  };
  return table;
}
// clang-format on

std::string PlanOption::flag_name() const {
  std::string f = flag;
  size_t comma = f.rfind(',');
  return comma == std::string::npos ? f : f.substr(comma + 1);
}

const PlanOption* find_plan_option_by_key(const std::string& key) {
  for (const auto& o : plan_options())
    if (key == o.profile_key || key == o.report_key) return &o;
  return nullptr;
}

namespace {

bool is_list(OptionType t) {
  return t == OptionType::IntList || t == OptionType::UIntList || t == OptionType::NumberList ||
         t == OptionType::TextList;
}

std::string shown(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return fmt::format("{}", v.get<double>());
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

json check_plan_value(const PlanOption& opt, const json& value, const std::string& where) {
  auto fail = [&](const json& got, const std::string& what) -> json {
    throw UsageError(where + " must be " + what + " (got " + shown(got) + ")");
  };
  if (!is_list(opt.type)) {
    if (!opt.valid_value(value)) fail(value, opt.valid);
    return value;
  }
  json list = value.is_array() ? value : json::array({value});
  if (list.empty() && !opt.may_be_empty) fail(value, std::string("a non-empty list of ") + opt.valid);
  for (const auto& e : list)
    if (!opt.valid_value(e)) fail(e, opt.valid);
  return list;
}

json parse_flag_value(const PlanOption& opt, const std::string& text) {
  auto one = [&](const std::string& s, OptionType t) -> json {
    switch (t) {
      case OptionType::Int:
      case OptionType::IntList:
      case OptionType::UInt:
      case OptionType::UIntList: {
        if (s.empty() || s.find_first_not_of("-+0123456789") != std::string::npos) return s;
        errno = 0;
        char* end = nullptr;
        if (s[0] == '-') {
          long long v = std::strtoll(s.c_str(), &end, 10);
          if (errno || *end) return s;
          return static_cast<int64_t>(v);
        }
        unsigned long long v = std::strtoull(s.c_str(), &end, 10);
        if (errno || *end) return s;
        return static_cast<uint64_t>(v);
      }
      case OptionType::Number:
      case OptionType::NumberList: {
        char* end = nullptr;
        double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end) return s;
        return v;  // NaN and infinities stay, and fail the range check by name
      }
      case OptionType::Json: {  // the flag names a file holding the JSON
        const std::string what = opt.flag_name() + " '" + s + "'";
        if (s.empty()) throw UsageError(opt.flag_name() + ": empty file name; give the path of a JSON file");
        json v;
        std::string err;
        if (!parse_json(read_file(s, (opt.flag_name() + " file").c_str()), v, &err))
          throw UsageError(what + ": not valid JSON (" + err + "); give a JSON Schema object (e.g. {\"type\":\"object\",...})");
        return v;
      }
      case OptionType::Bool:
        if (s == "true") return true;
        if (s == "false") return false;
        return s;
      default:
        return s;
    }
  };
  if (!is_list(opt.type)) return one(trim(text), opt.type);
  json out = json::array();
  for (const auto& part : split(text, ',')) {
    std::string t = trim(part);
    if (t.empty()) throw UsageError(opt.flag_name() + ": empty entry in '" + text + "'; give a comma-separated list");
    out.push_back(one(t, opt.type));
  }
  return out;
}

}  // namespace repro
