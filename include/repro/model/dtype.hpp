// Dequantization of GGUF tensor data to f32 (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
#pragma once
#include <cstdint>
#include <vector>

#include "repro/common/dtype.hpp"
#include "repro/model/gguf.hpp"

namespace repro::gguf {

// The scalar conversions live in repro/common/dtype.hpp (shared with the op tables).
using repro::bf16_to_f32;
using repro::f16_to_f32;
using repro::f32_to_f16;
// n elements (a multiple of the block size) from src to dst; UsageError for unsupported types.
void dequantize_row(TensorType type, const uint8_t* src, float* dst, uint64_t n);
// A whole tensor to f32; UsageError naming the file and tensor for unsupported types.
std::vector<float> dequantize(const File& f, const TensorInfo& t);

}  // namespace repro::gguf
