// The per-thread work of the batch-invariant CUDA matmul (kernels/matmul/cuda_invariant.cu), as
// host-callable functions: the kernel calls them on the GPU, tests/unit-cuda-emulation.cpp calls
// them on the CPU in a serial emulation of the block/thread decomposition and checks the bits
// against matmul_reference.
//
// Decomposition (fixed: it depends on nothing, neither the batch nor the weight shape):
//   block   256 threads = 32 groups of 8 lanes; computes a BM x BN = 32 x 64 tile of y
//   group   g = tid / 8 owns rows gm*8 .. gm*8+7 (gm = g / 8) and columns gn*8 .. gn*8+7 (gn = g % 8)
//           of the tile: 64 outputs, each a sum that the group's 8 lanes split by k mod 8
//   lane    l = tid % 8 accumulates, for each of its 64 outputs, the elements k = l (mod 8) in
//           increasing k with acc = fma(x, w, acc): exactly lane l of detail::dot_lanes
//   K       is staged through shared memory in chunks of KC = 32 (4 elements per lane); the chunk
//           loads zeros past K, and a lane runs only as many steps as the reference's zero-padded
//           length ceil(K / 8) * 8 has, so the padding fmas are exactly the reference's
//   tree    three xor-shuffles within the group (offsets 1, 2, 4) add lane pairs:
//           ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) = detail::tree8 (every lane ends with these bits,
//           since IEEE addition is commutative); lane l then stores column gn*8 + l of its 8 rows.
// So each y[m][n] is summed in matmul_reference's order whatever tile, block or batch it is in.
#pragma once
#include "../cuda/lanes.hpp"

namespace repro::kernels::cuda::mm {

constexpr int kThreads = 256;
constexpr int RM = 8, RN = 8;  // outputs per group: rows x columns
constexpr int BM = 32, BN = 64;
constexpr int KC = 32;        // K chunk staged in shared memory
constexpr int LDS = KC + 1;   // shared row stride: the 4 groups of a warp hit distinct banks

// Shared memory of one block: x rows [BM][LDS] and w rows [BN][LDS].
struct Smem {
  float xs[BM * LDS];
  float ws[BN * LDS];
};

// Weights in f32: element (n, k) of w[N][K].
struct F32Rows {
  const float* w;
  int K;
  REPRO_HD float operator()(int n, int k) const { return w[static_cast<long>(n) * K + k]; }
};

// Thread tid's share of loading chunk k0 of the tile at (m0, n0); zeros outside x/w. The weight is
// read through `w(n, k)`: an f32 matrix (F32Rows) or one in its stored type, each element turned
// into f32 in registers as it is staged (dq::Rows, kernels/matmul/cuda_dequant.hpp); the chunk in
// shared memory is f32 either way, so the sums below do not depend on the stored type.
template <class W>
REPRO_HD void load_chunk(int tid, const float* x, const W& w, int M, int N, int K, int m0, int n0, int k0, Smem& s) {
  for (int e = tid; e < BM * KC; e += kThreads) {
    const int r = e / KC, c = e % KC, m = m0 + r, k = k0 + c;
    s.xs[r * LDS + c] = (m < M && k < K) ? x[static_cast<long>(m) * K + k] : 0.0f;
  }
  for (int e = tid; e < BN * KC; e += kThreads) {
    const int r = e / KC, c = e % KC, n = n0 + r, k = k0 + c;
    s.ws[r * LDS + c] = (n < N && k < K) ? w(n, k) : 0.0f;
  }
}
REPRO_HD void load_chunk(int tid, const float* x, const float* w, int M, int N, int K, int m0, int n0, int k0,
                         Smem& s) {
  load_chunk(tid, x, F32Rows{w, K}, M, N, K, m0, n0, k0, s);
}

// Number of 8-wide steps of chunk k0 that belong to the zero-padded length ceil(K / 8) * 8.
REPRO_HD int chunk_steps(int K, int k0) {
  const int kpad = (K + 7) / 8 * 8;
  const int left = (kpad - k0) / 8;
  return left < KC / 8 ? left : KC / 8;
}

// Thread tid's fma chain over `steps` 8-wide steps of the staged chunk: lane l takes the chunk's
// elements s * 8 + l, s increasing.
REPRO_HD void accumulate(int tid, const Smem& s, int steps, float (&acc)[RM][RN]) {
  const int lane = tid % kLanes, g = tid / kLanes, gm = g / 8, gn = g % 8;
  for (int st = 0; st < steps; ++st) {
    float xv[RM], wv[RN];
    REPRO_UNROLL for (int i = 0; i < RM; ++i) xv[i] = s.xs[(gm * RM + i) * LDS + st * 8 + lane];
    REPRO_UNROLL for (int j = 0; j < RN; ++j) wv[j] = s.ws[(gn * RN + j) * LDS + st * 8 + lane];
    REPRO_UNROLL for (int i = 0; i < RM; ++i)
      REPRO_UNROLL for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
  }
}


// Lane tid % 8 stores column gn*8 + lane of the group's rows, from its reduced accumulators.
REPRO_HD void store(int tid, const float (&acc)[RM][RN], float* y, int M, int N, int m0, int n0) {
  const int lane = tid % kLanes, g = tid / kLanes, gm = g / 8, gn = g % 8;
  const int n = n0 + gn * RN + lane;
  for (int i = 0; i < RM; ++i) {
    float v = 0.0f;
    REPRO_UNROLL for (int j = 0; j < RN; ++j) v = j == lane ? acc[i][j] : v;  // no dynamic register indexing
    const int m = m0 + gm * RM + i;
    if (m < M && n < N) y[static_cast<long>(m) * N + n] = v;
  }
}

}  // namespace repro::kernels::cuda::mm
