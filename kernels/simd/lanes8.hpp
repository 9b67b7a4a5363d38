// The ISA-neutral 8-lane layer of the fast CPU kernels: one type of 8 floats (f32x8), a tail mask
// (mask8) and the operations the kernels use, each one IEEE single-precision operation per lane
// with round to nearest even, so every implementation gives the same bits:
//   zero(), set1(x)                   every lane 0 / x
//   load(p), store(p, v)              8 floats, unaligned
//   tail(n)                           the first n (0..8) lanes
//   load(p, m), store(p, m, v)        the lanes of m; load gives 0 in the others, store leaves
//                                     the memory of the others untouched
//   keep(v, m)                        v in the lanes of m, +0 in the others
//   add, sub, mul, div, neg           lane by lane (neg flips the sign bit)
//   fma(a, b, c)                      a * b + c with one rounding
//   max(a, b)                         a > b ? a : b per lane (b when either is NaN)
//   exp(v)                            math::exp lane by lane (kernels/elementwise_math.hpp)
// and the fixed reductions, in the order detail::tree8 defines (kernels/common.hpp):
//   hsum(v)                           ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
//   hsum4(a, b, c, d, out)            out[0..4) = hsum of a, b, c, d
//   hsum8(a, ..., h)                  lane j = hsum of the j-th argument
// Functions that use the layer carry REPRO_LANES (the ISA's target attribute) and run only when
// lanes_available() (dispatch: use_lanes(), kernels/cpu_features.cpp); the plain loops beside
// them follow the same order.
//
// One implementation per ISA, picked here: x86 (AVX2 + FMA) in lanes8_x86.hpp, and a scalar one
// (plain loops, for any other CPU) in lanes8_scalar.hpp. A port (NEON: float32x4_t pairs, vfmaq,
// vbslq for masks) adds its file and its line below; no kernel changes.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include "lanes8_x86.hpp"
#else
#include "lanes8_scalar.hpp"
#endif
