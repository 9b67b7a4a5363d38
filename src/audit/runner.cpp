// Executes the plan's cells and records every completion.
#include "repro/audit/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/core.h>
#include <map>
#include <tuple>
#include <optional>
#include <set>

#include "repro/audit/analysis.hpp"
#include "repro/audit/batch_context.hpp"
#include "repro/audit/remote_probe.hpp"
#include "repro/audit/cobatch.hpp"
#include "repro/remote/server_metrics.hpp"
#include "repro/audit/shards.hpp"
#include "repro/engine/engine.hpp"
#include "repro/kernels/backends.hpp"
#include "repro/model/synth.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/chat/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

using Clock = std::chrono::steady_clock;

std::string cell_key(const Completion& c) {
  return c.prompt_id + "|" + c.decoding_id + "|" + c.mode + "|" + c.precision + "|" + std::to_string(c.batch_size) +
         "|" + std::to_string(c.position) + "|" + c.filler_set + "|" + c.cache_state + "|" + std::to_string(c.repeat) +
         (c.mate_join_step != 0 ? "|j" + std::to_string(c.mate_join_step) : "") +
         (c.mate_prompt_delta != 0 ? "|d" + std::to_string(c.mate_prompt_delta) : "") +
         (c.mate_contents.empty() ? "" : "|m" + c.mate_contents) + (c.tp != 1 ? "|tp" + std::to_string(c.tp) : "") +
         (c.allreduce.empty() ? "" : "|" + c.allreduce) + (c.device.empty() ? "" : "|" + c.device) +
         (c.speculative.empty() ? "" : "|s" + c.speculative);
}

std::string progress_line(const ProgressState& p, int width) {
  double share = p.total_work > 0 ? static_cast<double>(p.done_work) / static_cast<double>(p.total_work) : 1.0;
  share = std::min(1.0, std::max(0.0, share));
  auto bar = [&](size_t w) {
    std::string b(static_cast<size_t>(static_cast<double>(w) * share), '=');
    b.resize(w, ' ');
    return "[" + b + "] ";
  };
  std::string eta = "ETA --";
  if (p.measured_work > 0 && p.measured_seconds > 0) {
    double rate = static_cast<double>(p.measured_work) / p.measured_seconds;  // tokens per second so far
    eta = fmt::format("ETA {:.0f}s", static_cast<double>(p.total_work - p.done_work) / rate);
  } else if (p.done_work >= p.total_work) {
    eta = "ETA 0s";
  }
  const std::string current = printable(p.current);  // a prompt id from a file: no raw control bytes
  const std::string full = fmt::format("{}/{} cells, {:.0f}% of tokens  {:.0f}s elapsed  {}", p.done_cells,
                                       p.total_cells, 100.0 * share, p.elapsed_s, eta);
  const std::string divergent = fmt::format("divergent cases: {}", p.divergent_cases);
  std::string line = bar(30) + full + (current.empty() ? "" : "  " + current) + "  " + divergent;
  // A redraw that wraps becomes a new line each time: the line fits the terminal (width - 1 columns,
  // so the cursor never lands in the last column). Shorter forms first drop the cell running now,
  // then shrink the bar and the words; the counts and the ETA stay.
  if (width <= 0 || display_width(line) < static_cast<size_t>(width)) return line;
  const size_t cols = static_cast<size_t>(width) - 1;
  const std::string compact = fmt::format("{}/{} {:.0f}% {} div {}", p.done_cells, p.total_cells, 100.0 * share,
                                          eta, p.divergent_cases);
  for (const std::string& form : {bar(30) + full + "  " + divergent, bar(20) + full + "  " + divergent,
                                  bar(10) + compact, compact}) {
    if (display_width(form) > cols) continue;
    // the room left goes to the cell running now, cut to fit
    const size_t room = cols - display_width(form);
    if (!current.empty() && room >= 8) return form + "  " + fit_columns(current, room - 2);
    return form;
  }
  return fit_columns(compact, cols);
}

