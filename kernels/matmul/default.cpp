// matmul default: OpenBLAS cblas_sgemm, as production engines call a vendor BLAS.
//
// NOT batch-invariant: OpenBLAS picks its kernel, blocking and thread split from M, N, K and the
// thread count (small M takes another path than large M), so a row's reduction order, hence its
// bits, depends on how many rows share the call and on the thread count. This is the honest
// default: it is not perturbed; it is simply the fastest BLAS available.
#include <cblas.h>

#include <atomic>

#include "repro/kernels/kernels.hpp"

namespace repro::kernels {

void matmul_default(const float* x, const float* w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
  static std::atomic<int> blas_threads{0};
  int t = pool.size();
  if (blas_threads.load(std::memory_order_relaxed) != t) {
    openblas_set_num_threads(t);
    blas_threads.store(t, std::memory_order_relaxed);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
}

}  // namespace repro::kernels
