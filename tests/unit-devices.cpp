// ctest-labels: unit cuda
// The cross-device tier (run --devices cpu,cuda; docs/ENGINE.md "The cross-device tier in
// reports"): the comparison of each completion with its twin on the first device, the flag's usage
// errors, and end to end on the embedded stories260K. Without a GPU the cuda leg is skipped with a
// note and the report says its completions were not verified; with one, batch-invariant f32 must
// be identical on both devices.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "repro/audit/compare.hpp"
#include "repro/audit/device_axis.hpp"
#include "repro/kernels/backends.hpp"
#include <nlohmann/json.hpp>
#include "test_util.hpp"

using namespace repro;

namespace {

Completion completion(const std::string& device, std::vector<int> tokens, std::vector<float> logprobs,
                      int batch_size = 4, int position = 3) {
  Completion c;
  c.prompt_id = "p-1";
  c.decoding_id = "greedy";
  c.mode = "batch-invariant";
  c.precision = "f32";
  c.batch_size = batch_size;
  c.position = position;
  c.filler_set = "f0";
  c.device = device;
  c.tokens = std::move(tokens);
  c.logprobs = std::move(logprobs);
  c.logits_sha256 = "ab";
  return c;
}

AuditReport two_devices() {
  AuditReport r;
  r.plan = {{"devices", {"cpu", "cuda"}}};
  ModeSummary ms;
  ms.mode = "batch-invariant";
  ms.precision = "f32";
  r.summary.modes.push_back(ms);
  return r;
}

bool cuda_here() { return kernels::backend(Device::Cuda).present(); }

}  // namespace

TEST_CASE("devices: twins on both devices are compared bit for bit; the first difference is located") {
  AuditReport r = two_devices();
  r.completions = {completion("cpu", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}), completion("cuda", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}),
                   completion("cpu", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}, 1, 0),
                   completion("cuda", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}, 1, 0)};
  analyze_devices(r);
  REQUIRE(r.summary.modes[0].devices.size() == 1);
  const DeviceRow& same = r.summary.modes[0].devices[0];
  CHECK(same.device == "cuda");
  CHECK(same.against == "cpu");
  CHECK(same.bit_differ.k == 0);
  CHECK(same.bit_differ.n == 2);
  CHECK(same.first_diff.empty());
  CHECK(r.summary.modes[0].device_finding ==
        "cross-device (cuda against cpu), batch-invariant (f32): identical in 2 of 2 completions");

  // One logprob off by one ulp at step 1: the bits differ, the tokens do not.
  AuditReport d = two_devices();
  d.completions = {completion("cpu", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}),
                   completion("cuda", {5, 6, 7}, {-0.5f, std::nextafter(-1.0f, 0.0f), -2.0f})};
  analyze_devices(d);
  REQUIRE(d.summary.modes[0].devices.size() == 1);
  const DeviceRow& ulp = d.summary.modes[0].devices[0];
  CHECK(ulp.bit_differ.k == 1);
  CHECK(ulp.token_differ.k == 0);
  CHECK(ulp.first_diff == "prompt p-1, greedy, batch 4 at position 3: step 1");
  CHECK(d.summary.modes[0].device_finding.find("1 of 1 completions differ in bits, 0 in tokens; the first at prompt "
                                               "p-1, greedy, batch 4 at position 3: step 1") != std::string::npos);

  // A token that differs at step 2; and a twin that differs in its final logits only.
  AuditReport t = two_devices();
  t.completions = {completion("cpu", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}), completion("cuda", {5, 6, 9}, {-0.5f, -1.0f, -2.5f}),
                   completion("cpu", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}, 1, 0),
                   completion("cuda", {5, 6, 7}, {-0.5f, -1.0f, -2.0f}, 1, 0)};
  t.completions[3].logits_sha256 = "cd";
  analyze_devices(t);
  const DeviceRow& tok = t.summary.modes[0].devices[0];
  CHECK(tok.bit_differ.k == 2);
  CHECK(tok.token_differ.k == 1);
  CHECK(tok.first_diff == "prompt p-1, greedy, batch 4 at position 3: step 2");
  REQUIRE(tok.max_dlogprob);
  CHECK(*tok.max_dlogprob == doctest::Approx(0.5));
  // A completion without a twin on the first device is not compared.
  AuditReport lone = two_devices();
  lone.completions = {completion("cuda", {5}, {-0.5f})};
  analyze_devices(lone);
  CHECK(lone.summary.modes[0].devices.empty());
  // Without the axis nothing is written.
  AuditReport none;
  none.summary.modes.push_back(ModeSummary{});
  none.completions = {completion("", {5}, {-0.5f})};
  analyze_devices(none);
  CHECK(none.summary.modes[0].devices.empty());
  CHECK(none.summary.device_findings.empty());
}

