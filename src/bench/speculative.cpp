// `bench --speculative` (repro/bench/speculative.hpp).
#include "repro/bench/speculative.hpp"

#include <chrono>
#include <functional>
#include <memory>

#include "repro/bench/loops.hpp"
#include "repro/common/error.hpp"

namespace repro::bench {

namespace {
struct SpecRun {
  double tok_s = 0;
  std::vector<int> probe_tokens;
  std::string probe_sha;
  SpecStats total;  // summed over the batch
};

// One decode run of the batch: the prefill step is not timed, the remaining steps are.
SpecRun decode_spec(Engine& engine, const std::vector<GenRequest>& reqs) {
  using Clock = std::chrono::steady_clock;
  std::vector<int> handles;
  for (const auto& r : reqs) handles.push_back(engine.submit(r));
  engine.step();
  const int64_t before = engine.generated_tokens();
  const auto t0 = Clock::now();
  while (engine.busy()) engine.step();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  SpecRun run;
  run.tok_s = s > 0 ? static_cast<double>(engine.generated_tokens() - before) / s : 0.0;
  for (size_t i = 0; i < handles.size(); ++i) {
    GenResult r = engine.take_result(handles[i]);
    run.total.drafted += r.spec.drafted;
    run.total.accepted += r.spec.accepted;
    run.total.verify_steps += r.spec.verify_steps;
    if (i == reqs.size() / 2) {
      run.probe_tokens = std::move(r.tokens);
      run.probe_sha = r.logits_sha256;
    }
  }
  return run;
}
}  // namespace

nlohmann::json run_speculative_bench(const Model& model, const SpecBenchConfig& cfg,
                                     const std::function<void(const SpecBenchRow&)>& on_row) {
  nlohmann::json rows = nlohmann::json::array();
  for (Mode mode : cfg.modes) {
    EngineOptions base;
    base.mode = mode;
    base.threads = cfg.threads;
    base.device = cfg.device;
    base.precision = cfg.precision;
    Engine off(model, base);
    for (const Speculative& sp : cfg.specs) {
      EngineOptions with = base;
      with.speculative = sp;
      Engine on(model, with);
      for (int b : cfg.batch_sizes) {
        const auto reqs = make_batch(model, cfg.prompt, b, cfg.max_tokens);
        std::vector<double> runs[2];
        SpecRun first[2];
        bool have[2] = {false, false};
        Engine* engines[2] = {&off, &on};
        interleaved(2, cfg.warmup, cfg.repeats, 0, [&](size_t m, bool counted) {
          SpecRun r = decode_spec(*engines[m], reqs);
          if (!have[m]) {
            first[m] = r;
            have[m] = true;
          }
          if (counted) runs[m].push_back(r.tok_s);
        });
        SpecBenchRow row;
        row.mode = mode_name(mode);
        row.speculative = speculative_name(sp);
        row.batch_size = b;
        row.off = summarize(std::move(runs[0]));
        row.on = summarize(std::move(runs[1]));
        row.ratio = row.off.mean > 0 ? row.on.mean / row.off.mean : 0;
        row.drafted = first[1].total.drafted;
        row.accepted = first[1].total.accepted;
        row.verify_steps = first[1].total.verify_steps;
        row.same_bits = first[0].probe_tokens == first[1].probe_tokens && first[0].probe_sha == first[1].probe_sha;
        if (!row.same_bits && mode != Mode::Default)
          throw BackendError("bench --speculative " + row.speculative + ": the " + row.mode + " engine gave the probe "
                             "other bits with speculation than without it at batch size " + std::to_string(b));
        on_row(row);
        rows.push_back({{"mode", row.mode},
                        {"speculative", row.speculative},
                        {"batch_size", b},
                        {"off", stats_json(row.off, cfg.noise_cv)},
                        {"on", stats_json(row.on, cfg.noise_cv)},
                        {"ratio", row.ratio},
                        {"drafted", row.drafted},
                        {"accepted", row.accepted},
                        {"verify_steps", row.verify_steps},
                        {"same_bits", row.same_bits}});
      }
    }
  }
  return rows;
}

}  // namespace repro::bench
