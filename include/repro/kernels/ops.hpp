// The op table: everything the forward pass asks of a device, in one small interface.
//
// One table per (device, mode): cpu-default, cpu-batch-invariant and cpu-deterministic
// (kernels/ops_cpu.cpp); cuda-default and cuda-batch-invariant (kernels/ops_cuda.cpp). The
// forward pass (src/engine/forward.cpp) is written once against this interface, and nothing above
// it branches on device or mode: make_ops() is the one place that turns (device, mode) into a table.
// The kernel harness (tests/unit-kernels-harness.cpp) runs every op of every table that
// available_op_tables() lists, so a new backend inherits every invariance test by registering.
//
// A table owns:
//   buffers      device memory for activations (host memory on the CPU), move-only handles
//   KV slots     a pool of K/V caches allocated once per engine and reused: a sequence takes a
//                slot when it joins and gives it back when it leaves; no per-sequence vectors
//   matmul       per weight dtype: the types a table reads are a row of the registry (ops.cpp), and
//                supports(dtype) answers from it; the engine checks every tensor of a model against
//                it when it binds the weights, so an unread type is refused before the first step
//   rmsnorm, attention (over KV slots), and the element-wise ops: embedding gather, RoPE (normal
//                or neox pairs), silu(gate) * up, residual add, bias add, KV store, row gather,
//                and the precision rounding
//   describe()   what runs: table name, ISA or GPU, library and version (for bench and reports)
//
// Compare ggml's backend interface, where BLAS is one backend among others: here OpenBLAS is what
// the cpu-default table calls for matmul, and the batch-invariant table calls the project's own
// kernels; the forward pass cannot tell them apart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "repro/common/dtype.hpp"

namespace repro {

enum class Device { Cpu, Cuda };
// default: the fastest path per shape; batch-invariant: one reduction order per output element;
// deterministic: what frameworks' deterministic switches amount to: the reference-order kernels
// (plain loops, the order batch-invariant reproduces), one thread, and the engine decodes every
// request alone (batch 1, no batch mates). Slow on purpose: it prices the strictest option.
// tp-invariant: batch-invariant, and the row-parallel matmuls (attention output, FFN down) also
// independent of the tensor-parallel size and of the all-reduce algorithm: each reduces K in fixed
// blocks whose length depends on K and the weight type only (kernels::tp_block) and adds the block
// sums, across ranks too, along one fixed pairwise tree in f32 (docs/ENGINE.md "Tensor parallelism").
enum class Mode { Default, BatchInvariant, Deterministic, TpInvariant };
// Where activations are stored between ops (outputs of matmul, attention and norms; the KV cache).
// Kernels accumulate in f32 either way; rounding is element-wise (round to nearest even), so a
// batch-invariant table stays bitwise batch-invariant at every precision.
enum class Precision { F32, BF16, F16 };
// The order in which a simulated all-reduce adds the N ranks' partials of a row-parallel matmul
// (kernels::allreduce_order says it exactly): ring = reduce-scatter around the ring, each chunk
// starting at its own rank; tree = one balanced pairwise tree over the ranks.
enum class AllReduce { Ring, Tree };

}  // namespace repro

namespace repro::kernels {

// A weight as an op table reads it: [rows][cols] row-major (a matrix is [out][in]; a norm gain is
// one row), elements of `dtype`, at `data` in memory the table can read (host memory on the CPU).
struct Weight {
  DType dtype = DType::F32;
  int rows = 0, cols = 0;
  const void* data = nullptr;
};

class Ops;

// Memory of one op table: `size()` floats at `data()` (a device pointer on a GPU; the forward pass
// never dereferences it, it only hands buffers back to ops). Move-only; freed with the function the
// table allocated it with (so a buffer may outlive the table's derived part, as KV slots do).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();
  float* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  friend class Ops;
  void (*free_)(float*) = nullptr;
  float* p_ = nullptr;
  size_t n_ = 0;
};

struct AttentionDims {
  int n_heads;
  int n_kv_heads;  // GQA: query head h reads KV head h / (n_heads / n_kv_heads)
  int head_dim;
};

