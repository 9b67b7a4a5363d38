// ctest-labels: unit
// The CUDA build's checks that need nvcc but no GPU (they run in CI, wherever the build has CUDA):
//   flags      every kernels/**/*.cu is in the build's compile_commands.json, and each .cu's real
//              command line (its --options-file included) carries the floating-point flags the CPU
//              emulation of the kernels assumes (--fmad=false, -prec-div=true, -prec-sqrt=true,
//              -ftz=false, -Xcompiler=-ffp-contract=off), never --use_fast_math or a contrary
//              setting, and -Werror=all-warnings (nvcc warnings are errors);
//   resources  each .cu is compiled again with exactly that command plus -Xptxas -v --keep, for
//              every architecture the build targets (80 and 90), and ptxas's report is checked per
//              kernel: no register spills, registers x threads per block <= 65,536 and static
//              shared memory <= 48 KiB (sm_80's limits per block; sm_90's are the same). The threads
//              per block are the kernel's __launch_bounds__ (.maxntid in its PTX), else 1,024, the
//              most a launch may ask for.
// The parsers and the checks are tested on captured ptxas and PTX text first, spills and missing
// flags included, so each check can fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "repro/common/json.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

constexpr long kRegistersPerBlock = 65536;    // sm_80 (and sm_90): registers of one block
constexpr long kStaticSmemPerBlock = 48 * 1024;  // static __shared__ per block
constexpr long kDefaultThreads = 1024;           // a kernel without __launch_bounds__ may be launched this wide

// One function as ptxas reports it for one architecture.
struct KernelUse {
  std::string name, arch;
  bool entry = false;  // a __global__ kernel (else a called device function with its own frame)
  long registers = -1, stack = 0, spill_stores = 0, spill_loads = 0, smem = 0;
};

// ptxas -v output (through nvcc: "ptxas info    : ..." lines) -> one record per (function, arch).
std::vector<KernelUse> parse_ptxas_verbose(const std::string& text) {
  static const std::regex entry_re(R"(Compiling entry function '([^']+)' for '(sm_[0-9a-z]+)')");
  static const std::regex props_re(R"(Function properties for ([^\s]+))");
  static const std::regex frame_re(
      R"(([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads)");
  static const std::regex used_re(R"(Used ([0-9]+) registers)");
  static const std::regex smem_re(R"(([0-9]+) bytes smem)");
  std::vector<KernelUse> out;
  std::string arch;
  long current = -1;  // the record the next frame / Used line belongs to
  long entry = -1;    // the entry function being compiled
  auto find_or_add = [&](const std::string& name, bool is_entry) {
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].name == name && out[i].arch == arch) return static_cast<long>(i);
    KernelUse k;
    k.name = name;
    k.arch = arch;
    k.entry = is_entry;
    out.push_back(k);
    return static_cast<long>(out.size() - 1);
  };
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry_re)) {
      arch = m[2];
      entry = current = find_or_add(m[1], true);
      out[entry].entry = true;
    } else if (std::regex_search(line, m, props_re)) {
      current = find_or_add(m[1], false);
    } else if (std::regex_search(line, m, frame_re) && current >= 0) {
      out[current].stack = std::stol(m[1]);
      out[current].spill_stores = std::stol(m[2]);
      out[current].spill_loads = std::stol(m[3]);
    } else if (std::regex_search(line, m, used_re) && entry >= 0) {
      out[entry].registers = std::stol(m[1]);
      if (std::regex_search(line, m, smem_re)) out[entry].smem = std::stol(m[1]);
    }
  }
  return out;
}

