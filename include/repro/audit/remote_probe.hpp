// The remote audit pieces the runner calls: the closed-loop probe under concurrency and the
// cold/warm prefix-cache probe. They drive the client (repro/remote/client.hpp) and turn its
// responses into Completion records (completion_from).
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/result.hpp"
#include "repro/structured/json_schema.hpp"
#include "repro/remote/client.hpp"

namespace repro {

// A client response as an audit Completion: output, metadata, timing, attempts, error.
Completion completion_from(const RemoteResult& r);

struct RemoteProbe {
  std::string prompt_id;
  std::string prompt;              // completions API text (chat: used when messages is empty)
  nlohmann::ordered_json messages;  // chat messages (completions API renders them with render_chat)
  nlohmann::ordered_json tools, chat_template_kwargs;  // chat API: sent as given (null: not sent)
  DecodingConfig decoding;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool logprobs = false;
  bool routed_experts = false;     // ask for the routed experts (--routed-experts; the fillers do not)
  std::vector<std::string> fillers;  // filler prompts; cycled; empty -> the probe prompt is reused
  std::string mate_contents;       // stamped on the probe completions ("other": --isolation's second arm)
  // Repeats (cache probe: requests) below this index finished in an earlier run (--resume): they are
  // not sent again, and the ones sent are numbered from here.
  int first_repeat = 0;
  // Structured output: the schema sent as response_format (null: none), the check of every answer,
  // and validation with retry: an answer that does not conform is requested again, up to
  // retry_invalid times (sampled configs with seed + k for retry k); the Completion records the
  // retries, the discarded answers' tokens and the first answer.
  nlohmann::json json_schema;
  std::shared_ptr<const JsonSchema> validator;
  int retry_invalid = 0;
};

// The probe is replayed `repeats` - probe.first_repeat times (repeat numbers first_repeat..repeats-1),
// one after another, while concurrency-1 filler requests
// are kept in flight (closed loop: a finished filler is replaced at once). Returns only the probe
// completions that finished (successful or failed after retries; mode=label,
// batch_size=concurrency, seed, repeat). When *stop becomes true, in-flight requests are aborted
// and what finished is returned. `stats` (optional) receives counts for probes and fillers;
// `filler_tokens` (optional) each filler text's prompt token count as the server's usage block gave it.
std::vector<Completion> run_remote_probe(const EndpointSpec& spec, const RemoteProbe& probe,
                                         int concurrency, int repeats,
                                         const std::atomic<bool>* stop,
                                         std::function<void(int done, int total)> progress,
                                         RemoteStats* stats = nullptr,
                                         std::map<std::string, int>* filler_tokens = nullptr);

// The same prompt cold (first request of it: call this before any other request of the prompt)
// then `warm_repeats` times warm, sequentially; cache_state "cold"/"warm", batch_size 1. Requests
// numbered below probe.first_repeat (0 = the cold one) are not sent.
std::vector<Completion> run_cache_probe(const EndpointSpec& spec, const RemoteProbe& probe,
                                        int warm_repeats, const std::atomic<bool>* stop,
                                        RemoteStats* stats = nullptr);

// The seed probe of one API path (spec.api): at T = 1 (top-p 1, no top-k) the probe's prompt is sent
// with `seeds` seeds (probe.seed, probe.seed + 1, ...), each twice in a row, one request at a time.
// "honoured": every same-seed pair agrees and some different-seed pair differs; "ignored": a same-seed
// pair differs, or every different-seed pair agrees; "unknown": too few answers.
inline constexpr int kSeedProbeSeeds = 4;  // seeds per API path: 8 requests
SeedProbeResult run_seed_probe(const EndpointSpec& spec, const RemoteProbe& probe, int seeds,
                               const std::atomic<bool>* stop, RemoteStats* stats = nullptr);
// The decision above on recorded outputs: out[seed][k] is the k-th answer to that seed (unset: failed).
void decide_seed_probe(SeedProbeResult& r, const std::vector<std::vector<std::optional<std::string>>>& out);

}  // namespace repro
