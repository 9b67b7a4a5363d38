// The tool's version and the commit it was built from (generated at configure time, so a new
// commit recompiles one file, not the project).
#pragma once

namespace repro {
const char* tool_version();  // e.g. "0.1.0"
const char* tool_commit();   // short git commit, or "unknown" outside a checkout
}  // namespace repro
