// Errors and exit codes. Every error message names the flag or file and the fix.
#pragma once
#include <stdexcept>
#include <string>

namespace repro {

// Exit status, as DESIGN.md and the man page document it.
enum ExitCode : int {
  kExitOk = 0,           // reproducible within thresholds
  kExitDivergent = 1,    // divergence over threshold (or drift, for `diff`)
  kExitUsage = 2,        // usage error or bad input
  kExitBackend = 3,      // backend failure (engine, endpoint)
  kExitUnverified = 4,   // a gated endpoint is UNVERIFIED: no probe shared the server with another request
  kExitCanaryRed = 5,    // `canary`: RED (its own code, so a scheduled job tells it from a typo, exit 2)
  kExitInterrupted = 130, // Ctrl-C (SIGINT); what was finished is still written
  kExitTerminated = 143   // SIGTERM, handled like SIGINT
};

// Bad input: a flag, a file, a profile. Exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The engine or an endpoint failed. Exit 3.
struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace repro
