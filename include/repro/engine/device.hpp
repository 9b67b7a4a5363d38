// Names of the engine's device, mode and precision, as flags, reports and errors spell them.
// The enums live with the op tables (repro/kernels/ops.hpp); this is their text form.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/kernels/ops.hpp"

namespace repro {

const char* mode_name(Mode m);            // "default" / "batch-invariant" / "deterministic" / "tp-invariant"
const char* device_name(Device d);        // "cpu" / "cuda"
const char* precision_name(Precision p);  // "f32" / "bf16" / "f16"
const char* allreduce_name(AllReduce a);  // "ring" / "tree"
// Parse the text form; UsageError names the flag and lists the allowed values.
Mode parse_mode(const std::string& s, const char* flag = "--mode");
Device parse_device(const std::string& s, const char* flag = "--device");
Precision parse_precision(const std::string& s, const char* flag = "--precision");
AllReduce parse_allreduce(const std::string& s, const char* flag = "--allreduce");

// The engine block of a report's environment record: device, precision, threads, and what each
// mode's op table says about itself (kernels::Ops::describe: name, ISA or GPU, library).
// Throws BackendError when the device is not available.
nlohmann::json engine_record(Device device, Precision precision, const std::vector<Mode>& modes, int threads);
nlohmann::json to_json(const kernels::OpsInfo& info);

}  // namespace repro
