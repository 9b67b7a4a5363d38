// The CPU op tables: cpu-default, cpu-batch-invariant and cpu-deterministic.
//
// The tables share everything but the three kernels whose reduction order decides batch variance
// (matmul, RMSNorm, attention): buffers are host memory, weights are read in place, and the
// element-wise ops (embedding gather, RoPE, silu * up, residual and bias add, KV store, row gather,
// precision rounding) are plain loops whose value for a row never depends on other rows, computed
// by the math the CUDA tables share (kernels/elementwise_math.hpp: own exp in SiLU,
// one RoPE table function), so a GPU's element-wise bits equal these.
//   cpu-default          kernels/*/default.cpp: a GEMV for one row, register tiles for a few rows,
//                        OpenBLAS cblas_sgemm for many, split-KV attention, the fastest RMSNorm;
//                        the fastest path per shape, as production engines run.
//   cpu-batch-invariant  kernels/*/invariant.cpp: one reduction order per output element, fixed
//                        by the reduction length alone; bitwise equal to kernels/*/reference.cpp.
//   cpu-deterministic    kernels/*/reference.cpp themselves: the plain loops that define the
//                        batch-invariant order, on one thread, and the engine decodes each request
//                        alone (OpsInfo::requests_alone). What a framework's deterministic switch
//                        amounts to; the reference order IS the invariant order, so its bits equal
//                        cpu-batch-invariant's (tests/unit-deterministic.cpp), only slower.
//   cpu-tp-invariant     cpu-batch-invariant's kernels, and a row-parallel matmul's partial
//                        (matmul_partial) in the blocks of tp_block(k_total) added along the
//                        pairwise tree, the ranks' partials added along the same tree in f32
//                        (kernels/tp/reference.cpp): bits independent of the TP size and of the
//                        all-reduce algorithm.
// Matmul reads every weight type in place: F32 through the f32 kernels, F16, BF16 and the GGUF
// block formats through kernels/matmul/quant_*.cpp (dequantized panel by panel, activations stay
// f32; the invariant order is fixed by K and the type). The embedding gather dequantizes the rows
// it reads.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "ops_internal.hpp"
#include "repro/common/error.hpp"
#include "repro/common/threadpool.hpp"
#include "repro/common/quant.hpp"
#include "elementwise_math.hpp"
#include "kernels.hpp"
#include "matmul_quant.hpp"
#include "moe.hpp"
#include "tp.hpp"

namespace repro::kernels {

namespace {

// The kernel set of one CPU table.
struct CpuKernels {
  const char* name;  // table name
  const char* mode;  // mode name
  bool blas;         // matmul calls OpenBLAS
  void (*matmul)(const float*, const float*, float*, int, int, int, ThreadPool&);
  // Weights in a block format or F16/BF16, read in their stored type (kernels/matmul_quant.hpp).
  void (*matmul_q)(const float*, const QuantWeight&, float*, int, int, int, ThreadPool&);
  void (*rmsnorm)(const float*, const float*, float*, int, int, float, ThreadPool&);
  void (*attention)(const AttentionRow*, int, const AttentionShape&, ThreadPool&);
  bool alone = false;  // one thread, one request at a time (the deterministic table)
  bool tp_blocks = false;  // row-parallel partials and the all-reduce in the tp-invariant order
};

// The reference kernels in the table's signature (they take no thread pool: plain loops, one thread).
void matmul_ref(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool&) {
  matmul_reference(x, w, y, M, N, K);
}
void matmul_q_ref(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool&) {
  matmul_q_reference(x, w, y, M, N, K);
}
void rmsnorm_ref(const float* x, const float* g, float* y, int M, int D, float eps, ThreadPool&) {
  rmsnorm_reference(x, g, y, M, D, eps);
}
void attention_ref(const AttentionRow* rows, int n, const AttentionShape& s, ThreadPool&) {
  attention_reference(rows, n, s);
}

const CpuKernels kDefault{"cpu-default", "default", true, matmul_default, matmul_q_default, rmsnorm_default,
                          attention_default};
const CpuKernels kInvariant{"cpu-batch-invariant", "batch-invariant", false, matmul_invariant, matmul_q_invariant,
                            rmsnorm_invariant, attention_invariant};
const CpuKernels kDeterministic{"cpu-deterministic", "deterministic", false, matmul_ref, matmul_q_ref, rmsnorm_ref,
                                attention_ref, true};
const CpuKernels kTpInvariant{"cpu-tp-invariant", "tp-invariant", false, matmul_invariant, matmul_q_invariant,
                              rmsnorm_invariant, attention_invariant, false, true};

const float* f32_data(const Weight& w, const char* op, const char* table) {
  if (w.dtype != DType::F32)
    throw BackendError(std::string(op) + ": weights of type " + dtype_name(w.dtype) + " are not supported by the " +
                       table + " op table (supported: F32; the loader keeps norm gains in F32)");
  return static_cast<const float*>(w.data);
}

// silu(g) * u on 8 lanes at a time, bit for bit math::silu_mul: simd::exp is math::exp lane by
// lane, and the negation, the add, the correctly rounded division and the product are the scalar's.
// Returns how many elements it did (a multiple of 8); the caller finishes the tail.
REPRO_LANES size_t silu_mul_lanes(float* g, const float* u, size_t n) {
  const simd::f32x8 one = simd::set1(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const simd::f32x8 x = simd::load(g + i);
    const simd::f32x8 e = simd::exp(simd::neg(x));
    const simd::f32x8 s = simd::div(x, simd::add(one, e));
    simd::store(g + i, simd::mul(s, simd::load(u + i)));
  }
  return i;
}

class CpuOps final : public TableBase {
 public:
  CpuOps(const CpuKernels& k, int threads) : k_(k), pool_(k.alone ? 1 : threads) {}
  ~CpuOps() override = default;