struct RopeDims {
  int head_dim;
  int rope_dim;  // rotated dims per head (the first rope_dim of each head)
  float theta;
  // Pairs: false = adjacent pairs (2i, 2i+1) (llama.cpp's "normal" RoPE, arch llama); true = the
  // halves (i, i + rope_dim / 2) (llama.cpp's "neox" RoPE, arch qwen2 / qwen3). i < rope_dim / 2.
  bool neox = false;
  // Pair i turns by pos * freq_scale * theta^(-2i / rope_dim) / freq_factors[i] (freq_factors:
  // rope_dim / 2 host floats, or nullptr for all 1: Llama 3.1's rope_freqs tensor; freq_scale:
  // 1 / linear scaling factor). A table rebuilds its cos/sin table when these or theta change.
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;
};

// One row of a step as the KV-cache ops see it: the row's sequence holds KV slot `slot`; the row
// writes position `pos` and attends to positions 0..pos.
struct KvRow {
  int slot;
  int pos;
};

// What a table is, for `bench` and the environment record of a report.
struct OpsInfo {
  std::string name;     // "cpu-batch-invariant"
  std::string device;   // "cpu" / "cuda"
  std::string mode;     // "default" / "batch-invariant" / "deterministic"
  std::string isa;      // CPU: "avx2+fma" or "portable"; GPU: device name and compute capability
  std::string library;  // what the matmul calls: "OpenBLAS 0.3.21 ..." or "own kernels"
  int threads = 1;
  // The engine decodes one request at a time on this table (batch 1, no batch mates): the
  // deterministic tables. A scheduling property of the table, so the engine never branches on mode.
  bool requests_alone = false;
};

class Ops {
 public:
  virtual ~Ops();
  virtual OpsInfo describe() const = 0;
  // Whether this table's matmul and embedding read weights stored as `t` (its registry row).
  bool supports(DType t) const { return (weight_types_ >> static_cast<unsigned>(t)) & 1u; }

  // ---- buffers ----
  Buffer alloc(size_t n);  // n floats, uninitialised
  virtual void upload(Buffer& dst, size_t offset, const float* src, size_t n) = 0;
  virtual void download(const Buffer& src, size_t offset, float* dst, size_t n) = 0;
  // A weight in memory the table reads (the CPU reads host memory in place: returns w).
  virtual Weight bind_weight(const Weight& w) = 0;

  // ---- KV-cache slots: K and V of every layer, [layer][position][kv_dim] each ----
  // Sets the shape of every slot; called once, before the first acquire.
  void kv_configure(int n_layers, int kv_dim);
  // A free slot that holds at least `positions` positions (a free slot is grown when none is
  // large enough, a new one is added when none is free). Slots are reused, never freed early.
  int kv_acquire(int positions);
  void kv_release(int slot);
  // Copies positions [0, positions) of every layer from slot src to slot dst (beam search forks).
  void kv_copy(int dst, int src, int positions);
  int kv_slots() const { return static_cast<int>(slots_.size()); }

  // ---- the step ----
  // Called by the forward pass once per step, before its first op, with the step's rows (slot and
  // position of each; the same rows kv_store and attention then receive, and the positions rope
  // receives). A table may upload here what stays constant over the step's layers; the ops still
  // take their rows and positions as arguments, and work without a begin_step (as the harness
  // calls them). The CPU tables keep nothing.
  virtual void begin_step(const KvRow* rows, int R) {}

  // ---- the three kernels whose reduction order decides batch variance ----
  // y[M][w.rows] = x[M][w.cols] * w^T, dispatched on w.dtype.
  virtual void matmul(const Buffer& x, const Weight& w, Buffer& y, int M) = 0;
  // y[m] = x[m] / sqrt(mean(x[m]^2) + eps) * g, rows of length g.cols.
  virtual void rmsnorm(const Buffer& x, const Weight& g, Buffer& y, int M, float eps) = 0;
  // Causal attention of R query rows q[R][n_heads * head_dim] over their slots' K/V of `layer`,
  // positions 0..rows[r].pos; softmax inside, scores scaled by 1/sqrt(head_dim).
  virtual void attention(const Buffer& q, const KvRow* rows, int R, int layer, const AttentionDims& d,
                         Buffer& out) = 0;

