// libFuzzer target for serve's request parsing: parse_body (the bounded JSON reader) and
// parse_request (every field's validation, chat rendering, tokenizing, response_format schemas),
// then the response bodies. The body lives in repro::serve::fuzz_request_one (src/serve/api.cpp) so
// the test suite (tests/unit-serve-hostile.cpp) replays fuzz/corpus/request/ through the same code
// without clang. Input: byte 0 selects completions/chat (bit 0), a 256-byte body limit (bit 1) and
// the ChatML template (bit 2); the rest is the request body.
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DREPRO_FUZZ=ON && cmake --build build-fuzz --target fuzz_request
// Run:   build-fuzz/fuzz_request fuzz/corpus/request -max_total_time=60 -rss_limit_mb=2048
#include <cstddef>
#include <cstdint>

#include "repro/serve/api.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::serve::fuzz_request_one(data, size);
}
