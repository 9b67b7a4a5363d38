// The CUDA op tables: cuda-default and cuda-batch-invariant (built when CMake found a CUDA toolkit).
//
// Both tables keep weights, activations and the KV-cache slots in device memory; the forward pass
// only hands buffers back to ops, and downloads the logits for sampling on the host (the same
// sampling code as the CPU). They share the element-wise kernels (kernels/elementwise/
// cuda_elementwise.cu, the shared host/device math) and differ in the three kernels whose
// reduction order decides batch variance:
//   cuda-default          cuBLAS sgemm (default heuristics), one-block-per-row RMSNorm, split-KV
//                         attention with the split count chosen by shape
//   cuda-batch-invariant  kernels/*/cuda_invariant.cu: the CPU reference order, so its bits equal
//                         cpu-batch-invariant's: a report made on a GPU re-verifies on any CPU
#ifdef REPRO_HAVE_CUDA
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops_internal.hpp"
#include "repro/common/error.hpp"
#include "repro/kernels/cuda.hpp"
#include "repro/kernels/elementwise_math.hpp"
#include "repro/kernels/kernels.hpp"

namespace repro::kernels {
namespace {

// Small device arrays, grown on demand (row indices, positions, row pointers).
template <class T>
struct DevArray {
  T* p = nullptr;
  size_t cap = 0;
};

class CudaOps final : public Ops {
 public:
  CudaOps(bool invariant, int threads) : invariant_(invariant), threads_(threads), info_(cuda::device_info()) {}
  ~CudaOps() override {
    for (auto& [host, dev] : weights_) cuda::free(dev);
    cuda::free(rope_cos_), cuda::free(rope_sin_);
    cuda::free_ints(ints_.p);
    cuda::free_ptrs(ptrs_.p);
  }

  OpsInfo describe() const override {
    OpsInfo i;
    i.name = invariant_ ? "cuda-batch-invariant" : "cuda-default";
    i.device = "cuda";
    i.mode = invariant_ ? "batch-invariant" : "default";
    i.isa = info_.name + " (compute capability " + std::to_string(info_.cc_major) + "." +
            std::to_string(info_.cc_minor) + ")";
    i.library = invariant_ ? "own kernels (no cuBLAS)" : "cuBLAS " + info_.cublas_version;
    i.threads = threads_;  // host threads the table was made with (the kernels run on the GPU)
    return i;
  }

  // ---- buffers: device memory ----
  void upload(Buffer& dst, size_t offset, const float* src, size_t n) override {
    cuda::upload(dst.data() + offset, src, n);
  }
  void download(const Buffer& src, size_t offset, float* dst, size_t n) override {
    cuda::download(dst, src.data() + offset, n);
  }
  // Weights are copied to the device once (per host address) and stay resident.
  // A type the kernels cannot read stays on the host; the op that meets it names the type.
  Weight bind_weight(const Weight& w) override {
    if (w.dtype != DType::F32) return w;
    auto it = weights_.find(w.data);
    if (it == weights_.end()) {
      const size_t n = static_cast<size_t>(w.rows) * w.cols;
      float* d = cuda::alloc(n);
      cuda::upload(d, static_cast<const float*>(w.data), n);
      it = weights_.emplace(w.data, d).first;
      resident_.insert(d);
    }
    Weight out = w;
    out.data = it->second;
    return out;
  }

  // ---- kernels ----
  void matmul(const Buffer& x, const Weight& w, Buffer& y, int M) override {
    const float* dw = device_weight(w);
    if (invariant_) cuda::matmul_invariant(x.data(), dw, y.data(), M, w.rows, w.cols);
    else cuda::matmul_default(x.data(), dw, y.data(), M, w.rows, w.cols);
  }
  void rmsnorm(const Buffer& x, const Weight& g, Buffer& y, int M, float eps) override {
    const float* dg = device_weight(g);
    if (invariant_) cuda::rmsnorm_invariant(x.data(), dg, y.data(), M, g.cols, eps);
    else cuda::rmsnorm_default(x.data(), dg, y.data(), M, g.cols, eps);
  }
  void attention(const Buffer& q, const KvRow* rows, int R, int layer, const AttentionDims& d, Buffer& out) override {
    const size_t width = static_cast<size_t>(d.n_heads) * d.head_dim;
    att_rows_.resize(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r)
      att_rows_[r] = {q.data() + r * width, kv_k(rows[r].slot, layer), kv_v(rows[r].slot, layer), rows[r].pos + 1,
                      out.data() + r * width};
    const AttentionShape s{d.n_heads, d.n_kv_heads, d.head_dim, kv_dim()};
    if (invariant_) cuda::attention_invariant(att_rows_.data(), R, s);
    else cuda::attention_default(att_rows_.data(), R, s);
  }

