// The CUDA op tables: cuda-default and cuda-batch-invariant (built when CMake found a CUDA toolkit).
//
// Both tables keep weights, activations and the KV-cache slots in device memory; the forward pass
// only hands buffers back to ops, and downloads the logits for sampling on the host (the same
// sampling code as the CPU). They share the element-wise kernels (kernels/elementwise/
// cuda_elementwise.cu, the shared host/device math) and differ in the three kernels whose
// reduction order decides batch variance:
//   cuda-default          cuBLAS sgemm (default heuristics; cublasGemmEx for F16/BF16 weights,
//                         block formats dequantized in chunks then sgemm), one-block-per-row
//                         RMSNorm, split-KV attention with the split count chosen by shape
//   cuda-batch-invariant  kernels/*/cuda_invariant.cu: the CPU reference order, so its bits equal
//                         cpu-batch-invariant's: a report made on a GPU re-verifies on any CPU
// Weights are uploaded once, in their stored type (F32, F16, BF16 or a GGUF block format); the
// kernels dequantize in registers (kernels/matmul/cuda_dequant.hpp), so a model takes its stored
// size on the device. Which types each table reads is its registry row (kernels/ops.cpp).
// Each table is one kernel set (CudaKernels), picked once, as the CPU tables pick theirs.
// What stays constant over a step's layers (the positions RoPE reads, the KV-cache addresses the
// store writes) is uploaded once per step, in begin_step; the attention rows carry the layer's K/V
// and the call's buffers, so they are uploaded per call, into the table's own attention scratch.
#ifdef REPRO_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops_internal.hpp"
#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "cuda.hpp"
#include "elementwise_math.hpp"
#include "kernels.hpp"

namespace repro::kernels {
namespace {

// The kernel set of one CUDA table: the three kernels whose reduction order decides batch variance.
struct CudaKernels {
  const char* name;  // table name
  const char* mode;  // mode name
  bool cublas;       // matmul calls cuBLAS
  void (*matmul)(const float*, const float*, float*, int, int, int);
  // Weights in a stored type (F16, BF16, block formats): the types the table's registry row names.
  void (*matmul_stored)(const float*, const cuda::StoredWeight&, float*, int, int, int, cuda::MatmulScratch&);
  void (*rmsnorm)(const float*, const float*, float*, int, int, float);
  void (*attention)(const AttentionRow*, int, const AttentionShape&, cuda::AttentionScratch&);
};

const CudaKernels kCudaDefault{"cuda-default",         "default",
                               true,                   cuda::matmul_default,
                               cuda::matmul_default_stored, cuda::rmsnorm_default,
                               cuda::attention_default};
const CudaKernels kCudaInvariant{"cuda-batch-invariant", "batch-invariant",
                                 false,                  cuda::matmul_invariant,
                                 cuda::matmul_invariant_stored, cuda::rmsnorm_invariant,
                                 cuda::attention_invariant};

// Small device arrays, grown on demand (row indices, positions, row pointers).
template <class T>
struct DevArray {
  T* p = nullptr;
  size_t cap = 0;
};
void device_free(int* p) { cuda::free_ints(p); }
void device_free(float** p) { cuda::free_ptrs(p); }
void device_alloc(int*& p, size_t n) { p = cuda::alloc_ints(n); }
void device_alloc(float**& p, size_t n) { p = cuda::alloc_ptrs(n); }
void device_upload(int* d, const int* src, size_t n) { cuda::upload_ints(d, src, n); }
void device_upload(float** d, float* const* src, size_t n) { cuda::upload_ptrs(d, src, n); }

// n elements of src into a (grown to twice n when too small); returns the device copy.
template <class T>
T* to_device(DevArray<T>& a, const T* src, size_t n) {
  if (n > a.cap) {
    device_free(a.p);
    a.p = nullptr;
    a.cap = 0;
    device_alloc(a.p, n * 2);
    a.cap = n * 2;
  }
  device_upload(a.p, src, n);
  return a.p;
}

class CudaOps final : public TableBase {
 public:
  CudaOps(const CudaKernels& k, int threads) : k_(k), threads_(threads), info_(cuda::device_info()) {}
  ~CudaOps() override {
    for (auto& [host, dev] : weights_) cuda::free_bytes(dev);
    cuda::free(rope_cos_), cuda::free(rope_sin_);
    device_free(ints_.p), device_free(step_pos_.p);
    device_free(ptrs_.p), device_free(step_ptrs_.p);
  }