  // ---- tensor parallelism, simulated on one device (docs/ENGINE.md "Tensor parallelism") ----
  // One rank's partial of a row-parallel matmul: y[M][w.rows] = x[M][w.cols] * w^T, where w holds a
  // contiguous shard of the columns (the K axis) of a weight whose whole reduction length is
  // k_total, and x the same shard of the input. Every table but the tp-invariant ones runs its own
  // matmul on the shard (the mode's kernel, as each rank would); the tp-invariant tables reduce in
  // the blocks of tp_block(k_total, w.dtype), added along a pairwise tree (as the tree all-reduce), so a
  // power-of-two shard is an exact subtree of the whole reduction.
  virtual void matmul_partial(const Buffer& x, const Weight& w, int k_total, Buffer& y, int M);
  // The all-reduce of N partials, parts[0..N) (n floats each), into parts[0] (the others are
  // scratch afterwards). Every table but the tp-invariant ones: each partial rounded to p, then
  // added in the order ring_first_rank / the pairwise tree give each element, every sum rounded to p (a bf16
  // all-reduce adds in f32 and stores bf16). The tp-invariant tables add in f32 along the pairwise
  // tree whatever algo says and round the total once. N == 1: parts[0] rounded to p.
  virtual void allreduce(Buffer* parts, int N, AllReduce algo, Precision p, size_t n);
  // dst[r][col + j] = src[r][j] for r < R, j < width; dst rows are dst_width floats (a rank's
  // columns of a column-parallel matmul put back in place). Any table: host round trip unless
  // overridden (the CPU tables copy in place).
  virtual void copy_cols(const Buffer& src, int R, int width, Buffer& dst, int dst_width, int col);

  // ---- mixture of experts (docs/ENGINE.md "Mixture of experts") ----
  // dst[idx[j]] = src[j] for rows of `width` floats, j < n (gather_rows' inverse: an expert's
  // output rows put into their tokens' slots).
  virtual void scatter_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst);
  // The weighted combine of each token's S expert outputs: out[r][i] = sum over j = 0..S-1, in that
  // order, of w[r][j] * y[r][j][i] (y: [R][S][width]; w: R * S host floats), in f32, the total rounded
  // to p once (kernels/moe/reference.cpp). One order in every table. Any table: host round trip
  // unless overridden (the CPU tables run the reference in place).
  virtual void moe_combine(const Buffer& y, const float* w, int R, int S, int width, Precision p, Buffer& out);

  // ---- element-wise ops (a row's values never depend on other rows) ----
  // x[r] = table[tokens[r]] (table: [vocab][dim], dim = table.cols).
  virtual void embed(const Weight& table, const int* tokens, int R, Buffer& x) = 0;
  // RoPE on rows x[R][n_heads * head_dim]; row r rotates by position pos[r].
  virtual void rope(Buffer& x, const int* pos, int R, int n_heads, const RopeDims& d) = 0;
  // gate[i] = silu(gate[i]) * up[i] for i < n.
  virtual void silu_mul(Buffer& gate, const Buffer& up, size_t n) = 0;
  // x[i] += y[i] for i < n.
  virtual void add(Buffer& x, const Buffer& y, size_t n) = 0;
  // x[r][i] += b[i] for r < R, i < b.cols (a bias vector, F32, added to each row).
  virtual void add_bias(Buffer& x, const Weight& b, int R) = 0;
  // Writes k[r] and v[r] ([R][kv_dim]) into layer `layer` of slot rows[r].slot at rows[r].pos.
  virtual void kv_store(const Buffer& k, const Buffer& v, const KvRow* rows, int R, int layer) = 0;
  // dst[j] = src[idx[j]] for rows of `width` floats, j < n.
  virtual void gather_rows(const Buffer& src, const int* idx, int n, int width, Buffer& dst) = 0;
  // x[i] = x[i] rounded to precision p and back to f32, i < n (F32: unchanged).
  virtual void round_to(Precision p, Buffer& x, size_t n) = 0;

 protected:
  // Device memory primitives of the table: n floats and the function that frees them.
  struct Raw {
    float* p;
    void (*free)(float*);
  };
  virtual Raw raw_alloc(size_t n) = 0;
  virtual void raw_copy(float* dst, const float* src, size_t n) = 0;  // device to device

  struct KvSlot {
    Buffer k, v;       // [n_layers][capacity][kv_dim]
    int capacity = 0;  // positions
    bool used = false;
  };
  // Base of layer `layer` of slot `s` (K or V), for the table's kv_store and attention.
  float* kv_k(int s, int layer) const { return kv_at(slots_[s].k, s, layer); }
  float* kv_v(int s, int layer) const { return kv_at(slots_[s].v, s, layer); }
  int kv_dim() const { return kv_dim_; }
  int kv_layers() const { return n_layers_; }
  // Changes whenever a slot's memory is (re)allocated: addresses taken before are then stale.
  long kv_generation() const { return kv_generation_; }

 private:
  float* kv_at(const Buffer& b, int s, int layer) const {
    return b.data() + static_cast<size_t>(layer) * slots_[s].capacity * kv_dim_;
  }
  void check_slot(int slot, const char* what) const;
  friend std::unique_ptr<Ops> make_ops(Device device, Mode mode, int threads);
  uint32_t weight_types_ = 0;  // bit t: reads DType t (set by make_ops from the registry)
  int n_layers_ = 0, kv_dim_ = 0;
  long kv_generation_ = 0;
  std::vector<KvSlot> slots_;
};

