// ctest-labels: unit
// The kernel harness: every op of every op table this machine has (kernels::available_op_tables(),
// so a new backend inherits it by registering), for batch sizes {1,2,3,7,8,16,33,64,128} drawn
// in a seeded random order from a pool of random nonzero rows:
//   - batch-invariant tables: row i of the batch is bitwise equal (memcmp) to the same row computed
//     alone AND to the plain-loop reference (kernels/*/reference.cpp, or a loop here for the
//     element-wise ops), at thread counts 1, 2 and 3;
//   - the mixture-of-experts path: the grouped expert matmul (a token's row among its expert's
//     tokens equals its row alone), scatter_rows and moe_combine (the one combine order);
//   - default tables: the three kernels are close to the reference (how many rows differ bitwise
//     from the row alone is printed, not asserted); the element-wise ops, which never mix rows,
//     are bitwise equal to the row alone and to the reference in every table.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../kernels/matmul/quant_dot.hpp"
#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"
#include "repro/engine/device.hpp"
#include "../kernels/elementwise_math.hpp"
#include "../kernels/kernels.hpp"
#include "../kernels/matmul_quant.hpp"
#include "../kernels/moe.hpp"
#include "../kernels/tp.hpp"
#include "repro/kernels/ops.hpp"

using namespace repro;
using namespace repro::kernels;

namespace {

const int kBatches[] = {1, 2, 3, 7, 8, 16, 33, 64, 128};
constexpr int kPool = 128;  // rows the batches are drawn from

// Random values in +-[0.05, 1]: never zero, so a skipped or doubled term always shows.
std::vector<float> nonzero(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.05f, 1.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = neg(rng) ? -mag(rng) : mag(rng);
  return v;
}

// b distinct pool rows in a seeded random order: other batch mates and positions per case.
std::vector<int> draw(int b, uint32_t seed) {
  std::vector<int> idx(kPool);
  for (int i = 0; i < kPool; ++i) idx[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(b);
  return idx;
}

bool same(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

float rel_err(const float* a, const float* ref, size_t n) {
  float scale = 0, err = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(ref[i]));
  for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(a[i] - ref[i]));
  return scale > 0 ? err / scale : err;
}

// Host rows <-> a table's buffer.
Buffer to_device(Ops& ops, const std::vector<float>& v) {
  Buffer b = ops.alloc(v.size());
  ops.upload(b, 0, v.data(), v.size());
  return b;
}
std::vector<float> to_host(Ops& ops, const Buffer& b, size_t n) {
  std::vector<float> v(n);
  ops.download(b, 0, v.data(), n);
  return v;
}
std::vector<float> gather(const std::vector<float>& pool, const std::vector<int>& idx, size_t width) {
  std::vector<float> out(idx.size() * width);
  for (size_t i = 0; i < idx.size(); ++i)
    std::copy_n(pool.data() + idx[i] * width, width, out.data() + i * width);
  return out;
}

// One table at one thread count, with what the checks need to know about it.
struct Table {
  TableSpec spec;
  int threads;
  std::unique_ptr<Ops> ops;
  // batch-invariant and deterministic (the reference kernels themselves) are held to memcmp
  bool invariant() const { return spec.mode != Mode::Default; }
};

std::vector<Table> tables() {
  std::vector<Table> out;
  for (const TableSpec& t : available_op_tables()) {
    std::vector<int> threads = {1, 2};
    if (t.mode != Mode::Default) threads = {1, 2, 3};
    for (int n : threads) out.push_back({t, n, make_ops(t.device, t.mode, n)});
  }
  return out;
}

// A row-wise op under test: runs `rows` pool rows (as a batch, or one at a time) through the table
// and returns the host result, `width` floats per row.
using RowOp = std::function<std::vector<float>(Ops&, const std::vector<int>& rows)>;

// Runs op on every batch size and checks each row against the row alone and the reference.
// exact: memcmp against both (else: relative error below tol, bitwise differences counted; from
// large_from rows on, against reference_large when given: the default table may change algorithm
// with the batch size).
void check_rows(Table& t, const char* op, size_t width, const std::vector<float>& reference, bool exact, float tol,
                const RowOp& run, const std::vector<float>* reference_large = nullptr, int large_from = 0) {
  const std::string op_name = op;
  CAPTURE(t.spec.name);
  CAPTURE(t.threads);
  CAPTURE(op_name);
  std::vector<float> alone(kPool * width);
  for (int r = 0; r < kPool; ++r) {
    std::vector<float> y = run(*t.ops, {r});
    std::copy(y.begin(), y.end(), alone.begin() + r * width);
  }
  if (exact) {
    int bad = 0;
    for (int r = 0; r < kPool; ++r) bad += !same(&alone[r * width], &reference[r * width], width);
    CHECK_MESSAGE(bad == 0, op << ": rows alone differ from the reference: " << bad);
  } else {
    CHECK(rel_err(alone.data(), reference.data(), alone.size()) < tol);
  }
  std::string counts;
  for (int b : kBatches) {
    CAPTURE(b);
    const auto idx = draw(b, 1000u * b + 17u * t.threads + static_cast<uint32_t>(width));
    const std::vector<float> y = run(*t.ops, idx);
    int differ = 0;
    for (int i = 0; i < b; ++i) differ += !same(&y[i * width], &alone[idx[i] * width], width);
    if (exact) {
      CHECK_MESSAGE(differ == 0, op << ": rows of a batch of " << b << " differ from the row alone: " << differ);
    } else {
      const auto ref = gather(reference_large && b >= large_from ? *reference_large : reference, idx, width);
      CHECK(rel_err(y.data(), ref.data(), y.size()) < tol);
      counts += " M=" + std::to_string(b) + ":" + std::to_string(differ) + "/" + std::to_string(b);
    }
  }
  if (!exact) MESSAGE(t.spec.name << " threads " << t.threads << " " << op_name << " rows differing bitwise from alone:" << counts);
}

}  // namespace

