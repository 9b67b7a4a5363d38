// The profiles/*.json files, embedded at build time (cmake/embed_profiles.cmake): name -> JSON text.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace repro {
const std::vector<std::pair<std::string, std::string>>& builtin_profiles();
}
