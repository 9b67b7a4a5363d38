// The remote audit pieces the runner calls: the closed-loop probe at one concurrency level and the
// cold/warm prefix-cache probe. Both run one RemoteClient loop on the calling thread, and turn the
// client's responses into Completion records here (the client knows nothing of audits).
#include "repro/audit/remote_probe.hpp"

#include "repro/audit/cobatch.hpp"

#include <algorithm>
#include <optional>

#include "repro/chat/chat.hpp"
#include "repro/common/error.hpp"
#include "repro/openai/routed_experts.hpp"

namespace repro {

Completion completion_from(const RemoteResult& res) {
  Completion c;
  c.decoding_id = res.decoding_id;
  c.seed = res.seed;
  c.attempts = res.attempts;
  if (!res.error.empty() || res.cause != FailCause::none) {
    c.tokens_known = false;
    c.error = res.error;
    return c;
  }
  const ParsedResponse& r = res.response;
  c.text = r.text;
  c.tokens_known = r.tokens_known;
  c.tokens = r.tokens;
  c.logprobs = r.logprobs;
  if (r.tokens_known && r.token_pieces.size() == r.tokens.size()) c.token_pieces = r.token_pieces;
  c.finish_reason = r.finish_reason;
  c.system_fingerprint = r.system_fingerprint;
  c.response_model = r.model;
  c.response_id = r.id;
  c.created = r.created;
  c.cache_header = res.cache_header;
  c.server_max_batch = r.max_batch;  // the server's own word (repro-audit serve), -1 when it says nothing
  c.prompt_tokens = std::max(0, r.prompt_tokens);
  if (r.completion_tokens >= 0)
    c.completion_tokens = r.completion_tokens;
  else if (r.tokens_known)
    c.completion_tokens = static_cast<int>(r.tokens.size());
  else
    c.completion_tokens = static_cast<int>(r.logprobs.size());
  // Routed experts (--routed-experts): one route per generated token, as the local trace; no margins.
  if (!r.routed_experts.is_null()) {
    RoutedDecode d = decode_routed_experts(r.routed_experts, r.prompt_tokens, c.completion_tokens);
    c.routing = std::move(d.steps);
    c.routing_error = d.error;
  }
  c.latency_s = res.latency_s;
  c.ttft_s = res.ttft_s;
  c.tokens_per_s = res.latency_s > 0 ? c.completion_tokens / res.latency_s : 0;
  return c;
}

namespace {

RequestParams probe_params(const EndpointSpec& spec, const RemoteProbe& probe) {
  RequestParams p;
  const DecodingConfig& d = probe.decoding;
  p.decoding = RequestDecoding{d.id, d.temperature, d.top_p, d.top_k, d.max_tokens};
  p.seed = probe.seed;
  p.stop = probe.stop;
  p.logprobs = probe.logprobs;
  p.routed_experts = probe.routed_experts;
  p.json_schema = probe.json_schema;
  const bool have_messages = probe.messages.is_array() && !probe.messages.empty();
  if (spec.api == "chat") {
    p.messages = have_messages ? probe.messages : nlohmann::ordered_json();
    p.prompt = probe.prompt;
    p.tools = probe.tools;
    p.chat_template_kwargs = probe.chat_template_kwargs;
  } else {
    if (!probe.tools.is_null() || !probe.chat_template_kwargs.is_null())
      throw UsageError("probe '" + probe.prompt_id + "': its tools or chat_template_kwargs need the chat API; the "
                       "completions API renders messages in the plain format, which has no place for them (use "
                       "api=chat for this endpoint)");
    p.prompt = have_messages && probe.prompt.empty() ? render_chat(probe.messages, "probe '" + probe.prompt_id + "' messages")
                                                     : probe.prompt;
  }
  return p;
}

void check_args(const EndpointSpec& spec, int concurrency, int repeats) {
  validate_endpoint(spec);
  if (concurrency < 1 || concurrency > 65536)
    throw UsageError("--concurrency " + std::to_string(concurrency) + " is out of range; use 1..65536");
  if (repeats < 0) throw UsageError("--repeats must be >= 0");
}

// One probe request with its retries (--retry-invalid): send() submits attempt `retries`; the answer
// either conforms (or is out of retries, or failed) and goes to `finish`, or is discarded and the
// request is sent again with the next seed (sampled configs).
struct Attempt {
  int repeat = 0;
  int retries = 0;
  int64_t retry_tokens = 0;
  std::string first_text;
  std::vector<int> first_tokens;
  bool failed = false;             // the last request failed after the client's retries
  long lifetime = -1;              // the last request's index in the level's lifetimes (-1: none kept)
  double first_byte = -1;          // the last request's first byte (monotonic clock)
};

using Lifetime = std::function<long(const RemoteResult&)>;

void send_attempt(RemoteClient& client, const RequestParams& pp, const RemoteProbe& probe, Attempt at,
                  std::function<void(Completion&&, const Attempt&)> finish, Lifetime lifetime = nullptr) {
  RequestParams q = pp;
  if (at.retries > 0 && probe.decoding.temperature > 0) q.seed = probe.seed + static_cast<uint64_t>(at.retries);
  client.submit(q, [&client, pp, &probe, at, finish, lifetime](RemoteResult&& res) mutable {
    at.lifetime = lifetime ? lifetime(res) : -1;
    if (res.aborted) return;
    at.failed = res.cause != FailCause::none;
    at.first_byte = res.t_first_byte;
    Completion c = completion_from(res);
    if (probe.validator && !at.failed && c.error.empty()) {
      c.schema_valid = probe.validator->validate(c.text);
      if (!*c.schema_valid && at.retries < probe.retry_invalid) {
        if (at.retries == 0) {
          at.first_text = c.text;
          at.first_tokens = c.tokens;
        }
        at.retries++;
        at.retry_tokens += c.completion_tokens;
        send_attempt(client, pp, probe, at, finish, lifetime);
        return;
      }
    }
    c.retries = at.retries;
    c.retry_tokens = at.retry_tokens;
    c.first_text = at.first_text;
    c.first_tokens = at.first_tokens;
    finish(std::move(c), at);
  });
}

void stamp(Completion& c, const EndpointSpec& spec, const RemoteProbe& probe, int batch, int repeat) {
  c.prompt_id = probe.prompt_id;
  c.decoding_id = probe.decoding.id;
  c.mode = spec.label;
  c.batch_size = batch;
  c.seed = probe.seed;
  c.repeat = repeat;
}

}  // namespace

std::vector<Completion> run_remote_probe(const EndpointSpec& spec, const RemoteProbe& probe, int concurrency,
                                         int repeats, const std::atomic<bool>* stop,
                                         std::function<void(int done, int total)> progress, RemoteStats* stats,
                                         std::map<std::string, int>* filler_tokens) {
  check_args(spec, concurrency, repeats);
  std::vector<Completion> out;
  const int first = std::max(0, probe.first_repeat);
  if (repeats <= first) return out;
  RemoteClient client(spec, concurrency + 4);
  const RequestParams pp = probe_params(spec, probe);
  // Every request's lifetime (probes and fillers, aborted ones to their abort), and which of them
  // are the probes that finished: the co-batching evidence on the client side.
  const double t0 = monotonic_seconds();
  std::vector<Interval> lifetimes;
  std::vector<std::pair<size_t, size_t>> probe_at;  // (index into out, index into lifetimes)
  auto lifetime = [&](const RemoteResult& res) -> long {
    if (res.t_send < 0) return -1;
    lifetimes.push_back({res.t_send, res.t_last_byte >= res.t_send ? res.t_last_byte : res.t_send});
    return static_cast<long>(lifetimes.size()) - 1;
  };

  int next_repeat = first, probes_done = first;
  std::function<void()> submit_probe = [&] {
    Attempt at;
    at.repeat = next_repeat++;
    send_attempt(client, pp, probe, at, [&](Completion&& c, const Attempt& a) {
      if (a.failed) ++client.stats().probe_failed;
      if (a.first_byte >= 0) c.first_byte_s = a.first_byte - t0;
      const int r = a.repeat;
      stamp(c, spec, probe, concurrency, r);
      c.mate_contents = probe.mate_contents;
      if (a.lifetime >= 0) probe_at.emplace_back(out.size(), static_cast<size_t>(a.lifetime));
      out.push_back(std::move(c));
      ++probes_done;
      if (progress) progress(probes_done, repeats);
      if (probes_done >= repeats)
        client.cancel();  // fillers still in flight are aborted: they only load the server
      else
        submit_probe();
    }, lifetime);
  };

  uint64_t filler_seq = 0;
  std::function<void()> submit_filler = [&] {
    const uint64_t i = filler_seq++;
    RemoteProbe f;
    f.prompt_id = "filler";
    f.prompt = probe.fillers.empty() ? probe.prompt : probe.fillers[i % probe.fillers.size()];
    if (probe.fillers.empty()) f.messages = probe.messages;
    f.decoding = probe.decoding;
    f.stop = probe.stop;
    RequestParams fp = probe_params(spec, f);
    fp.seed = probe.seed + 1 + i;
    fp.logprobs = false;
    client.submit(fp, [&, text = f.prompt](RemoteResult&& res) {
      lifetime(res);
      if (res.aborted) return;
      if (res.cause != FailCause::none) ++client.stats().filler_failed;
      if (filler_tokens && res.cause == FailCause::none && res.error.empty() && res.response.prompt_tokens > 0)
        (*filler_tokens)[text] = res.response.prompt_tokens;
      submit_filler();  // closed loop: replace it at once
    });
  };

  for (int i = 0; i < concurrency - 1; ++i) submit_filler();
  submit_probe();
  client.run(stop);
  for (const auto& [oi, li] : probe_at) {
    Completion& c = out[oi];
    c.others_max = overlap_with_others(lifetimes, li, c.others_min, c.others_mean);
    c.send_s = lifetimes[li].start - t0;
    c.last_byte_s = lifetimes[li].end - t0;
  }
  if (stats) stats->merge(client.stats());
  return out;
}

std::vector<Completion> run_cache_probe(const EndpointSpec& spec, const RemoteProbe& probe, int warm_repeats,
                                        const std::atomic<bool>* stop, RemoteStats* stats) {
  check_args(spec, 1, warm_repeats);
  std::vector<Completion> out;
  RemoteClient client(spec, 2);
  const RequestParams pp = probe_params(spec, probe);
  int done = std::max(0, probe.first_repeat);
  if (done > warm_repeats) return out;
  std::function<void()> submit = [&] {
    send_attempt(client, pp, probe, Attempt{}, [&](Completion&& c, const Attempt& a) {
      if (a.failed) ++client.stats().probe_failed;
      stamp(c, spec, probe, 1, done);
      c.cache_state = done == 0 ? "cold" : "warm";
      out.push_back(std::move(c));
      if (++done <= warm_repeats) submit();
    });
  };
  submit();
  client.run(stop);
  if (stats) stats->merge(client.stats());
  return out;
}

namespace {
std::string ids_text(const std::vector<int>& ids) {
  std::string s = "ids:";
  for (int t : ids) s += std::to_string(t) + ",";
  return s;
}
}  // namespace

void decide_seed_probe(SeedProbeResult& r, const std::vector<std::vector<std::optional<std::string>>>& out) {
  r.same_pairs = r.same_equal = r.diff_pairs = r.diff_distinct = 0;
  std::vector<std::string> first;  // each seed's first output, where it came
  for (const auto& runs : out) {
    if (runs.size() >= 2 && runs[0] && runs[1]) {
      ++r.same_pairs;
      r.same_equal += *runs[0] == *runs[1];
    }
    if (!runs.empty() && runs[0]) first.push_back(*runs[0]);
  }
  for (size_t i = 0; i < first.size(); ++i)
    for (size_t j = i + 1; j < first.size(); ++j) {
      ++r.diff_pairs;
      r.diff_distinct += first[i] != first[j];
    }
  if (r.same_pairs == 0 || r.diff_pairs == 0) {
    r.result = "unknown";
    r.detail = "too few answers (" + std::to_string(r.errors) + " requests failed)";
  } else if (r.same_equal < r.same_pairs) {
    r.result = "ignored";
    r.detail = "the same seed gave different outputs in " + std::to_string(r.same_pairs - r.same_equal) + " of " +
               std::to_string(r.same_pairs) + " pairs: sampling is not controlled by the seed on this API";
  } else if (r.diff_distinct == 0) {
    r.result = "ignored";
    r.detail = "different seeds gave one output in all " + std::to_string(r.diff_pairs) +
               " pairs: the seed has no effect on this API";
  } else {
    r.result = "honoured";
    r.detail = "the same seed gave the same output in " + std::to_string(r.same_pairs) +
               " pairs, different seeds different outputs in " + std::to_string(r.diff_distinct) + " of " +
               std::to_string(r.diff_pairs);
  }
}

SeedProbeResult run_seed_probe(const EndpointSpec& spec, const RemoteProbe& probe, int seeds,
                               const std::atomic<bool>* stop, RemoteStats* stats) {
  validate_endpoint(spec);
  SeedProbeResult r;
  r.api = spec.api;
  RemoteClient client(spec, 2);
  RemoteProbe q = probe;
  q.decoding = DecodingConfig{"seed-probe", 1.0, 1.0, 0, probe.decoding.max_tokens};
  q.logprobs = false;
  RequestParams pp = probe_params(spec, q);
  std::vector<std::vector<std::optional<std::string>>> out(static_cast<size_t>(std::max(2, seeds)));
  // One request at a time (nothing co-batched: the seed alone is tested), each seed twice in a row.
  size_t next = 0;
  std::function<void()> send = [&] {
    if (next >= out.size() * 2) return;
    const size_t k = next / 2;
    ++next;
    RequestParams x = pp;
    x.seed = probe.seed + k;
    client.submit(x, [&, k](RemoteResult&& res) {
      if (res.aborted) return;
      Completion c = completion_from(res);
      if (c.error.empty() && (c.tokens_known || !c.text.empty()))
        out[k].push_back(c.tokens_known && !c.tokens.empty() ? ids_text(c.tokens) : "text:" + c.text);
      else {
        out[k].push_back(std::nullopt);
        ++r.errors;
      }
      send();
    });
  };
  send();
  client.run(stop);
  if (stats) stats->merge(client.stats());
  decide_seed_probe(r, out);
  return r;
}

}  // namespace repro
