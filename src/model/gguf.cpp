// GGUF parser. See include/repro/model/gguf.hpp for the file layout; the writer is in gguf_write.cpp,
// dequantization in dtype.cpp, the memory-mapped file in src/common/mapped_file.cpp.
//
// The parser treats the file as hostile: a count, a length, a dimension or an offset is never used
// (to index, to allocate, to multiply) before it has been checked against the bytes that remain.
#include "repro/model/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf_bytes.hpp"
#include "repro/common/dtype.hpp"
#include "repro/common/error.hpp"
#include "repro/model/dtype.hpp"
#include "repro/common/quant.hpp"
#include "repro/common/util.hpp"

namespace repro::gguf {

// =====================================================================================
// Type tables
// =====================================================================================

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "u8";
    case ValueType::INT8: return "i8";
    case ValueType::UINT16: return "u16";
    case ValueType::INT16: return "i16";
    case ValueType::UINT32: return "u32";
    case ValueType::INT32: return "i32";
    case ValueType::FLOAT32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "u64";
    case ValueType::INT64: return "i64";
    case ValueType::FLOAT64: return "f64";
  }
  return "?";
}

namespace {

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

struct TypeInfo {
  TensorType type;
  const char* name;
  uint64_t block_elems;
  uint64_t block_bytes;
};

// Block layouts as ggml defines them (block = elements that share one scale).
constexpr TypeInfo kTensorTypes[] = {
    {TensorType::F32, "F32", 1, 4},        {TensorType::F16, "F16", 1, 2},
    {TensorType::Q4_0, "Q4_0", 32, 18},    {TensorType::Q4_1, "Q4_1", 32, 20},
    {TensorType::Q5_0, "Q5_0", 32, 22},    {TensorType::Q5_1, "Q5_1", 32, 24},
    {TensorType::Q8_0, "Q8_0", 32, 34},    {TensorType::Q8_1, "Q8_1", 32, 36},
    {TensorType::Q2_K, "Q2_K", 256, 84},   {TensorType::Q3_K, "Q3_K", 256, 110},
    {TensorType::Q4_K, "Q4_K", 256, 144},  {TensorType::Q5_K, "Q5_K", 256, 176},
    {TensorType::Q6_K, "Q6_K", 256, 210},  {TensorType::Q8_K, "Q8_K", 256, 292},
    {TensorType::I8, "I8", 1, 1},          {TensorType::I16, "I16", 1, 2},
    {TensorType::I32, "I32", 1, 4},        {TensorType::I64, "I64", 1, 8},
    {TensorType::F64, "F64", 1, 8},        {TensorType::BF16, "BF16", 1, 2},
};

const TypeInfo* type_info(TensorType t) {
  for (const auto& ti : kTensorTypes)
    if (ti.type == t) return &ti;
  return nullptr;
}

}  // namespace

std::string tensor_type_name(TensorType t) {
  if (const TypeInfo* ti = type_info(t)) return ti->name;
  return "type " + std::to_string(static_cast<uint32_t>(t));
}

const char* supported_tensor_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"; }

bool is_supported_tensor_type(TensorType t) {
  quant::Format f;
  return to_quant_format(t, f);
}

bool to_quant_format(TensorType t, quant::Format& out) {
  switch (t) {
    case TensorType::F32: out = quant::Format::F32; return true;
    case TensorType::F16: out = quant::Format::F16; return true;
    case TensorType::BF16: out = quant::Format::BF16; return true;
    case TensorType::Q8_0: out = quant::Format::Q8_0; return true;
    case TensorType::Q4_0: out = quant::Format::Q4_0; return true;
    case TensorType::Q4_K: out = quant::Format::Q4_K; return true;
    case TensorType::Q5_K: out = quant::Format::Q5_K; return true;
    case TensorType::Q6_K: out = quant::Format::Q6_K; return true;
    default: return false;
  }
}

TensorType from_quant_format(quant::Format f) {
  switch (f) {
    case quant::Format::F32: return TensorType::F32;
    case quant::Format::F16: return TensorType::F16;
    case quant::Format::BF16: return TensorType::BF16;
    case quant::Format::Q8_0: return TensorType::Q8_0;
    case quant::Format::Q4_0: return TensorType::Q4_0;
    case quant::Format::Q4_K: return TensorType::Q4_K;
    case quant::Format::Q5_K: return TensorType::Q5_K;
    case quant::Format::Q6_K: return TensorType::Q6_K;
  }
  return TensorType::F32;
}