TEST_CASE("op tables: a model's weight types are checked against the table before any kernel runs") {
  CHECK_NOTHROW(check_weight_types(Device::Cpu, Mode::BatchInvariant, {DType::F32, DType::Q5_K, DType::Q4_K}));
#ifdef REPRO_HAVE_CUDA
  // No GPU needed: the registry rows say what the CUDA tables read: every stored type the CPU reads
  // (cuda-batch-invariant in the CPU's order, cuda-default through cuBLAS).
  for (Mode mode : {Mode::Default, Mode::BatchInvariant}) {
    CHECK_NOTHROW(check_weight_types(Device::Cuda, mode,
                                     {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                                      DType::Q5_K, DType::Q6_K}));
    // A type outside a row (here a value past the last stored type) is refused by name, exit 2.
    CHECK_THROWS_WITH_AS(check_weight_types(Device::Cuda, mode, {DType::F16, static_cast<DType>(9)}),
                         doctest::Contains(doctest::String((std::string("--device cuda: the ") +
                                                            (mode == Mode::Default ? "cuda-default" : "cuda-batch-invariant") +
                                                            " op table does not read ? weights (it reads F32, F16, BF16, "
                                                            "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); use --device cpu")
                                                               .c_str())),
                         UsageError);
  }
#endif
  CHECK_THROWS_WITH_AS(check_weight_types(Device::Cpu, Mode::Default, {static_cast<DType>(9)}),
                       doctest::Contains("the cpu-default op table does not read ? weights"), UsageError);
  // A pair with no table: make_ops names that, not this check.
  CHECK_NOTHROW(check_weight_types(Device::Cuda, Mode::Deterministic, {DType::Q8_0}));
}

TEST_CASE("op tables: the registry lists the CPU tables; CUDA fails with one clear line") {
  std::vector<std::string> names;
  for (const auto& t : available_op_tables()) names.push_back(t.name);
  CHECK(std::find(names.begin(), names.end(), "cpu-default") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cpu-batch-invariant") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cpu-deterministic") != names.end());
  for (const auto& t : available_op_tables()) {
    auto ops = make_ops(t.device, t.mode, 2);
    const OpsInfo i = ops->describe();
    CHECK(i.name == t.name);
    CHECK(i.mode == mode_name(t.mode));
    CHECK(i.device == device_name(t.device));
    CHECK(!i.isa.empty());
    CHECK(!i.library.empty());
    CHECK(i.threads == (t.mode == Mode::Deterministic ? 1 : 2));  // deterministic: one thread, whatever asked
    CHECK(i.requests_alone == (t.mode == Mode::Deterministic));
    for (unsigned d = 0; d <= static_cast<unsigned>(DType::Q6_K); ++d)
      CHECK(ops->supports(static_cast<DType>(d)) == t.supports(static_cast<DType>(d)));
    if (t.device == Device::Cpu)  // the CPU tables read every stored type
      for (unsigned d = 0; d <= static_cast<unsigned>(DType::Q6_K); ++d) CHECK(t.supports(static_cast<DType>(d)));
  }
  bool has_cuda = false;
  for (const auto& t : available_op_tables()) has_cuda = has_cuda || t.device == Device::Cuda;
  if (!has_cuda) {
#ifdef REPRO_HAVE_CUDA
    CHECK_THROWS_WITH_AS(make_ops(Device::Cuda, Mode::BatchInvariant, 1),
                         doctest::Contains("--device cuda: no CUDA device ("), BackendError);
#else
    CHECK_THROWS_WITH_AS(make_ops(Device::Cuda, Mode::BatchInvariant, 1),
                         doctest::Contains("--device cuda: this repro-audit was built without CUDA"), BackendError);
#endif
  }
}

TEST_CASE("op tables: matmul and rmsnorm, every table, every batch size") {
  struct Shape {
    int N, K;
  };
  for (const Shape sh : {Shape{64, 64}, Shape{37, 100}, Shape{256, 288}}) {
    const int N = sh.N, K = sh.K;
    CAPTURE(N);
    CAPTURE(K);
    const auto x = nonzero(static_cast<size_t>(kPool) * K, 11 + K);
    const auto w = nonzero(static_cast<size_t>(N) * K, 23 + N);
    const auto g = nonzero(K, 5);
    std::vector<float> mref(static_cast<size_t>(kPool) * N), nref(static_cast<size_t>(kPool) * K);
    matmul_reference(x.data(), w.data(), mref.data(), kPool, N, K);
    rmsnorm_reference(x.data(), g.data(), nref.data(), kPool, K, 1e-5f);
    for (Table& t : tables()) {
      const Weight W = t.ops->bind_weight({DType::F32, N, K, w.data()});
      const Weight G = t.ops->bind_weight({DType::F32, 1, K, g.data()});
      check_rows(t, "matmul", N, mref, t.invariant(), 1e-5f, [&](Ops& ops, const std::vector<int>& rows) {
        const int M = static_cast<int>(rows.size());
        Buffer xb = to_device(ops, gather(x, rows, K)), yb = ops.alloc(static_cast<size_t>(M) * N);
        ops.matmul(xb, W, yb, M);
        return to_host(ops, yb, static_cast<size_t>(M) * N);
      });
      check_rows(t, "rmsnorm", K, nref, t.invariant(), 1e-5f, [&](Ops& ops, const std::vector<int>& rows) {
        const int M = static_cast<int>(rows.size());
        Buffer xb = to_device(ops, gather(x, rows, K)), yb = ops.alloc(static_cast<size_t>(M) * K);
        ops.rmsnorm(xb, G, yb, M, 1e-5f);
        return to_host(ops, yb, static_cast<size_t>(M) * K);
      });
    }
  }
}

TEST_CASE("op tables: matmul on weights in every stored type, every table, every batch size") {
  // The weight stays in its type; the reference is matmul_q_reference (for Q8_0 and the K formats the
  // integer dot products on 8-bit activation rows, else the f32 lane dot over the exactly
  // dequantized rows), which the invariant tables reproduce bitwise. The default table leaves the
  // integer path from quant_int_max_rows(type) rows on: there it is held to the f32 product.
  const int N = 45, K = 512;
  const auto x = nonzero(static_cast<size_t>(kPool) * K, 77);
  const auto wf = nonzero(static_cast<size_t>(N) * K, 78);
  for (DType dt : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(dtype_name(dt));
    const size_t rb = quant::row_bytes(dt, K);
    std::vector<uint8_t> wq(rb * N);
    for (int n = 0; n < N; ++n) quant::quantize_row(dt, &wf[static_cast<size_t>(n) * K], &wq[n * rb], K);
    std::vector<float> ref(static_cast<size_t>(kPool) * N);
    matmul_q_reference(x.data(), {dt, wq.data(), rb}, ref.data(), kPool, N, K);
    std::vector<float> ref_f32(ref.size());
    detail::matmul_q_panels_reference(x.data(), {dt, wq.data(), rb}, ref_f32.data(), kPool, N, K);
    const int switches_at = quant_int_max_rows(dt);
    for (Table& t : tables()) {
      const Weight W = t.ops->bind_weight({dt, N, K, wq.data()});
      check_rows(t, "matmul", N, ref, t.invariant(), 1e-5f, [&](Ops& ops, const std::vector<int>& rows) {
        const int M = static_cast<int>(rows.size());
        Buffer xb = to_device(ops, gather(x, rows, K)), yb = ops.alloc(static_cast<size_t>(M) * N);
        ops.matmul(xb, W, yb, M);
        return to_host(ops, yb, static_cast<size_t>(M) * N);
      }, switches_at > 0 ? &ref_f32 : nullptr, switches_at);
    }
  }
}

