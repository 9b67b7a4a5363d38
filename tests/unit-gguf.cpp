// GGUF parser, writer and dequantization; synthetic models; the fuzz corpus as a regression test.
// No model files needed.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/mapped_file.hpp"
#include "repro/model/dtype.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/model.hpp"
#include "repro/model/synth.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
using namespace repro::gguf;

namespace {

// ---- a hand-rolled byte builder, for files the writer would refuse to produce ----
struct Bytes {
  std::string s;
  Bytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  Bytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  Bytes& str(const std::string& x) {
    u64(x.size());
    s += x;
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    s += "GGUF";
    u32(version).u64(n_tensors).u64(n_kv);
    return *this;
  }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(type).u64(offset);
    return *this;
  }
  Bytes& pad_to(size_t n) {
    s.resize(n, '\0');
    return *this;
  }
};

File parse(const std::string& s) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "test.gguf");
}

// A small valid file with one value of every type, arrays of every type, a nested array and one
// tensor of each supported type.
std::string sample_file(uint32_t version = 3) {
  Writer w;
  w.add("general.architecture", Value::string("llama"));
  w.add("u8", Value::u(ValueType::UINT8, 200));
  w.add("i8", Value::i(ValueType::INT8, -5));
  w.add("u16", Value::u(ValueType::UINT16, 60000));
  w.add("i16", Value::i(ValueType::INT16, -300));
  w.add("u32", Value::u(ValueType::UINT32, 4000000000u));
  w.add("i32", Value::i(ValueType::INT32, -7));
  w.add("f32", Value::real(ValueType::FLOAT32, 1.5));
  w.add("bool", Value::boolean(true));
  w.add("string", Value::string("h\xc3\xa9llo"));
  w.add("u64", Value::u(ValueType::UINT64, std::numeric_limits<uint64_t>::max()));
  w.add("i64", Value::i(ValueType::INT64, std::numeric_limits<int64_t>::min()));
  w.add("f64", Value::real(ValueType::FLOAT64, 0.1));
  w.add("a.u8", Value::array(ValueType::UINT8, {Value::u(ValueType::UINT8, 1), Value::u(ValueType::UINT8, 255)}));
  w.add("a.i8", Value::array(ValueType::INT8, {Value::i(ValueType::INT8, -128)}));
  w.add("a.u16", Value::array(ValueType::UINT16, {Value::u(ValueType::UINT16, 65535)}));
  w.add("a.i16", Value::array(ValueType::INT16, {Value::i(ValueType::INT16, -2)}));
  w.add("a.u32", Value::array(ValueType::UINT32, {Value::u(ValueType::UINT32, 7)}));
  w.add("a.i32", Value::i32_array({1, -2, 3}));
  w.add("a.f32", Value::f32_array({1.0f, -2.5f, 1e-30f}));
  w.add("a.bool", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)}));
  w.add("a.string", Value::string_array({"a", "", "\xe2\x96\x81the"}));
  w.add("a.u64", Value::array(ValueType::UINT64, {Value::u(ValueType::UINT64, 1ull << 63)}));
  w.add("a.i64", Value::array(ValueType::INT64, {Value::i(ValueType::INT64, -(1ll << 40))}));
  w.add("a.f64", Value::array(ValueType::FLOAT64, {Value::real(ValueType::FLOAT64, -0.25)}));
  w.add("a.empty", Value::array(ValueType::UINT32, {}));
  w.add("a.nested", Value::array(ValueType::ARRAY, {Value::i32_array({4, 5}), Value::string_array({"x"}),
                                                    Value::array(ValueType::ARRAY, {Value::f32_array({2.0f})})}));
  w.add_f32("t.f32", {3, 2}, {1, 2, 3, 4, 5, -6});
  w.add_tensor("t.f16", {2}, TensorType::F16, std::string("\x00\x3c\x00\xc0", 4));
  w.add_tensor("t.bf16", {2}, TensorType::BF16, std::string("\x80\x3f\x00\xc0", 4));
  std::string q8(34, '\x01');
  q8[0] = 0, q8[1] = 0x38;  // d = 0.5
  w.add_tensor("t.q8_0", {32}, TensorType::Q8_0, q8);
  std::string q4(18, '\x7f');
  q4[0] = 0, q4[1] = 0x40;  // d = 2
  w.add_tensor("t.q4_0", {32}, TensorType::Q4_0, q4);
  return w.serialize(version);
}

}  // namespace