  OpsInfo describe() const override {
    OpsInfo i;
    i.name = k_.name;
    i.device = "cpu";
    i.mode = k_.mode;
    i.isa = cpu_kernels_isa();
    if (k_.alone) {
      i.library = "reference kernels (plain loops, one thread, no BLAS)";
    } else if (k_.blas) {
      const char* cfg = openblas_get_config();
      i.library = std::string("OpenBLAS (") + (cfg ? cfg : "unknown config") + ")";
    } else {
      i.library = "own kernels (no BLAS)";
    }
    i.threads = pool_.size();
    i.requests_alone = k_.alone;
    return i;
  }

  // ---- buffers: host memory ----
  void upload(Buffer& dst, size_t offset, const float* src, size_t n) override {
    std::memcpy(dst.data() + offset, src, n * sizeof(float));
  }
  void download(const Buffer& src, size_t offset, float* dst, size_t n) override {
    std::memcpy(dst, src.data() + offset, n * sizeof(float));
  }
  Weight bind_weight(const Weight& w) override { return w; }

  // ---- kernels ----
  void matmul(const Buffer& x, const Weight& w, Buffer& y, int M) override {
    if (w.dtype == DType::F32)
      return k_.matmul(x.data(), static_cast<const float*>(w.data), y.data(), M, w.rows, w.cols, pool_);
    const QuantWeight q{w.dtype, static_cast<const uint8_t*>(w.data), quant::row_bytes(w.dtype, w.cols)};
    k_.matmul_q(x.data(), q, y.data(), M, w.rows, w.cols, pool_);
  }

  // ---- tensor parallelism: the tp-invariant table's own order; the others run the base's ----
  void matmul_partial(const Buffer& x, const Weight& w, int k_total, Buffer& y, int M) override {
    if (!k_.tp_blocks) return matmul(x, w, y, M);
    const int B = tp_block(k_total, w.dtype);
    if (B == w.cols) return matmul(x, w, y, M);  // one block: the batch-invariant dot over it
    // Each block through the table's own batch-invariant kernel (the F32 and F16/BF16 panels or
    // the integer dot products; the block's weight rows are read in place, a row apart).
    matmul_tp_blocks(x.data(), w.dtype, w.data, y.data(), M, w.rows, w.cols, B,
                     [this](const float* xb, const QuantWeight& wb, float* yb, int m, int n, int k) {
                       k_.matmul_q(xb, wb, yb, m, n, k, pool_);
                     });
  }

  void allreduce(Buffer* parts, int N, AllReduce algo, Precision p, size_t n) override {
    float* ptr[kMaxTp];
    if (N < 1 || N > kMaxTp) throw std::logic_error("allreduce: N must be 1, 2, 4 or 8");
    for (int r = 0; r < N; ++r) ptr[r] = parts[r].data();
    if (k_.tp_blocks) return tp_allreduce_reference(ptr, N, p, n);
    allreduce_reference(ptr, N, algo, p, n);
  }

  void copy_cols(const Buffer& src, int R, int width, Buffer& dst, int dst_width, int col) override {
    for (int r = 0; r < R; ++r)
      std::memcpy(dst.data() + static_cast<size_t>(r) * dst_width + col, src.data() + static_cast<size_t>(r) * width,
                  sizeof(float) * width);
  }

  // ---- mixture of experts: in place ----
  void scatter_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) override {
    for (int j = 0; j < n; ++j)
      std::memcpy(dst.data() + static_cast<size_t>(idx[j]) * width, src.data() + static_cast<size_t>(j) * width,
                  sizeof(float) * width);
  }
  void moe_combine(const Buffer& y, const float* w, int R, int S, int width, Precision p, Buffer& out) override {
    moe_combine_reference(y.data(), w, R, S, width, p, out.data());
  }

  void rmsnorm(const Buffer& x, const Weight& g, Buffer& y, int M, float eps) override {
    k_.rmsnorm(x.data(), f32_data(g, "rmsnorm", k_.name), y.data(), M, g.cols, eps, pool_);
  }

