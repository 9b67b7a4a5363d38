// The embedded default model: a seeded synthetic model, created on first use in the cache directory.
#pragma once
#include <string>

namespace repro {

// Path of the default model, synthesizing it (bit-identical on every machine) when absent.
std::string default_model_path();

}  // namespace repro
