// Profiles, prompt sources and plan expansion.
#include "repro/audit/plan.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "repro/audit/builtin_profiles.hpp"
#include "repro/chat/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/rng.hpp"
#include "repro/common/json.hpp"
#include "repro/common/threadpool.hpp"
#include "repro/common/util.hpp"
#include "repro/audit/builtin_profiles.hpp"
#include "repro/audit/plan_options.hpp"
#include "repro/structured/json_schema.hpp"

namespace repro {

// ============================================================================================
// Profiles
// ============================================================================================

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : builtin_profiles()) names.push_back(p.first);
  return names;
}

ProfileSource find_profile(const std::string& name_or_path) {
  bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                         (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  if (!looks_like_path) {
    for (const auto& p : builtin_profiles())
      if (p.first == name_or_path) return {p.first, p.second};
    std::string names;
    for (const auto& n : builtin_profile_names()) names += (names.empty() ? "" : ", ") + n;
    std::string near = closest_match(name_or_path, builtin_profile_names());
    throw UsageError("--profile: unknown profile '" + name_or_path + "'" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; built-in profiles are " + names +
                     ", or give a path to a JSON file");
  }
  return {name_or_path, read_file(name_or_path, "profile")};
}

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& key, const std::string& why) {
  throw UsageError("profile '" + file + "': key \"" + key + "\" " + why);
}

// The value at a dotted key ("thresholds.min_tarr") of a JSON object, or nullptr.
const nlohmann::json* at_key(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json* cur = &j;
  for (const auto& part : split(key, '.')) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string allowed_profile_keys() {
  std::string s = "description, prompts";
  for (const auto& opt : plan_options()) s += std::string(", ") + opt.profile_key;
  return s;
}

}  // namespace

void apply_profile(const ProfileSource& src, PlanOptions& o) {
  const std::string& file = src.name;
  nlohmann::json j;
  std::string err;
  if (!parse_json(src.text, j, &err)) throw UsageError("profile '" + file + "': invalid JSON (" + err + "); fix the file");
  if (!j.is_object()) throw UsageError("profile '" + file + "': must be a JSON object of settings");
  o.profile = file;
  o.profile_digest = sha256_hex(src.text);
  // Flatten nested objects ("thresholds": {"min_tarr": ..}) to dotted keys the table knows.
  std::vector<std::pair<std::string, const nlohmann::json*>> keys;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool nested = false;
    for (const auto& opt : plan_options())
      if (std::string(opt.profile_key).rfind(it.key() + ".", 0) == 0) nested = true;
    if (!nested) {
      keys.emplace_back(it.key(), &it.value());
      continue;
    }
    if (!it.value().is_object()) bad(file, it.key(), "must be an object");
    for (auto t = it.value().begin(); t != it.value().end(); ++t) keys.emplace_back(it.key() + "." + t.key(), &t.value());
  }
  for (const auto& [k, v] : keys) {
    if (k == "description") {
      if (!v->is_string()) bad(file, k, "must be a string");
      continue;
    }
    if (k == "prompts") {
      nlohmann::json arr = v->is_array() ? *v : nlohmann::json::array({*v});
      if (arr.empty()) bad(file, k, "must not be empty");
      o.prompts.clear();
      for (const auto& e : arr) {
        if (e.is_string()) {
          o.prompts.push_back(prompt_from_text(e.get<std::string>()));
        } else if (e.is_object() && e.contains("prompt") && e["prompt"].is_string()) {
          Prompt p = prompt_from_text(e["prompt"].get<std::string>());
          if (e.contains("id")) {
            if (!e["id"].is_string()) bad(file, k, "entries' \"id\" must be a string");
            p.id = e["id"].get<std::string>();
          }
          o.prompts.push_back(std::move(p));
        } else {
          bad(file, k, "must be a list of strings or {\"id\", \"prompt\"} objects");
        }
      }
      continue;
    }
    const PlanOption* opt = nullptr;
    for (const auto& row : plan_options())
      if (k == row.profile_key) opt = &row;
    if (!opt)
      throw UsageError("profile '" + file + "': unknown key \"" + k + "\"; allowed keys are " + allowed_profile_keys());
    opt->set(o, check_plan_value(*opt, *v, "profile '" + file + "': key \"" + k + "\""));
  }
}

