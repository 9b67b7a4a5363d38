// The CPU backend's row (repro/kernels/backends.hpp): what its kernels run on and what the
// cpu-default table's OpenBLAS is, for the environment record, and the risks visible from here.
#include <cblas.h>

#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "ops_internal.hpp"

namespace repro::kernels {

namespace {

// "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "0.3.21"
std::string openblas_version(const std::string& config) {
  auto sp = config.find(' ');
  if (config.rfind("OpenBLAS ", 0) != 0 || sp == std::string::npos) return {};
  auto end = config.find(' ', sp + 1);
  return config.substr(sp + 1, end == std::string::npos ? std::string::npos : end - sp - 1);
}

}  // namespace

bool cpu_present() { return true; }

nlohmann::json cpu_describe(int threads) {
  nlohmann::json features = nlohmann::json::array();
#if REPRO_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) features.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) features.push_back("avx");
  if (__builtin_cpu_supports("avx2")) features.push_back("avx2");
  if (__builtin_cpu_supports("fma")) features.push_back("fma");
  if (__builtin_cpu_supports("f16c")) features.push_back("f16c");
  if (__builtin_cpu_supports("avx512f")) features.push_back("avx512f");
  if (__builtin_cpu_supports("avx512bw")) features.push_back("avx512bw");
  if (__builtin_cpu_supports("avx512vl")) features.push_back("avx512vl");
  if (__builtin_cpu_supports("avx512vnni")) features.push_back("avx512vnni");
  if (__builtin_cpu_supports("avx512bf16")) features.push_back("avx512bf16");
#endif
  nlohmann::json out;
  out["cpu"] = {{"logical_cores", std::thread::hardware_concurrency()},
                {"features", features},
                {"invariant_kernels", cpu_kernels_isa()}};
  const std::string config = openblas_get_config();
  out["blas"] = {{"library", "OpenBLAS"},
                 {"version", openblas_version(config)},
                 {"config", config},
                 {"core", openblas_get_corename()},
                 {"threads", threads},  // the default-mode matmul sets OpenBLAS to the engine's threads
                 {"default_threads", openblas_get_num_threads()}};
  return out;
}

std::vector<std::string> cpu_risks(int threads) {
  std::vector<std::string> risks;
  if (std::string(openblas_get_config()).find("DYNAMIC_ARCH") != std::string::npos && !std::getenv("OPENBLAS_CORETYPE"))
    risks.push_back("OpenBLAS chooses its kernels by CPU at run time (DYNAMIC_ARCH, core " +
                    std::string(openblas_get_corename()) +
                    "): default mode can give other bits on another CPU (OPENBLAS_CORETYPE pins the kernels)");
  if (threads > 1)
    risks.push_back("the engine and OpenBLAS run " + std::to_string(threads) +
                    " threads: default-mode matmul bits change with the thread count; batch-invariant mode does not");
  return risks;
}

}  // namespace repro::kernels