// =====================================================================================
// Round trip
// =====================================================================================

TEST_CASE("gguf: writer -> parser round-trips every value type, v2 and v3") {
  for (uint32_t version : {2u, 3u}) {
    std::string bytes = sample_file(version);
    File f = parse(bytes);
    CHECK(f.version == version);
    CHECK(f.alignment == 32);
    CHECK(f.data_offset % 32 == 0);
    REQUIRE(f.kv.size() == 27);
    CHECK(f.find("general.architecture")->str == "llama");
    int64_t i = 0;
    CHECK((f.find("u8")->get_int(i) && i == 200));
    CHECK((f.find("i8")->get_int(i) && i == -5));
    CHECK((f.find("u16")->get_int(i) && i == 60000));
    CHECK((f.find("i16")->get_int(i) && i == -300));
    CHECK((f.find("u32")->get_int(i) && i == 4000000000LL));
    CHECK((f.find("i32")->get_int(i) && i == -7));
    CHECK(f.find("f32")->f == 1.5);
    CHECK((f.find("bool")->get_int(i) && i == 1));
    CHECK(f.find("string")->str == "h\xc3\xa9llo");
    CHECK(f.find("u64")->bits == std::numeric_limits<uint64_t>::max());
    CHECK_FALSE(f.find("u64")->get_int(i));  // does not fit int64
    CHECK((f.find("i64")->get_int(i) && i == std::numeric_limits<int64_t>::min()));
    CHECK(f.find("f64")->f == 0.1);
    CHECK((f.find("a.u8")->int_at(1, i) && i == 255));
    CHECK((f.find("a.i8")->int_at(0, i) && i == -128));
    CHECK((f.find("a.u16")->int_at(0, i) && i == 65535));
    CHECK((f.find("a.i16")->int_at(0, i) && i == -2));
    CHECK((f.find("a.i32")->int_at(1, i) && i == -2));
    CHECK_FALSE(f.find("a.i32")->int_at(3, i));  // out of range
    double d = 0;
    CHECK((f.find("a.f32")->float_at(2, d) && d == static_cast<double>(1e-30f)));
    CHECK_FALSE(f.find("a.f32")->int_at(0, i));
    CHECK((f.find("a.bool")->int_at(1, i) && i == 1));
    CHECK(f.find("a.string")->strs == std::vector<std::string>{"a", "", "\xe2\x96\x81the"});
    CHECK_FALSE(f.find("a.u64")->int_at(0, i));  // 2^63 does not fit int64
    CHECK((f.find("a.i64")->int_at(0, i) && i == -(1ll << 40)));
    CHECK((f.find("a.f64")->float_at(0, d) && d == -0.25));
    CHECK(f.find("a.empty")->count == 0);
    const Value* n = f.find("a.nested");
    REQUIRE(n->arrays.size() == 3);
    CHECK((n->arrays[0].int_at(1, i) && i == 5));
    CHECK(n->arrays[1].strs[0] == "x");
    CHECK((n->arrays[2].arrays[0].float_at(0, d) && d == 2.0));
    CHECK(f.find("missing") == nullptr);

    // Every value equals what went in: re-serialize the parsed kv and tensors, byte for byte.
    Writer w;
    for (const auto& [k, v] : f.kv) w.add(k, v);
    for (const auto& t : f.tensors)
      w.add_tensor(t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), t.n_bytes));
    CHECK(w.serialize(version) == bytes);

    REQUIRE(f.tensors.size() == 5);
    const TensorInfo* t = f.tensor("t.f32");
    REQUIRE(t);
    CHECK(t->ne == std::vector<uint64_t>{3, 2});
    CHECK(t->n_elements == 6);
    CHECK(dequantize(f, *t) == std::vector<float>{1, 2, 3, 4, 5, -6});
    CHECK(dequantize(f, *f.tensor("t.f16")) == std::vector<float>{1.0f, -2.0f});
    CHECK(dequantize(f, *f.tensor("t.bf16")) == std::vector<float>{1.0f, -2.0f});
    CHECK(dequantize(f, *f.tensor("t.q8_0")) == std::vector<float>(32, 0.5f));
    std::vector<float> q4 = dequantize(f, *f.tensor("t.q4_0"));
    CHECK(q4[0] == 14.0f);   // low nibble 0xf: (15 - 8) * 2
    CHECK(q4[16] == -2.0f);  // high nibble 0x7: (7 - 8) * 2
  }
}