  void attention(const Buffer& q, const KvRow* rows, int R, int layer, const AttentionDims& d,
                 Buffer& out) override {
    k_.attention(attention_rows(q, rows, R, layer, d, out), R, attention_shape(d), pool_);
  }

  // ---- element-wise ops ----
  void embed(const Weight& table, const int* tokens, int R, Buffer& x) override {
    const size_t dim = table.cols;
    if (table.dtype != DType::F32) {
      // A row of a table in another type: dequantized on its own (row-local, so invariant).
      const size_t rb = quant::row_bytes(table.dtype, table.cols);
      for (int r = 0; r < R; ++r)
        quant::dequantize_row(table.dtype, static_cast<const uint8_t*>(table.data) + static_cast<size_t>(tokens[r]) * rb,
                              x.data() + r * dim, table.cols);
      return;
    }
    const float* t = static_cast<const float*>(table.data);
    for (int r = 0; r < R; ++r)
      std::memcpy(x.data() + r * dim, t + static_cast<size_t>(tokens[r]) * dim, sizeof(float) * dim);
  }

  // RoPE on the first rope_dim dims of each head: adjacent pairs (2i, 2i+1) as llama2.c's run.c and
  // llama.cpp's "normal" rope (arch llama), or the halves (i, i + rope_dim / 2) as llama.cpp's
  // "neox" rope (qwen2, qwen3). cos/sin per (position, pair) come from a table, so a row's
  // rotation depends only on its position.
  void rope(Buffer& x, const int* pos, int R, int n_heads, const RopeDims& d) override {
    const int half = d.rope_dim / 2;
    const size_t width = static_cast<size_t>(n_heads) * d.head_dim;
    for (int r = 0; r < R; ++r) {
      grow_rope(pos[r], d);
      const float* cs = rope_cos() + static_cast<size_t>(pos[r]) * half;
      const float* sn = rope_sin() + static_cast<size_t>(pos[r]) * half;
      for (int h = 0; h < n_heads; ++h) {
        float* v = x.data() + r * width + static_cast<size_t>(h) * d.head_dim;
        if (d.neox)
          for (int i = 0; i < half; ++i) math::rope_pair(v[i], v[i + half], cs[i], sn[i]);
        else
          for (int i = 0; i < half; ++i) math::rope_pair(v[2 * i], v[2 * i + 1], cs[i], sn[i]);
      }
    }
  }

  void silu_mul(Buffer& gate, const Buffer& up, size_t n) override {
    float* g = gate.data();
    const float* u = up.data();
    size_t i = 0;
    if (use_lanes()) i = silu_mul_lanes(g, u, n);
    for (; i < n; ++i) g[i] = math::silu_mul(g[i], u[i]);  // own exp: the GPU's bits
  }

  void add(Buffer& x, const Buffer& y, size_t n) override {
    float* a = x.data();
    const float* b = y.data();
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
  }

  void add_bias(Buffer& x, const Weight& b, int R) override {
    const float* bias = f32_data(b, "add_bias", k_.name);
    const size_t w = static_cast<size_t>(b.cols);
    for (int r = 0; r < R; ++r) {
      float* a = x.data() + r * w;
      for (size_t i = 0; i < w; ++i) a[i] += bias[i];
    }
  }

  void kv_store(const Buffer& k, const Buffer& v, const KvRow* rows, int R, int layer) override {
    const size_t kd = kv_dim();
    for (int r = 0; r < R; ++r) {
      std::memcpy(kv_k(rows[r].slot, layer) + rows[r].pos * kd, k.data() + r * kd, sizeof(float) * kd);
      std::memcpy(kv_v(rows[r].slot, layer) + rows[r].pos * kd, v.data() + r * kd, sizeof(float) * kd);
    }
  }

  void gather_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) override {
    for (int j = 0; j < n; ++j)
      std::memcpy(dst.data() + static_cast<size_t>(j) * width, src.data() + static_cast<size_t>(idx[j]) * width,
                  sizeof(float) * width);
  }

  void round_to(Precision p, Buffer& x, size_t n) override {
    if (p == Precision::F32) return;
    float* a = x.data();
    for (size_t i = 0; i < n; ++i) a[i] = round_to_precision(p, a[i]);
  }

 protected:
  Raw raw_alloc(size_t n) override {
    auto* p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
    if (!p) throw std::bad_alloc();
    return {p, [](float* q) { std::free(q); }};
  }
  void raw_copy(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }

 private:
  const CpuKernels& k_;
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Ops> make_cpu_default(int threads) { return std::make_unique<CpuOps>(kDefault, threads); }
std::unique_ptr<Ops> make_cpu_invariant(int threads) { return std::make_unique<CpuOps>(kInvariant, threads); }
std::unique_ptr<Ops> make_cpu_deterministic(int threads) { return std::make_unique<CpuOps>(kDeterministic, threads); }
std::unique_ptr<Ops> make_cpu_tp_invariant(int threads) { return std::make_unique<CpuOps>(kTpInvariant, threads); }

}  // namespace repro::kernels
