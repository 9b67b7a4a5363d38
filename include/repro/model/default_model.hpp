// The embedded default model: stories260K (a real trained 260K-parameter Llama-2 model, MIT;
// models/README.md), carried inside the binary and written to the cache directory on first use.
#pragma once
#include <string>
#include <string_view>

namespace repro {

// The embedded GGUF file's bytes.
std::string_view default_model_bytes();

// Path of the default model in the cache directory ($REPRO_AUDIT_CACHE, else ~/.cache/repro-audit),
// written there (atomically, after its SHA-256 is checked) when absent or different.
std::string default_model_path();

}  // namespace repro