nlohmann::json plan_to_json(const PlanOptions& o, bool remote) {
  nlohmann::json prompts = nlohmann::json::array(), messages = nlohmann::json::object(),
                 extras = nlohmann::json::object();
  for (const auto& p : o.prompts) {
    prompts.push_back(p.id);
    // Chat prompts keep their messages, so a resumed run sends them as they were, not flattened.
    if (p.messages.is_array() && !p.messages.empty()) messages[p.id] = p.messages;
    if (!p.tools.is_null()) extras[p.id]["tools"] = p.tools;
    if (!p.chat_template_kwargs.is_null()) extras[p.id]["chat_template_kwargs"] = p.chat_template_kwargs;
  }
  nlohmann::json j = {{"profile", o.profile}, {"prompt_ids", prompts}};
  if (!messages.empty()) j["prompt_messages"] = messages;
  if (!extras.empty()) j["prompt_chat_extras"] = extras;
  for (const auto& opt : plan_options()) {
    if (remote && opt.local_only()) continue;  // an endpoint has its own batches, kernels and precision
    nlohmann::json* cur = &j;
    for (const auto& part : split(opt.report_key, '.')) cur = &(*cur)[part];
    *cur = opt.get(o);
  }
  return j;
}

PlanOptions plan_from_report(const AuditReport& r) {
  PlanOptions o;
  const auto& j = r.plan;
  auto lacks = [](const std::string& key) {
    return UsageError("cannot resume: the report's \"plan\" lacks \"" + key +
                      "\" (written by another version?); start a new run instead");
  };
  if (!j.is_object()) throw lacks("profile");
  const nlohmann::json* profile = at_key(j, "profile");
  if (!profile || !profile->is_string()) throw lacks("profile");
  o.profile = profile->get<std::string>();
  if (r.environment.is_object())
    if (const nlohmann::json* d = at_key(r.environment, "digests.profile_sha256"); d && d->is_string())
      o.profile_digest = d->get<std::string>();
  for (const auto& opt : plan_options()) {
    const nlohmann::json* v = at_key(j, opt.report_key);
    nlohmann::json engine_precision;
    // Reports written before structured output had no schema and no retries.
    static const nlohmann::json kNoSchema = nullptr, kNoRetry = 0, kNo = false;
    if (!v && std::string(opt.report_key) == "json_schema") v = &kNoSchema;
    if (!v && std::string(opt.report_key) == "retry_invalid") v = &kNoRetry;
    // ... and refused control-token text in chat content (they did not check for it).
    if (!v && std::string(opt.report_key) == "allow_control_tokens") v = &kNo;
    // ... and encoded control-token text of completion prompts as text.
    if (!v && std::string(opt.report_key) == "parse_special") v = &kNo;
    // ... and were not shards.
    static const nlohmann::json kWhole = "";
    if (!v && std::string(opt.report_key) == "shard") v = &kWhole;
    if (!v && std::string(opt.report_key) == "replicate_shards") v = &kNo;
    // ... and ran without tensor parallelism.
    static const nlohmann::json kTp1 = nlohmann::json::array({1}), kRing = nlohmann::json::array({"ring"});
    if (!v && std::string(opt.report_key) == "tp") v = &kTp1;
    if (!v && std::string(opt.report_key) == "allreduce") v = &kRing;
    // ... and on one device.
    static const nlohmann::json kNoDevices = nlohmann::json::array();
    if (!v && std::string(opt.report_key) == "devices") v = &kNoDevices;
    // ... and without speculative decoding.
    if (!v && std::string(opt.report_key) == "speculative") v = &kNoDevices;
    // A remote run records no settings of the local engine: they keep their defaults.
    const nlohmann::json local_default = opt.get(PlanOptions{});
    if (!v && opt.local_only() && r.environment.is_object() && r.environment.contains("endpoints")) v = &local_default;
    if (!v && std::string(opt.report_key) == "precisions") {
      // Reports written before precisions became a plan axis ran one precision: the engine's.
      const nlohmann::json* p = r.environment.is_object() ? at_key(r.environment, "engine.precision") : nullptr;
      engine_precision = nlohmann::json::array({p && p->is_string() ? p->get<std::string>() : "f32"});
      v = &engine_precision;
    }
    if (!v) throw lacks(opt.report_key);
    opt.set(o, check_plan_value(opt, *v, std::string("cannot resume: the report's plan key \"") + opt.report_key + "\""));
  }
  const nlohmann::json* ids = at_key(j, "prompt_ids");
  if (!ids || !ids->is_array()) throw lacks("prompt_ids");
  for (const auto& id : *ids) {
    if (!id.is_string()) throw lacks("prompt_ids");
    if (!r.prompts.count(id.get<std::string>()))
      throw UsageError("cannot resume: the report lacks the text of prompt '" + id.get<std::string>() +
                       "'; start a new run instead");
  }
  o.prompts = report_prompts(r);
  return o;
}


