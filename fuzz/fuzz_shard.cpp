// libFuzzer target: `--shard K/N` and `--shard auto` (src/audit/shard_spec.cpp), which read a flag and
// the environment variables a scheduler (or anyone) set. Builds from its own short source list
// (CMakeLists.txt: fuzz_shard_SOURCES), see docs/FUZZING.md. tests/unit-shard.cpp includes this file
// with REPRO_FUZZ_NO_MAIN and replays fuzz/corpus/shard/ through shard_one_input().
//
// Input layout: the first line is the --shard text and the --shard-count (a decimal number; anything
// else is 0), separated by a tab; every further line is NAME=VALUE, an environment variable (the first
// of a name counts). Properties checked:
// - parse_shard gives 1 <= K <= N <= kMaxShards or {0, 0}, and K/N written back parses to the same;
// - resolve_shard_auto throws nothing but UsageError, and what it returns is such a K/N, with a
//   scheduler and a source, agreeing with --shard-count when one is given.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "repro/audit/shards.hpp"
#include "repro/common/error.hpp"

namespace repro::fuzz {

inline int shard_one_input(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string first = text.substr(0, nl);
  const size_t tab = first.find('\t');
  const std::string flag = first.substr(0, tab);
  int count = 0;
  if (tab != std::string::npos) {
    const std::string c = first.substr(tab + 1);
    if (!c.empty() && c.size() <= 6 && c.find_first_not_of("0123456789") == std::string::npos) count = std::stoi(c);
  }
  std::map<std::string, std::string> env;
  for (size_t at = nl == std::string::npos ? text.size() : nl + 1; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env.emplace(line.substr(0, eq), line.substr(eq + 1));
    at = end + 1;
  }
  auto valid = [](const ShardSpec& s) { return s.index >= 1 && s.index <= s.count && s.count <= kMaxShards; };
  const ShardSpec p = parse_shard(flag);
  if (p.count != 0) {
    if (!valid(p)) __builtin_trap();
    const ShardSpec back = parse_shard(shard_text(p));
    if (back.index != p.index || back.count != p.count) __builtin_trap();
  } else if (p.index != 0) {
    __builtin_trap();
  }
  try {
    const ShardSpec s = resolve_shard_auto(count, [&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    if (!valid(s) || s.scheduler.empty() || s.source.empty()) __builtin_trap();
    if (count > 0 && s.count != count) __builtin_trap();
  } catch (const UsageError&) {
    // the expected answer to variables that are absent, half set, inconsistent or not numbers
  }
  return 0;
}

}  // namespace repro::fuzz

#ifndef REPRO_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::fuzz::shard_one_input(data, size);
}
#endif