  OpsInfo describe() const override {
    OpsInfo i;
    i.name = k_.name;
    i.device = "cuda";
    i.mode = k_.mode;
    i.isa = info_.name + " (compute capability " + std::to_string(info_.cc_major) + "." +
            std::to_string(info_.cc_minor) + ")";
    i.library = k_.cublas ? "cuBLAS " + info_.cublas_version : "own kernels (no cuBLAS)";
    i.threads = threads_;  // host threads the table was made with (the kernels run on the GPU)
    return i;
  }

  // ---- the step: positions and KV-cache addresses of every layer, uploaded once ----
  void begin_step(const KvRow* rows, int R) override {
    step_rows_.assign(rows, rows + R);
    step_generation_ = kv_generation();
    std::vector<int> pos(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) pos[r] = rows[r].pos;
    to_device(step_pos_, pos.data(), pos.size());
    // [layer][K rows, then V rows]: the store's destinations, as kv_store would upload them per layer.
    const int layers = kv_layers();
    const size_t kd = kv_dim();
    host_ptrs_.resize(static_cast<size_t>(layers) * 2 * R);
    for (int l = 0; l < layers; ++l)
      for (int r = 0; r < R; ++r) {
        host_ptrs_[(static_cast<size_t>(l) * 2) * R + r] = kv_k(rows[r].slot, l) + rows[r].pos * kd;
        host_ptrs_[(static_cast<size_t>(l) * 2 + 1) * R + r] = kv_v(rows[r].slot, l) + rows[r].pos * kd;
      }
    to_device(step_ptrs_, host_ptrs_.data(), host_ptrs_.size());
  }

  // ---- buffers: device memory ----
  void upload(Buffer& dst, size_t offset, const float* src, size_t n) override {
    cuda::upload(dst.data() + offset, src, n);
  }
  void download(const Buffer& src, size_t offset, float* dst, size_t n) override {
    cuda::download(dst, src.data() + offset, n);
  }
  // Weights are copied to the device once (per host address), in their stored type, and stay
  // resident; the kernels dequantize in registers. A type outside the table's registry row never
  // gets here: the engine checks the model's types when it binds the weights (check_weight_types).
  Weight bind_weight(const Weight& w) override {
    auto it = weights_.find(w.data);
    if (it == weights_.end()) {
      const size_t bytes = static_cast<size_t>(w.rows) * quant::row_bytes(w.dtype, w.cols);
      void* d = cuda::alloc_bytes(bytes);
      cuda::upload_bytes(d, w.data, bytes);
      it = weights_.emplace(w.data, d).first;
      resident_.insert(d);
    }
    Weight out = w;
    out.data = it->second;
    return out;
  }

  // ---- kernels ----
  void matmul(const Buffer& x, const Weight& w, Buffer& y, int M) override {
    if (w.dtype == DType::F32) return k_.matmul(x.data(), device_weight(w), y.data(), M, w.rows, w.cols);
    k_.matmul_stored(x.data(), stored_weight(w), y.data(), M, w.rows, w.cols, mm_scratch_);
  }
  void rmsnorm(const Buffer& x, const Weight& g, Buffer& y, int M, float eps) override {
    k_.rmsnorm(x.data(), device_weight(g), y.data(), M, g.cols, eps);
  }
  void attention(const Buffer& q, const KvRow* rows, int R, int layer, const AttentionDims& d, Buffer& out) override {
    k_.attention(attention_rows(q, rows, R, layer, d, out), R, attention_shape(d), att_scratch_);
  }

