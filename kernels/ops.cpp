// The op-table base (buffers, KV-cache slots), the registry of tables with THE factory, and the
// backend rows beside it.
//
// make_ops() is the only place in the project that turns (device, mode) into kernels: it looks the
// pair up in the registry below. A backend joins by adding its rows (and so inherits the kernel
// harness in tests/unit-kernels-harness.cpp).
#include "repro/kernels/ops.hpp"

#include <algorithm>
#include <utility>

#include "elementwise_math.hpp"
#include "matmul/cuda_dequant.hpp"
#include "ops_internal.hpp"
#include "repro/common/error.hpp"
#include "moe.hpp"
#include "tp.hpp"
#include "repro/kernels/backends.hpp"

namespace repro::kernels {

// ---- Buffer ----

Buffer::Buffer(Buffer&& o) noexcept : free_(o.free_), p_(o.p_), n_(o.n_) {
  o.free_ = nullptr;
  o.p_ = nullptr;
  o.n_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (free_ && p_) free_(p_);
    free_ = std::exchange(o.free_, nullptr);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

Buffer::~Buffer() {
  if (free_ && p_) free_(p_);
}

// ---- Ops: buffers and KV slots (shared by every table; device memory through raw_*) ----

Ops::~Ops() = default;

Buffer Ops::alloc(size_t n) {
  Buffer b;
  const Raw r = raw_alloc(n == 0 ? 1 : n);
  b.free_ = r.free;
  b.p_ = r.p;
  b.n_ = n;
  return b;
}

void Ops::kv_configure(int n_layers, int kv_dim) {
  if (!slots_.empty() && (n_layers != n_layers_ || kv_dim != kv_dim_))
    throw std::logic_error("op table: KV slots already configured for another shape");
  n_layers_ = n_layers;
  kv_dim_ = kv_dim;
}

int Ops::kv_acquire(int positions) {
  if (kv_dim_ <= 0) throw std::logic_error("op table: kv_acquire before kv_configure");
  // The smallest free slot that is large enough; else the largest free one, grown; else a new one.
  int best = -1, largest = -1;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    if (slots_[s].used) continue;
    if (slots_[s].capacity >= positions && (best < 0 || slots_[s].capacity < slots_[best].capacity)) best = s;
    if (largest < 0 || slots_[s].capacity > slots_[largest].capacity) largest = s;
  }
  int s = best;
  if (s < 0) {
    if (largest >= 0) {
      s = largest;
    } else {
      slots_.emplace_back();
      s = static_cast<int>(slots_.size()) - 1;
    }
    const size_t n = static_cast<size_t>(n_layers_) * positions * kv_dim_;
    slots_[s].k = alloc(n);
    slots_[s].v = alloc(n);
    slots_[s].capacity = positions;
    ++kv_generation_;
  }
  slots_[s].used = true;
  return s;
}

void Ops::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size()) || !slots_[slot].used)
    throw std::logic_error(std::string("op table: ") + what + " of a KV slot that is not held");
}

void Ops::kv_release(int slot) {
  check_slot(slot, "release");
  slots_[slot].used = false;
}

void Ops::kv_copy(int dst, int src, int positions) {
  check_slot(dst, "copy");
  check_slot(src, "copy");
  if (positions > slots_[dst].capacity || positions > slots_[src].capacity)
    throw std::logic_error("op table: kv_copy beyond a slot's capacity");
  const size_t n = static_cast<size_t>(positions) * kv_dim_;
  for (int l = 0; l < n_layers_; ++l) {
    raw_copy(kv_k(dst, l), kv_k(src, l), n);
    raw_copy(kv_v(dst, l), kv_v(src, l), n);
  }
}

// ---- Ops: the simulated tensor parallelism (tables may override; see repro/kernels/ops.hpp) ----

void Ops::matmul_partial(const Buffer& x, const Weight& w, int, Buffer& y, int M) { matmul(x, w, y, M); }

// Any device: the partials come to the host, are added in the order of allreduce_reference and the
// sum goes back (one rounding of parts[0] when there is nothing to add).
void Ops::allreduce(Buffer* parts, int N, AllReduce algo, Precision p, size_t n) {
  if (N == 1) return round_to(p, parts[0], n);
  std::vector<std::vector<float>> host(N, std::vector<float>(n));
  std::vector<float*> ptr(N);
  for (int r = 0; r < N; ++r) {
    download(parts[r], 0, host[r].data(), n);
    ptr[r] = host[r].data();
  }
  allreduce_reference(ptr.data(), N, algo, p, n);
  upload(parts[0], 0, host[0].data(), n);
}

