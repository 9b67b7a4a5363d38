// libFuzzer target for the Prometheus text reader (src/remote/prometheus.cpp): the body of GET /metrics
// from a server the audit does not control. The body lives in repro::prom::fuzz_prometheus_one so the
// test suite (tests/unit-prometheus.cpp) replays fuzz/corpus/prometheus/ through the same code
// without clang: a refusal must be one error line, an accepted body must round-trip through the
// canonical writer to the same families. Input: the whole body.
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DREPRO_FUZZ=ON && cmake --build build-fuzz --target fuzz_prometheus
// Run:   build-fuzz/fuzz_prometheus fuzz/corpus/prometheus -max_total_time=60 -rss_limit_mb=2048
#include <cstddef>
#include <cstdint>

#include "repro/remote/prometheus.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::prom::fuzz_prometheus_one(data, size);
}
