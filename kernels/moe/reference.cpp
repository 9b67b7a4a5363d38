// The mixture-of-experts combine: a token's output is the weighted sum of its experts' outputs,
// added in one fixed order, the order the router chose them in (then the shared expert), whatever
// the mode, the device or the batch. Element-wise over the output (an element depends on its own
// row's slots only): batch-invariant by construction, and the one order every table runs.
#include "../moe.hpp"

namespace repro::kernels {

void moe_combine_reference(const float* y, const float* w, int R, int S, int width, Precision p, float* out) {
  for (int r = 0; r < R; ++r) {
    const float* wr = w + static_cast<size_t>(r) * S;
    float* o = out + static_cast<size_t>(r) * width;
    for (int i = 0; i < width; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < S; ++j) {
        const float prod = wr[j] * y[(static_cast<size_t>(r) * S + j) * width + i];
        acc = acc + prod;
      }
      o[i] = round_to_precision(p, acc);
    }
  }
}

}  // namespace repro::kernels
