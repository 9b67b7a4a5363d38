// Token choice from logits. The draw at step t depends only on (seed, t, logits): never on batch
// size, batch mates or position in the batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "repro/engine/engine.hpp"
#include "repro/common/error.hpp"
#include "repro/common/rng.hpp"

namespace repro {

namespace {
using rng::splitmix64;
// Uniform in [0, 1) from (seed, step) on one stream: 53 random bits. Stream 0 is the sampler's own
// draw (the value it always had); the speculative acceptance, residual and draft draws are streams
// of their own, so each draw of a step is independent of the others.
double uniform(uint64_t seed, int step, uint64_t stream = 0) {
  uint64_t h = splitmix64(splitmix64(seed) ^ (static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull) ^
                          (stream ? splitmix64(stream * 0x9E3779B97F4A7C15ull) : 0));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// The streams of the speculative draws (stream 0 is sample_token's).
constexpr uint64_t kStreamAccept = 1, kStreamResidual = 2, kStreamDraft = 3;

// The id whose cumulative probability first passes u (the last one when rounding leaves u above
// the total).
int draw_from(const std::vector<TokenProb>& dist, double u) {
  double cum = 0;
  for (const TokenProb& c : dist) {
    cum += c.prob;
    if (u < cum) return c.id;
  }
  return dist.back().id;
}
}  // namespace

float token_logprob(const float* logits, int n, int id) {
  float mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return static_cast<float>(static_cast<double>(logits[id]) - mx - std::log(sum));
}

StepStats step_stats(const float* logits, int n) { return step_stats(logits, n, -1, nullptr); }

StepStats step_stats(const float* logits, int n, int chosen, float* chosen_logprob) {
  StepStats st;
  int cnt = 0;  // ids held in st.top_ids, sorted by (logit desc, id asc)
  for (int i = 0; i < n; ++i) {
    const float v = logits[i];
    if (cnt == kTopRecorded && !(v > logits[st.top_ids[cnt - 1]])) continue;
    int at = cnt < kTopRecorded ? cnt++ : cnt - 1;
    while (at > 0 && v > logits[st.top_ids[at - 1]]) {
      st.top_ids[at] = st.top_ids[at - 1];
      --at;
    }
    st.top_ids[at] = i;
  }
  // log-softmax exactly as token_logprob computes it (same max, same double sum), so
  // top_logprobs[j] == token_logprob(logits, n, top_ids[j]) bit for bit
  const float mx = logits[st.top_ids[0]];
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = std::log(sum);
  if (chosen_logprob && chosen >= 0 && chosen < n)
    *chosen_logprob = static_cast<float>(static_cast<double>(logits[chosen]) - mx - lse);
  for (int j = 0; j < kTopRecorded; ++j) {
    if (j < cnt) {
      st.top_logprobs[j] = static_cast<float>(static_cast<double>(logits[st.top_ids[j]]) - mx - lse);
    } else {
      st.top_ids[j] = -1;
      st.top_logprobs[j] = -std::numeric_limits<float>::infinity();
    }
  }
  if (cnt >= 2) {
    const float a = logits[st.top_ids[0]], b = logits[st.top_ids[1]];
    st.margin = a - b;
    const float scale = std::max(std::fabs(a), std::fabs(b));
    st.margin_rel = scale > 0 ? st.margin / scale : 0.0f;
  }
  return st;
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int n, int k) {
  k = std::max(0, std::min(k, n));
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  std::vector<TokenLogprob> out;
  out.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) out.push_back({idx[i], token_logprob(logits, n, idx[i])});
  return out;
}

std::vector<TokenProb> sampling_distribution(const float* logits, int n, const DecodeParams& p) {
  // Candidates sorted by logit, descending; ties by index (a total order, so the result is unique).
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  int keep = n;
  if (p.top_k > 0 && p.top_k < keep) keep = p.top_k;
  std::vector<double> prob(keep);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < keep; ++i) {
    prob[i] = std::exp((static_cast<double>(logits[idx[i]]) - mx) / p.temperature);
    sum += prob[i];
  }
  for (int i = 0; i < keep; ++i) prob[i] /= sum;
  if (p.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
    double cum = 0;
    int k = 0;
    while (k < keep) {
      cum += prob[k++];
      if (cum >= p.top_p) break;
    }
    keep = std::max(k, 1);
    double s2 = 0;
    for (int i = 0; i < keep; ++i) s2 += prob[i];
    for (int i = 0; i < keep; ++i) prob[i] /= s2;
  }
  std::vector<TokenProb> out(static_cast<size_t>(keep));
  for (int i = 0; i < keep; ++i) out[static_cast<size_t>(i)] = {idx[i], prob[i]};
  return out;
}

int sample_token(const float* logits, int n, const DecodeParams& p, int step) {
  if (p.temperature <= 0.0f) {  // greedy: first index of the maximum
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  return draw_from(sampling_distribution(logits, n, p), uniform(p.seed, step));
}

int sample_draft_token(const std::vector<TokenProb>& q, const DecodeParams& p, int step) {
  return draw_from(q, uniform(p.seed, step, kStreamDraft));
}

int speculative_token(const float* logits, int n, const DecodeParams& p, int step, int drafted,
                      const std::vector<TokenProb>& q, bool* accepted) {
  if (p.temperature <= 0.0f) {  // greedy: the target's own choice; the draft counts when it is the same
    const int t = sample_token(logits, n, p, step);
    *accepted = t == drafted;
    return t;
  }
  // Rejection sampling (Leviathan et al. 2023, Chen et al. 2023): accept the drafted token x with
  // probability min(1, p(x) / q(x)); otherwise draw from the residual max(0, p - q), normalised.
  // q empty: a drafted token that came with no distribution (an n-gram lookup), i.e. q(x) = 1.
  const std::vector<TokenProb> dist = sampling_distribution(logits, n, p);
  std::vector<double> qd(static_cast<size_t>(n), 0.0);  // q over the vocabulary
  if (q.empty()) {
    qd[static_cast<size_t>(drafted)] = 1.0;
  } else {
    for (const TokenProb& c : q) qd[static_cast<size_t>(c.id)] = c.prob;
  }
  double px = 0;
  for (const TokenProb& c : dist)
    if (c.id == drafted) px = c.prob;
  if (uniform(p.seed, step, kStreamAccept) * qd[static_cast<size_t>(drafted)] < px) {
    *accepted = true;
    return drafted;
  }
  *accepted = false;
  std::vector<TokenProb> residual;
  double sum = 0;
  for (const TokenProb& c : dist) {
    const double r = c.prob - qd[static_cast<size_t>(c.id)];
    if (r > 0) {
      residual.push_back({c.id, r});
      sum += r;
    }
  }
  if (residual.empty()) return draw_from(dist, uniform(p.seed, step, kStreamResidual));  // p == q (rounding)
  for (TokenProb& c : residual) c.prob /= sum;
  return draw_from(residual, uniform(p.seed, step, kStreamResidual));
}

}  // namespace repro