TEST_CASE("devices: usage errors name the flag (exit 2)") {
  const auto dir = test::scratch_dir("devices-bad");
  const std::string run = "'" + test::binary() + "' run --quiet --out '" + (dir / "o").string() + "' ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--devices cpu,cuda --device cpu", "error: --device and --devices exclude each other"},
      {"--devices cpu", "error: --devices compares devices: give two (cpu,cuda), or run on one with --device cpu"},
      {"--devices cpu,cpu", "error: --devices: each device once"},
      {"--devices cpu,tpu", "--devices"},
      {"--devices cpu,cuda --modes deterministic", "error: --devices cuda: the cuda op tables run default and "
                                                   "batch-invariant only; drop 'deterministic' from --modes"},
      {"--devices cpu,cuda --endpoint http://127.0.0.1:9", "error: --devices runs the local engine on each device"},
  };
  for (const auto& [flags, message] : bad) {
    auto r = test::run_shell(run + flags);
    INFO(flags);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(message) != std::string::npos);
  }
}

TEST_CASE("devices: reports from before the axis compare as one device; another device plan is a config change") {
  AuditReport old_run, new_run, axis_run;
  old_run.plan = {{"profile", "quick"}, {"batch_sizes", {1, 8}}};
  new_run.plan = old_run.plan;
  new_run.plan["devices"] = nlohmann::json::array();
  axis_run.plan = old_run.plan;
  axis_run.plan["devices"] = {"cpu", "cuda"};
  for (const auto& line : config_drift(old_run, new_run)) CHECK_MESSAGE(line.find("plan.") != 0, line);
  bool named = false;
  for (const auto& line : config_drift(old_run, axis_run)) named = named || line.rfind("plan.devices ", 0) == 0;
  CHECK(named);
}

TEST_CASE("run --devices cpu,cuda: the CPU leg runs; the cuda leg is compared on a GPU and skipped, said, without") {
  const auto dir = test::scratch_dir("devices-run");
  const std::string out = (dir / "rep").string();
  const std::string cmd = "'" + test::binary() + "' run --quiet --out '" + out +
                          "' --devices cpu,cuda --batch-sizes 1,4 --positions first,last --filler-sets 1 "
                          "--max-tokens 16 --repeats 1 --precisions f32 --format json,md";
  auto r = test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.code == 0);  // the gate (batch-invariant) holds on every device that ran
  const nlohmann::json doc = nlohmann::json::parse(test::slurp(std::filesystem::path(out) / "report.json"));
  CHECK(doc["plan"]["devices"] == nlohmann::json::array({"cpu", "cuda"}));
  std::map<std::string, int> per_device;
  for (const auto& c : doc["completions"]) per_device[c.value("device", std::string())]++;
  const std::string md = test::slurp(std::filesystem::path(out) / "report.md");
  if (!cuda_here()) {
    MESSAGE("no CUDA device: checking that the cuda leg is skipped and said");
    CHECK(r.output.find("note: --devices cuda: ") != std::string::npos);
    CHECK(r.output.find("; the cuda leg is skipped (the other devices run)") != std::string::npos);
    CHECK(per_device.size() == 1);
    CHECK(per_device["cpu"] > 0);
    REQUIRE(doc["plan"].contains("devices_skipped"));
    CHECK(doc["plan"]["devices_skipped"].contains("cuda"));
    REQUIRE(doc["summary"].contains("device_findings"));
    CHECK(doc["summary"]["device_findings"][0].get<std::string>().rfind("cross-device: cuda not checked: ", 0) == 0);
    CHECK(md.find("cross-device: cuda not checked: ") != std::string::npos);
    for (const auto& ms : doc["summary"]["modes"]) CHECK_FALSE(ms.contains("devices"));
    // The cases are the CPU leg's: every completion of a case is on the CPU.
    for (const auto& c : doc["completions"]) CHECK(c["device"] == "cpu");
    return;
  }
  // A GPU: every batch context ran on both, and batch-invariant f32 is identical across them.
  CHECK(per_device["cpu"] == per_device["cuda"]);
  CHECK_FALSE(doc["plan"].contains("devices_skipped"));
  CHECK(md.find("## Cross-device: each device against the first") != std::string::npos);
  bool invariant_seen = false;
  for (const auto& ms : doc["summary"]["modes"]) {
    REQUIRE(ms.contains("devices"));
    const auto& row = ms["devices"][0];
    CHECK(row["device"] == "cuda");
    CHECK(row["bit_differ"]["n"].get<int>() == per_device["cpu"] / static_cast<int>(doc["summary"]["modes"].size()));
    MESSAGE(ms["device_finding"].get<std::string>());
    if (ms["mode"] == "batch-invariant" && ms["precision"] == "f32") {
      invariant_seen = true;
      CHECK(row["bit_differ"]["k"] == 0);
      CHECK(ms["device_finding"].get<std::string>().find("identical in ") != std::string::npos);
    }
  }
  CHECK(invariant_seen);
}
