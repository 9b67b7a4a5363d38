// Names of the engine's device, mode and precision, as flags, reports and errors spell them.
// The enums live with the op tables (repro/kernels/ops.hpp); this is their text form.
#pragma once
#include <string>

#include "repro/kernels/ops.hpp"

namespace repro {

const char* mode_name(Mode m);            // "default" / "batch-invariant"
const char* device_name(Device d);        // "cpu" / "cuda"
const char* precision_name(Precision p);  // "f32" / "bf16" / "f16"
// Parse the text form; UsageError names the flag and lists the allowed values.
Mode parse_mode(const std::string& s, const char* flag = "--mode");
Device parse_device(const std::string& s, const char* flag = "--device");
Precision parse_precision(const std::string& s, const char* flag = "--precision");

}  // namespace repro