  // ---- element-wise ops ----
  void embed(const Weight& table, const int* tokens, int R, Buffer& x) override {
    const float* dt = device_weight(table);
    cuda::gather_rows(dt, upload_ints(tokens, R), R, table.cols, x.data());
  }
  void rope(Buffer& x, const int* pos, int R, int n_heads, const RopeDims& d) override {
    int max_pos = 0;
    for (int r = 0; r < R; ++r) max_pos = std::max(max_pos, pos[r]);
    grow_rope(max_pos, d);
    cuda::rope(x.data(), upload_ints(pos, R), R, n_heads, d.head_dim, d.rope_dim, d.neox, rope_cos_, rope_sin_);
  }
  void silu_mul(Buffer& gate, const Buffer& up, size_t n) override { cuda::silu_mul(gate.data(), up.data(), n); }
  void add(Buffer& x, const Buffer& y, size_t n) override { cuda::add(x.data(), y.data(), n); }
  void add_bias(Buffer& x, const Weight& b, int R) override {
    cuda::add_bias(x.data(), device_weight(b), R, b.cols);
  }
  void kv_store(const Buffer& k, const Buffer& v, const KvRow* rows, int R, int layer) override {
    const size_t kd = kv_dim();
    host_ptrs_.resize(2 * static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      host_ptrs_[r] = kv_k(rows[r].slot, layer) + rows[r].pos * kd;
      host_ptrs_[R + r] = kv_v(rows[r].slot, layer) + rows[r].pos * kd;
    }
    float** dst = upload_ptrs(host_ptrs_.data(), host_ptrs_.size());
    cuda::scatter_rows(k.data(), dst, R, static_cast<int>(kd));
    cuda::scatter_rows(v.data(), dst + R, R, static_cast<int>(kd));
  }
  void gather_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) override {
    cuda::gather_rows(src.data(), upload_ints(idx, n), n, width, dst.data());
  }
  void round_to(Precision p, Buffer& x, size_t n) override {
    cuda::round_to(p == Precision::BF16 ? 1 : p == Precision::F16 ? 2 : 0, x.data(), n);
  }

 protected:
  Raw raw_alloc(size_t n) override {
    // Freed from destructors: a failing cudaFree at teardown is not worth an abort.
    return {cuda::alloc(n), [](float* p) {
              try {
                cuda::free(p);
              } catch (...) {
              }
            }};
  }
  void raw_copy(float* dst, const float* src, size_t n) override { cuda::copy(dst, src, n); }

 private:
  const float* device_weight(const Weight& w) {
    if (w.dtype != DType::F32)
      throw BackendError(std::string("weights of type ") + dtype_name(w.dtype) +
                         " are not supported by the CUDA op tables yet (supported: F32)");
    // A weight the forward pass bound already points at device memory; a host weight is bound now.
    if (resident_.count(w.data)) return static_cast<const float*>(w.data);
    return static_cast<const float*>(bind_weight(w).data);
  }
  int* upload_ints(const int* src, int n) {
    if (static_cast<size_t>(n) > ints_.cap) {
      cuda::free_ints(ints_.p);
      ints_.p = nullptr;
      ints_.p = cuda::alloc_ints(static_cast<size_t>(n) * 2);
      ints_.cap = static_cast<size_t>(n) * 2;
    }
    cuda::upload_ints(ints_.p, src, n);
    return ints_.p;
  }
  float** upload_ptrs(float* const* src, size_t n) {
    if (n > ptrs_.cap) {
      cuda::free_ptrs(ptrs_.p);
      ptrs_.p = nullptr;
      ptrs_.p = cuda::alloc_ptrs(n * 2);
      ptrs_.cap = n * 2;
    }
    cuda::upload_ptrs(ptrs_.p, src, n);
    return ptrs_.p;
  }
  // The host's cos/sin table (math::rope_table, the CPU tables' function) for positions 0..pos,
  // grown by doubling and uploaded whole.
  void grow_rope(int pos, const RopeDims& d) {
    const int half = d.rope_dim / 2;
    const bool same = half == rope_half_ && d.theta == rope_theta_ && d.freq_scale == rope_scale_ &&
                      d.freq_factors == rope_factors_;
    if (pos < rope_positions_ && same) return;
    if (!same) rope_positions_ = 0;  // another model's RoPE: a new table
    const int n = std::max(pos + 1, rope_positions_ * 2);
    host_cos_.resize(static_cast<size_t>(n) * half);
    host_sin_.resize(static_cast<size_t>(n) * half);
    math::rope_table(d.theta, d.rope_dim, rope_positions_, n, host_cos_.data(), host_sin_.data(), d.freq_scale,
                     d.freq_factors);
    cuda::free(rope_cos_), cuda::free(rope_sin_);
    rope_cos_ = rope_sin_ = nullptr;
    rope_cos_ = cuda::alloc(host_cos_.size());
    rope_sin_ = cuda::alloc(host_sin_.size());
    cuda::upload(rope_cos_, host_cos_.data(), host_cos_.size());
    cuda::upload(rope_sin_, host_sin_.data(), host_sin_.size());
    rope_positions_ = n;
    rope_half_ = half;
    rope_theta_ = d.theta;
    rope_scale_ = d.freq_scale;
    rope_factors_ = d.freq_factors;
  }

  bool invariant_;
  int threads_;
  cuda::DeviceInfo info_;
  std::unordered_map<const void*, float*> weights_;  // host address -> resident device copy
  std::unordered_set<const void*> resident_;         // the device copies
  std::vector<AttentionRow> att_rows_;
  std::vector<float*> host_ptrs_;
  DevArray<int> ints_;
  DevArray<float*> ptrs_;
  std::vector<float> host_cos_, host_sin_;
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  int rope_positions_ = 0, rope_half_ = 0;
  float rope_theta_ = 0, rope_scale_ = 0;
  const float* rope_factors_ = nullptr;
};

void require_device() {
  const cuda::DeviceInfo info = cuda::device_info();
  if (info.device_count == 0)
    throw BackendError("--device cuda: no CUDA device (" + info.error + "); use --device cpu");
}

}  // namespace

std::unique_ptr<Ops> make_cuda_default(int threads) {
  require_device();
  return std::make_unique<CudaOps>(false, threads);
}
std::unique_ptr<Ops> make_cuda_invariant(int threads) {
  require_device();
  return std::make_unique<CudaOps>(true, threads);
}

}  // namespace repro::kernels
#endif  // REPRO_HAVE_CUDA
