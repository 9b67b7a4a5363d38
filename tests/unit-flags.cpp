// The engine flags (src/cli/flags.cpp), declared once and shared by generate, run, bench and serve:
// every one of them lists the same flags, and each flag's errors name it and exit 2 (bad value)
// or 3 (a device this build or machine cannot run).
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace repro;

TEST_CASE("engine flags: generate, run, bench and serve all take the shared engine flags") {
  for (const char* cmd : {"generate", "run", "bench", "serve"}) {
    CAPTURE(cmd);
    test::CmdResult r = test::run_cli(std::string(cmd) + " --help");
    REQUIRE(r.code == 0);
    for (const char* flag : {"--model", "--tokenizer", "--device", "--threads", "--precision"})
      CHECK(r.output.find(flag) != std::string::npos);
  }
  CHECK(test::run_cli("generate --help").output.find("--mode") != std::string::npos);
  CHECK(test::run_cli("serve --help").output.find("--mode") != std::string::npos);
  CHECK(test::run_cli("run --help").output.find("--modes") != std::string::npos);
}

TEST_CASE("engine flags: bad values exit 2 naming the flag; an unavailable device exits 3 in one line") {
  test::CmdResult r = test::run_cli("generate --precision f8");
  CHECK(r.code == 2);
  CHECK(r.output == "error: --precision: unknown precision 'f8'; use f32, bf16, f16\n");
  r = test::run_cli("generate --device tpu");
  CHECK(r.code == 2);
  CHECK(r.output == "error: --device: unknown device 'tpu'; use cpu, cuda\n");
  r = test::run_cli("generate --threads 0");
  CHECK(r.code == 2);
  CHECK(r.output.find("error: --threads '0'") == 0);
  r = test::run_cli("generate --threads 1,2");
  CHECK(r.code == 2);
  CHECK(r.output.find("give one thread count here") != std::string::npos);
  r = test::run_cli("bench --precision f8");
  CHECK(r.code == 2);
  r = test::run_cli("generate --device cuda --max-tokens 2");
  CAPTURE(r.output);
#ifndef REPRO_HAVE_CUDA
  CHECK(r.code == 3);
  CHECK(r.output.find("error: --device cuda: this repro-audit was built without CUDA") == 0);
#else
  // With CUDA op tables registered the run may succeed; without them it is the same one-line exit 3.
  if (r.code != 0) {
    CHECK(r.code == 3);
    CHECK(r.output.find("error: --device cuda: ") == 0);
  }
#endif
}

TEST_CASE("engine flags: --precision reaches the engine (generate) and the report's engine record (run)") {
  auto dir = test::scratch_dir("flags-precision");
  test::CmdResult f32 = test::run_cli("generate --json --max-tokens 6");
  test::CmdResult bf16 = test::run_cli("generate --json --max-tokens 6 --precision bf16");
  REQUIRE(f32.code == 0);
  REQUIRE(bf16.code == 0);
  auto a = nlohmann::json::parse(f32.output), b = nlohmann::json::parse(bf16.output);
  CHECK(a["precision"] == "f32");
  CHECK(b["precision"] == "bf16");
  CHECK(a["op_table"] == "cpu-batch-invariant");
  CHECK(a["logits_sha256"] != b["logits_sha256"]);

  test::CmdResult r = test::run_cli("run -q --prompt 'Once upon a time' --max-tokens 4 --repeats 1 --batch-sizes 1 "
                                    "--modes batch-invariant --precision f16 --format json --out '" +
                                    dir.string() + "'");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  std::ifstream in(dir / "report.json");
  auto rep = nlohmann::json::parse(in);
  const auto& engine = rep["environment"]["engine"];
  CHECK(engine["device"] == "cpu");
  CHECK(engine["precision"] == "f16");
  REQUIRE(engine["op_tables"].size() == 1);
  CHECK(engine["op_tables"][0]["name"] == "cpu-batch-invariant");
  CHECK(rep["environment"]["op_tables"].size() >= 2);  // every table this machine has
}

TEST_CASE("generate: sampling, seed, batch and beam values out of range exit 2 in one line naming the flag") {
  struct Case {
    const char* args;
    const char* line;
  };
  for (const Case& k : std::vector<Case>{
           {"--temperature nan", "error: --temperature must be a number from 0 to 10 (got nan)\n"},
           {"--temperature inf", "error: --temperature must be a number from 0 to 10 (got inf)\n"},
           {"--temperature -1", "error: --temperature must be a number from 0 to 10 (got -1)\n"},
           {"--top-p nan", "error: --top-p must be a number in (0, 1] (got nan)\n"},
           {"--top-p 0", "error: --top-p must be a number in (0, 1] (got 0)\n"},
           {"--top-k -2", "error: --top-k must be an integer from 0 to 1048576 (got -2)\n"},
           {"--seed -1", "error: --seed must be an integer from 0 to 18446744073709551615 (got '-1')\n"},
           {"--seed 0x10", "error: --seed must be an integer from 0 to 18446744073709551615 (got '0x10')\n"},
           {"--seed 18446744073709551616",
            "error: --seed must be an integer from 0 to 18446744073709551615 (got '18446744073709551616')\n"},
           {"--batch-size 20000", "error: --batch-size must be an integer from 1 to 4096 (got 20000)\n"},
           {"--batch-size 0", "error: --batch-size must be an integer from 1 to 4096 (got 0)\n"},
           {"--beam-width 20000", "error: --beam-width must be an integer from 0 to 256 (got 20000)\n"},
           {"--beam-width -1", "error: --beam-width must be an integer from 0 to 256 (got -1)\n"},
           {"--max-tokens 0", "error: --max-tokens must be an integer from 1 to 1048576 (got 0)\n"},
       }) {
    CAPTURE(k.args);
    const std::string args = k.args;
    test::CmdResult r =
        test::run_cli("generate " + (args.find("--max-tokens") == 0 ? args : "--max-tokens 2 " + args));
    CHECK(r.code == 2);
    CHECK(r.output == k.line);
  }
  // The largest seed is accepted.
  test::CmdResult ok = test::run_cli("generate --max-tokens 2 --temperature 1 --seed 18446744073709551615");
  CHECK(ok.code == 0);
}
