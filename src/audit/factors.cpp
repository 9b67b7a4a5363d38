// The factor table: see include/repro/audit/factors.hpp.
#include "repro/audit/factors.hpp"

#include <algorithm>

namespace repro {

namespace {

const Factor kFactors[] = {
    {FactorId::BatchSize, "batch_size", [](const Completion& c) { return std::to_string(c.batch_size); }, true,
     "batch size"},
    {FactorId::Concurrency, "concurrency", [](const Completion& c) { return std::to_string(c.batch_size); }, true,
     "concurrency"},
    {FactorId::Position, "position", [](const Completion& c) { return std::to_string(c.position); }, true, "position"},
    {FactorId::FillerSet, "filler_set", [](const Completion& c) { return c.filler_set; }, false,
     "the batch mates (filler draw)"},
    {FactorId::MateJoinStep, "mate_join_step", [](const Completion& c) { return std::to_string(c.mate_join_step); },
     true, "a batch mate's prefill joining the decode"},
    {FactorId::MatePromptDelta, "mate_prompt_delta",
     [](const Completion& c) { return std::to_string(c.mate_prompt_delta); }, true, "a batch mate's prompt length"},
    {FactorId::MateContents, "mate_contents",
     [](const Completion& c) { return c.mate_contents.empty() ? std::string("drawn") : c.mate_contents; }, false,
     "the batch mates' contents at the same shapes (leakage between rows)"},
    {FactorId::Seed, "seed", [](const Completion& c) { return std::to_string(c.seed); }, true, "seed"},
    {FactorId::CacheState, "cache_state", [](const Completion& c) { return c.cache_state; }, false, "the prefix cache"},
    {FactorId::SystemFingerprint, "system_fingerprint", [](const Completion& c) { return c.system_fingerprint; },
     false, "system_fingerprint"},
    {FactorId::Repeat, "repeat", [](const Completion& c) { return std::to_string(c.repeat); }, true,
     "between repeats of the same context"},
    {FactorId::Host, "host", [](const Completion& c) { return c.host; }, false, "the host (machine)"},
    {FactorId::Tp, "tp", [](const Completion& c) { return std::to_string(c.tp); }, true, "the tensor-parallel size"},
    {FactorId::AllReduce, "allreduce", [](const Completion& c) { return c.allreduce; }, false,
     "the all-reduce order"},
    {FactorId::Device, "device", [](const Completion& c) { return c.device; }, false, "the device (CPU or GPU)"},
    {FactorId::Speculative, "speculative", [](const Completion& c) { return c.speculative; }, false,
     "the speculative decoding setting"},
    {FactorId::Routing, "routing", [](const Completion& c) { return c.routing_vs_reference; }, false,
     "the router's expert choice (same or flipped against the reference)"},
};

}  // namespace

const Factor& factor(FactorId id) {
  for (const auto& f : kFactors)
    if (f.id == id) return f;
  return kFactors[0];  // every FactorId has its row
}

const Factor* find_factor(const std::string& name) {
  for (const auto& f : kFactors)
    if (name == f.name) return &f;
  return nullptr;
}

int filler_draw_index(const std::string& f) {
  if (f.size() > 1 && f[0] == 'f') {
    try {
      return std::stoi(f.substr(1));
    } catch (...) {
    }
  }
  return f.empty() ? -1 : 1 << 30;
}

void sort_factor_values(const std::string& name, std::vector<std::string>& v, FactorUse use) {
  const Factor* f = find_factor(name);
  const bool numeric = f && f->numeric;
  if (use == FactorUse::Clusters) {
    if (numeric) {
      std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
        if (a.size() != b.size()) return a.size() < b.size();
        return a < b;
      });
    } else {
      std::sort(v.begin(), v.end());
    }
    return;
  }
  const bool draws = f && f->id == FactorId::FillerSet;
  std::sort(v.begin(), v.end(), [&](const std::string& a, const std::string& b) {
    if (numeric && a.size() != b.size()) return a.size() < b.size();
    if (draws) return filler_draw_index(a) < filler_draw_index(b);
    return a < b;
  });
}

}  // namespace repro