std::string json_schema_where(const PlanOptions& o) {
  return o.json_schema_file.empty() ? std::string("json_schema") : "--json-schema '" + o.json_schema_file + "'";
}

nlohmann::json json_schema_of(const PlanOptions& o) { return o.json_schema.is_null() ? o.json_schema : schema_of(o.json_schema); }

// A numeric --positions entry: a non-negative integer below 1,000,000 (no batch is larger).
static int parse_position(const std::string& p) {
  int v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || end != p.data() + p.size() || v < 0 || v >= 1000000)
    throw UsageError("--positions: '" + p + "' is not first, middle, last or an integer from 0 to 999999");
  return v;
}

namespace {
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}
std::string joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// A numeric position no batch size holds, or a batch size above 1 that holds none of the positions,
// would audit nothing that was asked for: refused, naming both flags.
void check_positions(const PlanOptions& o, int max_batch) {
  const std::vector<int>& sizes = o.batch_sizes;
  for (const auto& p : o.positions) {
    if (p == "first" || p == "middle" || p == "last") continue;
    int pos = parse_position(p);
    if (pos >= max_batch)
      throw UsageError("--positions " + p + ": no batch of --batch-sizes " + joined(sizes) +
                       " has position " + p + " (the largest, " + std::to_string(max_batch) +
                       ", has positions 0 to " + std::to_string(max_batch - 1) + "); give a position below " +
                       std::to_string(max_batch) + ", or first, middle or last, or a batch size above " + p);
  }
  for (const auto& s : skipped_positions(o))
    if (s.positions.size() == o.positions.size())
      throw UsageError("--positions " + joined(o.positions) + ": batch size " + std::to_string(s.batch_size) +
                       " of --batch-sizes " + joined(sizes) + " has none of these positions (it has 0 to " +
                       std::to_string(s.batch_size - 1) +
                       "); add first, middle or last to --positions, or drop " +
                       std::to_string(s.batch_size) + " from --batch-sizes");
}
}  // namespace

