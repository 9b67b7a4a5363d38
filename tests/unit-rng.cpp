#include <doctest/doctest.h>

#include <cstdint>

#include "repro/common/rng.hpp"

using namespace repro;

TEST_CASE("splitmix64: the published reference stream from seed 0, and the stateless form is its first step") {
  // Vigna's splitmix64.c seeded with 0.
  uint64_t s = 0;
  CHECK(rng::splitmix64_next(s) == 0xE220A8397B1DCDAFull);
  CHECK(rng::splitmix64_next(s) == 0x6E789E6AA1B965F4ull);
  CHECK(rng::splitmix64_next(s) == 0x06C45D188009454Full);
  CHECK(rng::splitmix64_next(s) == 0xF88BB8A8724C81ECull);
  CHECK(s == 4 * rng::kGoldenGamma);
  CHECK(rng::splitmix64(0) == 0xE220A8397B1DCDAFull);
  static_assert(rng::splitmix64(rng::kGoldenGamma) == 0x6E789E6AA1B965F4ull);
}
