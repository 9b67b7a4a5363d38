// Profiles, prompt sources and plan expansion.
#include "repro/audit/plan.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "repro/common/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"
#include "repro/audit/builtin_profiles.hpp"

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
    throw UsageError("--profile: unknown profile '" + name_or_path + "'; built-in profiles are " + names +
                     ", or give a path to a JSON file");
  }
  return {name_or_path, read_file(name_or_path, "profile")};
}

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& key, const std::string& why) {
  throw UsageError("profile '" + file + "': key \"" + key + "\" " + why);
}

int get_int(const nlohmann::json& v, const std::string& file, const std::string& key, int lo, int hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad(file, key, fmt::format("must be an integer from {} to {}", lo, hi));
  return v.get<int>();
}
double get_num(const nlohmann::json& v, const std::string& file, const std::string& key, double lo, double hi) {
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi)
    bad(file, key, fmt::format("must be a number from {} to {}", lo, hi));
  return v.get<double>();
}
template <class T, class F>
std::vector<T> get_list(const nlohmann::json& v, const std::string& file, const std::string& key, F each) {
  nlohmann::json arr = v.is_array() ? v : nlohmann::json::array({v});
  if (arr.empty()) bad(file, key, "must not be empty");
  std::vector<T> out;
  for (const auto& e : arr) out.push_back(each(e));
  return out;
}