void validate_plan(const PlanOptions& o, int context_length) {
  if (o.prompts.empty())
    throw UsageError("no prompts: give --prompt TEXT, --prompts FILE, or a profile with \"prompts\"");
  // Every option's range, whatever set it (a flag, a profile, a resumed report, code).
  for (const auto& opt : plan_options())
    check_plan_value(opt, opt.get(o), *opt.flag ? opt.flag_name() : "profile key \"" + std::string(opt.profile_key) + "\"");
  check_threads(o.threads);  // and at most 4 x the cores of this machine
  // The schema compiles (unsupported keywords are named here, before anything runs).
  if (!o.json_schema.is_null()) JsonSchema(json_schema_of(o), json_schema_where(o));
  if (o.retry_invalid > 0 && o.json_schema.is_null())
    throw UsageError("--retry-invalid " + std::to_string(o.retry_invalid) +
                     " re-requests answers that do not conform to a schema; give --json-schema FILE too");
  for (const auto& p : o.positions)
    if (p != "first" && p != "middle" && p != "last") parse_position(p);
  if (!o.devices.empty()) {
    if (std::set<std::string>(o.devices.begin(), o.devices.end()).size() != o.devices.size())
      throw UsageError("--devices: each device once (e.g. cpu,cuda)");
    if (o.devices.size() < 2)
      throw UsageError("--devices compares devices: give two (cpu,cuda), or run on one with --device " + o.devices[0]);
    if (std::find(o.devices.begin(), o.devices.end(), "cuda") != o.devices.end())
      for (const auto& m : o.modes)
        if (m != "default" && m != "batch-invariant" && m != "invariant")
          throw UsageError("--devices cuda: the cuda op tables run default and batch-invariant only; drop '" + m +
                           "' from --modes, or cuda from --devices");
  }
  if (!o.speculative.empty()) {
    if (std::set<std::string>(o.speculative.begin(), o.speculative.end()).size() != o.speculative.size())
      throw UsageError("--speculative: each setting once (e.g. off,ngram:3,ngram:8)");
    const bool on = std::any_of(o.speculative.begin(), o.speculative.end(), [](const std::string& s) { return s != "off"; });
    if (on && std::find(o.devices.begin(), o.devices.end(), "cuda") != o.devices.end())
      throw UsageError("--speculative is not implemented on cuda: drop cuda from --devices, or drop --speculative");
  }
  if (o.replicate_shards && o.shard.empty())
    throw UsageError("--replicate-shards runs the whole plan on every shard of --shard K/N (or --shard auto); give "
                     "--shard too");
  if (context_length > 0) {
    int max_batch = *std::max_element(o.batch_sizes.begin(), o.batch_sizes.end());
    if (max_batch > 1024)
      throw UsageError("--batch-sizes: " + std::to_string(max_batch) +
                       " sequences is more than the local engine batches (1024); use smaller batch sizes");
    check_positions(o, max_batch);
    if (o.max_tokens >= context_length)
      throw UsageError("--max-tokens " + std::to_string(o.max_tokens) + " does not fit the model's context length " +
                       std::to_string(context_length) + "; lower it");
  }
}

// ============================================================================================
// Prompts
// ============================================================================================

std::string prompt_id_for(const std::string& text) { return "p-" + sha256_hex(text).substr(0, 10); }

Prompt prompt_from_text(const std::string& text) { return Prompt{prompt_id_for(text), text, nullptr, "", "", nullptr, nullptr}; }

std::vector<Prompt> builtin_prompts() {
  return {prompt_from_text("Once upon a time"), prompt_from_text("The little dog was"),
          prompt_from_text("Lily wanted to")};
}

// ---------------------------------------------------------------- generated long prompts

namespace {
uint64_t story_next(uint64_t& s) { return rng::splitmix64_next(s); }
}  // namespace