void Ops::copy_cols(const Buffer& src, int R, int width, Buffer& dst, int dst_width, int col) {
  std::vector<float> s(static_cast<size_t>(R) * width), d(static_cast<size_t>(R) * dst_width);
  download(src, 0, s.data(), s.size());
  download(dst, 0, d.data(), d.size());
  for (int r = 0; r < R; ++r)
    std::copy_n(s.data() + static_cast<size_t>(r) * width, width, d.data() + static_cast<size_t>(r) * dst_width + col);
  upload(dst, 0, d.data(), d.size());
}

// ---- Ops: mixture of experts (tables may override; see repro/kernels/ops.hpp) ----

void Ops::scatter_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) {
  std::vector<float> s(static_cast<size_t>(n) * width), d(dst.size());
  download(src, 0, s.data(), s.size());
  download(dst, 0, d.data(), d.size());
  for (int j = 0; j < n; ++j)
    std::copy_n(s.data() + static_cast<size_t>(j) * width, width, d.data() + static_cast<size_t>(idx[j]) * width);
  upload(dst, 0, d.data(), d.size());
}

void Ops::moe_combine(const Buffer& y, const float* w, int R, int S, int width, Precision p, Buffer& out) {
  std::vector<float> yh(static_cast<size_t>(R) * S * width), oh(static_cast<size_t>(R) * width);
  download(y, 0, yh.data(), yh.size());
  moe_combine_reference(yh.data(), w, R, S, width, p, oh.data());
  upload(out, 0, oh.data(), oh.size());
}

// ---- TableBase: the RoPE table and the attention rows, built once for every table ----

bool TableBase::grow_rope(int pos, const RopeDims& d) {
  const int half = d.rope_dim / 2;
  const bool same = half == rope_half_ && d.theta == rope_theta_ && d.freq_scale == rope_scale_ &&
                    d.freq_factors == rope_factors_;
  if (pos < rope_positions_ && same) return false;
  if (!same) rope_positions_ = 0;  // another model's RoPE: a new table
  const int n = std::max(pos + 1, rope_positions_ * 2);
  rope_cos_.resize(static_cast<size_t>(n) * half);
  rope_sin_.resize(static_cast<size_t>(n) * half);
  math::rope_table(d.theta, d.rope_dim, rope_positions_, n, rope_cos_.data(), rope_sin_.data(), d.freq_scale,
                   d.freq_factors);
  rope_positions_ = n;
  rope_half_ = half;
  rope_theta_ = d.theta;
  rope_scale_ = d.freq_scale;
  rope_factors_ = d.freq_factors;
  return true;
}

const AttentionRow* TableBase::attention_rows(const Buffer& q, const KvRow* rows, int R, int layer,
                                              const AttentionDims& d, Buffer& out) {
  const size_t width = static_cast<size_t>(d.n_heads) * d.head_dim;
  att_rows_.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r)
    att_rows_[r] = {q.data() + r * width, kv_k(rows[r].slot, layer), kv_v(rows[r].slot, layer), rows[r].pos + 1,
                    out.data() + r * width};
  return att_rows_.data();
}

// ---- the backends and the registry of tables ----