// PTX text -> threads per block each .entry allows (.maxntid / .reqntid x * y * z), 0 when undeclared.
std::map<std::string, long> parse_ptx_max_threads(const std::string& ptx) {
  static const std::regex entry_re(R"(\.entry\s+([A-Za-z0-9_$]+)\s*\()");
  static const std::regex ntid_re(R"(\.(?:maxntid|reqntid)\s+([0-9]+)(?:\s*,\s*([0-9]+))?(?:\s*,\s*([0-9]+))?)");
  std::map<std::string, long> out;
  std::istringstream in(ptx);
  std::string line, name;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry_re)) {
      name = m[1];
      out[name] = 0;
    } else if (!name.empty() && std::regex_search(line, m, ntid_re)) {
      long t = std::stol(m[1]);
      if (m[2].matched) t *= std::stol(m[2]);
      if (m[3].matched) t *= std::stol(m[3]);
      out[name] = t;
    } else if (line.find('{') != std::string::npos) {
      name.clear();  // the body: directives before it belong to the entry
    }
  }
  return out;
}

// Spills known today, each bounded by its measured size (nvcc 13.0, sm_80 and sm_90): the attention
// kernels keep 8 bytes in local memory (8-12 bytes of spill stores and loads with 32 registers
// used). A spill anywhere else, or a larger one here, fails the test.
struct KnownSpill {
  const char* kernel;  // a substring of the mangled name
  long max_bytes;      // stores and loads each
};
constexpr KnownSpill kKnownSpills[] = {{"attention_invariant_kernel", 16}, {"attention_split_kernel", 16}};

bool known_spill(const KernelUse& k) {
  for (const KnownSpill& s : kKnownSpills)
    if (k.name.find(s.kernel) != std::string::npos && k.spill_stores <= s.max_bytes && k.spill_loads <= s.max_bytes)
      return true;
  return false;
}

// What breaks sm_80's per-block limits or spills, one line per finding ("" when none).
std::vector<std::string> resource_problems(const std::vector<KernelUse>& uses,
                                           const std::map<std::string, long>& max_threads) {
  std::vector<std::string> out;
  for (const KernelUse& k : uses) {
    const std::string where = k.name + " (" + k.arch + ")";
    if ((k.spill_stores > 0 || k.spill_loads > 0) && !known_spill(k))
      out.push_back(where + " spills registers: " + std::to_string(k.spill_stores) + " bytes stores, " +
                    std::to_string(k.spill_loads) + " bytes loads");
    if (!k.entry) continue;
    if (k.registers < 0) out.push_back(where + ": ptxas reported no register count");
    auto it = max_threads.find(k.name);
    const long threads = it != max_threads.end() && it->second > 0 ? it->second : kDefaultThreads;
    if (k.registers * threads > kRegistersPerBlock)
      out.push_back(where + " needs " + std::to_string(k.registers) + " registers x " + std::to_string(threads) +
                    " threads per block = " + std::to_string(k.registers * threads) + " > " +
                    std::to_string(kRegistersPerBlock) +
                    (it != max_threads.end() && it->second > 0 ? "" : " (no __launch_bounds__: 1024 threads assumed)"));
    if (k.smem > kStaticSmemPerBlock)
      out.push_back(where + " uses " + std::to_string(k.smem) + " bytes of static shared memory > " +
                    std::to_string(kStaticSmemPerBlock));
  }
  return out;
}

// Whitespace-separated tokens of a command line (the flags checked never contain spaces).
std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string t;
  while (in >> t) out.push_back(t);
  return out;
}

// The value of the last "-name=value" / "--name=value" / "-name value" among the tokens ("" when absent).
std::string last_value(const std::vector<std::string>& t, const std::string& name) {
  std::string v;
  for (size_t i = 0; i < t.size(); ++i)
    for (const std::string& p : {"-" + name, "--" + name}) {
      if (t[i].rfind(p + "=", 0) == 0) v = t[i].substr(p.size() + 1);
      else if (t[i] == p && i + 1 < t.size()) v = t[i + 1];
    }
  return v;
}

bool has_token(const std::vector<std::string>& t, std::initializer_list<const char*> any) {
  for (const std::string& x : t)
    for (const char* a : any)
      if (x == a) return true;
  return false;
}