std::string story_text(uint64_t seed, int sentences) {
  static const char* names[] = {"Lily", "Tom", "Ben", "Mia", "Sue", "Max", "Anna", "Tim", "Sam", "Lucy"};
  static const char* adjs[] = {"big", "little", "red", "happy", "small", "old", "new", "blue", "kind", "funny"};
  static const char* nouns[] = {"dog", "cat", "ball", "tree", "box", "bird", "car",
                                "cake", "toy", "fish", "hat", "book", "flower", "boat"};
  static const char* places[] = {"park", "shop", "sea", "forest", "school", "garden", "river", "house"};
  static const char* feelings[] = {"happy", "sad", "surprised", "tired", "proud", "scared"};
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + 0x5708ull;
  auto pick = [&](const auto& arr) { return arr[story_next(s) % std::size(arr)]; };
  std::string out = "Once upon a time, there was a " + std::string(pick(adjs)) + " " + pick(nouns) + ".";
  for (int i = 1; i < sentences; ++i) {
    const char* n = pick(names);
    switch (story_next(s) % 8) {
      case 0: out += fmt::format(" {} saw a {} {} in the {}.", n, pick(adjs), pick(nouns), pick(places)); break;
      case 1: out += fmt::format(" {} and {} played with the {}.", n, pick(names), pick(nouns)); break;
      case 2: out += fmt::format(" The {} was very {}.", pick(nouns), pick(feelings)); break;
      case 3: out += fmt::format(" {} wanted to find the {} {}.", n, pick(adjs), pick(nouns)); break;
      case 4: out += fmt::format(" One day, {} went to the {}.", n, pick(places)); break;
      case 5: out += fmt::format(" {} said, \"I like the {} {}!\"", n, pick(adjs), pick(nouns)); break;
      case 6: out += fmt::format(" {} felt {} and smiled.", n, pick(feelings)); break;
      default: out += " They were happy and played all day."; break;
    }
  }
  return out;
}

namespace {
// The fewest whole sentences of the story of `seed` that encode to at least min_tokens tokens.
std::string story_with_tokens(uint64_t seed, int min_tokens, const Tokenizer& tok) {
  auto count = [&](int n) { return static_cast<int>(tok.encode(story_text(seed, n), true).size()); };
  int hi = std::max(1, min_tokens / 8);
  while (count(hi) < min_tokens) {
    if (hi > (1 << 22)) throw UsageError("--prompt-tokens: the tokenizer makes too few tokens of the generated text");
    hi *= 2;
  }
  int lo = 0;  // count(lo) < min_tokens (or lo = 0), count(hi) >= min_tokens
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    (count(mid) >= min_tokens ? hi : lo) = mid;
  }
  return story_text(seed, hi);
}
}  // namespace

std::vector<Prompt> generated_prompts(int count, int min_tokens, const Tokenizer& tok) {
  std::vector<Prompt> out;
  for (int i = 0; i < count; ++i) out.push_back(prompt_from_text(story_with_tokens(static_cast<uint64_t>(i) + 1, min_tokens, tok)));
  return out;
}

std::vector<Prompt> endpoint_long_prompts(int count) {
  static const char* questions[] = {
      "Question: Why did the engineer's sensor disagree with Ilse's readings on some days? Answer:",
      "Question: What did Ilse write in the fourth column of her ledger, and why? Answer:",
      "Question: Name three kinds of agreement a visitor might mean by an accurate clock. Answer:",
      "Question: Retell the story in five sentences. Answer:"};
  std::vector<Prompt> out;
  for (int i = 0; i < count; ++i) {
    std::string q = questions[i % 4];
    if (i >= 4) q = "(" + std::to_string(i + 1) + ") " + q;
    out.push_back(prompt_from_text(long_prompt_text() + "\n" + q));
  }
  return out;
}

std::vector<int> story_tokens(uint64_t seed, int n, const Tokenizer& tok) {
  std::vector<int> ids = tok.encode(story_with_tokens(seed, n, tok), true);
  ids.resize(static_cast<size_t>(std::max(1, n)));
  return ids;
}

