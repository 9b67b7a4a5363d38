// libFuzzer target for the GGUF parser: parse_gguf, the metadata accessors and the tensor
// validation / dequantization path. The body lives in repro::gguf::fuzz_one_input so the test
// suite (tests/unit-gguf.cpp) replays fuzz/corpus/gguf/ through the very same code without clang.
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DREPRO_FUZZ=ON && cmake --build build-fuzz
// Run:   build-fuzz/fuzz_gguf fuzz/corpus/gguf -max_total_time=600 -rss_limit_mb=2048
#include <cstddef>
#include <cstdint>

#include "repro/model/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::gguf::fuzz_one_input(data, size);
}