// The floating-point and warning flags the emulation and the build rules assume, one line per
// finding ("" when none).
std::vector<std::string> flag_problems(const std::vector<std::string>& t) {
  std::vector<std::string> out;
  if (has_token(t, {"-use_fast_math", "--use_fast_math"})) out.push_back("--use_fast_math is set");
  const std::pair<const char*, const char*> want[] = {
      {"fmad", "false"}, {"prec-div", "true"}, {"prec-sqrt", "true"}, {"ftz", "false"}};
  for (const auto& [name, value] : want) {
    const std::string v = last_value(t, name);
    if (v != value) out.push_back(std::string("--") + name + " is " + (v.empty() ? "not set" : v) + ", not " + value);
  }
  if (!has_token(t, {"-Xcompiler=-ffp-contract=off", "--compiler-options=-ffp-contract=off"}))
    out.push_back("-Xcompiler=-ffp-contract=off is missing (host code of a .cu could contract a*b+c)");
  if (!has_token(t, {"-Werror=all-warnings", "--Werror=all-warnings"}) && last_value(t, "Werror") != "all-warnings")
    out.push_back("-Werror=all-warnings is missing (nvcc warnings must be errors)");
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

// The CUDA entries of this build's compile_commands.json: (file, directory, command).
struct CudaCommand {
  std::string file, directory, command;
};
std::vector<CudaCommand> cuda_commands() {
  const fs::path db = fs::path(REPRO_BUILD_DIR) / "compile_commands.json";
  const std::string text = repro::test::slurp(db);
  REQUIRE_MESSAGE(!text.empty(), "cannot read ", db.string(), " (CMAKE_EXPORT_COMPILE_COMMANDS is set in CMakeLists.txt)");
  const nlohmann::json j = repro::parse_json_or_throw(text, db.string());
  std::vector<CudaCommand> out;
  for (const auto& e : j) {
    const std::string file = e.value("file", "");
    if (file.size() < 3 || file.compare(file.size() - 3, 3, ".cu") != 0) continue;
    std::string cmd = e.value("command", "");
    if (cmd.empty() && e.contains("arguments"))
      for (const auto& a : e["arguments"]) cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
    out.push_back({file, e.value("directory", ""), cmd});
  }
  return out;
}

// A command's tokens with the contents of its --options-file / -optf files (relative to `dir`).
std::vector<std::string> expanded_tokens(const CudaCommand& c) {
  std::vector<std::string> t = tokens(c.command), out;
  for (size_t i = 0; i < t.size(); ++i) {
    if ((t[i] == "--options-file" || t[i] == "-optf") && i + 1 < t.size()) {
      fs::path p = t[++i];
      if (p.is_relative()) p = fs::path(c.directory) / p;
      const std::string body = repro::test::slurp(p);
      CHECK_MESSAGE(!body.empty(), "cannot read the options file ", p.string());
      for (const std::string& x : tokens(body)) out.push_back(x);
      continue;
    }
    out.push_back(t[i]);
  }
  return out;
}

}  // namespace

