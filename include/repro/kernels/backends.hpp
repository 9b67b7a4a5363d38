// The backends of the op tables, one row each: a device, whether this build has it and this
// machine runs it, and what it says about itself in the environment record of a report (the CPU:
// ISA features, the kernels' ISA, OpenBLAS config, core and threads; CUDA: device, driver,
// runtime and cuBLAS, or why there is none). The rows sit beside the table registry
// (kernels/ops.cpp); the environment record (src/audit/environment.cpp) loops over them, so it
// names no backend library and has no build switch. A new backend adds its row there.
#pragma once
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "repro/kernels/ops.hpp"

namespace repro::kernels {

struct Backend {
  Device device;
  const char* name;  // "cpu", "cuda" (as --device spells it)
  // This build has the backend's kernels. The CPU always; another backend is recorded under its
  // name in the build record of the environment (`"cuda": false` in a build without it).
  bool built;
  // This machine can run its tables now (a CUDA build without a GPU: false).
  bool (*present)();
  // Its part of the environment record: top-level keys ("cpu" and "blas"; "gpu"), for an engine
  // running `threads` threads. Never throws: a backend that is absent says why.
  nlohmann::json (*describe)(int threads);
  // The nondeterminism risks it sees from here, one line each: what, and what pins it.
  std::vector<std::string> (*risks)(int threads);
};

// Every backend of `Device`, built or not, the CPU first.
std::span<const Backend> backends();
const Backend& backend(Device device);

// ---- what the CPU backend's fast kernels run on (kernels/cpu_features.cpp) ----
// Whether the running CPU has AVX2+FMA (the fast invariant paths use it; otherwise a portable path
// with the same reduction order, hence the same bits).
bool cpu_has_avx2_fma();
// Whether it has AVX-512 F, DQ and VL (the f32 matmul tiles use them, with the AVX2 tiles' bits).
bool cpu_has_avx512();
// What the fast CPU kernels run on this machine now: "avx512+avx2+fma", "avx2+fma", "portable
// (forced)" (REPRO_KERNELS_PORTABLE) or "portable".
const char* cpu_kernels_isa();

}  // namespace repro::kernels