  // ---- element-wise ops ----
  void embed(const Weight& table, const int* tokens, int R, Buffer& x) override {
    if (table.dtype != DType::F32)  // a row dequantized on its own, as the CPU tables do
      return cuda::gather_rows_stored(stored_weight(table), to_device(ints_, tokens, R), R, table.cols, x.data());
    const float* dt = device_weight(table);
    cuda::gather_rows(dt, to_device(ints_, tokens, R), R, table.cols, x.data());
  }
  void rope(Buffer& x, const int* pos, int R, int n_heads, const RopeDims& d) override {
    int max_pos = 0;
    for (int r = 0; r < R; ++r) max_pos = std::max(max_pos, pos[r]);
    if (grow_rope(max_pos, d)) upload_rope();
    const int* d_pos = step_positions(pos, R) ? step_pos_.p : to_device(ints_, pos, R);
    cuda::rope(x.data(), d_pos, R, n_heads, d.head_dim, d.rope_dim, d.neox, rope_cos_, rope_sin_);
  }
  void silu_mul(Buffer& gate, const Buffer& up, size_t n) override { cuda::silu_mul(gate.data(), up.data(), n); }
  void add(Buffer& x, const Buffer& y, size_t n) override { cuda::add(x.data(), y.data(), n); }
  void add_bias(Buffer& x, const Weight& b, int R) override {
    cuda::add_bias(x.data(), device_weight(b), R, b.cols);
  }
  void kv_store(const Buffer& k, const Buffer& v, const KvRow* rows, int R, int layer) override {
    const size_t kd = kv_dim();
    float** dst = nullptr;
    if (step_rows(rows, R)) {
      dst = step_ptrs_.p + static_cast<size_t>(layer) * 2 * R;
    } else {  // outside a step (the kernel harness): this layer's destinations, now
      host_ptrs_.resize(2 * static_cast<size_t>(R));
      for (int r = 0; r < R; ++r) {
        host_ptrs_[r] = kv_k(rows[r].slot, layer) + rows[r].pos * kd;
        host_ptrs_[R + r] = kv_v(rows[r].slot, layer) + rows[r].pos * kd;
      }
      dst = to_device(ptrs_, host_ptrs_.data(), host_ptrs_.size());
    }
    cuda::scatter_rows(k.data(), dst, R, static_cast<int>(kd));
    cuda::scatter_rows(v.data(), dst + R, R, static_cast<int>(kd));
  }
  void gather_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) override {
    cuda::gather_rows(src.data(), to_device(ints_, idx, n), n, width, dst.data());
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
  // A weight the forward pass bound already points at device memory; a host weight is bound now.
  const void* device_data(const Weight& w) {
    if (resident_.count(w.data)) return w.data;
    return bind_weight(w).data;
  }
  // An F32 weight (matmul, norm gains, biases, embedding tables in f32).
  const float* device_weight(const Weight& w) {
    if (w.dtype != DType::F32)
      throw BackendError(std::string("the ") + k_.name + " op table reads " + dtype_name(w.dtype) +
                         " weights only in matmul and the embedding; norm gains and biases must be F32");
    return static_cast<const float*>(device_data(w));
  }
  cuda::StoredWeight stored_weight(const Weight& w) {
    return {w.dtype, static_cast<const uint8_t*>(device_data(w)), quant::row_bytes(w.dtype, w.cols)};
  }
  // Whether (rows, R) / (pos, R) are the current step's, whose device copies begin_step made (and
  // no slot was reallocated since).
  bool step_rows(const KvRow* rows, int R) const {
    if (R != static_cast<int>(step_rows_.size()) || step_generation_ != kv_generation()) return false;
    for (int r = 0; r < R; ++r)
      if (rows[r].slot != step_rows_[r].slot || rows[r].pos != step_rows_[r].pos) return false;
    return true;
  }
  bool step_positions(const int* pos, int R) const {
    if (R != static_cast<int>(step_rows_.size())) return false;
    for (int r = 0; r < R; ++r)
      if (pos[r] != step_rows_[r].pos) return false;
    return true;
  }
  // The base's cos/sin table (math::rope_table, the CPU tables' function), uploaded whole when it grew.
  void upload_rope() {
    cuda::free(rope_cos_), cuda::free(rope_sin_);
    rope_cos_ = rope_sin_ = nullptr;
    rope_cos_ = cuda::alloc(rope_size());
    rope_sin_ = cuda::alloc(rope_size());
    cuda::upload(rope_cos_, rope_cos(), rope_size());
    cuda::upload(rope_sin_, rope_sin(), rope_size());
  }

  const CudaKernels& k_;
  int threads_;
  cuda::DeviceInfo info_;
  std::unordered_map<const void*, void*> weights_;  // host address -> resident device copy (stored type)
  std::unordered_set<const void*> resident_;         // the device copies
  cuda::AttentionScratch att_scratch_;
  cuda::MatmulScratch mm_scratch_;  // the stored-weight matmul's converted activations or dequantized chunk
  std::vector<float*> host_ptrs_;
  DevArray<int> ints_;        // per-call indices (tokens, gathered rows; positions outside a step)
  DevArray<float*> ptrs_;     // per-call KV destinations outside a step
  std::vector<KvRow> step_rows_;  // the current step's rows (begin_step)
  long step_generation_ = -1;
  DevArray<int> step_pos_;        // [R] the step's positions
  DevArray<float*> step_ptrs_;    // [layer][2][R] the step's KV-cache destinations
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
};

void require_device() {
  const cuda::DeviceInfo info = cuda::device_info();
  if (info.device_count == 0)
    throw BackendError("--device cuda: no CUDA device (" + info.error + "); use --device cpu");
}

}  // namespace

std::unique_ptr<Ops> make_cuda_default(int threads) {
  require_device();
  return std::make_unique<CudaOps>(kCudaDefault, threads);
}
std::unique_ptr<Ops> make_cuda_invariant(int threads) {
  require_device();
  return std::make_unique<CudaOps>(kCudaInvariant, threads);
}

}  // namespace repro::kernels
#endif  // REPRO_HAVE_CUDA
