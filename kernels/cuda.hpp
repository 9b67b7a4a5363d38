// The CUDA backend's kernels and device memory, callable from plain C++ (no CUDA header needed).
// Compiled only when CMake found a CUDA toolkit (REPRO_HAVE_CUDA); callers guard with that macro.
//
// Every CUDA runtime and cuBLAS call is checked; a failure throws repro::BackendError naming the
// call, the file and the line (exit status 3 at the command line). Pointers named d_* are device
// pointers. All launches go to the default stream, in order; download() waits for them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels.hpp"
#include "repro/common/dtype.hpp"

namespace repro::kernels::cuda {

struct DeviceInfo {
  int device_count = 0;      // 0 when no device (or no driver) is present
  std::string name;          // device 0
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;          // multiprocessors of device 0
  int driver_version = 0;    // CUDA driver API version (e.g. 13000), 0 when no driver
  int runtime_version = 0;   // CUDA runtime the binary was built against
  std::string cublas_version;  // cuBLAS loaded ("major.minor.patch"); without a device, the version built against
  std::string error;         // why there is no device, in one line ("" when there is one)
};

// Asks the CUDA runtime; never throws and never aborts when there is no GPU or driver.
DeviceInfo device_info();
// True when at least one CUDA device can be used.
bool available();

// ---- device memory ----
float* alloc(size_t n);  // n floats (throws BackendError when out of memory)
void free(float* d);
void upload(float* d_dst, const float* src, size_t n);
void download(float* dst, const float* d_src, size_t n);  // waits for the launches before it
void copy(float* d_dst, const float* d_src, size_t n);     // device to device
void synchronize();
// n bytes of device memory (weights in their stored type).
void* alloc_bytes(size_t n);
void free_bytes(void* d);
void upload_bytes(void* d_dst, const void* src, size_t n);

// A weight matrix [N][K] on the device in its stored type (F16, BF16 or a block format; layouts in
// repro/common/quant.hpp): row n at data + n * row_bytes.
struct StoredWeight {
  DType type;
  const uint8_t* data;
  size_t row_bytes;
};

// Device scratch of the default matmul on stored weights (activations converted to 16 bits, or a
// chunk of weight rows dequantized to f32), owned by the caller, grown on demand.
class MatmulScratch {
 public:
  MatmulScratch() = default;
  MatmulScratch(const MatmulScratch&) = delete;
  MatmulScratch& operator=(const MatmulScratch&) = delete;
  ~MatmulScratch();
  void* get(size_t bytes);

 private:
  void* buf_ = nullptr;
  size_t cap_ = 0;
};

// ---- batch-invariant kernels: bitwise equal to the CPU reference (kernels/<op>/reference.cpp) ----
// y[M][N] = x[M][K] * w[N][K]^T (kernels/matmul/cuda_invariant.cu).
void matmul_invariant(const float* d_x, const float* d_w, float* d_y, int M, int N, int K);
// The same with a weight in its stored type, bitwise matmul_q_reference: F16, BF16 and Q4_0 with
// each element dequantized in registers as it is staged (kernels/matmul/cuda_dequant.hpp); Q8_0,
// Q4_K, Q5_K and Q6_K on int8 activations quantized row by row into `scratch`
// (kernels/matmul/cuda_int_dot.hpp).
void matmul_invariant_stored(const float* d_x, const StoredWeight& w, float* d_y, int M, int N, int K,
                             MatmulScratch& scratch);
// RMSNorm of M rows of length D (kernels/rmsnorm/cuda_invariant.cu).
void rmsnorm_invariant(const float* d_x, const float* d_g, float* d_y, int M, int D, float eps);
// Device scratch of the attention launchers, owned by the caller (an op table keeps one per table):
// the device copy of the rows array and the split-KV partial results, grown on demand, freed with
// the scratch (kernels/attention/cuda_invariant.cu).
class AttentionScratch {
 public:
  AttentionScratch() = default;
  AttentionScratch(const AttentionScratch&) = delete;
  AttentionScratch& operator=(const AttentionScratch&) = delete;
  ~AttentionScratch();
  // At least `bytes` of device memory (the rows array; the partial results).
  void* rows(size_t bytes) { return grow(0, bytes); }
  void* part(size_t bytes) { return grow(1, bytes); }