std::vector<Prompt> prompts_from_file(const std::string& path) {
  std::string data = read_file(path, "prompts file");
  std::vector<Prompt> out;
  bool jsonl = path.size() >= 6 && (path.substr(path.size() - 6) == ".jsonl" || path.substr(path.size() - 5) == ".json");
  std::istringstream in(data);
  std::string line;
  int lineno = 0;
  std::set<std::string> ids;
  std::map<std::pair<std::string, std::string>, int> variant_lines;  // (task, variant) -> line
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    std::string where = "prompts file '" + path + "' line " + std::to_string(lineno);
    if (!jsonl) {
      out.push_back(prompt_from_text(line));
    } else {
      // Key order kept: the chat template sees messages, tools and chat_template_kwargs as written.
      nlohmann::ordered_json j;
      std::string err;
      if (!parse_json(line, j, &err))
        throw UsageError(where + ": invalid JSON (" + err + "); each line must be one JSON object");
      if (!j.is_object()) throw UsageError(where + ": each line must be a JSON object");
      Prompt p;
      const nlohmann::ordered_json* body = &j;
      if (j.contains("custom_id")) {  // OpenAI Batch API input: {"custom_id", "method", "url", "body"}
        if (!j["custom_id"].is_string()) throw UsageError(where + ": \"custom_id\" must be a string");
        if (!j.contains("body") || !j["body"].is_object()) throw UsageError(where + ": batch line has no \"body\" object");
        p.id = j["custom_id"].get<std::string>();
        body = &j["body"];
      } else if (j.contains("id")) {
        if (j["id"].is_string())
          p.id = j["id"].get<std::string>();
        else if (j["id"].is_number_integer())
          p.id = std::to_string(j["id"].get<int64_t>());
        else
          throw UsageError(where + ": \"id\" must be a string or an integer");
      }
      if (body->contains("prompt") && (*body)["prompt"].is_string()) {
        p.text = (*body)["prompt"].get<std::string>();
      } else if (body->contains("messages")) {
        p.messages = (*body)["messages"];
        p.text = render_chat(p.messages, where);
        // What the chat template gets beside the messages (as a chat completions request gives it).
        if (body->contains("tools")) p.tools = (*body)["tools"];
        if (body->contains("chat_template_kwargs")) p.chat_template_kwargs = (*body)["chat_template_kwargs"];
        check_chat_extras(ChatExtras{p.tools, p.chat_template_kwargs}, where);
      } else {
        throw UsageError(where + ": needs a \"prompt\" string or a \"messages\" array");
      }
      // Variants of a task: {"task": ..., "variant": ..., "prompt"|"messages": ...}
      const bool has_task = j.contains("task"), has_variant = j.contains("variant");
      if (has_variant && !has_task)
        throw UsageError(where + ": \"variant\" without \"task\"; name the task this prompt is a variant of, e.g. "
                                 "{\"task\": \"contract-extraction\", \"variant\": \"free-form\", \"prompt\": ...}");
      if (has_task && !has_variant)
        throw UsageError(where + ": \"task\" without \"variant\"; name this variant of the task, e.g. \"variant\": \"structured\"");
      if (has_task) {
        for (const char* k : {"task", "variant"})
          if (!j[k].is_string() || trim(j[k].get<std::string>()).empty())
            throw UsageError(where + ": \"" + k + "\" must be a non-empty string");
        p.task = j["task"].get<std::string>();
        p.variant = j["variant"].get<std::string>();
        auto [it, fresh] = variant_lines.emplace(std::make_pair(p.task, p.variant), lineno);
        if (!fresh)
          throw UsageError(where + ": task '" + p.task + "' variant '" + p.variant + "' already appears on line " +
                           std::to_string(it->second) + "; give each variant of a task its own name");
        if (p.id.empty()) p.id = p.task + "/" + p.variant;
      }
      if (p.id.empty()) p.id = prompt_id_for(p.text);
      out.push_back(std::move(p));
    }
    if (!ids.insert(out.back().id).second)
      throw UsageError("prompts file '" + path + "' line " + std::to_string(lineno) + ": duplicate prompt id '" +
                       out.back().id + "'; ids must be unique");
  }
  if (out.empty()) throw UsageError("prompts file '" + path + "' holds no prompts; add one per line");
  return out;
}