TEST_CASE("gguf: general.alignment moves the data section") {
  Writer w(64);
  w.add("general.alignment", Value::u(ValueType::UINT32, 64));
  w.add_f32("a", {3}, {1, 2, 3});
  w.add_f32("b", {1}, {4});
  const std::string bytes = w.serialize();  // File views into the buffer: keep it alive
  File f = parse(bytes);
  CHECK(f.alignment == 64);
  CHECK(f.data_offset % 64 == 0);
  CHECK(f.tensor("b")->offset == 64);
  CHECK(dequantize(f, *f.tensor("b")) == std::vector<float>{4});
}

// =====================================================================================
// Dequantization on known values
// =====================================================================================

TEST_CASE("gguf: f16 / bf16 conversions on known values") {
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(f16_to_f32(0x3555) == 0.333251953125f);
  CHECK(std::signbit(f16_to_f32(0x8000)));
  CHECK(std::isinf(f16_to_f32(0xfc00)));
  CHECK(std::isnan(f16_to_f32(0x7e00)));
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0xc2f7) == -123.5f);
  // f32 -> f16 inverts f16 -> f32 for every non-NaN half, and rounds to nearest even.
  for (uint32_t h = 0; h < 65536; ++h) {
    float x = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(x)) continue;
    REQUIRE(f32_to_f16(x) == h);
  }
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (up)
  CHECK(f32_to_f16(65520.0f) == 0x7c00);                           // rounds to inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);              // tie -> 0
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
}

TEST_CASE("gguf: Q8_0 and Q4_0 blocks dequantize to q * d") {
  uint8_t q8[34];
  q8[0] = 0x00, q8[1] = 0x38;  // d = 0.5
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  float out[32];
  dequantize_row(TensorType::Q8_0, q8, out, 32);
  for (int j = 0; j < 32; ++j) CHECK(out[j] == static_cast<float>(j * 8 - 128) * 0.5f);
  uint8_t q4[18];
  q4[0] = 0x00, q4[1] = 0xbc;  // d = -1
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  dequantize_row(TensorType::Q4_0, q4, out, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(out[j] == static_cast<float>(8 - j));
    CHECK(out[16 + j] == static_cast<float>(j - 7));
  }
  uint8_t q2k[84] = {};
  float out256[256];
  CHECK_THROWS_WITH_AS(dequantize_row(TensorType::Q2_K, q2k, out256, 256),
                       doctest::Contains("supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"), UsageError);
}

// =====================================================================================
// Hostile input
// =====================================================================================

TEST_CASE("gguf: a file truncated at any byte gives a UsageError, never a crash") {
  const std::string bytes = sample_file();
  File full = parse(bytes);
  uint64_t end = 0;
  for (const auto& t : full.tensors) end = std::max(end, full.data_offset + t.offset + t.n_bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    // An exact-size heap copy, so a sanitizer build catches any read past the end.
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    const uint8_t* p = cut.empty() ? nullptr : cut.data();
    if (n < end) {
      CHECK_THROWS_AS(parse_gguf(p, n, "cut.gguf"), UsageError);
    } else {
      CHECK_NOTHROW(parse_gguf(p, n, "cut.gguf"));  // only trailing padding is missing
    }
  }
  CHECK_THROWS_WITH_AS(parse(Bytes().header(0, 1).str("key").u32(4).s),
                       "GGUF file 'test.gguf': truncated at byte 39 while reading value of 'key' (needs 4 bytes, 0 "
                       "left); the file is incomplete or corrupt: download or convert it again",
                       UsageError);
}