TEST_CASE("op tables: rmsnorm names the gain type it cannot read") {
  const std::vector<float> x(8, 1.0f), g(8, 1.0f);
  for (const auto& spec : available_op_tables()) {
    auto ops = make_ops(spec.device, spec.mode, 1);
    Buffer xb = to_device(*ops, x), yb = ops->alloc(8);
    const Weight G = ops->bind_weight({DType::BF16, 1, 8, g.data()});
    CHECK_THROWS_WITH_AS(ops->rmsnorm(xb, G, yb, 1, 1e-5f), doctest::Contains("weights of type BF16 are not supported"),
                         BackendError);
  }
}

TEST_CASE("op tables: KV store and attention over KV slots (GQA, contexts across the 256 chunk)") {
  const int n_heads = 4, n_kv = 2, hd = 16, kv_dim = n_kv * hd, width = n_heads * hd, layers = 2;
  // Every pool row is a sequence with its own context length (1..300), K/V and query.
  std::mt19937 rng(3);
  std::vector<int> n_ctx(kPool);
  for (auto& n : n_ctx) n = 1 + static_cast<int>(rng() % 300);
  n_ctx[0] = 256;
  n_ctx[1] = 257;
  std::vector<std::vector<float>> K(kPool), V(kPool);  // [layers][n_ctx][kv_dim] per sequence
  for (int s = 0; s < kPool; ++s) {
    K[s] = nonzero(static_cast<size_t>(layers) * n_ctx[s] * kv_dim, 100 + s);
    V[s] = nonzero(static_cast<size_t>(layers) * n_ctx[s] * kv_dim, 700 + s);
  }
  const auto q = nonzero(static_cast<size_t>(kPool) * width, 9);
  const int layer = 1;
  std::vector<float> ref(static_cast<size_t>(kPool) * width);
  {
    std::vector<AttentionRow> rows(kPool);
    for (int s = 0; s < kPool; ++s)
      rows[s] = {q.data() + s * width, K[s].data() + static_cast<size_t>(layer) * n_ctx[s] * kv_dim,
                 V[s].data() + static_cast<size_t>(layer) * n_ctx[s] * kv_dim, n_ctx[s], ref.data() + s * width};
    attention_reference(rows.data(), kPool, {n_heads, n_kv, hd, kv_dim});
  }
  for (Table& t : tables()) {
    Ops& ops = *t.ops;
    ops.kv_configure(layers, kv_dim);
    // Each sequence's K/V go in through kv_store, one position per row, every layer.
    std::vector<int> slot(kPool);
    for (int s = 0; s < kPool; ++s) {
      slot[s] = ops.kv_acquire(n_ctx[s]);
      std::vector<KvRow> rows(n_ctx[s]);
      for (int p = 0; p < n_ctx[s]; ++p) rows[p] = {slot[s], p};
      for (int l = 0; l < layers; ++l) {
        std::vector<float> k(K[s].begin() + static_cast<size_t>(l) * n_ctx[s] * kv_dim,
                             K[s].begin() + static_cast<size_t>(l + 1) * n_ctx[s] * kv_dim);
        std::vector<float> v(V[s].begin() + static_cast<size_t>(l) * n_ctx[s] * kv_dim,
                             V[s].begin() + static_cast<size_t>(l + 1) * n_ctx[s] * kv_dim);
        Buffer kb = to_device(ops, k), vb = to_device(ops, v);
        ops.kv_store(kb, vb, rows.data(), n_ctx[s], l);
      }
    }
    check_rows(t, "attention", width, ref, t.invariant(), 1e-5f, [&](Ops& o, const std::vector<int>& rows) {
      const int R = static_cast<int>(rows.size());
      std::vector<KvRow> kv(R);
      for (int i = 0; i < R; ++i) kv[i] = {slot[rows[i]], n_ctx[rows[i]] - 1};
      Buffer qb = to_device(o, gather(q, rows, width)), out = o.alloc(static_cast<size_t>(R) * width);
      o.attention(qb, kv.data(), R, layer, {n_heads, n_kv, hd}, out);
      return to_host(o, out, static_cast<size_t>(R) * width);
    });
    // A copied slot attends exactly like its source (beam search forks).
    const int copy = ops.kv_acquire(n_ctx[1]);
    ops.kv_copy(copy, slot[1], n_ctx[1]);
    std::vector<KvRow> a = {{slot[1], n_ctx[1] - 1}}, b = {{copy, n_ctx[1] - 1}};
    Buffer qb = to_device(ops, gather(q, {1}, width)), oa = ops.alloc(width), ob = ops.alloc(width);
    ops.attention(qb, a.data(), 1, layer, {n_heads, n_kv, hd}, oa);
    ops.attention(qb, b.data(), 1, layer, {n_heads, n_kv, hd}, ob);
    CHECK(same(to_host(ops, oa, width).data(), to_host(ops, ob, width).data(), width));
    // Released slots are reused, not added.
    const int before = ops.kv_slots();
    ops.kv_release(copy);
    ops.kv_release(slot[5]);
    const int again = ops.kv_acquire(2);
    CHECK((again == copy || again == slot[5]));
    CHECK(ops.kv_slots() == before);
  }
}

