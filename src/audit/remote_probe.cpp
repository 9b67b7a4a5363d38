// The remote audit pieces the runner calls: the closed-loop probe at one concurrency level and the
// cold/warm prefix-cache probe. Both run one RemoteClient loop on the calling thread, and turn the
// client's responses into Completion records here (the client knows nothing of audits).
#include "repro/audit/remote_probe.hpp"

#include <algorithm>

#include "repro/common/chat.hpp"
#include "repro/common/error.hpp"

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
  c.finish_reason = r.finish_reason;
  c.system_fingerprint = r.system_fingerprint;
  c.response_model = r.model;
  c.response_id = r.id;
  c.created = r.created;
  c.cache_header = res.cache_header;
  c.prompt_tokens = std::max(0, r.prompt_tokens);
  if (r.completion_tokens >= 0)
    c.completion_tokens = r.completion_tokens;
  else if (r.tokens_known)
    c.completion_tokens = static_cast<int>(r.tokens.size());
  else
    c.completion_tokens = static_cast<int>(r.logprobs.size());
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
  p.json_schema = probe.json_schema;
  const bool have_messages = probe.messages.is_array() && !probe.messages.empty();
  if (spec.api == "chat") {
    p.messages = have_messages ? probe.messages : nlohmann::json();
    p.prompt = probe.prompt;
  } else {
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
};

void send_attempt(RemoteClient& client, const RequestParams& pp, const RemoteProbe& probe, Attempt at,
                  std::function<void(Completion&&, const Attempt&)> finish) {
  RequestParams q = pp;
  if (at.retries > 0 && probe.decoding.temperature > 0) q.seed = probe.seed + static_cast<uint64_t>(at.retries);
  client.submit(q, [&client, pp, &probe, at, finish](RemoteResult&& res) mutable {
    if (res.aborted) return;
    at.failed = res.cause != FailCause::none;
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
        send_attempt(client, pp, probe, at, finish);
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
                                         std::function<void(int done, int total)> progress, RemoteStats* stats) {
  check_args(spec, concurrency, repeats);
  std::vector<Completion> out;
  const int first = std::max(0, probe.first_repeat);
  if (repeats <= first) return out;
  RemoteClient client(spec, concurrency + 4);
  const RequestParams pp = probe_params(spec, probe);

  int next_repeat = first, probes_done = first;
  std::function<void()> submit_probe = [&] {
    Attempt at;
    at.repeat = next_repeat++;
    send_attempt(client, pp, probe, at, [&](Completion&& c, const Attempt& a) {
      if (a.failed) ++client.stats().probe_failed;
      const int r = a.repeat;
      stamp(c, spec, probe, concurrency, r);
      out.push_back(std::move(c));
      ++probes_done;
      if (progress) progress(probes_done, repeats);
      if (probes_done >= repeats)
        client.cancel();  // fillers still in flight are aborted: they only load the server
      else
        submit_probe();
    });
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
    client.submit(fp, [&](RemoteResult&& res) {
      if (res.aborted) return;
      if (res.cause != FailCause::none) ++client.stats().filler_failed;
      submit_filler();  // closed loop: replace it at once
    });
  };

  for (int i = 0; i < concurrency - 1; ++i) submit_filler();
  submit_probe();
  client.run(stop);
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

}  // namespace repro