TEST_CASE("gguf: bad magic, version, counts, offsets and types are UsageErrors with a clear message") {
  auto err = [](const std::string& s) {
    try {
      parse(s);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err("GGML....") == "GGUF file 'test.gguf': not a GGUF file (the first 4 bytes are not 'GGUF'); supported model "
                           "files: GGUF v2/v3 and llama2.c .bin");
  CHECK(err(Bytes().header(0, 0, 1).s).find("GGUF version 1 is not supported; supported versions: 2, 3") !=
        std::string::npos);
  CHECK(err(Bytes().header(0, 0, 4).s).find("GGUF version 4 is not supported") != std::string::npos);
  CHECK(err(Bytes().header(0, 0, 0x03000000).s).find("big-endian") != std::string::npos);
  // Huge counts are refused before anything is reserved.
  CHECK(err(Bytes().header(0, 1ull << 60).s).find("claims 1152921504606846976 metadata pairs") != std::string::npos);
  CHECK(err(Bytes().header(~0ull, 0).s).find("tensors, more than the") != std::string::npos);
  // Huge string length and array count.
  CHECK(err(Bytes().header(0, 1).u64(~0ull).u64(0).s).find("while reading metadata key 0 (18446744073709551615 bytes)") !=
        std::string::npos);
  CHECK(err(Bytes().header(0, 1).str("k").u32(9).u32(4).u64(1ull << 62).s)
            .find("key 'k' claims an array of 4611686018427387904 elements") != std::string::npos);
  CHECK(err(Bytes().header(0, 1).str("k").u32(13).s).find("key 'k' has unknown value type 13") != std::string::npos);
  CHECK(err(Bytes().header(0, 2).str("k").u32(0).s + "\x01" + Bytes().str("k").u32(0).s + "\x01")
            .find("metadata key 'k' appears twice") != std::string::npos);
  // Deeply nested arrays are refused (stack safety).
  Bytes deep;
  deep.header(0, 1).str("k").u32(9);
  for (int i = 0; i < 20; ++i) deep.u32(9).u64(1);
  CHECK(err(deep.s).find("nests arrays more than 8 deep") != std::string::npos);
  // Alignment must be a power of two.
  CHECK(err(Bytes().header(0, 1).str("general.alignment").u32(4).u32(24).s).find("power of two") != std::string::npos);

  // Tensor infos.
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    Bytes b;
    b.header(1, 0).tensor("w", ne, type, offset);
    b.pad_to((b.s.size() + 31) / 32 * 32 + data);
    return b.s;
  };
  CHECK(err(one_tensor({4}, 0, 0, 16)) == "no error");
  CHECK(err(one_tensor({4}, 0, 0, 15)).find("tensor 'w' (16 bytes at data offset 0) extends past the end of the file") !=
        std::string::npos);
  CHECK(err(one_tensor({4}, 0, 1ull << 62, 16)).find("extends past the end of the file") != std::string::npos);
  CHECK(err(one_tensor({4}, 0, ~0ull - 31, 16)).find("extends past the end of the file") != std::string::npos);
  CHECK(err(one_tensor({4}, 0, 8, 64)).find("data offset 8, not a multiple of the alignment 32") != std::string::npos);
  CHECK(err(one_tensor({1ull << 32, 1ull << 32}, 0, 0, 16)).find("more elements than fit in 64 bits") !=
        std::string::npos);
  CHECK(err(one_tensor({0}, 0, 0, 16)).find("has dimension 0 = 0") != std::string::npos);
  CHECK(err(one_tensor({1, 1, 1, 1, 1}, 0, 0, 16)).find("has 5 dimensions; supported: 1 to 4") != std::string::npos);
  CHECK(err(one_tensor({4}, 99, 0, 16)) ==
        "GGUF file 'test.gguf': tensor 'w' has tensor type type 99, which this tool does not support; supported: F32, "
        "F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K");
  CHECK(err(one_tensor({31}, 8, 0, 64)).find("not a multiple of the Q8_0 block size 32") != std::string::npos);
  // Overlapping tensors.
  Bytes ov;
  ov.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32);
  ov.pad_to((ov.s.size() + 31) / 32 * 32 + 128);
  CHECK(err(ov.s).find("tensors 'a' and 'b' overlap") != std::string::npos);
  Bytes dup;
  dup.header(2, 0).tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32);
  dup.pad_to((dup.s.size() + 31) / 32 * 32 + 64);
  CHECK(err(dup.s).find("tensor 'a' appears twice") != std::string::npos);

  // A known but unsupported type parses (so its size is validated) and is refused at dequantize.
  std::string qk = one_tensor({256}, 10, 0, 84);
  File f = parse(qk);
  CHECK_THROWS_WITH_AS(dequantize(f, f.tensors[0]),
                       doctest::Contains("tensor 'w' has type Q2_K, which this tool cannot dequantize; supported: F32, "
                                         "F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"),
                       UsageError);
  // Every supported block type: rows must be whole blocks, and the data must fit in the file.
  struct Blk {
    uint32_t type;
    const char* name;
    uint64_t elems, bytes;
  };
  for (const Blk& b : {Blk{8, "Q8_0", 32, 34}, Blk{2, "Q4_0", 32, 18}, Blk{12, "Q4_K", 256, 144},
                       Blk{13, "Q5_K", 256, 176}, Blk{14, "Q6_K", 256, 210}}) {
    CAPTURE(b.name);
    CHECK(err(one_tensor({b.elems - 1, 2}, b.type, 0, 2 * b.bytes))
              .find(std::string("not a multiple of the ") + b.name + " block size " + std::to_string(b.elems)) !=
          std::string::npos);
    CHECK(err(one_tensor({b.elems, 3}, b.type, 0, 2 * b.bytes)).find("extends past the end of the file") !=
          std::string::npos);
    const std::string bytes = one_tensor({b.elems, 2}, b.type, 0, 2 * b.bytes);  // File views these bytes
    File ok = parse(bytes);
    CHECK(ok.tensors[0].n_bytes == 2 * b.bytes);
    CHECK(dequantize(ok, ok.tensors[0]).size() == 2 * b.elems);
  }
}

