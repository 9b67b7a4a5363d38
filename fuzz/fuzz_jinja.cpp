// libFuzzer target for the chat-template interpreter (src/chat/jinja.cpp): a template from outside
// is a program; lexing, parsing and rendering it must end in text or a UsageError, within the
// interpreter's limits. The body lives in repro::jinja::fuzz_one so the test suite
// (tests/unit-jinja.cpp) replays fuzz/corpus/jinja/ through the same code without clang. Input: a
// template, then optionally a NUL byte and a JSON object of variables.
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DREPRO_FUZZ=ON && cmake --build build-fuzz --target fuzz_jinja
// Run:   build-fuzz/fuzz_jinja fuzz/corpus/jinja -max_total_time=60 -rss_limit_mb=2048
#include <cstddef>
#include <cstdint>

#include "repro/chat/jinja.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return repro::jinja::fuzz_one(data, size); }