// ============================================================================================
// Expansion
// ============================================================================================

static std::string num(double v) {
  std::string s = fmt::format("{:g}", v);
  return s;
}

std::vector<DecodingCell> decoding_cells(const PlanOptions& o) {
  std::vector<DecodingCell> out;
  std::set<std::string> seen;
  for (double t : o.temperatures) {
    if (t == 0) {
      if (seen.insert("greedy").second) out.push_back({DecodingConfig{"greedy", 0, 1, 0, o.max_tokens}, 0});
      continue;
    }
    for (double p : o.top_ps)
      for (int k : o.top_ks)
        for (uint64_t s : o.seeds) {
          std::string id = "t" + num(t) + (p < 1 ? "-p" + num(p) : "") + (k > 0 ? "-k" + std::to_string(k) : "") +
                           "-s" + std::to_string(s);
          if (seen.insert(id).second) out.push_back({DecodingConfig{id, t, p, k, o.max_tokens}, s});
        }
  }
  return out;
}

std::vector<SkippedPositions> skipped_positions(const PlanOptions& o) {
  std::vector<int> sizes = o.batch_sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<SkippedPositions> out;
  for (int b : sizes) {
    if (b <= 1) continue;
    SkippedPositions s{b, {}};
    for (const auto& p : o.positions)
      if (p != "first" && p != "middle" && p != "last")
        if (int pos = parse_position(p); pos >= b) s.positions.push_back(pos);
    if (!s.positions.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::vector<ContextCell> context_cells(const PlanOptions& o) {
  std::vector<ContextCell> out;
  std::vector<int> sizes = o.batch_sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  // TP sizes (ascending, once each) with their all-reduce orders: one at TP 1 and 2.
  std::vector<std::pair<int, std::string>> tps;
  for (int tp : std::set<int>(o.tp_sizes.begin(), o.tp_sizes.end())) {
    if (tp <= 2) {
      tps.push_back({tp, ""});
      continue;
    }
    std::vector<std::string> seen;
    for (const auto& a : o.allreduces)
      if (std::find(seen.begin(), seen.end(), a) == seen.end()) {
        seen.push_back(a);
        tps.push_back({tp, a});
      }
  }
  if (tps.empty()) tps.push_back({1, ""});
  std::vector<std::string> devices = o.devices;
  if (devices.empty()) devices.push_back("");  // the engine's --device, no axis
  std::vector<std::string> specs = o.speculative;
  if (specs.empty()) specs.push_back("");  // no speculation, no axis
  for (int b : sizes) {
    std::set<int> positions;
    for (const auto& p : o.positions) {
      int pos = p == "first" ? 0 : p == "last" ? b - 1 : p == "middle" ? b / 2 : parse_position(p);
      if (pos < b) positions.insert(pos);  // a position the batch cannot hold: skipped_positions()
    }
    if (b == 1) positions = {0};  // the prompt alone
    int sets = b == 1 ? 1 : o.filler_sets;
    const std::vector<int> none = {0};
    const std::vector<int>& joins = b == 1 ? none : o.mate_join_steps;
    const std::vector<int>& deltas = b == 1 ? none : o.mate_prompt_deltas;
    for (int pos : positions)
      for (int f = 0; f < sets; ++f)
        for (int j : std::set<int>(joins.begin(), joins.end()))
          for (int d : std::set<int>(deltas.begin(), deltas.end()))
            for (const auto& [tp, ar] : tps)
              for (const auto& dev : devices)
                for (const auto& sp : specs) {
                  out.push_back({b, pos, f, j, d, false, tp, ar, dev, sp});
                  if (o.isolation && b > 1)
                    out.push_back({b, pos, f, j, d, true, tp, ar, dev, sp});  // same shapes, other contents
                }
  }
  return out;
}

}  // namespace repro