TEST_CASE("gguf: missing and non-regular files name the path") {
  CHECK_THROWS_WITH_AS(MappedFile("/nonexistent/x.gguf"), doctest::Contains("cannot open model file '/nonexistent/x.gguf'"),
                       UsageError);
  CHECK_THROWS_WITH_AS(MappedFile("/tmp"), doctest::Contains("not a regular file"), UsageError);
}

// =====================================================================================
// Fuzz corpus replay
// =====================================================================================

TEST_CASE("gguf: every file of fuzz/corpus/gguf replays through the fuzz entry without a crash") {
  const auto files = test::corpus_files("gguf");
  for (const auto& [name, bytes] : files) {
    CAPTURE(name);
    CHECK(fuzz_one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
  }
  MESSAGE("replayed ", files.size(), " corpus files");
  CHECK(files.size() >= 5);
}

// =====================================================================================
// Synthetic models
// =====================================================================================

TEST_CASE("synth: same options give identical bytes; another seed gives other bytes") {
  SynthOptions o;
  o.dim = 32, o.hidden_dim = 48, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2, o.vocab_size = 400;
  o.context_length = 64;
  std::string a = synth_model(o), b = synth_model(o);
  CHECK(sha256_hex(a) == sha256_hex(b));
  o.seed = 2;
  CHECK(sha256_hex(synth_model(o)) != sha256_hex(a));
  // Pinned: the bytes must be the same on every machine and compiler (integer PRNG, exact floats).
  CHECK(sha256_hex(a) == "6b8c554ec9970f6ec8981de574c0b5fad2cef0016713e050985fc7ad44d70881");
}

TEST_CASE("synth: the file loads with load_model with the given shape") {
  auto dir = test::scratch_dir("gguf-synth");
  for (const char* type : {"f32", "f16"}) {
    for (bool tied : {true, false}) {
      SynthOptions o;
      o.dim = 48, o.hidden_dim = 80, o.n_layers = 3, o.n_heads = 6, o.n_kv_heads = 3, o.vocab_size = 450;
      o.context_length = 96, o.type = type, o.tied = tied, o.seed = 9;
      auto path = (dir / (std::string(type) + (tied ? "-tied" : "-untied") + ".gguf")).string();
      write_synth_model(o, path);
      auto m = load_model(path);
      const ModelConfig& c = m->config;
      CHECK(c.dim == 48);
      CHECK(c.hidden_dim == 80);
      CHECK(c.n_layers == 3);
      CHECK(c.n_heads == 6);
      CHECK(c.n_kv_heads == 3);
      CHECK(c.vocab_size == 450);
      CHECK(c.context_length == 96);
      CHECK(c.rope_dim == 8);
      CHECK(m->format == "GGUF v3");
      CHECK(m->output.empty() == tied);
      CHECK(m->layers[2].wk.size() == 24u * 48u);
      const Tensor& fn = m->layers[1].ffn_norm;
      CHECK(std::vector<float>(fn.f32(), fn.f32() + fn.size()) == std::vector<float>(48, 1.0f));
      CHECK(m->tokenizer->vocab_size() == 450);
      CHECK(m->tokenizer->bos() == 1);
      CHECK(m->tokenizer->eos() == 2);
      int64_t expect = 450 * 48 * (tied ? 1 : 2) + 48 + 3 * (2 * 48 + 2 * 48 * 48 + 2 * 24 * 48 + 3 * 80 * 48);
      CHECK(m->n_params == expect);
      if (std::string(type) == "f16") {
        CHECK(m->tensor_types["F32"] == 1 + 2 * 3);
        CHECK(m->tensor_types["F16"] == (tied ? 1 : 2) + 7 * 3);
      } else {
        CHECK(m->tensor_types["F32"] == (tied ? 2 : 3) + 9 * 3);
      }
      CHECK(m->file_sha256 == sha256_file(path));
      // Words of the synthetic vocabulary tokenize into whole pieces.
      auto ids = m->tokenizer->encode("the little girl", true);
      CHECK(ids.size() == 4);
      CHECK(m->tokenizer->decode(ids) == " the little girl");
    }
  }
}

TEST_CASE("synth: inconsistent options name the flag") {
  SynthOptions o;
  o.vocab_size = 100;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--vocab 100 is out of range"), UsageError);
  o = SynthOptions{};
  o.n_heads = 3;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--heads 3 must divide --dim 128"), UsageError);
  o = SynthOptions{};
  o.n_kv_heads = 3;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--kv-heads 3 must divide --heads 4"), UsageError);
  o = SynthOptions{};
  o.type = "q4";
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("--type 'q4' is not supported; supported: f32, f16"), UsageError);
  o = SynthOptions{};
  o.dim = 16384, o.hidden_dim = 65536, o.n_layers = 256;
  CHECK_THROWS_WITH_AS(synth_model(o), doctest::Contains("synth supports at most 2^31"), UsageError);
}