TEST_CASE("cuda resources: the ptxas and PTX parsers, and each check can fail") {
  // Captured from nvcc 13.0 (-Xptxas -v), with one spilling kernel and one without launch bounds.
  const std::string ptxas = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3knbPfi' for 'sm_80'
ptxas info    : Function properties for _Z3knbPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 364 bytes cmem[0]
ptxas info    : Compile time = 38.882 ms
ptxas info    : Compiling entry function '_Z2kbPf' for 'sm_80'
ptxas info    : Function properties for _Z2kbPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1200 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5spillPf' for 'sm_90'
ptxas info    : Function properties for _Z5spillPf
    48 bytes stack frame, 44 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 50000 bytes smem
)";
  const auto uses = parse_ptxas_verbose(ptxas);
  REQUIRE(uses.size() == 3);
  CHECK(uses[0].name == "_Z3knbPfi");
  CHECK(uses[0].arch == "sm_80");
  CHECK(uses[0].registers == 72);
  CHECK(uses[0].smem == 0);
  CHECK(uses[1].registers == 10);
  CHECK(uses[1].smem == 1200);
  CHECK(uses[2].arch == "sm_90");
  CHECK(uses[2].spill_stores == 44);
  CHECK(uses[2].spill_loads == 40);
  CHECK(uses[2].stack == 48);
  const std::string ptx = R"(.visible .entry _Z2kbPf(
	.param .u64 _Z2kbPf_param_0
)
.maxntid 256, 1, 1
{
	ret;
}
.visible .entry _Z3knbPfi(
	.param .u64 _Z3knbPfi_param_0,
	.param .u32 _Z3knbPfi_param_1
)
{
	ret;
}
.visible .entry _Z5spillPf(
	.param .u64 _Z5spillPf_param_0
)
.reqntid 64, 2
{
}
)";
  const auto threads = parse_ptx_max_threads(ptx);
  CHECK(threads.at("_Z2kbPf") == 256);
  CHECK(threads.at("_Z3knbPfi") == 0);
  CHECK(threads.at("_Z5spillPf") == 128);
  const auto problems = resource_problems(uses, threads);
  // 72 registers x 1024 threads (no launch bounds); the spills; 255 x 128 fits; 50000 bytes smem.
  REQUIRE(problems.size() == 3);
  CHECK(problems[0] == "_Z3knbPfi (sm_80) needs 72 registers x 1024 threads per block = 73728 > 65536 "
                       "(no __launch_bounds__: 1024 threads assumed)");
  CHECK(problems[1] == "_Z5spillPf (sm_90) spills registers: 44 bytes stores, 40 bytes loads");
  CHECK(problems[2] == "_Z5spillPf (sm_90) uses 50000 bytes of static shared memory > 49152");
  // Within the limits: nothing. A known spill passes within its bound, and fails above it.
  CHECK(resource_problems({uses[1]}, threads).empty());
  KernelUse att;
  att.name = "_ZN5repro7kernels4cuda26attention_invariant_kernelE";
  att.arch = "sm_80";
  att.entry = true;
  att.registers = 32;
  att.spill_stores = 8;
  att.spill_loads = 12;
  CHECK(resource_problems({att}, {}).empty());
  att.spill_stores = 64;
  CHECK(resource_problems({att}, {}).size() == 1);

  // Flags: the project's set passes; fast math, a contrary fmad and a missing -Werror are named.
  const auto good = tokens("nvcc -O3 -Werror=all-warnings --fmad=false -prec-div=true -prec-sqrt=true -ftz=false "
                           "-Xcompiler=-ffp-contract=off -x cu -c a.cu -o a.o");
  CHECK(flag_problems(good).empty());
  auto bad = good;
  bad.push_back("--use_fast_math");
  bad.push_back("-fmad=true");
  CHECK(flag_problems(bad) == std::vector<std::string>{"--use_fast_math is set", "--fmad is true, not false"});
  auto no_werror = good;
  no_werror.erase(std::find(no_werror.begin(), no_werror.end(), "-Werror=all-warnings"));
  CHECK(flag_problems(no_werror) == std::vector<std::string>{"-Werror=all-warnings is missing (nvcc warnings must be errors)"});
  CHECK(flag_problems(tokens("nvcc -c a.cu")).size() == 6);
}

