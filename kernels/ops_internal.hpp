// Private to kernels/: the constructors of the registered op tables and the functions of the
// backend rows (see kernels/ops.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels.hpp"
#include "repro/kernels/ops.hpp"

namespace repro::kernels {

// The part of an op table that every backend builds the same way, on the host: the RoPE cos/sin
// table and the attention rows of a call. The tables derive from it (kernels/ops_cpu.cpp,
// kernels/ops_cuda.cpp); its code is in kernels/ops.cpp.
class TableBase : public Ops {
 protected:
  // cos/sin for positions 0..pos ([position][rope_dim / 2], math::rope_table), grown by doubling
  // and rebuilt from position 0 when another RoPE (dims, theta, scaling) asks. True when it changed
  // (a GPU table then uploads it).
  bool grow_rope(int pos, const RopeDims& d);
  const float* rope_cos() const { return rope_cos_.data(); }
  const float* rope_sin() const { return rope_sin_.data(); }
  size_t rope_size() const { return rope_cos_.size(); }
  // The R attention rows of one call: row r's query and output at r * n_heads * head_dim of q and
  // out, the K/V of its slot at `layer`, positions 0..pos. Valid until the next call.
  const AttentionRow* attention_rows(const Buffer& q, const KvRow* rows, int R, int layer, const AttentionDims& d,
                                     Buffer& out);
  AttentionShape attention_shape(const AttentionDims& d) const {
    return {d.n_heads, d.n_kv_heads, d.head_dim, kv_dim()};
  }

 private:
  std::vector<AttentionRow> att_rows_;
  std::vector<float> rope_cos_, rope_sin_;  // [position][rope_dim / 2]
  int rope_positions_ = 0, rope_half_ = 0;
  float rope_theta_ = 0, rope_scale_ = 0;
  const float* rope_factors_ = nullptr;
};

std::unique_ptr<Ops> make_cpu_default(int threads);    // kernels/ops_cpu.cpp
std::unique_ptr<Ops> make_cpu_invariant(int threads);  // kernels/ops_cpu.cpp
std::unique_ptr<Ops> make_cpu_deterministic(int threads);  // kernels/ops_cpu.cpp (one thread whatever `threads`)
std::unique_ptr<Ops> make_cpu_tp_invariant(int threads);   // kernels/ops_cpu.cpp
#ifdef REPRO_HAVE_CUDA
std::unique_ptr<Ops> make_cuda_default(int threads);    // kernels/ops_cuda.cpp
std::unique_ptr<Ops> make_cuda_invariant(int threads);  // kernels/ops_cuda.cpp
#endif

// The backend rows (repro/kernels/backends.hpp).
bool cpu_present();                                // kernels/backend_cpu.cpp
nlohmann::json cpu_describe(int threads);          // kernels/backend_cpu.cpp
std::vector<std::string> cpu_risks(int threads);   // kernels/backend_cpu.cpp
bool cuda_present();                               // kernels/backend_cuda.cpp
nlohmann::json cuda_describe(int threads);         // kernels/backend_cuda.cpp
std::vector<std::string> cuda_risks(int threads);  // kernels/backend_cuda.cpp

}  // namespace repro::kernels
