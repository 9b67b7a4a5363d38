// CUDA device discovery for the environment record and `--device cuda` checks. Works on a machine
// without a GPU or driver: every runtime call is checked and turned into DeviceInfo::error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "repro/kernels/cuda.hpp"

namespace repro::kernels::cuda {

DeviceInfo device_info() {
  DeviceInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  int major = 0, minor = 0, patch = 0;  // a library property: needs no device and no handle
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    info.cublas_version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess) info.driver_version = 0;
  cudaError_t e = cudaGetDeviceCount(&info.device_count);
  if (e != cudaSuccess) {
    info.device_count = 0;
    info.error = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error state
    return info;
  }
  if (info.device_count == 0) {
    info.error = "no CUDA device";
    return info;
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    info.error = cudaGetErrorString(e);
    return info;
  }
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  return info;
}

}  // namespace repro::kernels::cuda
