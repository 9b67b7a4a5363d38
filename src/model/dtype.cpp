// Dequantization of GGUF tensor data to f32 (the block layouts as ggml defines them, decoded by
// repro/common/quant.hpp, the same code the matmul kernels use). The scalar
// conversions (f16, bf16) are in repro/common/dtype.hpp, shared with the op tables.
#include "repro/model/dtype.hpp"

#include <bit>
#include <cstring>

#include "gguf_bytes.hpp"
#include "repro/common/error.hpp"
#include "repro/common/quant.hpp"

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
    default: {
      // Every block format: the one dequantizer the kernels use too (repro/common/quant.hpp).
      quant::Format qf;
      if (!to_quant_format(type, qf))
        throw UsageError("tensor type " + tensor_type_name(type) + " is not supported; supported: " +
                         supported_tensor_types());
      quant::dequantize_row(qf, src, dst, static_cast<int64_t>(n));
    }
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