#ifndef REPRO_HAVE_CUDA
TEST_CASE("cuda resources: built without CUDA") {
  MESSAGE("skipped: this build has no CUDA backend, so there is no .cu command to check");
}
#else
TEST_CASE("cuda resources: every .cu is built with the flags the emulation assumes, nvcc warnings as errors") {
  const auto cmds = cuda_commands();
  std::set<std::string> built, sources;
  for (const auto& c : cmds) {
    built.insert(fs::weakly_canonical(c.file).string());
    CAPTURE(c.file);
    const auto problems = flag_problems(expanded_tokens(c));
    CHECK_MESSAGE(problems.empty(), c.file, ":", joined(problems));
  }
  for (const auto& e : fs::recursive_directory_iterator(fs::path(REPRO_SOURCE_DIR) / "kernels"))
    if (e.path().extension() == ".cu") sources.insert(fs::weakly_canonical(e.path()).string());
  CHECK(sources.size() >= 8);
  for (const auto& s : sources) CHECK_MESSAGE(built.count(s) == 1, s, " is not compiled by the build");
}

TEST_CASE("cuda resources: no kernel spills, registers x threads and static shared memory fit sm_80") {
  const auto cmds = cuda_commands();
  REQUIRE(!cmds.empty());
  const fs::path tmp = repro::test::scratch_dir("cuda-resources");
  struct Result {
    int code = -1;
    std::string output;
    std::vector<KernelUse> uses;
    std::map<std::string, long> threads;
  };
  std::vector<Result> results(cmds.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < cmds.size();) {
      const CudaCommand& c = cmds[i];
      const fs::path keep = tmp / std::to_string(i);
      fs::create_directories(keep);
      // The build's own command, its object written to the scratch folder instead.
      std::string cmd = c.command;
      const size_t o = cmd.rfind(" -o ");
      if (o == std::string::npos) {
        results[i].output = "no -o in the command: " + cmd;
        continue;
      }
      const size_t end = cmd.find(' ', o + 4);
      cmd = cmd.substr(0, o) + " -o '" + (keep / "k.o").string() + "'" + (end == std::string::npos ? "" : cmd.substr(end));
      cmd = "cd '" + c.directory + "' && " + cmd + " -Xptxas -v --keep --keep-dir '" + keep.string() + "'";
      const auto r = repro::test::run_shell(cmd);
      Result& res = results[i];
      res.code = r.code;
      res.output = r.output;
      res.uses = parse_ptxas_verbose(r.output);
      for (const auto& e : fs::directory_iterator(keep))
        if (e.path().extension() == ".ptx")
          for (const auto& [name, t] : parse_ptx_max_threads(repro::test::slurp(e.path())))
            res.threads[name] = std::max(res.threads[name], t);
    }
  };
  const unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < n; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();

  int kernels = 0;
  std::set<std::string> archs;
  for (size_t i = 0; i < cmds.size(); ++i) {
    const Result& r = results[i];
    CAPTURE(cmds[i].file);
    REQUIRE_MESSAGE(r.code == 0, "nvcc failed:\n", r.output);
    const bool has_kernels = repro::test::slurp(cmds[i].file).find("__global__") != std::string::npos;
    CHECK_MESSAGE(r.uses.empty() != has_kernels, "ptxas reported nothing for ", cmds[i].file, ":\n", r.output);
    const auto problems = resource_problems(r.uses, r.threads);
    CHECK_MESSAGE(problems.empty(), cmds[i].file, ":", joined(problems));
    for (const KernelUse& k : r.uses) {
      if (k.spill_stores > 0 || k.spill_loads > 0)
        MESSAGE("known spill: ", k.name, " (", k.arch, "): ", k.spill_stores, " bytes stores, ", k.spill_loads,
                " bytes loads");
      if (!k.entry) continue;
      ++kernels;
      archs.insert(k.arch);
      // Every entry ptxas compiled has its PTX (so its launch bounds were read).
      CHECK_MESSAGE(r.threads.count(k.name) == 1, k.name, " has no .entry in the kept PTX");
    }
  }
  MESSAGE(kernels, " kernel compilations checked for ", archs.size(), " architectures");
  CHECK(archs.count("sm_80") == 1);
  CHECK(kernels >= 2 * 14);  // every kernel, once per architecture
}
#endif