bool tensor_type_block(TensorType t, uint64_t& block_elems, uint64_t& block_bytes) {
  const TypeInfo* ti = type_info(t);
  if (!ti) return false;
  block_elems = ti->block_elems;
  block_bytes = ti->block_bytes;
  return true;
}

// =====================================================================================
// Value helpers
// =====================================================================================

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
    case ValueType::BOOL:
      return true;
    default:
      return false;
  }
}

bool Value::get_int(int64_t& out) const {
  if (!is_integer()) return false;
  // A u64 above INT64_MAX does not fit; callers then report the key as out of range.
  if (type == ValueType::UINT64 && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return false;
  out = static_cast<int64_t>(bits);
  return true;
}

namespace {

// Sign- or zero-extends the n-byte little-endian integer of type t to 64 bits.
uint64_t extend(ValueType t, uint64_t v) {
  switch (t) {
    case ValueType::INT8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v)));
    case ValueType::INT16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v)));
    case ValueType::INT32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v)));
    case ValueType::BOOL: return v != 0;
    default: return v;
  }
}

bool is_int_type(ValueType t) {
  Value v;
  v.type = t;
  return v.is_integer();
}

}  // namespace

bool Value::int_at(uint64_t idx, int64_t& out) const {
  if (type != ValueType::ARRAY || idx >= count || !is_int_type(elem_type)) return false;
  uint64_t sz = scalar_size(elem_type);
  uint64_t v = extend(elem_type, load_le(reinterpret_cast<const uint8_t*>(raw.data()) + idx * sz, int(sz)));
  if (elem_type == ValueType::UINT64 && v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return false;
  out = static_cast<int64_t>(v);
  return true;
}

bool Value::float_at(uint64_t idx, double& out) const {
  if (type != ValueType::ARRAY || idx >= count) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  if (elem_type == ValueType::FLOAT32) {
    out = f32_from_bits(static_cast<uint32_t>(load_le(p + idx * 4, 4)));
    return true;
  }
  if (elem_type == ValueType::FLOAT64) {
    out = f64_from_bits(load_le(p + idx * 8, 8));
    return true;
  }
  return false;
}

Value Value::u(ValueType t, uint64_t v) {
  Value r;
  r.type = t;
  uint64_t sz = scalar_size(t);
  r.bits = sz >= 8 ? v : (v & ((uint64_t{1} << (8 * sz)) - 1));
  if (t == ValueType::BOOL) r.bits = v != 0;
  return r;
}

Value Value::i(ValueType t, int64_t v) {
  Value r;
  r.type = t;
  r.bits = extend(t, static_cast<uint64_t>(v));
  return r;
}

Value Value::real(ValueType t, double v) {
  Value r;
  r.type = t;
  r.f = t == ValueType::FLOAT32 ? static_cast<double>(static_cast<float>(v)) : v;
  return r;
}

Value Value::string(std::string s) {
  Value r;
  r.type = ValueType::STRING;
  r.str = std::move(s);
  return r;
}

Value Value::string_array(std::vector<std::string> items) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::STRING;
  r.count = items.size();
  r.strs = std::move(items);
  return r;
}

Value Value::f32_array(const std::vector<float>& items) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::FLOAT32;
  r.count = items.size();
  for (float x : items) store_le(r.raw, f32_to_bits(x), 4);
  return r;
}

Value Value::i32_array(const std::vector<int32_t>& items) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::INT32;
  r.count = items.size();
  for (int32_t x : items) store_le(r.raw, static_cast<uint32_t>(x), 4);
  return r;
}

Value Value::array(ValueType elem_type, const std::vector<Value>& items) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = elem_type;
  r.count = items.size();
  for (const Value& it : items) {
    if (it.type != elem_type)
      throw UsageError(std::string("GGUF writer: array of ") + value_type_name(elem_type) + " given an element of type " +
                       value_type_name(it.type));
    if (elem_type == ValueType::STRING) {
      r.strs.push_back(it.str);
    } else if (elem_type == ValueType::ARRAY) {
      r.arrays.push_back(it);
    } else if (elem_type == ValueType::FLOAT32) {
      store_le(r.raw, f32_to_bits(static_cast<float>(it.f)), 4);
    } else if (elem_type == ValueType::FLOAT64) {
      store_le(r.raw, f64_bits(it.f), 8);
    } else {
      store_le(r.raw, it.bits, static_cast<int>(scalar_size(elem_type)));
    }
  }
  return r;
}

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::STRING: return a.str == b.str;
    case ValueType::FLOAT32: case ValueType::FLOAT64: return f64_bits(a.f) == f64_bits(b.f);
    case ValueType::ARRAY:
      return a.elem_type == b.elem_type && a.count == b.count && a.raw == b.raw && a.strs == b.strs &&
             a.arrays == b.arrays;
    default: return a.bits == b.bits;
  }
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

