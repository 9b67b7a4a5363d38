// The 8-lane layer (lanes8.hpp) in plain loops, for a CPU without its own implementation. The
// fast kernels compile on it; lanes_available() is false, so the dispatch runs their portable
// twins, which compute the same bits.
#pragma once
#include <cmath>
#include <cstring>

#include "../elementwise_math.hpp"

#define REPRO_LANES
#define REPRO_LANES_ISA "portable"

namespace repro::kernels::simd {

struct f32x8 {
  float l[8];
};
struct mask8 {
  bool on[8];
};

inline bool lanes_available() { return false; }

inline f32x8 zero() { return f32x8{{0, 0, 0, 0, 0, 0, 0, 0}}; }
inline f32x8 set1(float x) { return f32x8{{x, x, x, x, x, x, x, x}}; }
inline f32x8 load(const float* p) {
  f32x8 v;
  std::memcpy(v.l, p, sizeof v.l);
  return v;
}
inline void store(float* p, f32x8 v) { std::memcpy(p, v.l, sizeof v.l); }
inline mask8 tail(int n) {
  mask8 m;
  for (int j = 0; j < 8; ++j) m.on[j] = j < n;
  return m;
}
inline f32x8 load(const float* p, mask8 m) {
  f32x8 v;
  for (int j = 0; j < 8; ++j) v.l[j] = m.on[j] ? p[j] : 0.0f;
  return v;
}
inline void store(float* p, mask8 m, f32x8 v) {
  for (int j = 0; j < 8; ++j)
    if (m.on[j]) p[j] = v.l[j];
}
inline f32x8 keep(f32x8 v, mask8 m) {
  for (int j = 0; j < 8; ++j)
    if (!m.on[j]) v.l[j] = 0.0f;
  return v;
}

#define REPRO_LANES8_BINARY(name, expr)         \
  inline f32x8 name(f32x8 a, f32x8 b) {         \
    f32x8 r;                                    \
    for (int j = 0; j < 8; ++j) r.l[j] = (expr); \
    return r;                                   \
  }
REPRO_LANES8_BINARY(add, a.l[j] + b.l[j])
REPRO_LANES8_BINARY(sub, a.l[j] - b.l[j])
REPRO_LANES8_BINARY(mul, a.l[j] * b.l[j])
REPRO_LANES8_BINARY(div, a.l[j] / b.l[j])
REPRO_LANES8_BINARY(max, a.l[j] > b.l[j] ? a.l[j] : b.l[j])
#undef REPRO_LANES8_BINARY

inline f32x8 neg(f32x8 a) {
  for (float& x : a.l) x = -x;
  return a;
}
inline f32x8 fma(f32x8 a, f32x8 b, f32x8 c) {
  for (int j = 0; j < 8; ++j) c.l[j] = std::fma(a.l[j], b.l[j], c.l[j]);
  return c;
}
inline f32x8 exp(f32x8 v) {
  for (float& x : v.l) x = math::exp(x);
  return v;
}

inline float hsum(f32x8 v) {
  const float* l = v.l;
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
inline void hsum4(f32x8 a, f32x8 b, f32x8 c, f32x8 d, float* out) {
  out[0] = hsum(a), out[1] = hsum(b), out[2] = hsum(c), out[3] = hsum(d);
}
inline f32x8 hsum8(f32x8 a, f32x8 b, f32x8 c, f32x8 d, f32x8 e, f32x8 f, f32x8 g, f32x8 h) {
  return f32x8{{hsum(a), hsum(b), hsum(c), hsum(d), hsum(e), hsum(f), hsum(g), hsum(h)}};
}

}  // namespace repro::kernels::simd
