// CPU feature detection and the dispatch switch of the fast kernels. The 8-lane (AVX2 on x86) and
// portable paths follow the same reduction order, so the choice changes speed, never bits.
#include <cstdlib>
#include <cstring>

#include "common.hpp"
#include "kernels.hpp"

namespace repro::kernels {

namespace {
// An environment switch: set, non-empty and not "0".
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::strcmp(e, "0") != 0;
}
std::atomic<bool> g_force_portable{env_on("REPRO_KERNELS_PORTABLE")};
std::atomic<bool> g_force_avx2{env_on("REPRO_KERNELS_AVX2")};
}  // namespace

bool cpu_has_avx2_fma() {
#if REPRO_X86
  return simd::lanes_available();  // the x86 lanes are AVX2 + FMA
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if REPRO_X86
  // libgcc's feature probe also checks that the OS saves the 512-bit register state (XCR0).
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return has;
#else
  return false;
#endif
}

bool use_avx512() { return use_lanes() && cpu_has_avx512() && !g_force_avx2.load(std::memory_order_relaxed); }

void set_force_avx2(bool on) { g_force_avx2.store(on, std::memory_order_relaxed); }

bool use_lanes() { return simd::lanes_available() && !g_force_portable.load(std::memory_order_relaxed); }

const char* cpu_kernels_isa() {
  if (!simd::lanes_available()) return "portable";
  return use_avx512() ? "avx512+" REPRO_LANES_ISA : use_lanes() ? REPRO_LANES_ISA : "portable (forced)";
}

void set_force_portable(bool on) { g_force_portable.store(on, std::memory_order_relaxed); }

}  // namespace repro::kernels
