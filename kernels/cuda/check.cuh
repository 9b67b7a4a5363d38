// Private to the CUDA backend: checked CUDA and cuBLAS calls. A failure throws repro::BackendError
// "CUDA error in <call> at <file>:<line>: <reason>", which the command line turns into exit 3.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "repro/common/error.hpp"

namespace repro::kernels::cuda::detail {

[[noreturn]] void fail(const char* what, const char* call, const char* file, int line, const std::string& reason);

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so later calls report their own
    fail("CUDA", call, file, line, cudaGetErrorString(e));
  }
}
// The cuBLAS entry points the backend uses, resolved with dlopen on first use (kernels/cuda/device.cu).
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSgemm_v2) sgemm;
  // The C entry point (cublas_api.h adds a C++ overload taking cudaDataType as the compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetProperty) get_property;
  decltype(&cublasGetStatusString) status_string;
};
// nullptr when libcublas cannot be loaded; cublas_load_error() says why and what to do.
const CublasApi* cublas_api();
std::string cublas_load_error();

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS", call, file, line,
         cublas_api() ? cublas_api()->status_string(s) : "status " + std::to_string(static_cast<int>(s)));
}

// The process's cuBLAS handle (created on first use, on device 0).
cublasHandle_t cublas();
// Multiprocessors of device 0 (cached).
int sm_count();

}  // namespace repro::kernels::cuda::detail

#define REPRO_CUDA_CHECK(call) ::repro::kernels::cuda::detail::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch's own error (bad configuration, no device).
#define REPRO_CUDA_LAUNCHED(name) \
  ::repro::kernels::cuda::detail::check(cudaGetLastError(), name, __FILE__, __LINE__)