TEST_CASE("op tables: a prefill/verify row equals the decode row (speculative decoding's premise)") {
  // A sequence decoded one row per step (each step stores its position's K/V, then attends) against
  // the same positions as k+1 rows of one step (a prefill chunk, or a verify step of k drafted
  // tokens) beside another sequence's decode row, written over positions that held K/V of rejected
  // drafts (the rollback: the next step overwrites them before any row attends to them). The
  // invariant tables must give every row the decode row's bits; the default table's split-KV choice
  // depends on the number of rows, so it is measured and printed. The matmuls and norms of a verify
  // row are rows of a batch like any other (the batch-size checks above).
  const int n_heads = 4, n_kv = 2, hd = 16, kv_dim = n_kv * hd, width = n_heads * hd, n = 300;
  const auto K = nonzero(static_cast<size_t>(n) * kv_dim, 61), V = nonzero(static_cast<size_t>(n) * kv_dim, 62);
  const auto Q = nonzero(static_cast<size_t>(n) * width, 63);
  const auto junk = nonzero(static_cast<size_t>(n) * kv_dim, 64);  // K/V of drafts that were rejected
  auto rows_of = [](const std::vector<float>& pool, int from, int count, int w) {
    return std::vector<float>(pool.begin() + static_cast<size_t>(from) * w, pool.begin() + static_cast<size_t>(from + count) * w);
  };
  struct Chunk {
    int from, rows;
  };
  const Chunk kChunks[] = {{0, 5}, {1, 2}, {7, 9}, {100, 4}, {250, 8}, {253, 33}, {120, 1}};
  for (Table& t : tables()) {
    CAPTURE(t.spec.name);
    CAPTURE(t.threads);
    Ops& ops = *t.ops;
    ops.kv_configure(1, kv_dim);
    // decode: one row per step
    const int dec = ops.kv_acquire(n);
    std::vector<float> decoded(static_cast<size_t>(n) * width);
    for (int p = 0; p < n; ++p) {
      const KvRow row{dec, p};
      Buffer kb = to_device(ops, rows_of(K, p, 1, kv_dim)), vb = to_device(ops, rows_of(V, p, 1, kv_dim));
      Buffer qb = to_device(ops, rows_of(Q, p, 1, width)), ob = ops.alloc(width);
      ops.kv_store(kb, vb, &row, 1, 0);
      ops.attention(qb, &row, 1, 0, {n_heads, n_kv, hd}, ob);
      const auto y = to_host(ops, ob, width);
      std::copy(y.begin(), y.end(), decoded.begin() + static_cast<size_t>(p) * width);
    }
    int differ = 0, total = 0;
    for (const Chunk c : kChunks) {
      CAPTURE(c.from);
      CAPTURE(c.rows);
      const int sa = ops.kv_acquire(n), other = ops.kv_acquire(n);
      // positions before the chunk, as earlier steps wrote them; junk where rejected drafts were
      for (int p = 0; p < c.from + c.rows; ++p) {
        const KvRow row{sa, p};
        Buffer kb = to_device(ops, rows_of(p < c.from ? K : junk, p, 1, kv_dim));
        Buffer vb = to_device(ops, rows_of(p < c.from ? V : junk, p, 1, kv_dim));
        ops.kv_store(kb, vb, &row, 1, 0);
      }
      // the other sequence: its own context of 40 positions, its decode row at position 40
      for (int p = 0; p <= 40; ++p) {
        const KvRow row{other, p};
        Buffer kb = to_device(ops, rows_of(junk, p, 1, kv_dim)), vb = to_device(ops, rows_of(junk, p, 1, kv_dim));
        ops.kv_store(kb, vb, &row, 1, 0);
      }
      // one step: the other sequence's decode row first, then the chunk's rows
      const int R = 1 + c.rows;
      std::vector<KvRow> rows(R);
      rows[0] = {other, 40};
      std::vector<float> k = rows_of(junk, 40, 1, kv_dim), v = k, q = rows_of(Q, 0, 1, width);
      for (int i = 0; i < c.rows; ++i) rows[1 + i] = {sa, c.from + i};
      const auto kc = rows_of(K, c.from, c.rows, kv_dim), vc = rows_of(V, c.from, c.rows, kv_dim);
      const auto qc = rows_of(Q, c.from, c.rows, width);
      k.insert(k.end(), kc.begin(), kc.end());
      v.insert(v.end(), vc.begin(), vc.end());
      q.insert(q.end(), qc.begin(), qc.end());
      Buffer kb = to_device(ops, k), vb = to_device(ops, v), qb = to_device(ops, q), ob = ops.alloc(q.size());
      ops.begin_step(rows.data(), R);
      ops.kv_store(kb, vb, rows.data(), R, 0);
      ops.attention(qb, rows.data(), R, 0, {n_heads, n_kv, hd}, ob);
      const auto y = to_host(ops, ob, q.size());
      int bad = 0;
      for (int i = 0; i < c.rows; ++i)
        bad += !same(&y[static_cast<size_t>(1 + i) * width], &decoded[static_cast<size_t>(c.from + i) * width], width);
      if (t.invariant()) {
        CHECK_MESSAGE(bad == 0, "rows of a verify step differ from the decode rows: " << bad << "/" << c.rows);
      } else {
        CHECK(rel_err(&y[width], &decoded[static_cast<size_t>(c.from) * width], static_cast<size_t>(c.rows) * width) < 1e-5f);
      }
      differ += bad;
      total += c.rows;
      ops.kv_release(sa);
      ops.kv_release(other);
    }
    if (!t.invariant())
      MESSAGE(t.spec.name << " threads " << t.threads << " attention: verify rows differing bitwise from the decode row: "
                          << differ << "/" << total);
    ops.kv_release(dec);
  }
}

TEST_CASE("op tables: begin_step changes no bits of rope, kv_store and attention, and goes stale with the slots") {
  const int layers = 3, n_heads = 4, n_kv = 2, hd = 16, kv_dim = n_kv * hd, width = n_heads * hd, R = 5;
  const RopeDims rd{hd, hd, 10000.0f};
  const auto q = nonzero(static_cast<size_t>(R) * width, 51);
  const auto k = nonzero(static_cast<size_t>(R) * kv_dim, 52);
  const auto v = nonzero(static_cast<size_t>(R) * kv_dim, 53);
  for (Table& t : tables()) {
    CAPTURE(t.spec.name);
    Ops& ops = *t.ops;
    ops.kv_configure(layers, kv_dim);
    // The same step twice, into two sets of slots: without begin_step, then with it.
    std::vector<float> out[2];
    for (int pass = 0; pass < 2; ++pass) {
      // A prefill step of two sequences: rows 0..2 at positions 0..2 of one slot, rows 3..4 at 0..1
      // of another (each row attends to positions its step writes).
      const int sa = ops.kv_acquire(40), sb = ops.kv_acquire(40);
      std::vector<KvRow> rows(R);
      std::vector<int> pos(R);
      for (int r = 0; r < R; ++r) rows[r] = {r < 3 ? sa : sb, pos[r] = r < 3 ? r : r - 3};
      if (pass == 1) {
        ops.begin_step(rows.data(), R);
        // A slot regrown after begin_step (same index, new memory): the step's addresses are stale
        // and the ops must write and read the slot where it is now.
        ops.kv_release(rows[0].slot);
        REQUIRE(ops.kv_acquire(400) == rows[0].slot);
      }
      Buffer qb = to_device(ops, q), kb = to_device(ops, k), vb = to_device(ops, v), ob = ops.alloc(q.size());
      ops.rope(qb, pos.data(), R, n_heads, rd);
      ops.rope(kb, pos.data(), R, n_kv, rd);
      for (int l = 0; l < layers; ++l) {
        ops.kv_store(kb, vb, rows.data(), R, l);
        ops.attention(qb, rows.data(), R, l, {n_heads, n_kv, hd}, ob);
      }
      out[pass] = to_host(ops, ob, q.size());
      ops.kv_release(sa);
      ops.kv_release(sb);
    }
    CHECK(same(out[0].data(), out[1].data(), q.size()));
  }
}

