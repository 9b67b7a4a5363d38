// The environment record of a report and of `repro-audit env`: what ran, on what, with which settings
// that change numerics, and the nondeterminism risks visible from here.
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
#include "repro/common/version.hpp"
#include "repro/engine/device.hpp"
#include "repro/kernels/ops.hpp"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace repro {

namespace {

std::string first_line_with(const char* path, const std::string& prefix, char sep) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) {
      auto p = line.find(sep);
      if (p == std::string::npos) return {};
      std::string v = line.substr(p + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t' || v.front() == '"')) v.erase(0, 1);
      while (!v.empty() && (v.back() == '"' || v.back() == ' ')) v.pop_back();
      return v;
    }
  return {};
}

std::string cpu_model() {
  std::string m = first_line_with("/proc/cpuinfo", "model name", ':');
  return m.empty() ? "unknown" : m;
}

// "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "0.3.21"
std::string openblas_version(const std::string& config) {
  auto sp = config.find(' ');
  if (config.rfind("OpenBLAS ", 0) != 0 || sp == std::string::npos) return {};
  auto end = config.find(' ', sp + 1);
  return config.substr(sp + 1, end == std::string::npos ? std::string::npos : end - sp - 1);
}

// Environment variables that change numerics (thread counts, kernel choice, reduction order,
// determinism switches) in this tool or in the serving engines it audits. Only these names are
// ever recorded, so no secret held in another variable can reach a report.
const char* const kNumericsVariables[] = {
    "OMP_NUM_THREADS",         "OMP_DYNAMIC",           "OMP_PROC_BIND",
    "OMP_SCHEDULE",            "OPENBLAS_CORETYPE",     "OPENBLAS_NUM_THREADS",
    "OPENBLAS_DEFAULT_NUM_THREADS", "OPENBLAS_L2_SIZE", "GOTO_NUM_THREADS",
    "MKL_NUM_THREADS",         "MKL_CBWR",              "MKL_ENABLE_INSTRUCTIONS",
    "CUDA_VISIBLE_DEVICES",    "CUDA_LAUNCH_BLOCKING",  "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE", "NVIDIA_TF32_OVERRIDE",  "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "VLLM_BATCH_INVARIANT",    "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1",
    "SGLANG_ENABLE_DETERMINISTIC_INFERENCE",            "PYTHONHASHSEED",
    "REPRO_KERNELS_PORTABLE",
};

nlohmann::json build_record() {
  nlohmann::json b;
#if defined(__clang__)
  b["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  b["compiler"] = std::string("gcc ") + __VERSION__;
#endif
#ifdef REPRO_BUILD_TYPE
  b["build_type"] = REPRO_BUILD_TYPE;
#endif
#ifdef __OPTIMIZE__
  b["optimized"] = true;
#else
  b["optimized"] = false;
#endif
#ifdef __FAST_MATH__
  b["fast_math"] = true;
#else
  b["fast_math"] = false;
#endif
#ifdef NDEBUG
  b["assertions"] = false;
#else
  b["assertions"] = true;
#endif
#if defined(__SANITIZE_ADDRESS__)
  b["sanitizers"] = "address";
#endif
#ifdef REPRO_HAVE_CUDA
  b["cuda"] = true;
#else
  b["cuda"] = false;
#endif
  b["cxx_standard"] = static_cast<long>(__cplusplus);
  return b;
}

}  // namespace

nlohmann::json environment_record(int threads) {
  nlohmann::json env;
  env["tool"] = {{"name", "repro-audit"}, {"version", tool_version()}, {"commit", tool_commit()}, {"build", build_record()}};
  struct utsname u{};
  if (uname(&u) == 0)
    env["os"] = {{"sysname", u.sysname}, {"release", u.release}, {"version", u.version}, {"machine", u.machine}};
  if (std::string distro = first_line_with("/etc/os-release", "PRETTY_NAME=", '='); !distro.empty())
    env["os"]["distribution"] = distro;
  nlohmann::json features = nlohmann::json::array();
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
  env["cpu"] = {{"model", cpu_model()},
                {"logical_cores", std::thread::hardware_concurrency()},
                {"features", features},
                {"invariant_kernels", kernels::cpu_kernels_isa()}};
  env["threads"] = threads;
  const std::string blas_config = openblas_get_config();
  const int blas_threads = openblas_get_num_threads();
  env["blas"] = {{"library", "OpenBLAS"},
                 {"version", openblas_version(blas_config)},
                 {"config", blas_config},
                 {"core", openblas_get_corename()},
                 {"threads", threads},  // the default-mode matmul sets OpenBLAS to the engine's threads
                 {"default_threads", blas_threads}};
  nlohmann::json vars = nlohmann::json::object();
  for (const char* name : kNumericsVariables)
    if (const char* v = std::getenv(name)) vars[name] = v;
  env["environment_variables"] = vars;
  // Every op table this build has on this machine, as each describes itself.
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& t : kernels::available_op_tables())
    tables.push_back(to_json(kernels::make_ops(t.device, t.mode, threads < 1 ? 1 : threads)->describe()));
  env["op_tables"] = tables;
  const std::string nvidia_driver = first_line_with("/proc/driver/nvidia/version", "NVRM version", ':');
  bool cuda_device = false;
#ifdef REPRO_HAVE_CUDA
  const kernels::cuda::DeviceInfo d = kernels::cuda::device_info();
  env["gpu"] = {{"cuda_build", true}, {"device_count", d.device_count}, {"runtime_version", d.runtime_version},
                {"driver_version", d.driver_version}, {"cublas_version", d.cublas_version}};
  if (d.device_count > 0) {
    cuda_device = true;
    env["gpu"]["device"] = {{"name", d.name}, {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                            {"multiprocessors", d.sm_count}};
  } else {
    env["gpu"]["device"] = "none (" + d.error + ")";
  }
#else
  env["gpu"] = {{"cuda_build", false}, {"device", "none"}};
#endif
  if (!nvidia_driver.empty()) env["gpu"]["nvidia_driver"] = nvidia_driver;

  // ---- nondeterminism risks visible from here (each one line: what, and what pins it)
  nlohmann::json risks = nlohmann::json::array();
  if (blas_config.find("DYNAMIC_ARCH") != std::string::npos && !std::getenv("OPENBLAS_CORETYPE"))
    risks.push_back("OpenBLAS chooses its kernels by CPU at run time (DYNAMIC_ARCH, core " + std::string(openblas_get_corename()) +
                    "): default mode can give other bits on another CPU (OPENBLAS_CORETYPE pins the kernels)");
  if (threads > 1)
    risks.push_back("the engine and OpenBLAS run " + std::to_string(threads) +
                    " threads: default-mode matmul bits change with the thread count; batch-invariant mode does not");
  if (cuda_device && !std::getenv("CUBLAS_WORKSPACE_CONFIG"))
    risks.push_back("CUBLAS_WORKSPACE_CONFIG is unset: cuBLAS may pick nondeterministic algorithms (':4096:8' pins them)");
  if (const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE"); tf32 && std::string(tf32) != "0")
    risks.push_back("NVIDIA_TF32_OVERRIDE is set: FP32 matmuls may run in TF32");
  env["nondeterminism_risks"] = risks;
  return env;
}

}  // namespace repro