 private:
  void* grow(int which, size_t bytes);
  void* buf_[2] = {nullptr, nullptr};
  size_t cap_[2] = {0, 0};
};

// Causal attention; the rows' pointers (q, k, v, out) are device pointers, the array itself is on
// the host and is copied into `scratch` (kernels/attention/cuda_invariant.cu).
void attention_invariant(const AttentionRow* rows, int n_rows, const AttentionShape& s, AttentionScratch& scratch);

// ---- default kernels: the fastest path per shape, as production engines run ----
// cuBLAS sgemm with its default heuristics (tiles and split-K chosen by shape).
void matmul_default(const float* d_x, const float* d_w, float* d_y, int M, int N, int K);
// Stored weights, as production engines run them: F16 and BF16 through cublasGemmEx (activations
// rounded to the weight's type, f32 accumulation, default algorithm); the block formats
// dequantized in chunks of weight rows into f32 scratch (at most kDequantChunkBytes), each chunk
// through cuBLAS sgemm (kernels/matmul/cuda_default.cu).
void matmul_default_stored(const float* d_x, const StoredWeight& w, float* d_y, int M, int N, int K,
                           MatmulScratch& scratch);
constexpr size_t kDequantChunkBytes = size_t(64) << 20;
// One block per row, tree reduction across the block.
void rmsnorm_default(const float* d_x, const float* d_g, float* d_y, int M, int D, float eps);
// Split-KV attention with the split count chosen from the shape (rows x heads against the number
// of multiprocessors), combined in a second pass: the order changes with the batch.
void attention_default(const AttentionRow* rows, int n_rows, const AttentionShape& s, AttentionScratch& scratch);

// ---- element-wise ops (the same bits in both modes; kernels/elementwise/cuda_elementwise.cu) ----
// gate[i] = silu(gate[i]) * up[i] (math::silu_mul).
void silu_mul(float* d_gate, const float* d_up, size_t n);
// x[i] += y[i].
void add(float* d_x, const float* d_y, size_t n);
// RoPE on x[R][n_heads * head_dim]: adjacent pairs (2i, 2i+1), or with neox the halves
// (i, i + rope_dim / 2), i < rope_dim / 2; row r rotates by the table rows d_cos/d_sin[pos[r]]
// ([positions][rope_dim / 2], from math::rope_table on the host). d_pos: R positions on the device.
void rope(float* d_x, const int* d_pos, int R, int n_heads, int head_dim, int rope_dim, bool neox, const float* d_cos,
          const float* d_sin);
// x[r][i] += b[i] for r < R, i < width.
void add_bias(float* d_x, const float* d_b, int R, int width);
// x[i] = round to bf16 (kind 1) or f16 (kind 2) and back, nearest even; kind 0: unchanged.
void round_to(int kind, float* d_x, size_t n);
// dst[j] = src[idx[j]] for rows of `width` floats (d_idx on the device).
void gather_rows(const float* d_src, const int* d_idx, int n, int width, float* d_dst);
// dst[j] = the row idx[j] of a stored table, dequantized (quant::dequantize_row's bits; embedding
// lookup of an F16, BF16 or block-format table; kernels/matmul/cuda_dequant.cu).
void gather_rows_stored(const StoredWeight& table, const int* d_idx, int n, int width, float* d_dst);
// dst[r][k] = element k of weight rows n0 .. n0 + rows - 1, dequantized to f32.
void dequantize_rows(const StoredWeight& w, int n0, int rows, int K, float* d_dst);
// Row r of src (width floats) written at d_dst[r] (KV-cache store; d_dst: n device pointers, itself
// on the device).
void scatter_rows(const float* d_src, float* const* d_dst, int n, int width);

// d[i] = a hash of (seed, i) mapped to [-scale, scale): synthetic weights made on the device.
void fill_random(float* d, size_t n, uint32_t seed, float scale);

// Device copies of small arrays (row indices, positions, row pointers).
int* alloc_ints(size_t n);
void upload_ints(int* d_dst, const int* src, size_t n);
void free_ints(int* d);
float** alloc_ptrs(size_t n);
void upload_ptrs(float** d_dst, float* const* src, size_t n);
void free_ptrs(float** d);

}  // namespace repro::kernels::cuda
