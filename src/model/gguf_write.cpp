// GGUF writer (version 3): `model synth` and the tests write models with it.
#include "repro/model/gguf_write.hpp"

#include "gguf_bytes.hpp"
#include "repro/common/dtype.hpp"
#include "repro/common/error.hpp"

namespace repro::gguf {

namespace {

void put_string(std::string& out, const std::string& s) {
  store_le(out, s.size(), 8);
  out += s;
}

void put_value(std::string& out, const Value& v) {
  switch (v.type) {
    case ValueType::STRING: put_string(out, v.str); return;
    case ValueType::FLOAT32: store_le(out, f32_to_bits(static_cast<float>(v.f)), 4); return;
    case ValueType::FLOAT64: store_le(out, f64_bits(v.f), 8); return;
    case ValueType::ARRAY:
      store_le(out, static_cast<uint32_t>(v.elem_type), 4);
      store_le(out, v.count, 8);
      if (v.elem_type == ValueType::STRING) {
        for (const auto& s : v.strs) put_string(out, s);
      } else if (v.elem_type == ValueType::ARRAY) {
        for (const auto& a : v.arrays) {
          // nested arrays carry their own element type and count, without a value-type tag
          put_value(out, a);
        }
      } else {
        out += v.raw;
      }
      return;
    default: store_le(out, v.bits, static_cast<int>(scalar_size(v.type))); return;
  }
}

}  // namespace

void Writer::add_tensor(const std::string& name, std::vector<uint64_t> ne, TensorType type, std::string data) {
  uint64_t be = 0, bb = 0;
  if (!tensor_type_block(type, be, bb)) throw UsageError("GGUF writer: unknown tensor type for '" + name + "'");
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  if (ne.empty() || ne[0] % be != 0 || n / be * bb != data.size())
    throw UsageError("GGUF writer: tensor '" + name + "' data size does not match its shape and type");
  tensors_.push_back({name, std::move(ne), type, std::move(data)});
}

void Writer::add_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& values) {
  std::string data;
  data.reserve(values.size() * 4);
  for (float x : values) store_le(data, f32_to_bits(x), 4);
  add_tensor(name, std::move(ne), TensorType::F32, std::move(data));
}

std::string Writer::serialize(uint32_t version) const {
  std::string out = "GGUF";
  store_le(out, version, 4);
  store_le(out, tensors_.size(), 8);
  store_le(out, kv_.size(), 8);
  for (const auto& [k, v] : kv_) {
    put_string(out, k);
    store_le(out, static_cast<uint32_t>(v.type), 4);
    put_value(out, v);
  }
  auto align = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t off = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    store_le(out, t.ne.size(), 4);
    for (uint64_t d : t.ne) store_le(out, d, 8);
    store_le(out, static_cast<uint32_t>(t.type), 4);
    store_le(out, off, 8);
    offsets.push_back(off);
    off = align(off + t.data.size());
  }
  out.resize(align(out.size()), '\0');
  uint64_t base = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(base + offsets[i], '\0');
    out += tensors_[i].data;
  }
  if (!tensors_.empty()) out.resize(align(out.size()), '\0');
  return out;
}

}  // namespace repro::gguf
