// GGUF writer (version 3), used by `model synth` and the tests.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "repro/model/gguf.hpp"

namespace repro::gguf {

class Writer {
 public:
  explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}
  void add(const std::string& key, Value v) { kv_.emplace_back(key, std::move(v)); }
  // data must hold exactly the tensor's bytes for its type and ne.
  void add_tensor(const std::string& name, std::vector<uint64_t> ne, TensorType type, std::string data);
  void add_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& values);
  std::string serialize(uint32_t version = 3) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    TensorType type;
    std::string data;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace repro::gguf
