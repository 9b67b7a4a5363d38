// The environment record of a report and of `repro-audit env`: what ran, on what, with which settings
// that change numerics, and the nondeterminism risks visible from here.
#include <sys/utsname.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "repro/audit/runner.hpp"
#include "repro/common/version.hpp"
#include "repro/engine/device.hpp"
#include "repro/kernels/backends.hpp"
#include "repro/kernels/ops.hpp"

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
  for (const auto& be : kernels::backends())  // the optional backends: whether this build has them
    if (be.device != Device::Cpu) b[be.name] = be.built;
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
  // Each backend's own part ("cpu" and "blas"; "gpu"), then what the host says of itself.
  for (const auto& be : kernels::backends()) env.update(be.describe(threads));
  env["cpu"]["model"] = cpu_model();
  env["threads"] = threads;
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
  if (!nvidia_driver.empty()) env["gpu"]["nvidia_driver"] = nvidia_driver;

  // ---- nondeterminism risks visible from here (each one line: what, and what pins it), by backend
  nlohmann::json risks = nlohmann::json::array();
  for (const auto& be : kernels::backends())
    for (std::string& r : be.risks(threads)) risks.push_back(std::move(r));
  env["nondeterminism_risks"] = risks;
  return env;
}

}  // namespace repro
