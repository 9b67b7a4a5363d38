// The op tables bench measures (repro/bench/tables.hpp).
#include "repro/bench/tables.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "repro/common/error.hpp"
#include "repro/engine/device.hpp"

namespace repro::bench {
namespace {

// The names bench has always written for the default and batch-invariant tables; any other mode
// is named after its mode name ("tp-invariant": key "tp_invariant", ratio "tp_invariant_ratio").
struct Names {
  const char* mode;
  const char* key;
  const char* short_name;
  const char* ratio_key;
};
constexpr Names kNames[] = {
    {"default", "default", "d", ""},
    {"batch-invariant", "invariant", "inv", "ratio"},
};

}  // namespace

std::vector<BenchTable> bench_tables(Device device, int threads, const std::vector<Mode>& modes) {
  std::vector<BenchTable> out;
  auto add = [&](Mode mode) {
    for (const auto& have : out)
      if (have.mode == mode) return;
    BenchTable t;
    t.mode = mode;
    t.info = kernels::make_ops(device, mode, threads)->describe();
    if (mode != Mode::Default && t.info.requests_alone && modes.empty()) return;
    const std::string name = mode_name(mode);
    const auto* n = std::find_if(std::begin(kNames), std::end(kNames), [&](const Names& x) { return name == x.mode; });
    if (n != std::end(kNames)) {
      t.key = n->key;
      t.short_name = n->short_name;
      t.ratio_key = n->ratio_key;
    } else {
      t.key = name;
      std::replace(t.key.begin(), t.key.end(), '-', '_');
      t.short_name = name;
      t.ratio_key = t.key + "_ratio";
    }
    out.push_back(std::move(t));
  };
  const auto tables = kernels::available_op_tables();
  add(Mode::Default);
  if (modes.empty()) {
    for (const auto& spec : tables)
      if (spec.device == device && spec.mode != Mode::Default) add(spec.mode);
    return out;
  }
  for (Mode mode : modes) {
    bool registered = false;
    std::string names;
    for (const auto& spec : tables) {
      if (spec.device != device) continue;
      registered = registered || spec.mode == mode;
      names += (names.empty() ? "" : ", ") + std::string(mode_name(spec.mode));
    }
    if (!registered)
      throw UsageError(std::string("--modes: --device ") + device_name(device) + " has no " + mode_name(mode) +
                       " op table (it has " + names + ")");
    add(mode);
  }
  return out;
}

}  // namespace repro::bench
