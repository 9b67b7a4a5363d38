// The environment record of a report: what ran, on what.
#include <sys/utsname.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "repro/kernels/kernels.hpp"
#ifdef REPRO_HAVE_CUDA
#include "repro/kernels/cuda.hpp"
#endif
#include "repro/audit/runner.hpp"
#include "repro/engine/device.hpp"
#include "repro/kernels/ops.hpp"
#include "repro/common/version.hpp"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace repro {

static std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  return "unknown";
}

#ifdef REPRO_HAVE_CUDA
static std::string fmt_cc(int major, int minor) { return std::to_string(major) + "." + std::to_string(minor); }
#endif

nlohmann::json environment_record(int threads) {
  nlohmann::json env;
  env["tool"] = {{"name", "repro-audit"}, {"version", tool_version()}, {"commit", tool_commit()}};
  struct utsname u{};
  if (uname(&u) == 0)
    env["os"] = {{"sysname", u.sysname}, {"release", u.release}, {"machine", u.machine}};
  nlohmann::json features = nlohmann::json::array();
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) features.push_back("avx2");
  if (__builtin_cpu_supports("fma")) features.push_back("fma");
  if (__builtin_cpu_supports("avx512f")) features.push_back("avx512f");
  env["cpu"] = {{"model", cpu_model()},
                {"logical_cores", std::thread::hardware_concurrency()},
                {"features", features},
                {"invariant_kernels", kernels::cpu_has_avx2_fma() ? "avx2+fma" : "portable"}};
  env["threads"] = threads;
  env["blas"] = {{"library", "OpenBLAS"},
                 {"config", openblas_get_config()},
                 {"core", openblas_get_corename()}};
  nlohmann::json vars = nlohmann::json::object();
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
                           "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "GOTO_NUM_THREADS"})
    if (const char* v = std::getenv(name)) vars[name] = v;
  env["environment_variables"] = vars;
  // Every op table this build has on this machine, as each describes itself.
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& t : kernels::available_op_tables())
    tables.push_back(to_json(kernels::make_ops(t.device, t.mode, threads < 1 ? 1 : threads)->describe()));
  env["op_tables"] = tables;
#ifdef REPRO_HAVE_CUDA
  const kernels::cuda::DeviceInfo d = kernels::cuda::device_info();
  env["gpu"] = {{"cuda_build", true}, {"device_count", d.device_count}, {"runtime_version", d.runtime_version},
                {"driver_version", d.driver_version}};
  if (d.device_count > 0)
    env["gpu"]["device"] = {{"name", d.name}, {"compute_capability", fmt_cc(d.cc_major, d.cc_minor)}};
  else
    env["gpu"]["device"] = "none (" + d.error + ")";
#else
  env["gpu"] = {{"cuda_build", false}, {"device", "none"}};
#endif
  return env;
}

}  // namespace repro
