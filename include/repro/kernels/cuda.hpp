// The CUDA backend's view of the machine. Compiled only when CMake found a CUDA toolkit
// (REPRO_HAVE_CUDA); callers guard with that macro.
#pragma once
#include <string>

namespace repro::kernels::cuda {

struct DeviceInfo {
  int device_count = 0;      // 0 when no device (or no driver) is present
  std::string name;          // device 0
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;    // CUDA driver API version (e.g. 13000), 0 when no driver
  int runtime_version = 0;   // CUDA runtime the binary was built against
  std::string cublas_version;  // cuBLAS library loaded, "major.minor.patch"
  std::string error;         // why there is no device, in one line ("" when there is one)
};

// Asks the CUDA runtime; never throws and never aborts when there is no GPU or driver.
DeviceInfo device_info();

}  // namespace repro::kernels::cuda
