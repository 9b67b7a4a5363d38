// Element-wise ops on the GPU, the same in both modes: SiLU * up, residual and bias add, RoPE, precision
// rounding, row gather and scatter (embedding lookup, KV-cache store).
//
// Why they are batch-invariant and equal the CPU: each output element is a function of the same
// input elements only, computed by the shared host/device math (include/repro/kernels/
// elementwise_math.hpp: own exp, IEEE division, no contraction under --fmad=false); RoPE rotates
// by a cos/sin table made on the host by math::rope_table. No reduction, so no order to keep.
#include "../cuda/check.cuh"
#include "../cuda.hpp"
#include "repro/common/rng.hpp"
#include "../elementwise_math.hpp"

namespace repro::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void silu_mul_kernel(float* gate, const float* up, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = math::silu_mul(gate[i], up[i]);
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] + y[i];
}

__global__ void round_kernel(int kind, float* x, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = math::round_storage(kind, x[i]);
}

// One thread per (row, head, pair).
__global__ void rope_kernel(float* x, const int* pos, int R, int n_heads, int head_dim, int half, bool neox,
                            const float* cs, const float* sn) {
  const long idx = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long per_row = static_cast<long>(n_heads) * half;
  if (idx >= per_row * R) return;
  const int r = static_cast<int>(idx / per_row), rem = static_cast<int>(idx % per_row);
  const int h = rem / half, i = rem % half;
  float* v = x + static_cast<long>(r) * n_heads * head_dim + static_cast<long>(h) * head_dim;
  const long t = static_cast<long>(pos[r]) * half + i;
  const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
  float a = v[i0], b = v[i1];
  math::rope_pair(a, b, cs[t], sn[t]);
  v[i0] = a;
  v[i1] = b;
}

__global__ void add_bias_kernel(float* x, const float* b, long n, int width) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n) x[e] = x[e] + b[e % width];
}

__global__ void gather_kernel(const float* src, const int* idx, int n, int width, float* dst) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long>(n) * width) return;
  const int j = static_cast<int>(e / width), c = static_cast<int>(e % width);
  dst[e] = src[static_cast<long>(idx[j]) * width + c];
}

__global__ void scatter_kernel(const float* src, float* const* dst, int n, int width) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long>(n) * width) return;
  const int j = static_cast<int>(e / width), c = static_cast<int>(e % width);
  dst[j][c] = src[e];
}

__global__ void fill_random_kernel(float* d, size_t n, uint32_t seed, float scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t h = rng::splitmix64((static_cast<uint64_t>(seed) << 32) ^ i);
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  d[i] = (2.0f * u - 1.0f) * scale;
}

}  // namespace

void fill_random(float* d, size_t n, uint32_t seed, float scale) {
  if (!n) return;
  fill_random_kernel<<<blocks_for(n), kThreads>>>(d, n, seed, scale);
  REPRO_CUDA_LAUNCHED("fill_random_kernel");
}

void silu_mul(float* d_gate, const float* d_up, size_t n) {
  if (!n) return;
  silu_mul_kernel<<<blocks_for(n), kThreads>>>(d_gate, d_up, n);
  REPRO_CUDA_LAUNCHED("silu_mul_kernel");
}

void add(float* d_x, const float* d_y, size_t n) {
  if (!n) return;
  add_kernel<<<blocks_for(n), kThreads>>>(d_x, d_y, n);
  REPRO_CUDA_LAUNCHED("add_kernel");
}

void round_to(int kind, float* d_x, size_t n) {
  if (!n || kind == 0) return;
  round_kernel<<<blocks_for(n), kThreads>>>(kind, d_x, n);
  REPRO_CUDA_LAUNCHED("round_kernel");
}

void rope(float* d_x, const int* d_pos, int R, int n_heads, int head_dim, int rope_dim, bool neox, const float* d_cos,
          const float* d_sin) {
  const int half = rope_dim / 2;
  const size_t n = static_cast<size_t>(R) * n_heads * half;
  if (!n) return;
  rope_kernel<<<blocks_for(n), kThreads>>>(d_x, d_pos, R, n_heads, head_dim, half, neox, d_cos, d_sin);
  REPRO_CUDA_LAUNCHED("rope_kernel");
}

void add_bias(float* d_x, const float* d_b, int R, int width) {
  const size_t n = static_cast<size_t>(R) * width;
  if (!n) return;
  add_bias_kernel<<<blocks_for(n), kThreads>>>(d_x, d_b, static_cast<long>(n), width);
  REPRO_CUDA_LAUNCHED("add_bias_kernel");
}

void gather_rows(const float* d_src, const int* d_idx, int n, int width, float* d_dst) {
  const size_t total = static_cast<size_t>(n) * width;
  if (!total) return;
  gather_kernel<<<blocks_for(total), kThreads>>>(d_src, d_idx, n, width, d_dst);
  REPRO_CUDA_LAUNCHED("gather_kernel");
}

void scatter_rows(const float* d_src, float* const* d_dst, int n, int width) {
  const size_t total = static_cast<size_t>(n) * width;
  if (!total) return;
  scatter_kernel<<<blocks_for(total), kThreads>>>(d_src, d_dst, n, width);
  REPRO_CUDA_LAUNCHED("scatter_kernel");
}

}  // namespace repro::kernels::cuda
