// ctest-labels: model
// load_model and `repro-audit model info` on the real stories260K files (../shared/models).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "repro/common/error.hpp"
#include "repro/common/mapped_file.hpp"
#include "repro/model/dtype.hpp"
#include "repro/model/gguf.hpp"
#include "repro/model/gguf_write.hpp"
#include "repro/model/model.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

namespace {

const char* kGgufSha = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";

// Runs the real binary; returns the exit code and fills `out` with stdout + stderr.
int run_cli(const std::string& args, std::string& out) {
  std::string cmd = test::binary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  out.clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void check_stories_config(const ModelConfig& c) {
  CHECK(c.arch == "llama");
  CHECK(c.dim == 64);
  CHECK(c.hidden_dim == 172);
  CHECK(c.n_layers == 5);
  CHECK(c.n_heads == 8);
  CHECK(c.n_kv_heads == 4);
  CHECK(c.head_dim() == 8);
  CHECK(c.kv_dim() == 32);
  CHECK(c.vocab_size == 512);
  CHECK(c.rope_dim == 8);
  CHECK(c.rope_theta == 10000.0f);
  CHECK(c.rms_eps == 1e-5f);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols &&
         std::memcmp(a.f32(), b.f32(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("model: stories260K.gguf and stories260K.bin + tok512.bin load with the same config and bits") {
  REPRO_REQUIRE_MODELS(dir);
  auto g = load_model((dir / "stories260K.gguf").string());
  auto b = load_model((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  check_stories_config(g->config);
  check_stories_config(b->config);
  CHECK(g->config.context_length == 2048);  // the converter's default, as the README says
  CHECK(b->config.context_length == 512);

  CHECK(g->format == "GGUF v3");
  CHECK(b->format == "llama2.c");
  CHECK(g->file_sha256 == kGgufSha);
  CHECK(b->file_sha256 == "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  CHECK(g->tensor_types == std::map<std::string, int64_t>{{"F32", 48}});
  CHECK(b->tensor_types == std::map<std::string, int64_t>{{"F32", 47}});
  CHECK(b->n_params == 260032);
  CHECK(g->n_params == 260032 + 512 * 64);  // the GGUF stores output.weight separately
  CHECK(b->output.empty());                  // tied: vocab_size in the header is positive
  REQUIRE(g->output.size() == 512u * 64u);

  // Every weight tensor is bit-identical between the two containers.
  CHECK(same(g->token_embd, b->token_embd));
  CHECK(same(g->output, b->token_embd));
  CHECK(same(g->output_norm, b->output_norm));
  REQUIRE(g->layers.size() == 5);
  REQUIRE(b->layers.size() == 5);
  for (int l = 0; l < 5; ++l) {
    CAPTURE(l);
    const LayerWeights &x = g->layers[l], &y = b->layers[l];
    CHECK(same(x.attn_norm, y.attn_norm));
    CHECK(same(x.wq, y.wq));
    CHECK(same(x.wk, y.wk));
    CHECK(same(x.wv, y.wv));
    CHECK(same(x.wo, y.wo));
    CHECK(same(x.ffn_norm, y.ffn_norm));
    CHECK(same(x.w_gate, y.w_gate));
    CHECK(same(x.w_down, y.w_down));
    CHECK(same(x.w_up, y.w_up));
    CHECK(x.wk.size() == 32u * 64u);
    CHECK(x.w_down.size() == 64u * 172u);
  }
  // A weight that is not all zeros, so memcmp above compared something.
  CHECK(g->layers[0].wq.f32()[0] != 0.0f);

  // Both tokenizers encode the README's prompt the same way.
  const std::vector<int> want = {1, 403, 407, 261, 378};
  CHECK(g->tokenizer->encode("Once upon a time", true) == want);
  CHECK(b->tokenizer->encode("Once upon a time", true) == want);
  CHECK(g->tokenizer->vocab_size() == 512);
  CHECK(b->tokenizer->vocab_size() == 512);
}

TEST_CASE("model: the llama2.c tokenizer is found beside the checkpoint, else the error says --tokenizer") {
  REPRO_REQUIRE_MODELS(dir);
  auto tmp = test::scratch_dir("model-l2c");
  fs::copy_file(dir / "stories260K.bin", tmp / "stories260K.bin");
  CHECK_THROWS_WITH_AS(load_model((tmp / "stories260K.bin").string()),
                       doctest::Contains("no tokenizer found (looked for tok512.bin and tokenizer.bin beside it); pass "
                                         "the llama2.c tokenizer file with --tokenizer FILE"),
                       UsageError);
  fs::copy_file(dir / "tok512.bin", tmp / "tok512.bin");
  auto m = load_model((tmp / "stories260K.bin").string());
  CHECK(m->tokenizer->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
}

TEST_CASE("model: the stories260K GGUF re-written as F16 loads its weights rounded to f16") {
  REPRO_REQUIRE_MODELS(dir);
  MappedFile mf((dir / "stories260K.gguf").string());
  gguf::File f = gguf::parse_gguf(mf.data(), mf.size(), mf.path());
  gguf::Writer w;
  for (const auto& [k, v] : f.kv) w.add(k, v);
  for (const auto& t : f.tensors) {
    std::vector<float> x = gguf::dequantize(f, t);
    if (t.ne.size() == 1) {
      w.add_f32(t.name, t.ne, x);
      continue;
    }
    std::string data;
    for (float v : x) {
      uint16_t h = gguf::f32_to_f16(v);
      data.push_back(static_cast<char>(h & 0xff));
      data.push_back(static_cast<char>(h >> 8));
    }
    w.add_tensor(t.name, t.ne, gguf::TensorType::F16, data);
  }
  auto tmp = test::scratch_dir("model-f16");
  std::string path = (tmp / "stories-f16.gguf").string();
  write_file_atomic(path, w.serialize());
  auto h = load_model(path);
  auto g = load_model((dir / "stories260K.gguf").string());
  CHECK(h->tensor_types == std::map<std::string, int64_t>{{"F16", 37}, {"F32", 11}});
  REQUIRE(h->layers[3].w_up.size() == g->layers[3].w_up.size());
  // Kept as F16, read in place from the mapped file.
  REQUIRE(h->layers[3].w_up.dtype == DType::F16);
  const auto* half = static_cast<const uint8_t*>(h->layers[3].w_up.data);
  for (size_t i = 0; i < g->layers[3].w_up.size(); ++i) {
    float want = gguf::f16_to_f32(gguf::f32_to_f16(g->layers[3].w_up.f32()[i]));
    REQUIRE(gguf::f16_to_f32(static_cast<uint16_t>(half[2 * i] | (half[2 * i + 1] << 8))) == want);
  }
  CHECK(h->layers[3].attn_norm.dtype == DType::F32);
  CHECK(h->tokenizer->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
}

TEST_CASE("model: `model info` shows the real file's SHA-256 and shape") {
  REPRO_REQUIRE_MODELS(dir);
  std::string out;
  CHECK(run_cli("model info " + (dir / "stories260K.gguf").string(), out) == 0);
  CAPTURE(out);
  CHECK(out.find(std::string("sha256:          ") + kGgufSha) != std::string::npos);
  CHECK(out.find("format:          GGUF v3") != std::string::npos);
  CHECK(out.find("heads:           8 (kv heads 4, head size 8)") != std::string::npos);
  CHECK(out.find("tensor types:    F32 x48") != std::string::npos);
  CHECK(out.find("parameters:      292800") != std::string::npos);
  CHECK(out.find("tokenizer:       llama") != std::string::npos);

  CHECK(run_cli("model info --json " + (dir / "stories260K.bin").string() + " --tokenizer " +
                    (dir / "tok512.bin").string(),
                out) == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["format"] == "llama2.c");
  CHECK(j["dim"] == 64);
  CHECK(j["hidden_dim"] == 172);
  CHECK(j["n_layers"] == 5);
  CHECK(j["n_kv_heads"] == 4);
  CHECK(j["vocab_size"] == 512);
  CHECK(j["n_params"] == 260032);
  CHECK(j["tied_output"] == true);
  CHECK(j["sha256"] == "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
}

TEST_CASE("model: corrupt files exit 2 with one error line naming the file") {
  REPRO_REQUIRE_MODELS(dir);
  auto tmp = test::scratch_dir("model-corrupt");
  std::string gguf = read_file((dir / "stories260K.gguf").string());
  std::string bin = read_file((dir / "stories260K.bin").string());
  std::string cut_gguf = (tmp / "cut.gguf").string(), cut_bin = (tmp / "cut.bin").string();
  std::string text = (tmp / "notes.gguf").string();
  write_file_atomic(cut_gguf, gguf.substr(0, gguf.size() / 2));
  write_file_atomic(cut_bin, bin.substr(0, bin.size() - 4));
  write_file_atomic(text, "this is a text file, not a model, but long enough to have a header\n");
  std::string out;
  CHECK(run_cli("model info " + cut_gguf, out) == 2);
  CHECK(out.rfind("error: GGUF file '" + cut_gguf + "': tensor '", 0) == 0);
  CHECK(out.find("extends past the end of the file (592688 bytes") != std::string::npos);
  CHECK(run_cli("model info " + cut_bin + " --tokenizer " + (dir / "tok512.bin").string(), out) == 2);
  CHECK(out.find("error: model file '" + cut_bin + "' (no GGUF magic, read as a llama2.c checkpoint): the header") == 0);
  CHECK(out.find("implies 1056540 bytes but the file has 1056536") != std::string::npos);
  CHECK(run_cli("model info " + text, out) == 2);
  CHECK(out.find("error: model file '" + text + "' (no GGUF magic, read as a llama2.c checkpoint): dim") == 0);
  CHECK(run_cli("model info " + (tmp / "missing.gguf").string(), out) == 2);
  CHECK(out.find("cannot open model file") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
}
