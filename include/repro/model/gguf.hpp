// GGUF files (llama.cpp's model container, versions 2 and 3): a validating parser over a memory
// buffer. Beside it: dequantization (repro/model/dtype.hpp), the writer (repro/model/gguf_write.hpp)
// and the memory-mapped file (repro/common/mapped_file.hpp).
//
// Layout of a GGUF file (little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv
//   n_kv x      (string key, u32 value_type, value)
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 tensor_type, u64 offset)
//   padding to general.alignment (default 32), then the tensor data; each tensor's offset is
//   relative to the start of the data section and a multiple of the alignment.
// A string is u64 length + bytes; an array is u32 element_type + u64 count + elements.
//
// Every count, length, dimension and offset is checked against the buffer before it is used;
// bad input throws repro::UsageError whose message names the file (name_for_errors).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "repro/common/quant.hpp"

namespace repro::gguf {

// ---- value and tensor types, with the numbers GGUF stores ----
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);  // "u32", "string", "array", ...; "?" when unknown

enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};
// "F32", "Q8_0", ...; "type <n>" for a number this parser does not know.
std::string tensor_type_name(TensorType t);
// The types dequantize() converts to f32, for error messages: "F32, F16, BF16, Q8_0, Q4_0".
const char* supported_tensor_types();
bool is_supported_tensor_type(TensorType t);
// The block format of a supported tensor type (false for the others), and back.
bool to_quant_format(TensorType t, quant::Format& out);
TensorType from_quant_format(quant::Format f);
// Elements per block and bytes per block; false for numbers the parser does not know.
bool tensor_type_block(TensorType t, uint64_t& block_elems, uint64_t& block_bytes);

// ---- one metadata value ----
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t bits = 0;  // scalar integers and bool: the value zero/sign-extended to 64 bits
  double f = 0;       // FLOAT32 / FLOAT64
  std::string str;    // STRING
  // ARRAY: elem_type and count; the elements live in exactly one of the three containers below.
  ValueType elem_type = ValueType::UINT8;
  uint64_t count = 0;
  std::string raw;                // numeric and bool elements: their little-endian bytes, packed
  std::vector<std::string> strs;  // STRING elements
  std::vector<Value> arrays;      // ARRAY elements (nested arrays)

  bool is_integer() const;  // a scalar of an integer type (or bool)
  bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  // Scalar integer as int64; false when not an integer or when a UINT64 does not fit.
  bool get_int(int64_t& out) const;
  // Numeric array element i (i < count) as int64 / double; false when the element type differs.
  bool int_at(uint64_t i, int64_t& out) const;
  bool float_at(uint64_t i, double& out) const;

  // Constructors for the writer and tests.
  static Value u(ValueType t, uint64_t v);  // UINT8..UINT64, BOOL (v truncated to the type)
  static Value i(ValueType t, int64_t v);   // INT8..INT64
  static Value real(ValueType t, double v); // FLOAT32 (stored as float) / FLOAT64
  static Value boolean(bool v) { return u(ValueType::BOOL, v ? 1 : 0); }
  static Value string(std::string s);
  static Value string_array(std::vector<std::string> items);
  static Value f32_array(const std::vector<float>& items);
  static Value i32_array(const std::vector<int32_t>& items);
  // Array of scalars or arrays: every item must have type elem_type.
  static Value array(ValueType elem_type, const std::vector<Value>& items);
};
bool operator==(const Value& a, const Value& b);

// ---- tensor info ----
struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // dimensions, fastest first: a weight [out][in] has ne = {in, out}
  TensorType type = TensorType::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

// ---- a parsed file: views into the caller's buffer (keep it alive while using data()) ----
struct File {
  std::string name;  // for error messages
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute offset of the data section
  std::vector<std::pair<std::string, Value>> kv;  // in file order
  std::vector<TensorInfo> tensors;                // in file order
  const uint8_t* buffer = nullptr;
  size_t size = 0;

  const Value* find(std::string_view key) const;
  const TensorInfo* tensor(std::string_view name) const;
  const uint8_t* data(const TensorInfo& t) const { return buffer + data_offset + t.offset; }
};

// Parses and validates the header, metadata and tensor infos; tensors are checked to lie inside
// the buffer, aligned and non-overlapping. Throws UsageError naming name_for_errors.
File parse_gguf(const uint8_t* data, size_t size, const std::string& name_for_errors);

// The libFuzzer entry, as a plain function so the test suite can replay the corpus: parses,
// touches every value, and dequantizes small tensors. Never throws; returns 0.
int fuzz_one_input(const uint8_t* data, size_t size);

}  // namespace repro::gguf
