// Private to kernels/ (and the kernel tests): the mixture-of-experts combine, defined once in a
// plain loop (kernels/moe/reference.cpp; what it is: repro/kernels/ops.hpp, Ops::moe_combine).
#pragma once
#include <cstddef>

#include "repro/kernels/ops.hpp"

namespace repro::kernels {

// out[r][i] = ((w[r][0] * y[r][0][i] + w[r][1] * y[r][1][i]) + ...) + w[r][S-1] * y[r][S-1][i], in f32,
// slots in order 0..S-1 (each product rounded to f32, then added), the total rounded to p once.
// y: [R][S][width], w: [R][S], out: [R][width].
void moe_combine_reference(const float* y, const float* w, int R, int S, int width, Precision p, float* out);

}  // namespace repro::kernels
