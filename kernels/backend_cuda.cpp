// The CUDA backend's row (repro/kernels/backends.hpp): the device, driver, runtime and cuBLAS as
// the CUDA runtime reports them, "none" in a build without CUDA, and the risks visible from here.
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "ops_internal.hpp"
#ifdef REPRO_HAVE_CUDA
#include "cuda.hpp"
#endif

namespace repro::kernels {

bool cuda_present() {
#ifdef REPRO_HAVE_CUDA
  return cuda::available();
#else
  return false;
#endif
}

nlohmann::json cuda_describe(int) {
  nlohmann::json gpu;
#ifdef REPRO_HAVE_CUDA
  const cuda::DeviceInfo d = cuda::device_info();
  gpu = {{"cuda_build", true}, {"device_count", d.device_count}, {"runtime_version", d.runtime_version},
         {"driver_version", d.driver_version}, {"cublas_version", d.cublas_version}};
  if (d.device_count > 0)
    gpu["device"] = {{"name", d.name},
                     {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                     {"multiprocessors", d.sm_count}};
  else
    gpu["device"] = "none (" + d.error + ")";
#else
  gpu = {{"cuda_build", false}, {"device", "none"}};
#endif
  return {{"gpu", gpu}};
}

std::vector<std::string> cuda_risks(int) {
  std::vector<std::string> risks;
  if (cuda_present() && !std::getenv("CUBLAS_WORKSPACE_CONFIG"))
    risks.push_back("CUBLAS_WORKSPACE_CONFIG is unset: cuBLAS may pick nondeterministic algorithms (':4096:8' pins them)");
  if (const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE"); tf32 && std::string(tf32) != "0")
    risks.push_back("NVIDIA_TF32_OVERRIDE is set: FP32 matmuls may run in TF32");
  return risks;
}

}  // namespace repro::kernels
