// matmul with quantized weights, default: the fastest path per shape, as production engines run.
//
// Q8_0, Q4_K, Q5_K and Q6_K weights below quant_int_max_rows(format) rows take the integer
// dot-product kernels (8-bit activations, as in batch-invariant mode). Otherwise batches below
// kQuantSgemmMinRows (256) take the f32 panel kernel: at small M the cost is reading and
// dequantizing the weights, which that kernel does once per panel. Larger
// batches dequantize chunks of weight rows to f32 (threads over rows) and call OpenBLAS
// cblas_sgemm, whose kernel, blocking and thread split depend on M, N, K and the thread count: NOT
// batch-invariant (a row's bits depend on its batch), which is the honest default.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "../matmul_quant.hpp"
#include "quant_dot.hpp"

namespace repro::kernels {

void matmul_q_default(const float* x, const QuantWeight& w, float* y, int M, int N, int K, ThreadPool& pool) {
  if (M <= 0 || N <= 0) return;
  if (M < quant_int_max_rows(w.format)) return detail::matmul_q_int(x, w, y, M, N, K, pool);
  if (M < kQuantSgemmMinRows) return detail::matmul_q_panels(x, w, y, M, N, K, pool);
  static std::atomic<int> blas_threads{0};
  const int t = pool.size();
  if (blas_threads.load(std::memory_order_relaxed) != t) {
    openblas_set_num_threads(t);
    blas_threads.store(t, std::memory_order_relaxed);
  }
  // Weight rows per sgemm call: about 8 MiB of f32.
  const int chunk = std::max(16, std::min(N, static_cast<int>((8u << 20) / (4u * static_cast<unsigned>(K)))));
  std::vector<float> wf(static_cast<size_t>(chunk) * K);
  for (int c0 = 0; c0 < N; c0 += chunk) {
    const int cn = std::min(chunk, N - c0);
    pool.parallel_for(cn, [&](int b, int e) {
      for (int j = b; j < e; ++j)
        quant::dequantize_row(w.format, w.data + static_cast<size_t>(c0 + j) * w.row_bytes,
                              wf.data() + static_cast<size_t>(j) * K, K);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, cn, K, 1.0f, x, K, wf.data(), K, 0.0f, y + c0, N);
  }
}

}  // namespace repro::kernels
