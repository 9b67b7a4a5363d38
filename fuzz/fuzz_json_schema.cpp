// libFuzzer target for structured output: a JSON Schema compiled to the byte automaton, document
// bytes fed through it, and the vocabulary mask checked token by token against the automaton. The
// body lives in repro::json_schema_fuzz_one_input (src/structured/json_schema.cpp) so the test suite
// (tests/unit-json-schema.cpp) replays fuzz/corpus/json_schema/ through the very same code without clang.
// Input: the schema's JSON text, a NUL byte, the document bytes.
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DREPRO_FUZZ=ON && cmake --build build-fuzz --target fuzz_json_schema
// Run:   build-fuzz/fuzz_json_schema fuzz/corpus/json_schema -max_total_time=600 -rss_limit_mb=2048
#include <cstddef>
#include <cstdint>

#include "repro/structured/json_schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::json_schema_fuzz_one_input(data, size);
}