TEST_CASE("op tables: element-wise ops are bitwise row-independent and equal plain loops in every table") {
  const int dim = 48, vocab = kPool, n_heads = 3, hd = 16;
  const auto table = nonzero(static_cast<size_t>(vocab) * dim, 41);
  const auto x = nonzero(static_cast<size_t>(kPool) * dim, 42);
  const auto y = nonzero(static_cast<size_t>(kPool) * dim, 43);
  std::vector<int> pos(kPool);
  for (int r = 0; r < kPool; ++r) pos[r] = (r * 37) % 300;
  const RopeDims rd{hd, 12, 10000.0f};  // rope_dim < head_dim: the tail of each head is untouched
  // references, plain loops
  std::vector<float> embed_ref = table;  // token r -> row r
  std::vector<float> rope_ref = x, silu_ref(x.size()), add_ref(x.size());
  for (int r = 0; r < kPool; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < rd.rope_dim / 2; ++i) {
        const float freq = 1.0f / std::pow(rd.theta, static_cast<float>(2 * i) / static_cast<float>(rd.rope_dim));
        const float angle = static_cast<float>(pos[r]) * freq, c = std::cos(angle), s = std::sin(angle);
        float* v = &rope_ref[static_cast<size_t>(r) * dim + h * hd];
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c - b * s;
        v[2 * i + 1] = a * s + b * c;
      }
  // neox RoPE (pairs i, i + rope_dim / 2) with per-pair frequency divisors and a linear scale.
  const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 3.0f, 5.0f, 8.0f};
  RopeDims nd = rd;
  nd.neox = true;
  nd.freq_scale = 0.5f;
  nd.freq_factors = factors.data();
  std::vector<float> neox_ref = x;
  for (int r = 0; r < kPool; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < nd.rope_dim / 2; ++i) {
        float freq = 1.0f / std::pow(nd.theta, static_cast<float>(2 * i) / static_cast<float>(nd.rope_dim));
        freq = freq / factors[i];
        const float angle = static_cast<float>(pos[r]) * nd.freq_scale * freq, c = std::cos(angle), s = std::sin(angle);
        float* v = &neox_ref[static_cast<size_t>(r) * dim + h * hd];
        const int j = i + nd.rope_dim / 2;
        const float a = v[i], b = v[j];
        v[i] = a * c - b * s;
        v[j] = a * s + b * c;
      }
  // a bias row added to every row
  const auto bias = nonzero(dim, 44);
  std::vector<float> bias_ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    silu_ref[i] = math::silu_mul(x[i], y[i]);  // the shared host/device math (own exp)
    add_ref[i] = x[i] + y[i];
    bias_ref[i] = x[i] + bias[i % dim];
  }
  for (Table& t : tables()) {
    const Weight E = t.ops->bind_weight({DType::F32, vocab, dim, table.data()});
    check_rows(t, "embed", dim, embed_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      Buffer out = ops.alloc(rows.size() * dim);
      ops.embed(E, rows.data(), static_cast<int>(rows.size()), out);
      return to_host(ops, out, rows.size() * dim);
    });
    check_rows(t, "rope", dim, rope_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      std::vector<int> p(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) p[i] = pos[rows[i]];
      Buffer b = to_device(ops, gather(x, rows, dim));
      ops.rope(b, p.data(), static_cast<int>(rows.size()), n_heads, rd);
      return to_host(ops, b, rows.size() * dim);
    });
    check_rows(t, "rope neox", dim, neox_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      std::vector<int> p(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) p[i] = pos[rows[i]];
      Buffer b = to_device(ops, gather(x, rows, dim));
      ops.rope(b, p.data(), static_cast<int>(rows.size()), n_heads, nd);
      return to_host(ops, b, rows.size() * dim);
    });
    const Weight B = t.ops->bind_weight({DType::F32, 1, dim, bias.data()});
    check_rows(t, "add_bias", dim, bias_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      Buffer a = to_device(ops, gather(x, rows, dim));
      ops.add_bias(a, B, static_cast<int>(rows.size()));
      return to_host(ops, a, rows.size() * dim);
    });
    check_rows(t, "silu_mul", dim, silu_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      Buffer g = to_device(ops, gather(x, rows, dim)), u = to_device(ops, gather(y, rows, dim));
      ops.silu_mul(g, u, rows.size() * dim);
      return to_host(ops, g, rows.size() * dim);
    });
    check_rows(t, "add", dim, add_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      Buffer a = to_device(ops, gather(x, rows, dim)), b = to_device(ops, gather(y, rows, dim));
      ops.add(a, b, rows.size() * dim);
      return to_host(ops, a, rows.size() * dim);
    });
    check_rows(t, "gather_rows", dim, x, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
      Buffer src = to_device(ops, x), out = ops.alloc(rows.size() * dim);
      ops.gather_rows(src, rows.data(), static_cast<int>(rows.size()), dim, out);
      return to_host(ops, out, rows.size() * dim);
    });
    for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
      std::vector<float> round_ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) round_ref[i] = round_to_precision(p, x[i]);
      const std::string name = std::string("round_to ") + precision_name(p);
      check_rows(t, name.c_str(), dim, round_ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
        Buffer b = to_device(ops, gather(x, rows, dim));
        ops.round_to(p, b, rows.size() * dim);
        return to_host(ops, b, rows.size() * dim);
      });
    }
  }
}

