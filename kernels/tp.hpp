// Private to kernels/ (and the kernel tests): the simulated tensor parallelism's reduction orders
// (kernels/tp/reference.cpp; what they are: repro/kernels/ops.hpp, docs/ENGINE.md).
#pragma once
#include <cstddef>
#include <functional>

#include "matmul_quant.hpp"
#include "repro/kernels/ops.hpp"

namespace repro::kernels {

// The all-reduce of N partials parts[0..N) (n floats each) into parts[0], in the order of `algo`
// (ring_first_rank, or the pairwise tree), every partial and every sum rounded to p.
void allreduce_reference(float* const* parts, int N, AllReduce algo, Precision p, size_t n);
// The tp-invariant all-reduce: the pairwise tree over the ranks in f32, the total rounded to p once.
void tp_allreduce_reference(float* const* parts, int N, Precision p, size_t n);

// One block's batch-invariant product: y[M][N] = x[M][K] * w^T, x contiguous, w rows of K elements
// of w.format, w.row_bytes apart.
using BlockMatmul = std::function<void(const float* x, const QuantWeight& w, float* y, int M, int N, int K)>;
// The tp-invariant partial of a shard: x [M][Ks], w [N][Ks] of type t (rows quant::row_bytes(t, Ks)
// bytes), y [M][N]: Ks cut into blocks of B (Ks / B a power of two), each block by `block`, the
// block products added along the pairwise tree in f32.
void matmul_tp_blocks(const float* x, DType t, const void* w, float* y, int M, int N, int Ks, int B,
                      const BlockMatmul& block);
// The same with the reference kernels (matmul_q_reference per block) and B = tp_block(k_total, t).
void matmul_tp_reference(const float* x, DType t, const void* w, float* y, int M, int N, int Ks, int k_total);

}  // namespace repro::kernels