// The tables this build and this machine can run, for the harness and for describe listings.
struct TableSpec {
  Device device;
  Mode mode;
  std::string name;            // "cpu-default", "cpu-batch-invariant"
  uint32_t weight_types = 0;   // bit t: the table reads weights of DType t
  bool supports(DType t) const { return (weight_types >> static_cast<unsigned>(t)) & 1u; }
};
std::vector<TableSpec> available_op_tables();

// Refuses, before any kernel runs, a model whose weights the (device, mode) table cannot read:
// throws UsageError "--device cuda: the cuda-batch-invariant op table does not read Q8_0 weights
// (it reads F32); use --device cpu". Needs no device (the registry row says what the table reads);
// does nothing for a pair with no table (make_ops names that).
void check_weight_types(Device device, Mode mode, const std::vector<DType>& types);

// THE factory: the only place that turns (device, mode) into kernels. Throws BackendError with a
// one-line reason when the device is not available (a build without CUDA, no GPU, no tables yet).
// Mode::Deterministic runs one thread whatever `threads` says (describe().threads is 1).
std::unique_ptr<Ops> make_ops(Device device, Mode mode, int threads);

// ---- the simulated tensor parallelism's arithmetic order, defined once ----
// Largest tensor-parallel size: one node's GPUs (TP beyond a node is rare and slow).
inline constexpr int kMaxTp = 8;
// The order in which an all-reduce over N ranks (a power of two, <= kMaxTp) adds the ranks'
// partials x_0..x_{N-1} at element i of n (element-wise: it depends on i, n, N and the algorithm):
//   ring  the buffer is cut into N contiguous chunks of ceil(n / N) elements; chunk c is reduced
//         along the ring starting at rank c: ((x_c + x_{c+1}) + x_{c+2}) + ... + x_{c-1} (ranks mod
//         N): the reduce-scatter of the textbook ring all-reduce (at step t rank r sends its running
//         sum of chunk r - t to rank r + 1, which adds its own partial). The all-gather after it
//         only copies.
//   tree  the balanced pairwise tree over the ranks, the same for every element: level 1 adds
//         (x_0 + x_1), (x_2 + x_3), ..., level 2 adds neighbouring pair sums, and so on.
// N = 2: both are x_0 + x_1; they part from N = 4 on. ring_first_rank is the c of element i.
int ring_first_rank(int N, size_t i, size_t n);
// The block length of the tp-invariant reduction of a row-parallel matmul with reduction length K
// and weight type t: K / G, G the largest of 8, 4, 2, 1 such that K is a multiple of G blocks of the
// type (1 element for F32/F16/BF16, 32 for Q8_0/Q4_0, 256 for the K formats). Any valid TP size N
// (a power of two dividing G) gives each rank G / N whole blocks.
int tp_block(int K, DType t);

// Element-wise rounding of one value to precision p and back (shared by every backend).
inline float round_to_precision(Precision p, float x) {
  switch (p) {
    case Precision::F32: return x;
    case Precision::BF16: return bf16_to_f32(f32_to_bf16(x));
    case Precision::F16: return f16_to_f32(f32_to_f16(x));
  }
  return x;
}

}  // namespace repro::kernels
