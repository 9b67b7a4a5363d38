// Block formats of weights as GGUF stores them (the ggml layouts, little-endian), with a quantizer
// and a dequantizer per format. Shared by the model loader, `model synth` and the matmul kernels.
//
//   format  elems/block bytes/block  layout of one block                         element value
//   F32     1           4            f32                                          x
//   F16     1           2            IEEE half                                    x
//   BF16    1           2            bfloat16                                     x
//   Q8_0    32          34           f16 d, int8 q[32]                            d * q
//   Q4_0    32          18           f16 d, u8 qs[16]: element j in the low nibble of qs[j],
//                                    element j+16 in the high nibble              d * (nibble - 8)
//   Q4_K    256         144          f16 d, f16 dmin, u8 scales[12] (8 pairs of 6-bit scale and
//                                    min, packed), u8 qs[128]: group g (64 elements) uses
//                                    qs[32g..32g+32): low nibbles are its first 32 elements,
//                                    high nibbles the next 32; sub-block s = element / 32
//                                                                                 (d*sc_s)*q - (dmin*m_s)
//   Q5_K    256         176          f16 d, f16 dmin, u8 scales[12] as Q4_K, u8 qh[32], u8 qs[128]
//                                    as Q4_K for the low 4 bits; the fifth bit of element
//                                    64g + l (l < 32) is bit 2g of qh[l], of 64g + 32 + l bit 2g+1
//                                                                                 (d*sc_s)*q - (dmin*m_s)
//   Q6_K    256         210          u8 ql[128], u8 qh[64], int8 scales[16], f16 d; half h
//                                    (128 elements) uses ql[64h..), qh[32h..); its element
//                                    32k + l (k < 4, l < 32) has low 4 bits in ql[64h + l + 32(k&1)]
//                                    (low nibble for k < 2, high for k >= 2) and high 2 bits at
//                                    bit 2k of qh[32h + l]; sub-block s = element / 16
//                                                                                 (d*sc_s)*(q - 32)
// In the K formats the 6-bit scale/min pairs (sc_s, m_s), s < 8, are packed into 12 bytes: for
// s < 4, sc_s and m_s are the low 6 bits of bytes s and s+4; for s >= 4 their low 4 bits are the
// low / high nibble of byte s+4 and their high 2 bits are the top bits of bytes s-4 / s.
//
// Every element value is computed with single f32 operations in the order written in the table
// (no fused multiply-add), so a SIMD dequantizer gives exactly the bits of dequantize_row.
#pragma once
#include <cstddef>
#include <cstdint>

#include "repro/common/dtype.hpp"

namespace repro::quant {

// A format is a weight's DType (repro/common/dtype.hpp).
using Format = DType;

inline const char* format_name(Format f) { return dtype_name(f); }  // "F32", "Q4_K", ...
struct Block {
  int elems;
  int bytes;
};
Block block_of(Format f);
// Bytes of a row of n elements (n a multiple of the block's elements).
size_t row_bytes(Format f, int64_t n);

// n elements (a multiple of the block's elements) from the stored bytes src to f32.
// Block formats and BF16 take AVX2 code where the CPU has it, F16 the F16C instruction: the same
// bits as dequantize_row_scalar, element for element (tests/unit-quant.cpp compares them).
void dequantize_row(Format f, const uint8_t* src, float* dst, int64_t n);
// The plain per-element loops that define every element's value (no SIMD).
void dequantize_row_scalar(Format f, const uint8_t* src, float* dst, int64_t n);
// n elements of src to the format's bytes (n a multiple of the block's elements). Deterministic:
// plain f32 arithmetic, round to nearest even, the same bytes on every machine.
void quantize_row(Format f, const float* src, uint8_t* dst, int64_t n);

// The 6-bit scale sc and min m of sub-block j (< 8) from a K format's 12 packed scale bytes.
void unpack_scale_min(const uint8_t* scales, int j, int& sc, int& m);
// Whether the CPU has the F16C conversion instructions (CPUID leaf 1, ECX bit 29); false off x86.
bool cpu_has_f16c();

}  // namespace repro::quant