const TensorInfo* File::tensor(std::string_view tname) const {
  for (const auto& t : tensors)
    if (t.name == tname) return &t;
  return nullptr;
}

// =====================================================================================
// Parser
// =====================================================================================

namespace {

// Arrays may nest (GGUF allows arrays of arrays); a depth limit keeps a hostile file from
// exhausting the stack through recursion.
constexpr int kMaxArrayDepth = 8;
// Nested-array elements cost far more memory than their 12 bytes on disk; cap their total so a
// file cannot turn a few megabytes into gigabytes of Value objects.
constexpr uint64_t kMaxNestedElements = uint64_t{1} << 20;
// ggml tensors have at most 4 dimensions.
constexpr uint32_t kMaxDims = 4;
// Smallest possible encodings, used to bound counts by the bytes left before reserving memory:
// a KV pair is key length (8) + value type (4) + at least 1 value byte; a tensor info is name
// length (8) + n_dims (4) + one dimension (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 32;

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& name) : p_(p), n_(n), name_(name) {}

  size_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError("GGUF file '" + name_ + "': " + what);
  }
  // Every read goes through need(): this is the one place that keeps reads inside the buffer.
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > left())
      fail("truncated at byte " + std::to_string(pos_) + " while reading " + what + " (needs " +
           std::to_string(bytes) + " bytes, " + std::to_string(left()) +
           " left); the file is incomplete or corrupt: download or convert it again");
  }
  uint64_t uint(int size, const std::string& what) {
    need(static_cast<uint64_t>(size), what);
    uint64_t v = load_le(p_ + pos_, size);
    pos_ += static_cast<size_t>(size);
    return v;
  }
  uint32_t u32(const std::string& what) { return static_cast<uint32_t>(uint(4, what)); }
  uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string str(const std::string& what) {
    uint64_t len = u64("length of " + what);
    // The length is checked against the bytes left before any allocation.
    need(len, what + " (" + std::to_string(len) + " bytes)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  std::string bytes(uint64_t len, const std::string& what) {
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
};

std::string type_list_hint() {
  return "value types are numbered 0..12 (u8, i8, u16, i16, u32, i32, f32, bool, string, array, u64, i64, f64)";
}

Value read_value(Reader& r, ValueType t, const std::string& key, int depth, uint64_t& nested_budget) {
  Value v;
  v.type = t;
  if (t == ValueType::STRING) {
    v.str = r.str("string value of '" + key + "'");
    return v;
  }
  if (t != ValueType::ARRAY) {
    int sz = static_cast<int>(scalar_size(t));
    uint64_t raw = r.uint(sz, "value of '" + key + "'");
    if (t == ValueType::FLOAT32)
      v.f = f32_from_bits(static_cast<uint32_t>(raw));
    else if (t == ValueType::FLOAT64)
      v.f = f64_from_bits(raw);
    else
      v.bits = extend(t, raw);
    return v;
  }
  // ---- arrays ----
  if (depth >= kMaxArrayDepth)
    r.fail("key '" + key + "' nests arrays more than " + std::to_string(kMaxArrayDepth) +
           " deep; this parser supports at most that depth");
  uint32_t et = r.u32("array element type of '" + key + "'");
  if (!known_value_type(et))
    r.fail("key '" + key + "' has an array of unknown value type " + std::to_string(et) + "; " + type_list_hint());
  v.elem_type = static_cast<ValueType>(et);
  v.count = r.u64("array length of '" + key + "'");
  // Bound the count by the bytes left before reserving anything: every element takes at least
  // this many bytes on disk.
  uint64_t min_elem = v.elem_type == ValueType::STRING  ? 8
                      : v.elem_type == ValueType::ARRAY ? 12
                                                        : scalar_size(v.elem_type);
  if (v.count > r.left() / min_elem)
    r.fail("key '" + key + "' claims an array of " + std::to_string(v.count) + " elements, more than the " +
           std::to_string(r.left()) + " bytes left can hold; the file is corrupt");
  if (v.elem_type == ValueType::STRING) {
    v.strs.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strs.push_back(r.str("element " + std::to_string(i) + " of '" + key + "'"));
  } else if (v.elem_type == ValueType::ARRAY) {
    if (v.count > nested_budget)
      r.fail("key '" + key + "' holds more nested-array elements than the " + std::to_string(kMaxNestedElements) +
             " this parser supports");
    nested_budget -= v.count;
    for (uint64_t i = 0; i < v.count; ++i)
      v.arrays.push_back(read_value(r, ValueType::ARRAY, key, depth + 1, nested_budget));
  } else {
    // count * size cannot overflow: count <= left / size.
    v.raw = r.bytes(v.count * min_elem, "array elements of '" + key + "'");
  }
  return v;
}

bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

File parse_gguf(const uint8_t* data, size_t size, const std::string& name) {
  Reader r(data, size, name);
  File f;
  f.name = name;
  f.buffer = data;
  f.size = size;

  // ---- header: magic, version, counts ----
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0)
    r.fail("not a GGUF file (the first 4 bytes are not 'GGUF'); supported model files: GGUF v2/v3 and llama2.c .bin");
  r.uint(4, "magic");
  f.version = r.u32("version");
  // v1 used 32-bit counts and lengths; a byte-swapped version number means a big-endian file.
  if (f.version == 0x02000000 || f.version == 0x03000000)
    r.fail("is a big-endian GGUF; only little-endian GGUF v2 and v3 are supported");
  if (f.version != 2 && f.version != 3)
    r.fail("GGUF version " + std::to_string(f.version) + " is not supported; supported versions: 2, 3 "
           "(re-convert the model with a current llama.cpp)");
  uint64_t n_tensors = r.u64("tensor count");
  uint64_t n_kv = r.u64("metadata count");
  // Counts are bounded by what the rest of the file could possibly hold, so the reserve()s below
  // cannot be driven to huge sizes by a forged header.
  if (n_kv > r.left() / kMinKvBytes)
    r.fail("header claims " + std::to_string(n_kv) + " metadata pairs, more than the " + std::to_string(r.left()) +
           " bytes left can hold; the file is corrupt");
  if (n_tensors > r.left() / kMinTensorInfoBytes)
    r.fail("header claims " + std::to_string(n_tensors) + " tensors, more than the " + std::to_string(r.left()) +
           " bytes left can hold; the file is corrupt");

  // ---- metadata key/value pairs ----
  f.kv.reserve(static_cast<size_t>(n_kv));
  std::unordered_set<std::string> keys;
  uint64_t nested_budget = kMaxNestedElements;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str("metadata key " + std::to_string(i));
    // Duplicate keys make lookups ambiguous (which one wins?), so they are rejected as llama.cpp does.
    if (!keys.insert(key).second) r.fail("metadata key '" + key + "' appears twice; the file is corrupt");
    uint32_t t = r.u32("value type of '" + key + "'");
    if (!known_value_type(t))
      r.fail("key '" + key + "' has unknown value type " + std::to_string(t) + "; " + type_list_hint());
    f.kv.emplace_back(key, read_value(r, static_cast<ValueType>(t), key, 0, nested_budget));
  }

  // ---- general.alignment ----
  if (const Value* a = f.find("general.alignment")) {
    int64_t al = 0;
    // Offsets are rounded up to the alignment, so it must be a power of two; the upper bound keeps
    // the rounding from overflowing.
    if (!a->get_int(al) || !is_pow2(static_cast<uint64_t>(al)) || al > (int64_t{1} << 30))
      r.fail("general.alignment must be an integer power of two up to 2^30; the file is corrupt");
    f.alignment = static_cast<uint64_t>(al);
  }

  // ---- tensor infos ----
  f.tensors.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.str("name of tensor " + std::to_string(i));
    const std::string tn = "tensor '" + t.name + "'";
    // Two tensors with one name would make lookups ambiguous.
    if (!names.insert(t.name).second) r.fail(tn + " appears twice; the file is corrupt");
    uint32_t n_dims = r.u32("dimension count of " + tn);
    if (n_dims == 0 || n_dims > kMaxDims)
      r.fail(tn + " has " + std::to_string(n_dims) + " dimensions; supported: 1 to " + std::to_string(kMaxDims));
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = r.u64("dimension " + std::to_string(d) + " of " + tn);
      // ggml stores dimensions as int64: a zero or negative (huge unsigned) size is corrupt.
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        r.fail(tn + " has dimension " + std::to_string(d) + " = " + std::to_string(ne) + "; the file is corrupt");
      // The element count must not overflow int64 (it sizes allocations later).
      uint64_t prod = 0;
      if (__builtin_mul_overflow(t.n_elements, ne, &prod) ||
          prod > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        r.fail(tn + " has more elements than fit in 64 bits; the file is corrupt");
      t.n_elements = prod;
      t.ne.push_back(ne);
    }
    uint32_t type = r.u32("type of " + tn);
    t.type = static_cast<TensorType>(type);
    uint64_t be = 0, bb = 0;
    if (!tensor_type_block(t.type, be, bb))
      r.fail(tn + " has tensor type " + tensor_type_name(t.type) + ", which this tool does not support; supported: " +
             supported_tensor_types());
    // Quantized rows are whole blocks; a row that is not cannot be laid out.
    if (t.ne[0] % be != 0)
      r.fail(tn + " has " + std::to_string(t.ne[0]) + " elements per row, not a multiple of the " +
             tensor_type_name(t.type) + " block size " + std::to_string(be) + "; the file is corrupt");
    // n_elements / be * bb <= n_elements * 34/32 for every type here, but check anyway.
    if (__builtin_mul_overflow(t.n_elements / be, bb, &t.n_bytes))
      r.fail(tn + " has a byte size that overflows 64 bits; the file is corrupt");
    t.offset = r.u64("data offset of " + tn);
    // Tensor data must start on an alignment boundary (ggml maps it in place).
    if (t.offset % f.alignment != 0)
      r.fail(tn + " has data offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
             std::to_string(f.alignment) + "; the file is corrupt");
    f.tensors.push_back(std::move(t));
  }

  // ---- data section: starts at the next alignment boundary after the infos ----
  uint64_t pos = r.pos();
  uint64_t pad = (f.alignment - pos % f.alignment) % f.alignment;
  f.data_offset = pos + pad;  // pos <= size and pad < 2^30: no overflow
  uint64_t data_size = f.data_offset <= size ? size - f.data_offset : 0;
  for (const TensorInfo& t : f.tensors) {
    // Written as subtraction so a huge offset cannot wrap around: the tensor lies inside the file.
    if (f.data_offset > size || t.offset > data_size || t.n_bytes > data_size - t.offset)
      r.fail("tensor '" + t.name + "' (" + std::to_string(t.n_bytes) + " bytes at data offset " +
             std::to_string(t.offset) + ") extends past the end of the file (" + std::to_string(size) +
             " bytes, data section at " + std::to_string(f.data_offset) +
             "); the file is truncated or corrupt: download or convert it again");
  }
  // Overlapping tensors would alias each other's weights: a sign of a corrupt or forged file.
  std::vector<const TensorInfo*> order;
  order.reserve(f.tensors.size());
  for (const TensorInfo& t : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->offset + order[i - 1]->n_bytes > order[i]->offset)
      r.fail("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap in the data section; the file is corrupt");
  return f;
}

// =====================================================================================
// Fuzz entry
// =====================================================================================

int fuzz_one_input(const uint8_t* data, size_t size) {
  try {
    File f = parse_gguf(data, size, "fuzz-input");
    // Touch every value through the accessors the loader uses.
    double acc = 0;
    for (const auto& [k, v] : f.kv) {
      int64_t iv = 0;
      if (v.get_int(iv)) acc += static_cast<double>(iv);
      if (v.type == ValueType::ARRAY) {
        for (uint64_t i = 0; i < v.count && i < 64; ++i) {
          double d = 0;
          if (v.int_at(i, iv)) acc += static_cast<double>(iv);
          if (v.float_at(i, d)) acc += d;
        }
      }
    }
    // The tensor path: dequantize what is small enough to keep each run fast.
    for (const TensorInfo& t : f.tensors) {
      if (!is_supported_tensor_type(t.type) || t.n_elements > (1u << 16)) continue;
      std::vector<float> x = dequantize(f, t);
      if (!x.empty()) acc += x[0] + x.back();
    }
    volatile double sink = acc;
    (void)sink;
  } catch (const UsageError&) {
    // Expected for malformed input; any other exception is a bug and propagates.
  }
  return 0;
}

}  // namespace repro::gguf