TEST_CASE("precision rounding: round to nearest even, bf16 and f16") {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> even (1).
  CHECK(round_to_precision(Precision::BF16, 1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  CHECK(round_to_precision(Precision::BF16, 1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(round_to_precision(Precision::BF16, 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) ==
        1.0f + std::ldexp(1.0f, -7));
  // f16 keeps 11 significant bits; 65520 rounds to inf, 65504 is the largest finite value.
  CHECK(round_to_precision(Precision::F16, 1.0f + std::ldexp(1.0f, -11)) == 1.0f);
  CHECK(round_to_precision(Precision::F16, 65504.0f) == 65504.0f);
  CHECK(std::isinf(round_to_precision(Precision::F16, 65520.0f)));
  CHECK(std::isnan(round_to_precision(Precision::BF16, std::nanf(""))));
  CHECK(round_to_precision(Precision::F32, 0.1f) == 0.1f);
  CHECK(round_to_precision(Precision::BF16, 0.1f) != 0.1f);
}

TEST_CASE("silu_mul: the CPU table's vector loop gives math::silu_mul's bits over the whole float range") {
  // Every exponent from 2^-30 to 2^7 with both signs, the exp clamps (x = +-87, +-88 and beyond),
  // infinities and zeros; 1 001 values, so the vector loop's 8-lane body and its scalar tail both run.
  std::vector<float> g, u;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f), up(-3.0f, 3.0f);
  for (int e = -30; e <= 7; ++e)
    for (int k = 0; k < 12; ++k) {
      const float v = std::ldexp(mant(rng), e);
      g.push_back(v);
      g.push_back(-v);
    }
  for (float v : {0.0f, -0.0f, 86.9f, -86.9f, 87.0f, -87.0f, 87.5f, -87.5f, 88.0f, -88.0f, 88.5f, -88.5f, 1e30f,
                  -1e30f, INFINITY, -INFINITY})
    g.push_back(v);
  while (g.size() < 1001) g.push_back(up(rng) * 10.0f);
  for (size_t i = 0; i < g.size(); ++i) u.push_back(i % 7 == 0 ? 1.0f : up(rng));
  std::vector<float> ref(g.size());
  for (size_t i = 0; i < g.size(); ++i) ref[i] = math::silu_mul(g[i], u[i]);
  for (Mode m : {Mode::Default, Mode::BatchInvariant}) {
    auto ops = make_ops(Device::Cpu, m, 1);
    Buffer gb = to_device(*ops, g), ub = to_device(*ops, u);
    ops->silu_mul(gb, ub, g.size());
    const std::vector<float> out = to_host(*ops, gb, g.size());
    int differ = 0;
    for (size_t i = 0; i < g.size(); ++i)
      differ += !(std::memcmp(&out[i], &ref[i], 4) == 0 || (std::isnan(out[i]) && std::isnan(ref[i])));
    CAPTURE(ops->describe().isa);
    CHECK(differ == 0);
  }
}

// ---- tensor parallelism (simulated; docs/ENGINE.md "Tensor parallelism") ----

namespace {
// Columns [s K/N, (s+1) K/N) of rows [R][K] (floats) or of weight rows (bytes of type t).
std::vector<float> k_shard(const std::vector<float>& x, int rows, int K, int N, int s) {
  const int ks = K / N;
  std::vector<float> out(static_cast<size_t>(rows) * ks);
  for (int r = 0; r < rows; ++r)
    std::copy_n(x.data() + static_cast<size_t>(r) * K + s * ks, ks, out.data() + static_cast<size_t>(r) * ks);
  return out;
}
std::vector<uint8_t> k_shard_bytes(const std::vector<uint8_t>& w, DType t, int rows, int K, int N, int s) {
  const size_t row = quant::row_bytes(t, K), srow = quant::row_bytes(t, K / N);
  std::vector<uint8_t> out(srow * rows);
  for (int r = 0; r < rows; ++r) std::copy_n(w.data() + r * row + s * srow, srow, out.data() + r * srow);
  return out;
}
}  // namespace

TEST_CASE("op tables: a column-parallel split (output rows over ranks) changes no bits in the invariant tables") {
  // Rank s of N computes weight rows [s Nout/N, (s+1) Nout/N): in the invariant tables its output
  // is those columns of the whole product, bitwise, at every batch size. The default table's sgemm
  // (from kSgemmMinRows rows) blocks by the whole shape, so there a rank's smaller product may
  // round differently: counted and printed (the engine runs each rank's rows, so it simulates that).
  const int Nout = 48, K = 96;
  const auto x = nonzero(static_cast<size_t>(kPool) * K, 61);
  const auto w = nonzero(static_cast<size_t>(Nout) * K, 62);
  for (Table& t : tables()) {
    CAPTURE(t.spec.name);
    CAPTURE(t.threads);
    Ops& ops = *t.ops;
    const Weight W = ops.bind_weight({DType::F32, Nout, K, w.data()});
    for (int b : kBatches) {
      CAPTURE(b);
      const auto rows = draw(b, 7u * b + 3u);
      Buffer xb = to_device(ops, gather(x, rows, K)), yb = ops.alloc(static_cast<size_t>(b) * Nout);
      ops.matmul(xb, W, yb, b);
      const auto whole = to_host(ops, yb, static_cast<size_t>(b) * Nout);
      for (int N : {2, 4, 8}) {
        CAPTURE(N);
        const int ns = Nout / N;
        int bad = 0;
        for (int s = 0; s < N; ++s) {
          const Weight Ws = ops.bind_weight({DType::F32, ns, K, w.data() + static_cast<size_t>(s) * ns * K});
          Buffer ys = ops.alloc(static_cast<size_t>(b) * ns);
          ops.matmul(xb, Ws, ys, b);
          const auto part = to_host(ops, ys, static_cast<size_t>(b) * ns);
          for (int m = 0; m < b; ++m)
            bad += !same(&part[static_cast<size_t>(m) * ns], &whole[static_cast<size_t>(m) * Nout + s * ns], ns);
        }
        if (t.invariant())
          CHECK_MESSAGE(bad == 0, "rows whose rank columns differ from the whole product: " << bad);
        else if (bad > 0)
          MESSAGE(t.spec.name << " threads " << t.threads << " batch " << b << " TP " << N << ": " << bad
                              << " rank rows differ from the whole product");
      }
    }
  }
}

TEST_CASE("op tables: copy_cols puts a rank's columns in place, every table") {
  const int R = 5, width = 6, dst_width = 24, col = 12;
  const auto src = nonzero(static_cast<size_t>(R) * width, 91);
  const auto dst = nonzero(static_cast<size_t>(R) * dst_width, 92);
  std::vector<float> ref = dst;
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < width; ++j) ref[static_cast<size_t>(r) * dst_width + col + j] = src[static_cast<size_t>(r) * width + j];
  for (Table& t : tables()) {
    CAPTURE(t.spec.name);
    Buffer sb = to_device(*t.ops, src), db = to_device(*t.ops, dst);
    t.ops->copy_cols(sb, R, width, db, dst_width, col);
    CHECK(same(to_host(*t.ops, db, ref.size()).data(), ref.data(), ref.size()));
  }
}

TEST_CASE("op tables: row-parallel matmul (K shards + all-reduce), every table, TP size, order, precision") {
  // K = 512 in F32: 8 tp-invariant blocks of 64. Each rank's partial comes from matmul_partial on its
  // K shard; allreduce adds them. References, plain loops:
  //   tp-invariant tables: matmul_tp_reference over the whole K (one tree over the 8 blocks), rounded
  //     once: the SAME reference for every TP size and all-reduce order;
  //   the other invariant tables: matmul_reference per shard, then allreduce_reference;
  //   default: close to the latter (bitwise differences from the row alone are printed).
  const int Nout = 40, K = 512;
  const auto x = nonzero(static_cast<size_t>(kPool) * K, 71);
  const auto w = nonzero(static_cast<size_t>(Nout) * K, 72);
  std::vector<float> tp_ref(static_cast<size_t>(kPool) * Nout);
  matmul_tp_reference(x.data(), DType::F32, w.data(), tp_ref.data(), kPool, Nout, K, K);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    CAPTURE(std::string(precision_name(p)));
    std::vector<float> tp_ref_p = tp_ref;
    for (float& v : tp_ref_p) v = round_to_precision(p, v);
    for (int N : {1, 2, 4, 8})
      for (AllReduce a : {AllReduce::Ring, AllReduce::Tree}) {
        CAPTURE(N);
        CAPTURE(std::string(allreduce_name(a)));
        // The ranks' shards and the reference of the plain tables.
        std::vector<std::vector<float>> xs(N), ws(N), refs(N, std::vector<float>(static_cast<size_t>(kPool) * Nout));
        std::vector<float*> ptr(N);
        for (int s = 0; s < N; ++s) {
          xs[s] = k_shard(x, kPool, K, N, s);
          ws[s] = k_shard(w, Nout, K, N, s);
          matmul_reference(xs[s].data(), ws[s].data(), refs[s].data(), kPool, Nout, K / N);
          ptr[s] = refs[s].data();
        }
        allreduce_reference(ptr.data(), N, a, p, refs[0].size());
        for (Table& t : tables()) {
          const bool tpi = t.spec.mode == Mode::TpInvariant;
          std::vector<Weight> W(N);
          for (int s = 0; s < N; ++s) W[s] = t.ops->bind_weight({DType::F32, Nout, K / N, ws[s].data()});
          const std::string name = "row-parallel matmul tp " + std::to_string(N) + " " + allreduce_name(a);
          const RowOp op = [&](Ops& ops, const std::vector<int>& rows) {
            const int M = static_cast<int>(rows.size());
            std::vector<Buffer> parts;
            for (int s = 0; s < N; ++s) {
              Buffer xb = to_device(ops, gather(xs[s], rows, K / N));
              parts.push_back(ops.alloc(static_cast<size_t>(M) * Nout));
              ops.matmul_partial(xb, W[s], K, parts.back(), M);
            }
            ops.allreduce(parts.data(), N, a, p, static_cast<size_t>(M) * Nout);
            return to_host(ops, parts[0], static_cast<size_t>(M) * Nout);
          };
          if (!tpi && a == AllReduce::Ring && N >= 4) {
            // The ring's chunks cut the flattened [rows][Nout] buffer: an element's order depends on
            // the batch size and the row's position (batch variance from the all-reduce itself), so
            // only the whole pool, in order, is held to the reference.
            CAPTURE(t.spec.name);
            std::vector<int> all(kPool);
            for (int i = 0; i < kPool; ++i) all[i] = i;
            const std::vector<float> y = op(*t.ops, all);
            if (t.invariant())
              CHECK(same(y.data(), refs[0].data(), y.size()));
            else
              CHECK(rel_err(y.data(), refs[0].data(), y.size()) < (p == Precision::F32 ? 1e-5f : 2e-2f));
            continue;
          }
          check_rows(t, name.c_str(), Nout, tpi ? tp_ref_p : refs[0], t.invariant(), p == Precision::F32 ? 1e-5f : 2e-2f,
                     op);
        }
      }
  }
}

TEST_CASE("op tables: tp-invariant partials on stored weight types are one tree over K whatever the TP size") {
  // Q8_0 (K = 512: 8 blocks of 64) and Q4_K (K = 512: 2 blocks of 256, so TP 1 and 2), F16.
  const int Nout = 24, K = 512;
  const auto x = nonzero(static_cast<size_t>(kPool) * K, 81);
  const auto wf = nonzero(static_cast<size_t>(Nout) * K, 82);
  for (DType dt : {DType::F16, DType::Q8_0, DType::Q4_K}) {
    CAPTURE(dtype_name(dt));
    const size_t rb = quant::row_bytes(dt, K);
    std::vector<uint8_t> wq(rb * Nout);
    for (int n = 0; n < Nout; ++n) quant::quantize_row(dt, &wf[static_cast<size_t>(n) * K], &wq[n * rb], K);
    std::vector<float> ref(static_cast<size_t>(kPool) * Nout);
    matmul_tp_reference(x.data(), dt, wq.data(), ref.data(), kPool, Nout, K, K);
    const int G = K / tp_block(K, dt);
    for (Table& t : tables()) {
      if (t.spec.mode != Mode::TpInvariant) continue;
      for (int N = 1; N <= G; N *= 2) {
        CAPTURE(N);
        std::vector<std::vector<float>> xs(N);
        std::vector<std::vector<uint8_t>> ws(N);
        std::vector<Weight> W(N);
        for (int s = 0; s < N; ++s) {
          xs[s] = k_shard(x, kPool, K, N, s);
          ws[s] = k_shard_bytes(wq, dt, Nout, K, N, s);
          W[s] = t.ops->bind_weight({dt, Nout, K / N, ws[s].data()});
        }
        const std::string name = std::string("tp-invariant partial ") + dtype_name(dt) + " tp " + std::to_string(N);
        check_rows(t, name.c_str(), Nout, ref, true, 0, [&](Ops& ops, const std::vector<int>& rows) {
          const int M = static_cast<int>(rows.size());
          std::vector<Buffer> parts;
          for (int s = 0; s < N; ++s) {
            Buffer xb = to_device(ops, gather(xs[s], rows, K / N));
            parts.push_back(ops.alloc(static_cast<size_t>(M) * Nout));
            ops.matmul_partial(xb, W[s], K, parts.back(), M);
          }
          ops.allreduce(parts.data(), N, AllReduce::Ring, Precision::F32, static_cast<size_t>(M) * Nout);
          return to_host(ops, parts[0], static_cast<size_t>(M) * Nout);
        });
      }
    }
  }
}

TEST_CASE("op tables: the grouped expert matmul gives a token's row the bits of the row alone, every table") {
  // A mixture of experts groups a step's tokens per expert: expert e's matmul gets exactly the n_e
  // rows routed to it (gather_rows, then matmul with M = n_e), so M depends on the batch mates'
  // routing. In the invariant tables a token's output row is bitwise its row computed alone (M = 1)
  // and the reference; the default table picks its kernel by M, as production grouped GEMMs do, and
  // how often a row's bits move is printed.
  const int E = 4, k = 2, N = 40, K = 256;
  const auto x = nonzero(static_cast<size_t>(kPool) * K, 131);
  for (DType dt : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_K}) {
    const std::string type_name = dtype_name(dt);
    CAPTURE(type_name);
    const size_t rb = quant::row_bytes(dt, K);
    std::vector<std::vector<uint8_t>> wq(E, std::vector<uint8_t>(rb * N));
    for (int e = 0; e < E; ++e) {
      const auto wf = nonzero(static_cast<size_t>(N) * K, 140u + e);
      if (dt == DType::F32)
        std::memcpy(wq[e].data(), wf.data(), rb * N);
      else
        for (int n = 0; n < N; ++n) quant::quantize_row(dt, &wf[static_cast<size_t>(n) * K], &wq[e][n * rb], K);
    }
    for (Table& t : tables()) {
      CAPTURE(t.spec.name);
      CAPTURE(t.threads);
      Ops& ops = *t.ops;
      std::vector<Weight> W;
      for (int e = 0; e < E; ++e) W.push_back(ops.bind_weight({dt, N, K, wq[e].data()}));
      // Expert e's output for pool row r alone, and its reference.
      auto alone = [&](int r, int e) {
        Buffer xb = to_device(ops, gather(x, {r}, K)), yb = ops.alloc(N);
        ops.matmul(xb, W[e], yb, 1);
        return to_host(ops, yb, N);
      };
      for (int b : kBatches) {
        CAPTURE(b);
        const auto rows = draw(b, 11u * b + 5u);
        Buffer xb = to_device(ops, gather(x, rows, K));
        // Each token to k distinct experts, drawn per case.
        std::mt19937 rng(17u * b);
        std::vector<std::vector<int>> of_expert(E);
        for (int m = 0; m < b; ++m) {
          std::vector<int> ex = {0, 1, 2, 3};
          std::shuffle(ex.begin(), ex.end(), rng);
          for (int j = 0; j < k; ++j) of_expert[ex[j]].push_back(m);
        }
        int bad = 0, bad_ref = 0;
        for (int e = 0; e < E; ++e) {
          const int n = static_cast<int>(of_expert[e].size());
          if (n == 0) continue;
          Buffer xe = ops.alloc(static_cast<size_t>(n) * K), ye = ops.alloc(static_cast<size_t>(n) * N);
          ops.gather_rows(xb, of_expert[e].data(), n, K, xe);
          ops.matmul(xe, W[e], ye, n);
          const auto got = to_host(ops, ye, static_cast<size_t>(n) * N);
          for (int j = 0; j < n; ++j) {
            const int r = rows[of_expert[e][j]];
            bad += !same(&got[static_cast<size_t>(j) * N], alone(r, e).data(), N);
            std::vector<float> ref(N);
            if (dt == DType::F32)
              matmul_reference(&x[static_cast<size_t>(r) * K], reinterpret_cast<const float*>(wq[e].data()), ref.data(),
                               1, N, K);
            else
              matmul_q_reference(&x[static_cast<size_t>(r) * K], {dt, wq[e].data(), rb}, ref.data(), 1, N, K);
            if (t.invariant())
              bad_ref += !same(&got[static_cast<size_t>(j) * N], ref.data(), N);
            else
              CHECK(rel_err(&got[static_cast<size_t>(j) * N], ref.data(), N) < 2e-2f);
          }
        }
        if (t.invariant()) {
          CHECK_MESSAGE(bad == 0, "token rows that differ from the row alone: " << bad);
          CHECK_MESSAGE(bad_ref == 0, "token rows that differ from the reference: " << bad_ref);
        } else if (bad > 0) {
          MESSAGE(t.spec.name << " threads " << t.threads << " " << std::string(dtype_name(dt)) << " batch " << b << ": " << bad
                              << " token rows differ from the row alone");
        }
      }
    }
  }
}

