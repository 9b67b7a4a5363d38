// The one splitmix64 of the project, for the host and for CUDA kernels. It seeds synthetic models,
// filler and long prompts, batch mates, sampling and device-side fills, so a version of the tool
// reproduces those streams only while every user calls this one definition.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define REPRO_HOST_DEVICE __host__ __device__
#else
#define REPRO_HOST_DEVICE
#endif

namespace repro::rng {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// splitmix64 of one value: (x + gamma) through the finalizer. A stateless hash of x.
REPRO_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The splitmix64 stream: returns the next value and advances the state `s`.
REPRO_HOST_DEVICE constexpr uint64_t splitmix64_next(uint64_t& s) {
  const uint64_t out = splitmix64(s);
  s += kGoldenGamma;
  return out;
}

}  // namespace repro::rng