TEST_CASE("synth: tokenizer has the documented layout") {
  TokenizerData d = synth_tokenizer(synth_min_vocab());
  CHECK(static_cast<int>(d.tokens.size()) == synth_min_vocab());
  CHECK(d.tokens[0] == "<unk>");
  CHECK(d.tokens[1] == "<s>");
  CHECK(d.tokens[2] == "</s>");
  CHECK(d.tokens[3] == "<0x00>");
  CHECK(d.tokens[258] == "<0xFF>");
  CHECK(d.types[258] == 6);
  CHECK(d.tokens[259] == "\xe2\x96\x81");
  TokenizerData big = synth_tokenizer(32000);
  CHECK(big.tokens.size() == 32000u);
  CHECK(big.scores.back() < big.scores[300]);
}

// =====================================================================================
// load_model on hostile GGUF models (a synthetic model, edited)
// =====================================================================================

namespace {

// The synthetic model with one edit: kv overrides (or removals, with an empty Value of type ARRAY
// and count 0 marked by `drop`) and a tensor filter.
std::string edited_synth(const std::function<void(Writer&, const File&)>& edit, const std::string& skip_key = "",
                         const std::string& skip_tensor = "") {
  SynthOptions o;
  o.dim = 16, o.hidden_dim = 24, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2, o.vocab_size = 340;
  static std::string bytes;
  bytes = synth_model(o);
  File f = parse(bytes);
  Writer w;
  for (const auto& [k, v] : f.kv)
    if (k != skip_key) w.add(k, v);
  edit(w, f);
  for (const auto& t : f.tensors)
    if (t.name != skip_tensor)
      w.add_tensor(t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), t.n_bytes));
  return w.serialize();
}