namespace {

// A one-line progress bar on stderr; silent when stderr is not a terminal. The ETA comes from the
// tokens still to generate (probe and fillers of every batch), not from the count of cells: a cell
// at batch 64 is 64 times the work of a cell at batch 1.
class Progress {
 public:
  Progress(bool on, int total_cells, int64_t total_work)
      : on_(on && ::isatty(2)), start_(Clock::now()) {
    st_.total_cells = total_cells;
    st_.total_work = total_work;
  }
  ~Progress() { finish(); }
  // A cell finished: `work` tokens; `measured`: it ran now (false when resumed from a report).
  void tick(int64_t work, bool measured, const std::string& current, int divergent_cases, double cell_seconds = 0) {
    st_.done_cells++;
    st_.done_work += work;
    if (measured) st_.measured_work += work, st_.measured_seconds += cell_seconds;
    st_.current = current;
    st_.divergent_cases = divergent_cases;
    if (!on_) return;
    auto now = Clock::now();
    if (st_.done_cells < st_.total_cells && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    st_.elapsed_s = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s\x1b[K", progress_line(st_, terminal_columns(2)).c_str());  // a resize applies at the next redraw
    std::fflush(stderr);
    shown_ = true;
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\n");
    shown_ = false;
  }

 private:
  bool on_;
  ProgressState st_;
  Clock::time_point start_, last_{};
  bool shown_ = false;
};

// Counts the cases that diverged so far: a case (prompt, decoding, mode, precision) whose probes
// produced more than one token sequence (or text, when ids are unknown).
class DivergenceCounter {
 public:
  void add(const Completion& c) {
    if (!c.error.empty()) return;
    std::string key = c.prompt_id + "|" + c.decoding_id + "|" + c.mode + "|" + c.precision;
    std::string out = c.tokens_known ? std::string(reinterpret_cast<const char*>(c.tokens.data()),
                                                   c.tokens.size() * sizeof(int))
                                     : c.text;
    auto [it, added] = first_.emplace(key, out);
    if (!added && it->second != out) divergent_.insert(key);
  }
  int count() const { return static_cast<int>(divergent_.size()); }

 private:
  std::map<std::string, std::string> first_;
  std::set<std::string> divergent_;
};

struct Checkpointer {
  RunControl& ctl;
  Clock::time_point last = Clock::now();
  void maybe(const AuditReport& r) {
    if (ctl.checkpoint && Clock::now() - last > std::chrono::seconds(2)) {
      ctl.checkpoint(r);
      last = Clock::now();
    }
  }
};

void add_throughput(AuditReport& r, const std::string& mode, const std::string& precision, int batch, int64_t tokens,
                    double seconds) {
  for (auto& row : r.throughput)
    if (row.mode == mode && row.precision == precision && row.batch_size == batch) {
      add_throughput_run(row, tokens, seconds);
      return;
    }
  ThroughputRow row;
  row.mode = mode;
  row.precision = precision;
  row.batch_size = batch;
  add_throughput_run(row, tokens, seconds);
  r.throughput.push_back(row);
}

}  // namespace

void record_steps(const GenResult& g, Completion& c) {
  c.margins.clear();
  c.margins_rel.clear();
  c.top_ids.clear();
  c.top_logprobs.clear();
  c.top_k = g.steps.empty() ? 0 : kTopRecorded;
  for (const StepStats& st : g.steps) {
    c.margins.push_back(st.margin);
    c.margins_rel.push_back(st.margin_rel);
    c.top_ids.insert(c.top_ids.end(), st.top_ids, st.top_ids + kTopRecorded);
    c.top_logprobs.insert(c.top_logprobs.end(), st.top_logprobs, st.top_logprobs + kTopRecorded);
  }
  // The routing trace (a mixture of experts, DecodeParams::routing_trace): experts per step and
  // layer, and the margins, which are +infinity when every expert is chosen (no JSON form): then
  // none are written.
  c.routing.clear();
  c.routing_margins.clear();
  bool finite = true;
  for (const auto& step : g.routing) {
    std::vector<std::vector<int>> experts;
    std::vector<float> margins;
    for (const Route& rt : step) {
      experts.push_back(rt.experts);
      margins.push_back(rt.margin);
      finite = finite && std::isfinite(rt.margin);
    }
    c.routing.push_back(std::move(experts));
    c.routing_margins.push_back(std::move(margins));
  }
  if (!finite) c.routing_margins.clear();
}

namespace {

// Why a device of --devices cannot run here, in a few words ("no CUDA device (...)").
std::string device_absence(Device dev) {
  const kernels::Backend& b = kernels::backend(dev);
  if (!b.built) return std::string("this repro-audit was built without ") + b.name;
  const nlohmann::json d = b.describe(1);
  const nlohmann::json* gpu = d.contains("gpu") ? &d["gpu"] : nullptr;
  if (gpu && gpu->contains("device") && (*gpu)["device"].is_string()) {
    std::string why = (*gpu)["device"].get<std::string>();  // "none (the runtime's reason)"
    if (why.rfind("none (", 0) == 0 && why.back() == ')') why = why.substr(6, why.size() - 7);
    return "no CUDA device (" + why + ")";
  }
  return std::string("no ") + b.name + " device";
}

// A local cell's identity as its completion records it (run_local and local_cell_order).
Completion local_cell(const PlanOptions& plan, size_t pi, const DecodingCell& dc, const ContextCell& cx, int rep,
                      size_t pr, size_t mi) {
  Completion c;
  c.prompt_id = plan.prompts[pi].id;
  c.decoding_id = dc.cfg.id;
  c.mode = plan.modes[mi];
  c.precision = plan.precisions[pr];
  c.batch_size = cx.batch_size;
  c.position = cx.position;
  c.filler_set = cx.batch_size == 1 ? "" : "f" + std::to_string(cx.filler_set);  // no fillers alone
  c.mate_join_step = cx.mate_join_step;
  c.mate_prompt_delta = cx.mate_prompt_delta;
  c.mate_contents = cx.other_contents ? "other" : "";
  c.tp = cx.tp;
  c.allreduce = cx.allreduce;
  c.device = cx.device;
  c.speculative = cx.speculative;
  c.seed = dc.seed;
  c.repeat = rep;
  return c;
}

}  // namespace

std::vector<std::string> local_cell_order(const PlanOptions& plan) {
  std::vector<std::string> keys;
  const auto decodings = decoding_cells(plan);
  const auto contexts = context_cells(plan);
  for (size_t pi = 0; pi < plan.prompts.size(); ++pi)
    for (const auto& dc : decodings)
      for (const auto& cx : contexts)
        for (int rep = 0; rep < plan.repeats; ++rep)
          for (size_t pr = 0; pr < plan.precisions.size(); ++pr)
            for (size_t mi = 0; mi < plan.modes.size(); ++mi)
              keys.push_back(cell_key(local_cell(plan, pi, dc, cx, rep, pr, mi)));
  return keys;
}

constexpr size_t kWarmupPromptTokens = 16;
constexpr int kWarmupTokens = 4;

void run_local(const PlanOptions& plan, const Model& model, AuditReport& report, RunControl& ctl) {
  // Completions of reports written before precisions were a plan axis ran at the plan's one precision.
  if (plan.precisions.size() == 1)
    for (auto& c : report.completions)
      if (c.precision.empty()) c.precision = plan.precisions[0];
  std::set<std::string> done;
  for (const auto& c : report.completions) done.insert(cell_key(c));
  // Chat prompts are rendered with the model's chat template (the plain format keeps the plan's
  // text); a template's special tokens are matched verbatim (Tokenizer::encode_special), and so are
  // those of completion prompts under --parse-special.
  const bool templated = model.chat_template.name != "plain";
  std::vector<std::string> texts;
  for (const auto& p : plan.prompts) {
    const bool chat = templated && p.messages.is_array() && !p.messages.empty();
    // Content that spells a control token would become one: a user message could open a system turn.
    if (chat && !plan.allow_control_tokens)
      if (auto m = find_control_text(p.messages, model.tokenizer->control_tokens()))
        throw UsageError(
            "prompt '" + p.id + "' message " + std::to_string(m->message) + " (" + m->role +
            "): its content holds '" + printable(m->marker) + "', a control token of the " +
            (model.chat_template.name == "jinja" ? "chat template (" + model.chat_template.origin + ")"
                                                 : model.chat_template.name + " chat template") +
            ", which would become that token (a message could "
            "end its turn and open another, a system turn); remove it, or pass --allow-control-tokens "
            "to audit the prompt as written");
    texts.push_back(chat ? render_chat(p.messages, model.chat_template, "prompt '" + p.id + "' messages",
                                       ChatExtras{p.tools, p.chat_template_kwargs})
                         : p.text);
    // A resumed run renders again: its text must be the one the finished completions had. It can
    // differ when the template reads the clock (strftime_now), or when tools or tool-call
    // arguments were written with keys out of sorted order (the report keeps JSON keys sorted).
    if (chat && !report.completions.empty()) {
      auto had = report.prompts.find(p.id);
      const bool ran = std::any_of(report.completions.begin(), report.completions.end(),
                                   [&](const Completion& c) { return c.prompt_id == p.id; });
      if (ran && had != report.prompts.end() && had->second != texts.back())
        throw UsageError("prompt '" + p.id + "': the chat template renders it differently than in the run being " +
                         "resumed (a template that reads the date: pin SOURCE_DATE_EPOCH; tools or tool-call " +
                         "arguments whose keys are not in sorted order, which the report does not keep: give " +
                         "--prompts FILE again); start a new run otherwise");
    }
    report.prompts[p.id] = texts.back();
  }

  // The devices the cells run on: the engine's --device, or (run --devices) each device of the
  // axis this machine has. A device it lacks (no CUDA device) is skipped with a note, and the report
  // says it was not checked (Summary::device_findings); its cells never run.
  std::vector<std::pair<std::string, Device>> devices;
  if (plan.devices.empty()) devices.push_back({"", ctl.device});
  if (report.plan.is_object()) report.plan.erase("devices_skipped");  // a resumed run says what it skips now
  for (const auto& d : plan.devices) {
    const Device dev = parse_device(d, "--devices");
    if (kernels::backend(dev).present()) {
      devices.push_back({d, dev});
      continue;
    }
    const std::string why = device_absence(dev);
    std::fprintf(stderr, "note: --devices %s: %s; the %s leg is skipped (the other devices run)\n", d.c_str(),
                 why.c_str(), d.c_str());
    if (report.plan.is_object()) report.plan["devices_skipped"][d] = why;
  }
  auto device_index = [&](const std::string& name) -> int {
    for (size_t i = 0; i < devices.size(); ++i)
      if (devices[i].first == name) return static_cast<int>(i);
    return -1;
  };

  // The speculative settings of the axis (run --speculative): "" (none, no axis) or each setting; a
  // draft model is read once per file, and its vocabulary is checked when the first engine is made.
  std::vector<std::string> spec_names = plan.speculative;
  if (spec_names.empty()) spec_names.push_back("");
  std::vector<Speculative> specs;
  std::map<std::string, std::shared_ptr<const Model>> drafts;
  for (const auto& name : spec_names) {
    Speculative sp = name.empty() ? Speculative{} : parse_speculative(name, "--speculative");
    if (sp.kind == DraftKind::Model) {
      auto& d = drafts[sp.draft_file];
      try {
        if (!d) d = std::shared_ptr<const Model>(load_model(resolve_model_spec(sp.draft_file)));
      } catch (const UsageError& e) {
        throw UsageError("--speculative " + name + ": " + e.what());
      }
      sp.draft = d;
    }
    specs.push_back(sp);
  }
  auto spec_index = [&](const std::string& name) -> size_t {
    for (size_t i = 0; i < spec_names.size(); ++i)
      if (spec_names[i] == name) return i;
    throw std::logic_error("runner: a context's speculative setting is not the plan's");
  };

  // One engine per (device, precision, mode, speculative setting), and per TP size and all-reduce
  // order, reused across cells (each batch leaves it empty); the TP ones are made when their first
  // cell runs. All the others are made here, so a weight type a device's table does not read, or a
  // draft of another vocabulary, fails before any cell.
  std::vector<Precision> precisions;
  for (const auto& p : plan.precisions) precisions.push_back(parse_precision(p, "--precisions"));
  auto options = [&](size_t di, size_t pr, size_t mi, size_t si) {
    EngineOptions eo{parse_mode(plan.modes[mi]), plan.threads, devices[di].second, precisions[pr]};
    eo.speculative = specs[si];
    return eo;
  };
  std::map<std::tuple<size_t, size_t, size_t, size_t>, std::unique_ptr<Engine>> engines;
  for (size_t di = 0; di < devices.size(); ++di)
    for (size_t pr = 0; pr < precisions.size(); ++pr)
      for (size_t mi = 0; mi < plan.modes.size(); ++mi)
        for (size_t si = 0; si < specs.size(); ++si)
          engines[{di, pr, mi, si}] = std::make_unique<Engine>(model, options(di, pr, mi, si));
  std::map<std::tuple<size_t, size_t, size_t, size_t, int, std::string>, std::unique_ptr<Engine>> tp_engines;
  auto engine_for = [&](size_t pr, size_t mi, const ContextCell& cx) -> Engine& {
    const size_t di = static_cast<size_t>(device_index(cx.device));
    const size_t si = spec_index(cx.speculative);
    if (cx.tp == 1) return *engines.at({di, pr, mi, si});
    auto& e = tp_engines[{di, pr, mi, si, cx.tp, cx.allreduce}];
    if (!e) {
      EngineOptions eo = options(di, pr, mi, si);
      eo.tp = cx.tp;
      eo.allreduce = parse_allreduce(cx.allreduce.empty() ? "ring" : cx.allreduce, "--allreduce");
      e = std::make_unique<Engine>(model, eo);
    }
    return *e;
  };

  const auto decodings = decoding_cells(plan);
  auto contexts = context_cells(plan);
  std::erase_if(contexts, [&](const ContextCell& cx) { return device_index(cx.device) < 0; });  // skipped devices
  // Numeric positions a smaller batch of the sweep cannot hold: said on stderr and in the plan block.
  if (auto skipped = skipped_positions(plan); !skipped.empty()) {
    nlohmann::json rec = nlohmann::json::array();
    for (const auto& s : skipped) {
      std::string list;
      for (int p : s.positions) list += (list.empty() ? "" : ",") + std::to_string(p);
      std::fprintf(stderr,
                   "note: --positions %s: batch size %d has positions 0 to %d only; it runs at the others\n",
                   list.c_str(), s.batch_size, s.batch_size - 1);
      rec.push_back({{"batch_size", s.batch_size}, {"positions", s.positions}});
    }
    if (report.plan.is_object()) report.plan["positions_skipped"] = rec;
  }
  // Structured output: one compiled schema and vocabulary trie for every probe (fillers stay free).
  // A schema the vocabulary cannot spell is a UsageError here, before any cell runs.
  std::shared_ptr<const JsonConstraint> constraint;
  if (!plan.json_schema.is_null())
    constraint = std::make_shared<JsonConstraint>(json_schema_of(plan), json_schema_where(plan), *model.tokenizer);
  std::vector<std::vector<int>> prompt_ids;
  for (size_t i = 0; i < plan.prompts.size(); ++i) {
    const auto& p = plan.prompts[i];
    const bool messages = p.messages.is_array() && !p.messages.empty();
    const bool special = messages ? templated : plan.parse_special;
    prompt_ids.push_back(special ? model.tokenizer->encode_special(texts[i], true) : model.tokenizer->encode(texts[i], true));
    report.prompt_token_ids[p.id] = prompt_ids.back();
  }
  for (size_t i = 0; i < plan.prompts.size(); ++i)
    if (static_cast<int>(prompt_ids[i].size()) + plan.max_tokens > model.config.context_length)
      throw UsageError("prompt '" + plan.prompts[i].id + "' (" + std::to_string(prompt_ids[i].size()) +
                       " tokens) + --max-tokens " + std::to_string(plan.max_tokens) +
                       " exceeds the model's context length " + std::to_string(model.config.context_length) +
                       "; shorten the prompt or lower --max-tokens");

  // --shard K/N: the cases of this shard only (all of them without a shard).
  const std::vector<std::string> mine_list = shard_case_ids(plan, {});
  const std::set<std::string> mine(mine_list.begin(), mine_list.end());
  // Work in tokens: every sequence of a batch generates up to max_tokens (fillers may stop earlier).
  int64_t per_case_work = 0;
  for (const auto& cx : contexts) per_case_work += static_cast<int64_t>(cx.batch_size) * plan.max_tokens;
  per_case_work *= plan.repeats;
  const int64_t total_work = per_case_work * static_cast<int64_t>(mine.size());
  const int total = static_cast<int>(mine.size() * contexts.size() * static_cast<size_t>(plan.repeats));
  Progress progress(ctl.progress, total, total_work);
  DivergenceCounter diverged;
  for (const auto& c : report.completions) diverged.add(c);
  Checkpointer cp{ctl};
  // Warm-up, not measured and not recorded: one short request per engine (the first prompt's first
  // kWarmupPromptTokens tokens, kWarmupTokens new tokens, alone) before the first cell, so the first
  // measured cell of each mode does not pay for starting threads, faulting in memory-mapped weights
  // and cold caches. Its tokens never reach the report; every engine is empty again afterwards.
  if (static_cast<int>(done.size()) < total && total > 0 && !prompt_ids.empty() && !prompt_ids[0].empty())
    for (auto& [key, engine] : engines) {
        if (ctl.stop && ctl.stop->load()) return;
        GenRequest w;
        w.prompt.assign(prompt_ids[0].begin(),
                        prompt_ids[0].begin() + std::min<size_t>(prompt_ids[0].size(), kWarmupPromptTokens));
        w.params.max_tokens = std::min(kWarmupTokens, plan.max_tokens);
        engine->generate({w});
      }
  for (size_t pi = 0; pi < plan.prompts.size(); ++pi)
    for (const auto& dc : decodings)
      for (const auto& cx : contexts)
        for (int rep = 0; rep < plan.repeats; ++rep)
          for (size_t pr = 0; pr < precisions.size(); ++pr)
          for (size_t mi = 0; mi < plan.modes.size(); ++mi) {  // modes and precisions interleaved: side-by-side timing
            if (ctl.stop && ctl.stop->load()) return;
            Completion c = local_cell(plan, pi, dc, cx, rep, pr, mi);
            if (!mine.count(case_id(c))) continue;  // another shard's case
            const int64_t work = static_cast<int64_t>(cx.batch_size) * plan.max_tokens;
            const std::string current = fmt::format("{} {} batch {}{}{}{}", c.mode, c.precision, cx.batch_size,
                                                    cx.tp == 1 ? "" : " tp " + std::to_string(cx.tp),
                                                    cx.device.empty() ? "" : " " + cx.device,
                                                    cx.speculative.empty() ? "" : " spec " + cx.speculative);
            if (done.count(cell_key(c))) {
              progress.tick(work, false, current, diverged.count());
              continue;
            }
            GenRequest req;
            req.prompt = prompt_ids[pi];
            req.params.max_tokens = dc.cfg.max_tokens;
            req.params.temperature = static_cast<float>(dc.cfg.temperature);
            req.params.top_p = static_cast<float>(dc.cfg.top_p);
            req.params.top_k = dc.cfg.top_k;
            req.params.seed = dc.seed;
            req.params.json_schema = constraint;
            req.params.routing_trace = model.config.is_moe();  // the probe's routes (src/audit/routing.cpp)
            BatchContext bc{cx.batch_size, cx.position, plan.filler_seed + static_cast<uint64_t>(cx.filler_set),
                            cx.mate_join_step, cx.mate_prompt_delta, plan.prompt_tokens, cx.other_contents};
            Engine& engine = engine_for(pr, mi, cx);
            BatchRun run = run_in_batch(engine, req, bc);
            int64_t gen_tokens = run.generated_tokens;
            double gen_seconds = run.seconds;
            if (constraint) {
              // Validation with retry: an answer that does not conform is requested again, in the same
              // batch context (sampled configs with the next seed: the same seed would repeat it).
              c.schema_valid = constraint->schema.validate(run.probe.text);
              for (int k = 1; k <= plan.retry_invalid && !*c.schema_valid; ++k) {
                if (k == 1) {
                  c.first_text = run.probe.text;
                  c.first_tokens = run.probe.tokens;
                }
                c.retries++;
                c.retry_tokens += static_cast<int64_t>(run.probe.tokens.size());
                GenRequest again = req;
                if (dc.cfg.temperature > 0) again.params.seed = dc.seed + static_cast<uint64_t>(k);
                run = run_in_batch(engine, again, bc);
                gen_tokens += run.generated_tokens;
                gen_seconds += run.seconds;
                c.schema_valid = constraint->schema.validate(run.probe.text);
              }
            }
            const GenResult& g = run.probe;
            c.filler_ids = run.fillers.ids;
            c.tokens = g.tokens;
            c.text = g.text;
            c.logprobs = g.logprobs;
            c.logits_sha256 = g.logits_sha256;
            record_steps(g, c);
            c.finish_reason = g.finish_reason;
            c.latency_s = g.latency_s;
            c.tokens_per_s = g.latency_s > 0 ? g.tokens.size() / g.latency_s : 0;
            c.batch_tokens = run.generated_tokens;  // the whole cell: probe and batch mates
            c.batch_seconds = run.seconds;
            c.prompt_tokens = g.prompt_tokens;
            c.completion_tokens = static_cast<int>(g.tokens.size());
            c.spec_drafted = g.spec.drafted;
            c.spec_accepted = g.spec.accepted;
            c.spec_verify_steps = g.spec.verify_steps;
            diverged.add(c);
            report.completions.push_back(std::move(c));
            // A mode's throughput is its first device's without speculation (the trade-off table compares
            // modes on one device; speculation has its own rows).
            if (device_index(cx.device) == 0 && (cx.speculative.empty() || cx.speculative == "off"))
              add_throughput(report, plan.modes[mi], plan.precisions[pr], cx.batch_size, gen_tokens, gen_seconds);
            progress.tick(work, true, current, diverged.count(), gen_seconds);
            cp.maybe(report);
          }
}

// --routed-experts: an endpoint none of whose probe completions carries routing gets one note on
// stderr and one finding line (its posture's findings), never one per request.
static void note_unknown_routing(const std::vector<EndpointSpec>& endpoints, AuditReport& report) {
  for (const auto& ep : endpoints) {
    bool any = false, answered = false;
    std::string why;
    for (const auto& c : report.completions) {
      if (c.mode != ep.label || !c.error.empty()) continue;
      answered = true;
      any = any || !c.routing.empty();
      if (why.empty()) why = c.routing_error;
    }
    if (any || !answered) continue;
    std::string line = "routing unknown: ";
    if (ep.provider != Provider::sglang && ep.provider != Provider::vllm)
      line += "no dialect for routed experts is known for provider '" + std::string(provider_name(ep.provider)) +
              "' (sglang and vllm have one)";
    else if (!why.empty())
      line += "the routed experts the server returned could not be read (" + why + ")";
    else
      line += "the responses carry no routed experts (a dense model has none; on a mixture of experts start the "
              "server with --enable-return-routed-experts)";
    EndpointEvidence& ev = evidence_for(report, ep.label);
    if (std::find(ev.posture.findings.begin(), ev.posture.findings.end(), line) == ev.posture.findings.end())
      ev.posture.findings.push_back(line);
    std::fprintf(stderr, "note: endpoint '%s': %s\n", ep.label.c_str(), line.c_str());
  }
}

void run_remote(const PlanOptions& plan, const std::vector<EndpointSpec>& endpoints, AuditReport& report,
                RunControl& ctl) {
  std::set<std::string> done;
  for (const auto& c : report.completions) done.insert(cell_key(c));
  for (const auto& p : plan.prompts) report.prompts[p.id] = p.text;
  const auto decodings = decoding_cells(plan);
  std::vector<std::string> fillers = filler_pool();
  // --shard K/N: the cases (prompt, decoding, endpoint) of this shard only.
  std::vector<std::string> labels;
  for (const auto& ep : endpoints) labels.push_back(ep.label);
  const std::vector<std::string> mine_list = shard_case_ids(plan, labels);
  const std::set<std::string> mine(mine_list.begin(), mine_list.end());
  const size_t isolation_arms =
      plan.isolation ? static_cast<size_t>(std::count_if(plan.concurrency.begin(), plan.concurrency.end(),
                                                         [](int c) { return c > 1; }))
                     : 0;
  const int total =
      static_cast<int>(mine.size() * (plan.concurrency.size() + isolation_arms + (plan.cache_probe ? 1 : 0)));
  // Work in tokens: the probes of each cell (fillers load the server but are not the audit's work).
  const int64_t per_cell = static_cast<int64_t>(plan.repeats) * plan.max_tokens;
  Progress progress(ctl.progress, total, per_cell * total);
  DivergenceCounter diverged;
  for (const auto& c : report.completions) diverged.add(c);
  Checkpointer cp{ctl};
  // Structured output: the schema goes out as each provider's response_format; answers are checked here.
  std::shared_ptr<const JsonSchema> validator;
  if (!plan.json_schema.is_null())
    validator = std::make_shared<const JsonSchema>(json_schema_of(plan), json_schema_where(plan));
  // Request statistics per endpoint, over every segment of the run: a resumed report carries the
  // earlier segments' (record_provenance keeps them), and this segment's requests are added.
  std::map<std::string, RemoteStats> per_endpoint;
  if (report.environment.is_object() && report.environment.contains("remote_stats") &&
      report.environment["remote_stats"].is_object())
    for (const auto& ep : endpoints)
      if (report.environment["remote_stats"].contains(ep.label))
        per_endpoint[ep.label] = RemoteStats::from_json(report.environment["remote_stats"][ep.label]);
  std::map<std::string, std::string> no_metrics;  // endpoint -> why its running count is unknown
  auto publish_stats = [&] {
    nlohmann::json stats = nlohmann::json::object();
    for (auto& [label, st] : per_endpoint) stats[label] = st.to_json();
    report.environment["remote_stats"] = stats;
  };
  // The seed probe (--seed-probe): per endpoint and API path, before the levels; a resumed run keeps
  // the probes it finished.
  if (plan.seed_probe && !plan.prompts.empty())
    for (const auto& ep : endpoints)
      for (const char* api : {"completions", "chat"}) {
        if (ctl.stop && ctl.stop->load()) break;
        EndpointEvidence& ev = evidence_for(report, ep.label);
        if (std::any_of(ev.seeds.begin(), ev.seeds.end(), [&](const SeedProbeResult& s) { return s.api == api; }))
          continue;
        EndpointSpec spec = ep;
        spec.api = api;
        RemoteProbe probe;
        probe.prompt_id = plan.prompts[0].id;
        probe.prompt = plan.prompts[0].text;
        probe.messages = plan.prompts[0].messages;
        probe.decoding.max_tokens = plan.max_tokens;
        probe.seed = plan.seeds.empty() ? 1 : plan.seeds[0];
        RemoteStats st;
        SeedProbeResult res = run_seed_probe(spec, probe, kSeedProbeSeeds, ctl.stop, &st);
        per_endpoint[ep.label].merge(st);
        if (ctl.stop && ctl.stop->load()) break;  // an interrupted probe is not a result
        evidence_for(report, ep.label).seeds.push_back(std::move(res));
      }
  for (size_t pi = 0; pi < plan.prompts.size(); ++pi)
    for (const auto& dc : decodings)
      for (const auto& ep : endpoints) {
        if (!mine.count(case_id(plan.prompts[pi].id, dc.cfg.id, ep.label, ""))) continue;  // another shard's
        RemoteProbe probe;
        probe.prompt_id = plan.prompts[pi].id;
        probe.prompt = plan.prompts[pi].text;
        probe.messages = plan.prompts[pi].messages;
        probe.tools = plan.prompts[pi].tools;
        probe.chat_template_kwargs = plan.prompts[pi].chat_template_kwargs;
        probe.decoding = dc.cfg;
        probe.seed = dc.seed;
        probe.logprobs = provider_supports_logprobs(ep.provider);
        probe.routed_experts = plan.routed_experts;
        probe.fillers = fillers;
        probe.json_schema = plan.json_schema;
        probe.validator = validator;
        probe.retry_invalid = plan.retry_invalid;
        // Requests that finished before an interruption are not sent again (--resume): a level's
        // probes run one after another, so what finished is a prefix of its repeats.
        auto finished_prefix = [&](int batch, bool cache, int n, const std::string& mates = "") {
          Completion k;
          k.prompt_id = probe.prompt_id;
          k.decoding_id = dc.cfg.id;
          k.mode = ep.label;
          k.batch_size = batch;
          k.seed = dc.seed;
          k.mate_contents = mates;
          int r = 0;
          for (; r < n; ++r) {
            k.repeat = r;
            k.cache_state = !cache ? "" : r == 0 ? "cold" : "warm";
            if (!done.count(cell_key(k))) break;
          }
          return r;
        };
        auto keep = [&](std::vector<Completion> cs) {
          for (auto& c : cs) {
            c.decoding_id = dc.cfg.id;
            if (c.error.empty() && c.text.empty() && c.tokens.empty())  // HTTP 200, but nothing generated
              c.error = "empty_content: the response carries no generated text (finish_reason '" + c.finish_reason +
                        "')";
            if (done.count(cell_key(c))) continue;
            diverged.add(c);
            report.completions.push_back(std::move(c));
          }
        };
        // --isolation: the level again, its fillers' words in reverse order (other contents, the same
        // token counts where the server's usage says so); analyze_isolation compares the probes.
        auto run_isolation_arm = [&](const EndpointSpec& spec, const RemoteProbe& drawn, int conc,
                                     const std::map<std::string, int>& drawn_tokens) {
          RemoteProbe other = drawn;
          other.mate_contents = "other";
          other.fillers.clear();
          for (const auto& f : drawn.fillers) other.fillers.push_back(other_contents_text(f));
          other.first_repeat = finished_prefix(conc, false, plan.repeats, "other");
          const std::string what = spec.label + " concurrency " + std::to_string(conc) + ", other filler contents";
          if (other.first_repeat >= plan.repeats) {
            progress.tick(per_cell, false, what, diverged.count());
            return;
          }
          RemoteStats st;
          std::map<std::string, int> other_tokens;
          auto t0 = Clock::now();
          keep(run_remote_probe(spec, other, conc, plan.repeats, ctl.stop, nullptr, &st, &other_tokens));
          progress.tick(per_cell, true, what, diverged.count(), std::chrono::duration<double>(Clock::now() - t0).count());
          per_endpoint[spec.label].merge(st);
          EndpointEvidence& ev = evidence_for(report, spec.label);
          for (auto& l : ev.levels) {
            if (l.concurrency != conc) continue;
            for (const auto& f : drawn.fillers) {
              auto a = drawn_tokens.find(f);
              auto b = other_tokens.find(other_contents_text(f));
              if (a == drawn_tokens.end() || b == other_tokens.end()) continue;
              ++l.isolation_fillers;
              l.isolation_same_tokens += a->second == b->second;
            }
          }
          publish_stats();
          cp.maybe(report);
        };
        if (plan.cache_probe) {
          if (ctl.stop && ctl.stop->load()) break;
          RemoteStats st;
          auto t0 = Clock::now();
          const int warm = std::max(1, plan.repeats - 1);
          RemoteProbe rest = probe;
          rest.first_repeat = finished_prefix(1, true, warm + 1);
          keep(run_cache_probe(ep, rest, warm, ctl.stop, &st));
          per_endpoint[ep.label].merge(st);
          progress.tick(per_cell, true, ep.label + " cache probe", diverged.count(),
                        std::chrono::duration<double>(Clock::now() - t0).count());
        }
        for (int conc : plan.concurrency) {
          if (ctl.stop && ctl.stop->load()) break;
          RemoteStats st;
          RemoteProbe rest = probe;
          rest.first_repeat = finished_prefix(conc, false, plan.repeats);
          if (rest.first_repeat >= plan.repeats) {  // the whole level finished before
            progress.tick(per_cell, false, ep.label + " concurrency " + std::to_string(conc), diverged.count());
            if (plan.isolation && conc > 1) run_isolation_arm(ep, probe, conc, {});
            continue;
          }
          auto t0 = Clock::now();
          // The server's own running count while the level runs (/metrics, /slots); an endpoint
          // that exposed none at its first level is not asked again.
          ServerMetricsSummary server;
          std::optional<ServerMetricsSampler> sampler;
          if (auto it = no_metrics.find(ep.label); it != no_metrics.end()) {
            server.status = it->second;
          } else {
            sampler.emplace(ep);
            sampler->start();
          }
          std::map<std::string, int> drawn_tokens;  // filler text -> prompt tokens (server usage)
          auto cs = run_remote_probe(ep, rest, conc, plan.repeats, ctl.stop, nullptr, &st, &drawn_tokens);
          double secs = std::chrono::duration<double>(Clock::now() - t0).count();
          if (sampler) {
            server = sampler->stop();
            if (!server.known() && server.samples == 0) no_metrics[ep.label] = server.status;
          }
          record_level(report, ep.label, conc, cs, server);
          int64_t toks = 0;
          for (const auto& c : cs) toks += c.completion_tokens > 0 ? c.completion_tokens : 0;
          // Throughput of the probe stream under load (fillers load the server; their tokens are not counted).
          add_throughput(report, ep.label, "", conc, toks, secs);
          keep(std::move(cs));
          per_endpoint[ep.label].merge(st);
          progress.tick(per_cell, true, ep.label + " concurrency " + std::to_string(conc), diverged.count(), secs);
          publish_stats();  // a checkpoint carries the statistics of what it holds
          cp.maybe(report);
          if (plan.isolation && conc > 1 && !(ctl.stop && ctl.stop->load()))
            run_isolation_arm(ep, probe, conc, drawn_tokens);
        }
      }
  publish_stats();
  if (plan.routed_experts) note_unknown_routing(endpoints, report);
}

}  // namespace repro