namespace {

#ifdef REPRO_HAVE_CUDA
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

// One row per Device, the CPU first (the environment record lists them in this order).
const Backend kBackends[] = {
    {Device::Cpu, "cpu", true, cpu_present, cpu_describe, cpu_risks},
    {Device::Cuda, "cuda", kCudaBuilt, cuda_present, cuda_describe, cuda_risks},
};

struct Registered {
  Device device;
  Mode mode;
  const char* name;
  uint32_t weight_types;  // bit t: the table reads DType t
  std::unique_ptr<Ops> (*make)(int threads);
};

constexpr uint32_t bit(DType t) { return 1u << static_cast<unsigned>(t); }
// The CPU tables read every stored type (kernels/matmul/quant_*.cpp), and so does cuda-default
// (cuBLAS: cublasGemmEx for F16/BF16, chunks dequantized for sgemm otherwise). cuda-batch-invariant
// reads the types whose CPU order its kernel reproduces (kernels/matmul/cuda_invariant.cu: F32 and
// the types the CPU multiplies as dot_lanes over the dequantized row); Q8_0 and Q4_K, which the
// CPU multiplies on 8-bit activations (kernels/matmul_quant.hpp), are refused at bind.
constexpr uint32_t kCpuTypes = bit(DType::F32) | bit(DType::F16) | bit(DType::BF16) | bit(DType::Q8_0) |
                               bit(DType::Q4_0) | bit(DType::Q4_K) | bit(DType::Q5_K) | bit(DType::Q6_K);
[[maybe_unused]] constexpr uint32_t kCudaDefaultTypes = kCpuTypes;
constexpr uint32_t cuda_invariant_types() {
  uint32_t b = 0;
  for (unsigned t = 0; t <= static_cast<unsigned>(DType::Q6_K); ++t)
    if (cuda::dq::invariant_reads(static_cast<DType>(t))) b |= bit(static_cast<DType>(t));
  return b;
}
[[maybe_unused]] constexpr uint32_t kCudaInvariantTypes = cuda_invariant_types();

// Every table this build has (the CUDA tables when it was built with CUDA).
const Registered kTables[] = {
    {Device::Cpu, Mode::Default, "cpu-default", kCpuTypes, make_cpu_default},
    {Device::Cpu, Mode::BatchInvariant, "cpu-batch-invariant", kCpuTypes, make_cpu_invariant},
    {Device::Cpu, Mode::Deterministic, "cpu-deterministic", kCpuTypes, make_cpu_deterministic},
    {Device::Cpu, Mode::TpInvariant, "cpu-tp-invariant", kCpuTypes, make_cpu_tp_invariant},
#ifdef REPRO_HAVE_CUDA
    {Device::Cuda, Mode::Default, "cuda-default", kCudaDefaultTypes, make_cuda_default},
    {Device::Cuda, Mode::BatchInvariant, "cuda-batch-invariant", kCudaInvariantTypes, make_cuda_invariant},
#endif
};

const Registered* find_table(Device device, Mode mode) {
  for (const auto& t : kTables)
    if (t.device == device && t.mode == mode) return &t;
  return nullptr;
}

}  // namespace

std::span<const Backend> backends() { return kBackends; }

const Backend& backend(Device device) {
  for (const auto& b : kBackends)
    if (b.device == device) return b;
  throw std::logic_error("no backend row for this device");
}

std::vector<TableSpec> available_op_tables() {
  std::vector<TableSpec> out;
  for (const auto& t : kTables)
    if (backend(t.device).present()) out.push_back({t.device, t.mode, t.name, t.weight_types});
  return out;
}

void check_weight_types(Device device, Mode mode, const std::vector<DType>& types) {
  const Registered* t = find_table(device, mode);
  if (!t) return;
  for (DType d : types) {
    if ((t->weight_types >> static_cast<unsigned>(d)) & 1u) continue;
    std::string reads;
    for (unsigned k = 0; k < 32; ++k)
      if ((t->weight_types >> k) & 1u) reads += (reads.empty() ? "" : ", ") + std::string(dtype_name(static_cast<DType>(k)));
    throw UsageError(std::string("--device ") + (device == Device::Cuda ? "cuda" : "cpu") + ": the " + t->name +
                     " op table does not read " + dtype_name(d) + " weights (it reads " + reads +
                     "); use --device cpu, or a model stored in a type it reads");
  }
}

std::unique_ptr<Ops> make_ops(Device device, Mode mode, int threads) {
  if (threads < 1) throw UsageError("--threads must be at least 1");
  if (const Registered* t = find_table(device, mode)) {
    std::unique_ptr<Ops> ops = t->make(threads);
    ops->weight_types_ = t->weight_types;
    return ops;
  }
  if (device == Device::Cuda && mode == Mode::TpInvariant)
    throw BackendError("--mode tp-invariant runs on the CPU tables only (there is no cuda-tp-invariant table yet); use "
                       "--device cpu, or batch-invariant on cuda");
  if (device == Device::Cuda && mode == Mode::Deterministic)
    throw BackendError("--mode deterministic runs the CPU reference kernels only (there is no cuda-deterministic "
                       "table); use --device cpu, or batch-invariant on cuda");
  if (device == Device::Cuda && !backend(device).built)
    throw BackendError("--device cuda: this repro-audit was built without CUDA (configure with -DREPRO_CUDA=ON on a "
                       "machine with the CUDA toolkit); use --device cpu");
  throw BackendError("no op table for this device and mode; use --device cpu");
}

}  // namespace repro::kernels
