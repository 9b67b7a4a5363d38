// Dequantization of GGUF tensor data to f32 (the block layouts as ggml defines them). The scalar
// conversions (f16, bf16) are in repro/common/dtype.hpp, shared with the op tables.
#include "repro/model/dtype.hpp"

#include <bit>
#include <cstring>

#include "gguf_bytes.hpp"
#include "repro/common/error.hpp"

namespace repro::gguf {

void dequantize_row(TensorType type, const uint8_t* src, float* dst, uint64_t n) {
  switch (type) {
    case TensorType::F32:
      if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(dst, src, static_cast<size_t>(n) * 4);
        return;
      }
      for (uint64_t i = 0; i < n; ++i) dst[i] = f32_from_bits(static_cast<uint32_t>(load_le(src + 4 * i, 4)));
      return;
    case TensorType::F16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<uint16_t>(load_le(src + 2 * i, 2)));
      return;
    case TensorType::BF16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<uint16_t>(load_le(src + 2 * i, 2)));
      return;
    case TensorType::Q8_0:
      // block: f16 scale d, then 32 int8 quants; x = q * d
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 34;
        float d = f16_to_f32(static_cast<uint16_t>(load_le(blk, 2)));
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
      }
      return;
    case TensorType::Q4_0:
      // block: f16 scale d, then 16 bytes; low nibbles are elements 0..15, high nibbles 16..31,
      // each stored with an offset of 8: x = (nibble - 8) * d
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 18;
        float d = f16_to_f32(static_cast<uint16_t>(load_le(blk, 2)));
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = static_cast<float>((blk[2 + j] & 0x0f) - 8) * d;
          dst[b * 32 + j + 16] = static_cast<float>((blk[2 + j] >> 4) - 8) * d;
        }
      }
      return;
    default:
      throw UsageError("tensor type " + tensor_type_name(type) + " is not supported; supported: " +
                       supported_tensor_types());
  }
}

std::vector<float> dequantize(const File& f, const TensorInfo& t) {
  if (!is_supported_tensor_type(t.type))
    throw UsageError("GGUF file '" + f.name + "': tensor '" + t.name + "' has type " + tensor_type_name(t.type) +
                     ", which this tool cannot dequantize; supported: " + supported_tensor_types() +
                     " (re-quantize the model, e.g. llama-quantize ... Q8_0)");
  // n_elements was validated against the file size by parse_gguf, so this allocation is bounded
  // by a small multiple of the file size.
  std::vector<float> out(static_cast<size_t>(t.n_elements));
  dequantize_row(t.type, f.data(t), out.data(), t.n_elements);
  return out;
}

}  // namespace repro::gguf
