// The CPU kernel paths a test runs side by side: the portable loops, AVX2 and (on an AVX-512 CPU)
// the AVX-512 tiles. Every path must give the same bits; these switches pick one for a scope.
#pragma once
#include <vector>

#include "../kernels/common.hpp"
#include "../kernels/kernels.hpp"

namespace repro::test {

struct ForcePortable {
  explicit ForcePortable(bool on) { kernels::set_force_portable(on); }
  ~ForcePortable() { kernels::set_force_portable(false); }
};

// On an AVX-512 CPU the f32 tiles run AVX-512 unless forced down to AVX2.
struct ForceAvx2 {
  explicit ForceAvx2(bool on) { kernels::set_force_avx2(on); }
  ~ForceAvx2() { kernels::set_force_avx2(false); }
};

// Portable on or off: both where the CPU has AVX2, else only the portable path.
inline std::vector<bool> portable_modes() {
  if (kernels::cpu_has_avx2_fma()) return {false, true};
  return {true};
}

// AVX2 forced on or off: both on an AVX-512 CPU (unless the portable path is forced anyway).
inline std::vector<bool> avx2_forced_modes(bool portable) {
  if (!portable && kernels::cpu_has_avx512()) return {false, true};
  return {false};
}

}  // namespace repro::test