TEST_CASE("op tables: scatter_rows and moe_combine equal the plain loop and never mix rows, every table") {
  const int R = 7, S = 3, width = 40;
  const auto y = nonzero(static_cast<size_t>(R) * S * width, 151);
  const auto w = nonzero(static_cast<size_t>(R) * S, 152);
  for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
    std::vector<float> ref(static_cast<size_t>(R) * width);
    moe_combine_reference(y.data(), w.data(), R, S, width, p, ref.data());
    // The plain loop is the sum in slot order: check one element by hand.
    float acc = 0.0f;
    for (int j = 0; j < S; ++j) acc = acc + w[static_cast<size_t>(2) * S + j] * y[(static_cast<size_t>(2) * S + j) * width + 5];
    CHECK(ref[static_cast<size_t>(2) * width + 5] == round_to_precision(p, acc));
    for (Table& t : tables()) {
      CAPTURE(t.spec.name);
      Ops& ops = *t.ops;
      Buffer yb = to_device(ops, y), ob = ops.alloc(static_cast<size_t>(R) * width);
      ops.moe_combine(yb, w.data(), R, S, width, p, ob);
      CHECK(same(to_host(ops, ob, ref.size()).data(), ref.data(), ref.size()));
      // Row 4 alone: its own slots and weights give its row of the batch.
      Buffer y1 = to_device(ops, std::vector<float>(y.begin() + 4 * S * width, y.begin() + 5 * S * width));
      Buffer o1 = ops.alloc(width);
      ops.moe_combine(y1, w.data() + 4 * S, 1, S, width, p, o1);
      CHECK(same(to_host(ops, o1, width).data(), &ref[static_cast<size_t>(4) * width], width));
    }
  }
  // scatter_rows: rows to their slots, the other rows untouched.
  const auto src = nonzero(static_cast<size_t>(3) * width, 153);
  const auto dst = nonzero(static_cast<size_t>(R) * width, 154);
  const int idx[] = {5, 0, 3};
  std::vector<float> ref = dst;
  for (int j = 0; j < 3; ++j) std::copy_n(&src[static_cast<size_t>(j) * width], width, &ref[static_cast<size_t>(idx[j]) * width]);
  for (Table& t : tables()) {
    CAPTURE(t.spec.name);
    Buffer sb = to_device(*t.ops, src), db = to_device(*t.ops, dst);
    t.ops->scatter_rows(sb, idx, 3, width, db);
    CHECK(same(to_host(*t.ops, db, ref.size()).data(), ref.data(), ref.size()));
  }
}