std::string load_error(const std::string& bytes) {
  auto dir = test::scratch_dir("gguf-edit");
  auto path = (dir / "m.gguf").string();
  write_file_atomic(path, bytes);
  try {
    load_model(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("load_model: GGUF models with the wrong architecture, keys, shapes or tokenizer are refused") {
  auto none = [](Writer&, const File&) {};
  CHECK(load_error(edited_synth(none)) == "no error");
  CHECK(load_error(edited_synth([](Writer& w, const File&) { w.add("general.architecture", Value::string("gpt2")); },
                                "general.architecture"))
            .find("architecture 'gpt2' is not supported; supported: llama") != std::string::npos);
  CHECK(load_error(edited_synth(none, "llama.block_count")).find("missing metadata key 'llama.block_count'") !=
        std::string::npos);
  // head_count_kv 4 makes attn_k [16, 16] expected, but the file has [16, 8].
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("llama.attention.head_count_kv", Value::u(ValueType::UINT32, 4));
                   },
                                "llama.attention.head_count_kv"))
            .find("tensor 'blk.0.attn_k.weight' has shape [16, 8], expected [16, 16] from the hyper-parameters") !=
        std::string::npos);
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("llama.attention.head_count", Value::u(ValueType::UINT32, 3));
                   },
                                "llama.attention.head_count"))
            .find("dim 16 is not a multiple of n_heads 3") != std::string::npos);
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("llama.embedding_length", Value::u(ValueType::UINT64, 1ull << 40));
                   },
                                "llama.embedding_length"))
            .find("'llama.embedding_length' = 1099511627776 is out of range") != std::string::npos);
  CHECK(load_error(edited_synth(none, "", "blk.1.ffn_up.weight")).find("tensor 'blk.1.ffn_up.weight' is missing") !=
        std::string::npos);
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("tokenizer.ggml.tokens", Value::string_array({"a", "b"}));
                   },
                                "tokenizer.ggml.tokens"))
            .find("'tokenizer.ggml.tokens' has 2 entries but the model has 340 tokens") != std::string::npos);
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("tokenizer.ggml.model", Value::string("bert"));
                   },
                                "tokenizer.ggml.model"))
            .find("tokenizer model 'bert' is not supported; supported: llama (SentencePiece BPE), gpt2") !=
        std::string::npos);
  CHECK(load_error(edited_synth(none, "tokenizer.ggml.model")).find("no tokenizer") != std::string::npos);
  CHECK(load_error(edited_synth([](Writer& w, const File&) {
                     w.add("tokenizer.ggml.bos_token_id", Value::u(ValueType::UINT32, 340));
                   },
                                "tokenizer.ggml.bos_token_id"))
            .find("'tokenizer.ggml.bos_token_id' = 340 is not a token id") != std::string::npos);
  // A Q4_K weight: parsed (its size is known) but refused with the supported list.
  std::string q4k = edited_synth(
      [](Writer& w, const File&) { w.add_tensor("token_embd.weight", {256, 340}, TensorType::Q4_K, std::string(144 * 340, '\0')); },
      "", "token_embd.weight");
  CHECK(load_error(q4k).find("tensor 'token_embd.weight' has shape [256, 340], expected [16, 340]") != std::string::npos);
  // A file with a 'GGUF' magic is read as GGUF even when named .bin (format by magic, not extension).
  auto dir = test::scratch_dir("gguf-magic");
  write_file_atomic((dir / "model.bin").string(), edited_synth(none));
  CHECK(load_model((dir / "model.bin").string())->format == "GGUF v3");
}

TEST_CASE("cli: `model synth` writes the same bytes as synth_model; `model info` reads them back") {
  auto dir = test::scratch_dir("gguf-cli");
  auto path = (dir / "s.gguf").string();
  std::string cmd = test::binary() + " model synth --out " + path +
                    " --seed 5 --dim 32 --hidden 40 --layers 2 --heads 4 --kv-heads 1 --vocab 360 --context 64 "
                    "--type f16 > /dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  SynthOptions o;
  o.seed = 5, o.dim = 32, o.hidden_dim = 40, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 1, o.vocab_size = 360;
  o.context_length = 64, o.type = "f16";
  CHECK(sha256_file(path) == sha256_hex(synth_model(o)));
  auto m = load_model(path);
  CHECK(m->config.n_kv_heads == 1);
  CHECK(m->config.vocab_size == 360);
  std::string bad = test::binary() + " model synth --out " + path + " --vocab 10 > /dev/null 2>&1";
  int st = std::system(bad.c_str());
  CHECK(WEXITSTATUS(st) == 2);
}
