// Text forms of the engine's device, mode and precision (one table each; no behaviour here: the
// op-table factory, repro::kernels::make_ops, is the one place that acts on device and mode).
#include "repro/engine/device.hpp"

#include "repro/common/error.hpp"

namespace repro {

namespace {

template <class E>
struct Named {
  E value;
  const char* name;
};

const Named<Mode> kModes[] = {
    {Mode::Default, "default"}, {Mode::BatchInvariant, "batch-invariant"}, {Mode::Deterministic, "deterministic"},
    {Mode::TpInvariant, "tp-invariant"}};
const Named<Device> kDevices[] = {{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}};
const Named<Precision> kPrecisions[] = {{Precision::F32, "f32"}, {Precision::BF16, "bf16"}, {Precision::F16, "f16"}};
const Named<AllReduce> kAllReduces[] = {{AllReduce::Ring, "ring"}, {AllReduce::Tree, "tree"}};

template <class E, size_t N>
const char* name_of(const Named<E> (&table)[N], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "?";
}

template <class E, size_t N>
E parse(const Named<E> (&table)[N], const std::string& s, const char* flag, const char* what) {
  std::string allowed;
  for (const auto& e : table) {
    if (s == e.name) return e.value;
    allowed += std::string(allowed.empty() ? "" : ", ") + e.name;
  }
  throw UsageError(std::string(flag) + ": unknown " + what + " '" + s + "'; use " + allowed);
}

}  // namespace

const char* mode_name(Mode m) { return name_of(kModes, m); }
const char* device_name(Device d) { return name_of(kDevices, d); }
const char* precision_name(Precision p) { return name_of(kPrecisions, p); }
const char* allreduce_name(AllReduce a) { return name_of(kAllReduces, a); }

Mode parse_mode(const std::string& s, const char* flag) {
  if (s == "invariant") return Mode::BatchInvariant;  // short form
  return parse(kModes, s, flag, "mode");
}
Device parse_device(const std::string& s, const char* flag) { return parse(kDevices, s, flag, "device"); }
Precision parse_precision(const std::string& s, const char* flag) {
  return parse(kPrecisions, s, flag, "precision");
}
AllReduce parse_allreduce(const std::string& s, const char* flag) {
  return parse(kAllReduces, s, flag, "all-reduce algorithm");
}

nlohmann::json to_json(const kernels::OpsInfo& i) {
  return {{"name", i.name}, {"device", i.device}, {"mode", i.mode},
          {"isa", i.isa},   {"library", i.library}, {"threads", i.threads}};
}

nlohmann::json engine_record(Device device, Precision precision, const std::vector<Mode>& modes, int threads) {
  nlohmann::json tables = nlohmann::json::array();
  for (Mode m : modes) tables.push_back(to_json(kernels::make_ops(device, m, threads)->describe()));
  return {{"device", device_name(device)},
          {"precision", precision_name(precision)},
          {"threads", threads},
          {"op_tables", tables}};
}

}  // namespace repro
