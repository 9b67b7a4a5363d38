// CUDA device discovery (environment record, `--device cuda` checks) and device memory. Device
// discovery works on a machine without a GPU or driver: every runtime call is checked and turned
// into DeviceInfo::error. Everything else throws BackendError with the call, file and line.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "check.cuh"
#include "../cuda.hpp"

namespace repro::kernels::cuda {
namespace detail {

void fail(const char* what, const char* call, const char* file, int line, const std::string& reason) {
  throw BackendError(std::string(what) + " error in " + call + " at " + file + ":" + std::to_string(line) + ": " +
                     reason);
}

// cuBLAS is opened with dlopen on first use: linking it would map the library (about 200 MB of
// resident memory and its load time) into every run, CPU-only ones included.
namespace {
struct Loaded {
  CublasApi api{};
  bool ok = false;
  std::string error;
};
const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = nullptr;
    for (const std::string& name : {soname, std::string(REPRO_CUDA_LIBRARY_DIR) + "/" + soname})
      if ((h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!h) {
      const char* why = dlerror();
      r.error = "cannot load " + soname + " (" + (why ? why : "not found") +
                "); install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH";
      return r;
    }
    auto sym = [&](const char* name) { return dlsym(h, name); };
    r.api.create = reinterpret_cast<decltype(r.api.create)>(sym("cublasCreate_v2"));
    r.api.sgemm = reinterpret_cast<decltype(r.api.sgemm)>(sym("cublasSgemm_v2"));
    r.api.gemm_ex = reinterpret_cast<decltype(r.api.gemm_ex)>(sym("cublasGemmEx"));
    r.api.get_property = reinterpret_cast<decltype(r.api.get_property)>(sym("cublasGetProperty"));
    r.api.status_string = reinterpret_cast<decltype(r.api.status_string)>(sym("cublasGetStatusString"));
    r.ok = r.api.create && r.api.sgemm && r.api.gemm_ex && r.api.get_property && r.api.status_string;
    if (!r.ok) r.error = soname + " lacks a cuBLAS entry point this build needs; use the toolkit it was built with";
    return r;
  }();
  return l;
}
}  // namespace

const CublasApi* cublas_api() { return loaded().ok ? &loaded().api : nullptr; }
std::string cublas_load_error() { return loaded().error; }

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    const CublasApi* api = cublas_api();
    if (!api) throw BackendError("cuBLAS: " + cublas_load_error());
    cublasHandle_t h = nullptr;
    REPRO_CUDA_CHECK(api->create(&h));
    return h;
  }();
  return handle;
}

int sm_count() {
  static int n = [] {
    int v = 0;
    REPRO_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    return v;
  }();
  return n;
}

}  // namespace detail

DeviceInfo device_info() {
  DeviceInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  // cuBLAS is opened only where a device is (a CPU-only run never maps the library, about 200 MB of
  // resident memory); without one, the version this build was compiled against is recorded.
  info.cublas_version = "built against " + std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) +
                        "." + std::to_string(CUBLAS_VER_PATCH) + " (not loaded: no device)";
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
  info.sm_count = prop.multiProcessorCount;
  if (const detail::CublasApi* api = detail::cublas_api()) {
    int major = 0, minor = 0, patch = 0;  // a library property: needs no handle
    if (api->get_property(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        api->get_property(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        api->get_property(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
      info.cublas_version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  } else {
    info.cublas_version = "not loaded: " + detail::cublas_load_error();
  }
  return info;
}

bool available() {
  static const bool ok = device_info().device_count > 0;
  return ok;
}

float* alloc(size_t n) {
  void* p = nullptr;
  REPRO_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(float)));
  return static_cast<float*>(p);
}
void free(float* d) {
  if (d) REPRO_CUDA_CHECK(cudaFree(d));
}
void upload(float* d_dst, const float* src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(d_dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
}
void download(float* dst, const float* d_src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(dst, d_src, n * sizeof(float), cudaMemcpyDeviceToHost));
}
void copy(float* d_dst, const float* d_src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(d_dst, d_src, n * sizeof(float), cudaMemcpyDeviceToDevice));
}
void synchronize() { REPRO_CUDA_CHECK(cudaDeviceSynchronize()); }

void* alloc_bytes(size_t n) {
  void* p = nullptr;
  REPRO_CUDA_CHECK(cudaMalloc(&p, n ? n : 1));
  return p;
}
void free_bytes(void* d) {
  if (d) REPRO_CUDA_CHECK(cudaFree(d));
}
void upload_bytes(void* d_dst, const void* src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(d_dst, src, n, cudaMemcpyHostToDevice));
}

MatmulScratch::~MatmulScratch() {
  // Freed from destructors: a failing cudaFree at teardown is not worth an abort.
  if (buf_) cudaFree(buf_);
}
void* MatmulScratch::get(size_t bytes) {
  if (bytes > cap_) {
    if (buf_) REPRO_CUDA_CHECK(cudaFree(buf_));
    buf_ = nullptr;
    cap_ = 0;
    REPRO_CUDA_CHECK(cudaMalloc(&buf_, bytes));
    cap_ = bytes;
  }
  return buf_;
}

int* alloc_ints(size_t n) {
  void* p = nullptr;
  REPRO_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(int)));
  return static_cast<int*>(p);
}
void upload_ints(int* d_dst, const int* src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(d_dst, src, n * sizeof(int), cudaMemcpyHostToDevice));
}
void free_ints(int* d) {
  if (d) REPRO_CUDA_CHECK(cudaFree(d));
}
float** alloc_ptrs(size_t n) {
  void* p = nullptr;
  REPRO_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(float*)));
  return static_cast<float**>(p);
}
void upload_ptrs(float** d_dst, float* const* src, size_t n) {
  if (n) REPRO_CUDA_CHECK(cudaMemcpy(d_dst, src, n * sizeof(float*), cudaMemcpyHostToDevice));
}
void free_ptrs(float** d) {
  if (d) REPRO_CUDA_CHECK(cudaFree(d));
}

}  // namespace repro::kernels::cuda
