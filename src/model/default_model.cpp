// The embedded default model: stories260K (MIT; models/README.md has its provenance), assembled into
// the binary from models/stories260K.gguf and written to the cache directory on first use.
#include "repro/model/default_model.hpp"

#include <filesystem>
#include <string_view>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

// The file's bytes, placed in .rodata by the assembler (REPRO_DEFAULT_MODEL_FILE is set by CMake).
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".global repro_default_model_begin\n"
        "repro_default_model_begin:\n"
        ".incbin \"" REPRO_DEFAULT_MODEL_FILE "\"\n"
        ".global repro_default_model_end\n"
        "repro_default_model_end:\n"
        ".previous\n");
extern "C" const char repro_default_model_begin[];
extern "C" const char repro_default_model_end[];

namespace repro {

// Pinned digest of models/stories260K.gguf: a build that embedded other bytes fails loudly.
static constexpr const char* kDefaultModelSha256 =
    "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";

std::string_view default_model_bytes() {
  return {repro_default_model_begin, static_cast<size_t>(repro_default_model_end - repro_default_model_begin)};
}

std::string default_model_path() {
  const std::string_view bytes = default_model_bytes();
  std::filesystem::path dir = cache_dir();
  std::filesystem::path p = dir / (std::string("stories260K-") + std::string(kDefaultModelSha256, 12) + ".gguf");
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec) && std::filesystem::file_size(p, ec) == bytes.size() &&
      sha256_file(p.string()) == kDefaultModelSha256)
    return p.string();
  if (sha256_hex(bytes) != kDefaultModelSha256)
    throw BackendError("the embedded default model does not match its pinned SHA-256; rebuild repro-audit "
                       "from a clean checkout (models/stories260K.gguf) or pass --model");
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create the cache directory '" + dir.string() + "': " + ec.message() +
                     "; set REPRO_AUDIT_CACHE to a writable directory or pass --model");
  write_file_atomic(p.string(), bytes);  // tmp + rename: concurrent first uses never see a partial file
  return p.string();
}

}  // namespace repro
