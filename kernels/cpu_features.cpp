// CPU feature detection and the dispatch switch of the fast kernels. The AVX2 and portable paths
// follow the same reduction order, so the choice changes speed, never bits.
#include <cstdlib>
#include <cstring>

#include "common.hpp"
#include "repro/kernels/kernels.hpp"

namespace repro::kernels {

namespace {
bool env_force_portable() {
  const char* e = std::getenv("REPRO_KERNELS_PORTABLE");
  return e && *e && std::strcmp(e, "0") != 0;
}
std::atomic<bool> g_force_portable{env_force_portable()};
}  // namespace

bool cpu_has_avx2_fma() {
#if REPRO_X86
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

bool use_avx2() { return cpu_has_avx2_fma() && !g_force_portable.load(std::memory_order_relaxed); }

void set_force_portable(bool on) { g_force_portable.store(on, std::memory_order_relaxed); }

}  // namespace repro::kernels