const std::vector<std::string> kModes = {"default", "batch-invariant"};
const std::vector<std::string> kFormats = {"json", "md", "html", "junit"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

void apply_profile(const ProfileSource& src, PlanOptions& o) {
  const std::string& file = src.name;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(src.text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError("profile '" + file + "': invalid JSON (" + std::string(e.what()) + "); fix the file");
  }
  if (!j.is_object()) throw UsageError("profile '" + file + "': must be a JSON object of settings");
  o.profile = file;
  o.profile_digest = sha256_hex(src.text);
  static const std::vector<std::string> keys = {
      "description", "prompts", "max_tokens", "repeats", "modes", "batch_sizes", "positions", "filler_sets",
      "filler_seed", "temperatures", "top_p", "top_k", "seeds", "threads", "formats", "thresholds",
      "answer_regex", "answer_json_path", "concurrency", "cache_probe"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const auto& v = it.value();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      throw UsageError("profile '" + file + "': unknown key \"" + k + "\"; allowed keys are " + join(keys));
    if (k == "description") {
      if (!v.is_string()) bad(file, k, "must be a string");
    } else if (k == "prompts") {
      o.prompts = get_list<Prompt>(v, file, k, [&](const nlohmann::json& e) {
        if (e.is_string()) return prompt_from_text(e.get<std::string>());
        if (e.is_object() && e.contains("prompt") && e["prompt"].is_string()) {
          Prompt p = prompt_from_text(e["prompt"].get<std::string>());
          if (e.contains("id")) {
            if (!e["id"].is_string()) bad(file, k, "entries' \"id\" must be a string");
            p.id = e["id"].get<std::string>();
          }
          return p;
        }
        bad(file, k, "must be a list of strings or {\"id\", \"prompt\"} objects");
      });
    } else if (k == "max_tokens") {
      o.max_tokens = get_int(v, file, k, 1, 1 << 20);
    } else if (k == "repeats") {
      o.repeats = get_int(v, file, k, 1, 1000000);
    } else if (k == "modes") {
      o.modes = get_list<std::string>(v, file, k, [&](const nlohmann::json& e) {
        if (!e.is_string() || std::find(kModes.begin(), kModes.end(), e.get<std::string>()) == kModes.end())
          bad(file, k, "allows " + join(kModes));
        return e.get<std::string>();
      });
    } else if (k == "batch_sizes") {
      o.batch_sizes = get_list<int>(v, file, k, [&](const nlohmann::json& e) { return get_int(e, file, k, 1, 4096); });
    } else if (k == "positions") {
      o.positions = get_list<std::string>(v, file, k, [&](const nlohmann::json& e) {
        if (e.is_number_integer() && e.get<int>() >= 0) return std::to_string(e.get<int>());
        if (e.is_string() && (e == "first" || e == "middle" || e == "last")) return e.get<std::string>();
        bad(file, k, "allows first, middle, last or a non-negative integer");
      });
    } else if (k == "filler_sets") {
      o.filler_sets = get_int(v, file, k, 1, 10000);
    } else if (k == "filler_seed") {
      if (!v.is_number_unsigned()) bad(file, k, "must be a non-negative integer");
      o.filler_seed = v.get<uint64_t>();
    } else if (k == "temperatures") {
      o.temperatures = get_list<double>(v, file, k, [&](const nlohmann::json& e) { return get_num(e, file, k, 0, 10); });
    } else if (k == "top_p") {
      o.top_ps = get_list<double>(v, file, k, [&](const nlohmann::json& e) {
        double p = get_num(e, file, k, 0, 1);
        if (p <= 0) bad(file, k, "must be in (0, 1]");
        return p;
      });
    } else if (k == "top_k") {
      o.top_ks = get_list<int>(v, file, k, [&](const nlohmann::json& e) { return get_int(e, file, k, 0, 1 << 20); });
    } else if (k == "seeds") {
      o.seeds = get_list<uint64_t>(v, file, k, [&](const nlohmann::json& e) {
        if (!e.is_number_unsigned()) bad(file, k, "must be non-negative integers");
        return e.get<uint64_t>();
      });
    } else if (k == "threads") {
      o.threads = get_int(v, file, k, 1, 1024);
    } else if (k == "formats") {
      o.formats = get_list<std::string>(v, file, k, [&](const nlohmann::json& e) {
        if (!e.is_string() || std::find(kFormats.begin(), kFormats.end(), e.get<std::string>()) == kFormats.end())
          bad(file, k, "allows " + join(kFormats));
        return e.get<std::string>();
      });
    } else if (k == "thresholds") {
      if (!v.is_object()) bad(file, k, "must be an object with max_divergent, min_tarr, modes, max_error_rate");
      for (auto t = v.begin(); t != v.end(); ++t) {
        std::string tk = "thresholds." + t.key();
        if (t.key() == "max_divergent")
          o.thresholds.max_divergent = get_int(t.value(), file, tk, 0, 1 << 30);
        else if (t.key() == "min_tarr")
          o.thresholds.min_tarr = get_num(t.value(), file, tk, 0, 1);
        else if (t.key() == "max_error_rate")
          o.thresholds.max_error_rate = get_num(t.value(), file, tk, 0, 1);
        else if (t.key() == "modes")
          o.thresholds.modes = get_list<std::string>(t.value(), file, tk, [&](const nlohmann::json& e) {
            if (!e.is_string()) bad(file, tk, "must be a list of mode or endpoint names");
            return e.get<std::string>();
          });
        else
          throw UsageError("profile '" + file + "': unknown key \"" + tk +
                           "\"; allowed keys are thresholds.max_divergent, thresholds.min_tarr, "
                           "thresholds.modes, thresholds.max_error_rate");
      }
    } else if (k == "answer_regex" || k == "answer_json_path") {
      if (!v.is_string()) bad(file, k, "must be a string");
      (k == "answer_regex" ? o.answer_regex : o.answer_json_path) = v.get<std::string>();
    } else if (k == "concurrency") {
      o.concurrency = get_list<int>(v, file, k, [&](const nlohmann::json& e) { return get_int(e, file, k, 1, 4096); });
    } else if (k == "cache_probe") {
      if (!v.is_boolean()) bad(file, k, "must be true or false");
      o.cache_probe = v.get<bool>();
    }
  }
}

nlohmann::json plan_to_json(const PlanOptions& o) {
  nlohmann::json prompts = nlohmann::json::array();
  for (const auto& p : o.prompts) prompts.push_back(p.id);
  return {{"profile", o.profile},
          {"prompt_ids", prompts},
          {"max_tokens", o.max_tokens},
          {"repeats", o.repeats},
          {"modes", o.modes},
          {"batch_sizes", o.batch_sizes},
          {"positions", o.positions},
          {"filler_sets", o.filler_sets},
          {"filler_seed", o.filler_seed},
          {"temperatures", o.temperatures},
          {"top_p", o.top_ps},
          {"top_k", o.top_ks},
          {"seeds", o.seeds},
          {"threads", o.threads},
          {"concurrency", o.concurrency}};
}

void validate_plan(const PlanOptions& o, int context_length) {
  if (o.prompts.empty())
    throw UsageError("no prompts: give --prompt TEXT, --prompts FILE, or a profile with \"prompts\"");
  if (o.repeats < 1) throw UsageError("--repeats must be at least 1 (got " + std::to_string(o.repeats) + ")");
  if (o.max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  if (o.threads < 1) throw UsageError("--threads must be at least 1");
  if (o.filler_sets < 1) throw UsageError("--filler-sets must be at least 1");
  if (o.modes.empty()) throw UsageError("--modes: give at least one of default, batch-invariant");
  for (const auto& m : o.modes)
    if (std::find(kModes.begin(), kModes.end(), m) == kModes.end())
      throw UsageError("--modes: unknown mode '" + m + "'; use default or batch-invariant");
  for (int b : o.batch_sizes)
    if (b < 1) throw UsageError("--batch-sizes: batch sizes must be at least 1");
  for (const auto& f : o.formats)
    if (std::find(kFormats.begin(), kFormats.end(), f) == kFormats.end())
      throw UsageError("--format: unknown format '" + f + "'; use " + join(kFormats));
  for (double t : o.temperatures)
    if (t < 0) throw UsageError("--temperatures must be >= 0");
  for (double p : o.top_ps)
    if (p <= 0 || p > 1) throw UsageError("--top-p must be in (0, 1]");
  if (context_length > 0) {
    int max_batch = *std::max_element(o.batch_sizes.begin(), o.batch_sizes.end());
    if (max_batch > 1024)
      throw UsageError("--batch-sizes: " + std::to_string(max_batch) +
                       " sequences is more than the local engine batches (1024); use smaller batch sizes");
    if (o.max_tokens >= context_length)
      throw UsageError("--max-tokens " + std::to_string(o.max_tokens) + " does not fit the model's context length " +
                       std::to_string(context_length) + "; lower it");
  }
}

// ============================================================================================
// Prompts
// ============================================================================================

std::string prompt_id_for(const std::string& text) { return "p-" + sha256_hex(text).substr(0, 10); }

Prompt prompt_from_text(const std::string& text) { return Prompt{prompt_id_for(text), text, nullptr}; }

std::vector<Prompt> builtin_prompts() {
  return {prompt_from_text("Once upon a time"), prompt_from_text("The little dog was"),
          prompt_from_text("Lily wanted to")};
}

std::vector<Prompt> prompts_from_file(const std::string& path) {
  std::string data = read_file(path, "prompts file");
  std::vector<Prompt> out;
  bool jsonl = path.size() >= 6 && (path.substr(path.size() - 6) == ".jsonl" || path.substr(path.size() - 5) == ".json");
  std::istringstream in(data);
  std::string line;
  int lineno = 0;
  std::set<std::string> ids;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    std::string where = "prompts file '" + path + "' line " + std::to_string(lineno);
    if (!jsonl) {
      out.push_back(prompt_from_text(line));
    } else {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        throw UsageError(where + ": invalid JSON (" + e.what() + "); each line must be one JSON object");
      }
      if (!j.is_object()) throw UsageError(where + ": each line must be a JSON object");
      Prompt p;
      const nlohmann::json* body = &j;
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
      } else {
        throw UsageError(where + ": needs a \"prompt\" string or a \"messages\" array");
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

std::vector<ContextCell> context_cells(const PlanOptions& o) {
  std::vector<ContextCell> out;
  std::vector<int> sizes = o.batch_sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int b : sizes) {
    std::set<int> positions;
    for (const auto& p : o.positions) {
      int pos = p == "first" ? 0 : p == "last" ? b - 1 : p == "middle" ? b / 2 : std::stoi(p);
      if (pos < b) positions.insert(pos);
    }
    if (positions.empty()) positions.insert(0);
    int sets = b == 1 ? 1 : o.filler_sets;
    for (int pos : positions)
      for (int f = 0; f < sets; ++f) out.push_back({b, pos, f});
  }
  return out;
}

}  // namespace repro
