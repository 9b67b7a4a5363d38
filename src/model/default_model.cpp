#include "repro/model/default_model.hpp"

#include <filesystem>

#include "repro/common/error.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"

namespace repro {

std::string default_model_path() {
  SynthOptions o;  // the documented defaults of `model synth`
  std::filesystem::path dir = cache_dir();
  std::string name = "default-synth-v1-seed" + std::to_string(o.seed) + ".gguf";
  std::filesystem::path p = dir / name;
  std::error_code ec;
  if (std::filesystem::exists(p, ec)) return p.string();
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create the cache directory '" + dir.string() + "': " + ec.message() +
                     "; set REPRO_AUDIT_CACHE to a writable directory or pass --model");
  write_synth_model(o, p.string());
  return p.string();
}

}  // namespace repro
