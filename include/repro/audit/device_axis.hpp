// The cross-device tier as an audit axis (run --devices cpu,cuda): every batch context runs on each
// device, so each completion off the first device (the verifier, normally the CPU) has a twin on it
// in the same context. This compares them, per mode and precision (ModeSummary::devices,
// device_finding): "cross-device (cuda against cpu), batch-invariant: identical in 96 of 96
// completions", or where the first one differs. A device of the axis this machine lacks was skipped
// by the runner (plan.devices_skipped); it gets one line in Summary::device_findings.
#pragma once
#include "repro/audit/result.hpp"

namespace repro {

// Fills ModeSummary::devices / device_finding and Summary::device_findings from the completions and
// the plan block (after compute_verdicts); nothing without --devices.
void analyze_devices(AuditReport& report);

}  // namespace repro
