// A plain scalar reading of the architectures (f32 weights, double accumulation), independent of
// the op tables: the reference forward the model tests compare the engine with. The feed-forward
// block is a parameter, so mixture-of-experts layers reuse the same attention and norms.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/engine/forward.hpp"
#include "repro/model/gguf.hpp"

namespace repro::test {

inline std::vector<float> matvec(const Tensor& w, const std::vector<float>& x) {
  const float* W = w.f32();
  std::vector<float> y(static_cast<size_t>(w.rows));
  for (int o = 0; o < w.rows; ++o) {
    double s = 0;
    for (int i = 0; i < w.cols; ++i) s += static_cast<double>(W[static_cast<size_t>(o) * w.cols + i]) * x[i];
    y[o] = static_cast<float>(s);
  }
  return y;
}
inline void rmsnorm_span(float* x, int n, const float* g, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * scale * g[i]);
}

// SwiGLU feed-forward: down(silu(gate x) * up x).
inline std::vector<float> swiglu(const Tensor& gate, const Tensor& up, const Tensor& down, const std::vector<float>& x) {
  std::vector<float> g = matvec(gate, x), u = matvec(up, x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(g[i] / (1.0 + std::exp(-g[i])) * u[i]);
  return matvec(down, g);
}

// The feed-forward block of one layer on the normed activations; empty means the dense SwiGLU.
using ReferenceFfn = std::function<std::vector<float>(const LayerWeights&, const std::vector<float>&)>;

// Logits of every position of `tokens` (one sequence from position 0).
inline std::vector<std::vector<float>> reference_logits(const Model& m, const std::vector<int>& tokens,
                                                        const ReferenceFfn& ffn = {}) {
  const ModelConfig& c = m.config;
  const int dim = c.dim, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads, T = static_cast<int>(tokens.size());
  const int half = c.rope_dim / 2;
  std::vector<std::vector<std::vector<float>>> K(c.n_layers), V(c.n_layers);
  std::vector<std::vector<float>> out;
  auto rope = [&](std::vector<float>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.rope_dim);
        if (!m.rope_freqs.empty()) freq /= m.rope_freqs[i];
        const double a = pos * c.rope_freq_scale * freq;
        float& x0 = v[static_cast<size_t>(h) * hd + (c.rope_neox ? i : 2 * i)];
        float& x1 = v[static_cast<size_t>(h) * hd + (c.rope_neox ? i + half : 2 * i + 1)];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = static_cast<float>(r0);
        x1 = static_cast<float>(r1);
      }
  };
  for (int t = 0; t < T; ++t) {
    std::vector<float> x(m.token_embd.f32() + static_cast<size_t>(tokens[t]) * dim,
                         m.token_embd.f32() + static_cast<size_t>(tokens[t] + 1) * dim);
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& w = m.layers[l];
      std::vector<float> xn = x;
      rmsnorm_span(xn.data(), dim, w.attn_norm.f32(), c.rms_eps);
      std::vector<float> q = matvec(w.wq, xn), k = matvec(w.wk, xn), v = matvec(w.wv, xn);
      if (!w.bq.empty())
        for (size_t i = 0; i < q.size(); ++i) q[i] += w.bq.f32()[i];
      if (!w.bk.empty())
        for (size_t i = 0; i < k.size(); ++i) k[i] += w.bk.f32()[i];
      if (!w.bv.empty())
        for (size_t i = 0; i < v.size(); ++i) v[i] += w.bv.f32()[i];
      if (!w.q_norm.empty()) {
        for (int h = 0; h < nh; ++h) rmsnorm_span(q.data() + h * hd, hd, w.q_norm.f32(), c.rms_eps);
        for (int h = 0; h < nkv; ++h) rmsnorm_span(k.data() + h * hd, hd, w.k_norm.f32(), c.rms_eps);
      }
      rope(q, nh, t);
      rope(k, nkv, t);
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<float> att(static_cast<size_t>(nh) * hd, 0.0f);
      for (int h = 0; h < nh; ++h) {
        const int kh = h / (nh / nkv);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int p = 0; p <= t; ++p) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += static_cast<double>(q[h * hd + i]) * K[l][p][kh * hd + i];
          s[p] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int p = 0; p <= t; ++p)
          for (int i = 0; i < hd; ++i) att[h * hd + i] += static_cast<float>(s[p] / sum * V[l][p][kh * hd + i]);
      }
      const std::vector<float> o = matvec(w.wo, att);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      xn = x;
      rmsnorm_span(xn.data(), dim, w.ffn_norm.f32(), c.rms_eps);
      const std::vector<float> d = ffn ? ffn(w, xn) : swiglu(w.w_gate, w.w_up, w.w_down, xn);
      for (int i = 0; i < dim; ++i) x[i] += d[i];
    }
    rmsnorm_span(x.data(), dim, m.output_norm.f32(), c.rms_eps);
    out.push_back(matvec(m.classifier(), x));
  }
  return out;
}

// The engine's logits for every position of `tokens` (one prefill step).
inline std::vector<std::vector<float>> engine_logits(const Model& m, const std::vector<int>& tokens, Mode mode) {
  EngineOptions eo;
  eo.mode = mode;
  Forward fwd(m, eo);
  const int slot = fwd.acquire_slot(static_cast<int>(tokens.size()));
  std::vector<TokenRow> rows;
  for (size_t t = 0; t < tokens.size(); ++t) rows.push_back({slot, tokens[t], static_cast<int>(t), true});
  const float* lg = fwd.run(rows);
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < tokens.size(); ++t)
    out.emplace_back(lg + t * m.config.vocab_size, lg + (t + 1) * m.config.vocab_size);
  fwd.release_slot(slot);
  return out;
}

inline float max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float d = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) d = std::max(d, std::fabs(a[t][i] - b[t][i]));
  return d;
}

}  // namespace repro::test
