// The report schema, written once. Each structure of include/repro/audit/result.hpp has one
// describe() below that lists its JSON fields in the order of docs/REPORT-SCHEMA.md; the same list
// drives the writer (Writer) and the reader (Reader), and nlohmann/json's type mapping
// (to_json / from_json) is defined on top of it. Key order in the output is irrelevant: objects are
// sorted (canonical form, repro/report/canonical.hpp).
#include "repro/report/schema.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <concepts>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/common/util.hpp"
#include "repro/report/canonical.hpp"

namespace repro {

using nlohmann::json;

namespace {

// A read failure: `where` is the field path below the value being read, ready to append to the
// path above it: ".cases[0].n".
struct SchemaError {
  std::string where, why;
};

template <class T, class U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

// Field options.
enum Opt : unsigned {
  kPlain = 0,
  kEmptyObjectIfNull = 1,  // write a null json value as {}
};

// ============================================================================ the schema
// v(key, member) declares one field; v.only_if(cond, key, member) a field written only when cond
// holds (read whenever present). Members missing from a list are not part of the report.

template <class V, Is<DecodingConfig> T>
void describe(V& v, T& x) {
  v("id", x.id);
  v("temperature", x.temperature);
  v("top_p", x.top_p);
  v("top_k", x.top_k);
  v("max_tokens", x.max_tokens);
}

template <class V, Is<Completion> T>
void describe(V& v, T& x) {
  v("prompt_id", x.prompt_id);
  v("decoding", x.decoding_id);
  v("mode", x.mode);
  v("precision", x.precision);
  v("batch_size", x.batch_size);
  v("position", x.position);
  v("filler_set", x.filler_set);
  v("filler_ids", x.filler_ids);
  v.only_if(x.mate_join_step != 0, "mate_join_step", x.mate_join_step);
  v.only_if(x.mate_prompt_delta != 0, "mate_prompt_delta", x.mate_prompt_delta);
  v.only_if(!x.mate_contents.empty(), "mate_contents", x.mate_contents);
  v.only_if(x.tp != 1, "tp", x.tp);
  v.only_if(!x.allreduce.empty(), "allreduce", x.allreduce);
  v.only_if(!x.device.empty(), "device", x.device);  // run --devices only
  v.only_if(!x.speculative.empty(), "speculative", x.speculative);  // run --speculative only
  v.only_if(!x.speculative.empty(), "spec_drafted", x.spec_drafted);
  v.only_if(!x.speculative.empty(), "spec_accepted", x.spec_accepted);
  v.only_if(!x.speculative.empty(), "spec_verify_steps", x.spec_verify_steps);
  v("seed", x.seed);
  v("repeat", x.repeat);
  v("cache_state", x.cache_state);
  v("tokens_known", x.tokens_known);
  v("tokens", x.tokens);
  v("text", x.text);
  v("logprobs", x.logprobs);
  v.only_if(!x.token_pieces.empty(), "token_pieces", x.token_pieces);  // endpoints with ids and logprobs
  v("logits_sha256", x.logits_sha256);
  v("margins", x.margins);
  v("margins_rel", x.margins_rel);
  v("top_k", x.top_k);
  v("top_ids", x.top_ids);
  v("top_logprobs", x.top_logprobs);
  // a mixture of experts on the local engine only: [step][layer][k] experts, [step][layer] margins
  v.only_if(!x.routing.empty(), "routing", x.routing);
  v.only_if(!x.routing_margins.empty(), "routing_margins", x.routing_margins);
  v("finish_reason", x.finish_reason);
  v("latency_s", x.latency_s);
  v("ttft_s", x.ttft_s);
  v("tokens_per_s", x.tokens_per_s);
  v("batch_tokens", x.batch_tokens);
  v("batch_seconds", x.batch_seconds);
  v("prompt_tokens", x.prompt_tokens);
  v("completion_tokens", x.completion_tokens);
  v("system_fingerprint", x.system_fingerprint);
  v("response_model", x.response_model);
  v("response_id", x.response_id);
  v("created", x.created);
  v.only_if(!x.cache_header.empty(), "cache_header", x.cache_header);  // endpoints: a cache reported a hit
  // endpoints: the probe's co-batching evidence (written when the client timed it)
  const bool timed = x.send_s >= 0;
  v.only_if(timed, "send_s", x.send_s);
  v.only_if(timed, "first_byte_s", x.first_byte_s);
  v.only_if(timed, "last_byte_s", x.last_byte_s);
  v.only_if(timed, "others_min", x.others_min);
  v.only_if(timed, "others_max", x.others_max);
  v.only_if(timed, "others_mean", x.others_mean);
  v.only_if(x.server_max_batch >= 0, "server_max_batch", x.server_max_batch);
  v("error", x.error);
  v("attempts", x.attempts);
  // structured output only: the schema check, and the retries' record when there were any
  v.only_if(x.schema_valid.has_value(), "schema_valid", x.schema_valid);
  const bool retried = x.retries > 0;
  v.only_if(retried, "retries", x.retries);
  v.only_if(retried, "retry_tokens", x.retry_tokens);
  v.only_if(retried, "first_text", x.first_text);
  v.only_if(retried, "first_tokens", x.first_tokens);
  v.only_if(!x.host.empty(), "host", x.host);  // merged replicated shards only
}

template <class V, Is<DistributionTest> T>
void describe(V& v, T& x) {
  v("factor", x.factor);
  v("value", x.value);
  v("reference", x.reference);
  v("n_reference", x.n_reference);
  v("n_other", x.n_other);
  v("statistic", x.statistic);
  v("p_value", x.p_value);
  v("effect", x.effect);
  v("differs", x.differs);
  v("note", x.note);
}

template <class V, Is<CoBatchLevel> T>
void describe(V& v, T& x) {
  v("concurrency", x.concurrency);
  v("control", x.control);
  v("probes", x.probes);
  v("others_min", x.others_min);
  v("others_max", x.others_max);
  v("others_mean", x.others_mean);
  v("server_source", x.server_source);
  v("server_status", x.server_status);
  v("server_running_max", x.server_running_max);
  v("server_running_mean", x.server_running_mean);
  v("server_samples", x.server_samples);
  v("response_max_batch", x.response_max_batch);
  v("co_batched", x.co_batched);
  v("evidence", x.evidence);
  v.only_if(x.isolation_fillers > 0, "isolation_fillers", x.isolation_fillers);  // --isolation only
  v.only_if(x.isolation_fillers > 0, "isolation_same_tokens", x.isolation_same_tokens);
}

template <class V, Is<EndpointPosture> T>
void describe(V& v, T& x) {
  v("engine", x.engine);
  v("version", x.version);
  v("deterministic", x.deterministic);
  v("batch_invariance", x.batch_invariance);
  v("sources", x.sources);
  v("info", x.info, kEmptyObjectIfNull);
  v("system_fingerprint", x.system_fingerprint);
  v("findings", x.findings);
}

template <class V, Is<SeedProbeResult> T>
void describe(V& v, T& x) {
  v("api", x.api);
  v("result", x.result);
  v("same_pairs", x.same_pairs);
  v("same_equal", x.same_equal);
  v("diff_pairs", x.diff_pairs);
  v("diff_distinct", x.diff_distinct);
  v("errors", x.errors);
  v("detail", x.detail);
}

template <class V, Is<EndpointEvidence> T>
void describe(V& v, T& x) {
  v("endpoint", x.endpoint);
  v("posture", x.posture);
  v("levels", x.levels);
  v("seeds", x.seeds);
  v("verified", x.verified);
  v("finding", x.finding);
}

template <class V, Is<PanelMember> T>
void describe(V& v, T& x) {
  v("endpoint", x.endpoint);
  v("hash", x.hash);
  v("agrees", x.agrees);
  v("first_divergence", x.first_divergence);
  v("by_char", x.by_char);
  v("completions", x.completions);
}

template <class V, Is<PanelCase> T>
void describe(V& v, T& x) {
  v("prompt_id", x.prompt_id);
  v("decoding", x.decoding_id);
  v("majority_hash", x.majority_hash);
  v("agreeing", x.agreeing);
  v("members", x.members);
}

template <class V, Is<Cluster> T>
void describe(V& v, T& x) {
  v("hash", x.hash);
  v("count", x.count);
  v("majority", x.majority);
  v("members", x.members);
  v("text", x.text);
  v("tokens", x.tokens);
  v("first_divergence_token", x.first_divergence_token);
  v("first_divergence_char", x.first_divergence_char);
  v("majority_token", x.majority_token);
  v("cluster_token", x.cluster_token);
  v("majority_logprob", x.majority_logprob);
  v("cluster_logprob", x.cluster_logprob);
  v("family", x.family);
  v("distance_to_majority", x.distance_to_majority);
  v("bit_variants", x.bit_variants);
  v("answer", x.answer);
  v("repro_command", x.repro_command);
}

template <class V, Is<FactorTable> T>
void describe(V& v, T& x) {
  v("factor", x.factor);
  v("values", x.values);
  v("counts", x.counts);
  v("explains", x.explains);
}

template <class V, Is<CrossModeTable> T>
void describe(V& v, T& x) {
  v("prompt_id", x.prompt_id);
  v("decoding", x.decoding_id);
  v("hashes", x.hashes);
  v("table", x.table);
}

template <class V, Is<Rate> T>
void describe(V& v, T& x) {
  v("k", x.k);
  v("n", x.n);
  v("lo", x.lo);
  v("hi", x.hi);
}

template <class V, Is<DriftFactor> T>
void describe(V& v, T& x) {
  v("factor", x.factor);
  v("values", x.values);
  v("n", x.n);
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("max_dlogprob", x.max_dlogprob);
}

template <class V, Is<DriftSize> T>
void describe(V& v, T& x) {
  v("reference", x.reference);
  v("reference_context", x.reference_context);
  v("compared", x.compared);
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("steps_compared", x.steps_compared);
  v("max_dlogprob", x.max_dlogprob);
  v("mean_dlogprob", x.mean_dlogprob);
  v("first_divergence", x.first_divergence);
  v("first_divergence_completion", x.first_divergence_completion);
  v("reference_token", x.reference_token);
  v("divergent_token", x.divergent_token);
  v("topk_kl", x.topk_kl);
  v("fragile", x.fragile);
  v("min_margin_rel", x.min_margin_rel);
  v("flip_margin", x.flip_margin);
  v("flip_margin_rel", x.flip_margin_rel);
  v("status", x.status);
  v("factors", x.factors);
}

template <class V, Is<ModeDriftSize> T>
void describe(V& v, T& x) {
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("token_divergent_cases", x.token_divergent_cases);
  v("max_dlogprob", x.max_dlogprob);
  v("mean_dlogprob", x.mean_dlogprob);
  v("max_topk_kl", x.max_topk_kl);
  v("max_flip_margin", x.max_flip_margin);
  v("fragile", x.fragile);
  v("fragile_cases", x.fragile_cases);
  v("factors", x.factors);
  v("finding", x.finding);
}

template <class V, Is<FieldAgreement> T>
void describe(V& v, T& x) {
  v("path", x.path);
  v("agree", x.agree);
  v("unique", x.unique);
  v("missing", x.missing);
  v("majority", x.majority);
}

template <class V, Is<StructuredCase> T>
void describe(V& v, T& x) {
  v("valid", x.valid);
  v("valid_first", x.valid_first);
  v("tara_json", x.tara_json);
  v("json_unique", x.json_unique);
  v("json_invalid", x.json_invalid);
  v("tarr_first", x.tarr_first);
  v("tara_json_first", x.tara_json_first);
  v("retries", x.retries);
  v("retry_tokens", x.retry_tokens);
}

template <class V, Is<FieldRate> T>
void describe(V& v, T& x) {
  v("path", x.path);
  v("agree", x.agree);
}

template <class V, Is<StructuredSummary> T>
void describe(V& v, T& x) {
  v("valid", x.valid);
  v("valid_first", x.valid_first);
  v("tarr", x.tarr);
  v("tarr_first", x.tarr_first);
  v("tara_json", x.tara_json);
  v("tara_json_first", x.tara_json_first);
  v("fields", x.fields);
  v("requests", x.requests);
  v("retries", x.retries);
  v("tokens", x.tokens);
  v("retry_tokens", x.retry_tokens);
}

template <class V, Is<RoutingDivergence> T>
void describe(V& v, T& x) {
  v("completion", x.completion);
  v("step", x.step);
  v("layer", x.layer);
  v("token_divergence", x.token_divergence);
}

template <class V, Is<CaseRouting> T>
void describe(V& v, T& x) {
  v("reference", x.reference);
  v("compared", x.compared);
  v("token_diverged", x.token_diverged);
  v("pairs", x.pairs);
  v("flips", x.flips);
  v("layer_pairs", x.layer_pairs);
  v("layer_flips", x.layer_flips);
  v("fragile", x.fragile);
  v("min_margin", x.min_margin);
  v("divergences", x.divergences);
}

template <class V, Is<CaseResult> T>
void describe(V& v, T& x) {
  v("prompt_id", x.prompt_id);  // prompt_text is not stored: it is prompts[prompt_id]
  v("decoding", x.decoding_id);
  v("mode", x.mode);
  v("precision", x.precision);
  v("n", x.n);
  v("errors", x.errors);
  v("unique", x.unique);
  v("tarr", x.tarr);
  const bool extractor = x.tara.has_value();  // the answer fields exist only with an extractor
  v.only_if(extractor, "tara", x.tara);
  v.only_if(extractor, "answer_unique", x.answer_unique);
  v.only_if(extractor, "answer_missing", x.answer_missing);
  v.only_if(extractor, "no_answer", x.no_answer);
  v("bit_divergent", x.bit_divergent);
  v("bit_unique", x.bit_unique);
  v("divergent", x.divergent);
  v("failed", x.failed);
  v("clusters", x.clusters);
  v("factors", x.factors);
  v("drift_size", x.drift_size);
  v.only_if(x.structured.has_value(), "structured", x.structured);  // plan with a JSON Schema only
  v.only_if(!x.fields.empty(), "fields", x.fields);                 // --answer-json-path only
  v.only_if(!x.distribution.empty(), "distribution", x.distribution);  // sampled cases whose outputs vary
  v.only_if(x.isolation_pairs > 0, "isolation_pairs", x.isolation_pairs);  // --isolation only
  v.only_if(x.isolation_pairs > 0, "isolation_leaks", x.isolation_leaks);
  v.only_if(x.routing.has_value(), "routing", x.routing);  // a mixture of experts on the local engine only
}

template <class V, Is<ThroughputRow> T>
void describe(V& v, T& x) {
  v("mode", x.mode);
  v("precision", x.precision);
  v("batch_size", x.batch_size);
  v("tokens", x.tokens);
  v("seconds", x.seconds);
  v("tokens_per_s", x.tokens_per_s);
  v("ratio", x.ratio_vs_default);
  v.only_if(x.ratio_sd.has_value(), "ratio_sd", x.ratio_sd);
  v("runs", x.runs);
  v("mean_tokens_per_s", x.mean_tokens_per_s);
  v("stddev_tokens_per_s", x.stddev_tokens_per_s);
  v("min_tokens_per_s", x.min_tokens_per_s);
  v("max_tokens_per_s", x.max_tokens_per_s);
}

template <class V, Is<TradeoffRow> T>
void describe(V& v, T& x) {
  v("approach", x.approach);
  v("mode", x.mode);
  v("decoding", x.decoding);
  v("precision", x.precision);
  v.only_if(!x.speculative.empty(), "speculative", x.speculative);  // run --speculative rows only
  v("measured", x.measured);
  v("note", x.note);
  v("cases", x.cases);
  v("n_min", x.n_min);
  v("n_max", x.n_max);
  v("tarr", x.tarr);
  v("tara", x.tara);
  v("token_differ", x.token_differ);
  v("bit_differ", x.bit_differ);
  v("max_dlogprob", x.max_dlogprob);
  v("mean_dlogprob", x.mean_dlogprob);
  v("speed_n", x.speed_n);
  v("speed_mean", x.speed_mean);
  v("speed_sd", x.speed_sd);
  v("speed_min", x.speed_min);
  v("speed_max", x.speed_max);
  v("tokens_per_s", x.tokens_per_s);
}

template <class V, Is<ResponseCacheSigns> T>
void describe(V& v, T& x) {
  v("completions", x.completions);
  v("header_hits", x.header_hits);
  v("repeated_ids", x.repeated_ids);
  v("fast_replays", x.fast_replays);
  v("replayed", x.replayed);
  v("headers", x.headers);
  v("finding", x.finding);
}

template <class V, Is<TpRow> T>
void describe(V& v, T& x) {
  v("tp", x.tp);
  v("allreduce", x.allreduce);
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("greedy_token_differ", x.greedy_token_differ);
  v("tokens", x.tokens);
  v("tokens_changed", x.tokens_changed);
  v("max_dlogprob", x.max_dlogprob);
}

template <class V, Is<DeviceRow> T>
void describe(V& v, T& x) {
  v("device", x.device);
  v("against", x.against);
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("first_diff", x.first_diff);
  v("max_dlogprob", x.max_dlogprob);
}

template <class V, Is<SpecRow> T>
void describe(V& v, T& x) {
  v("speculative", x.speculative);
  v("bit_differ", x.bit_differ);
  v("token_differ", x.token_differ);
  v("fork_first", x.fork_first);
  v("fork_median", x.fork_median);
  v("first_diff", x.first_diff);
  v("max_dlogprob", x.max_dlogprob);
  v("drafted", x.drafted);
  v("accepted", x.accepted);
  v("verify_steps", x.verify_steps);
  v("acceptance", x.acceptance);
  v("tokens_per_verify", x.tokens_per_verify);
  v("sampled_token_differ", x.sampled_token_differ);
}

template <class V, Is<RoutingSummary> T>
void describe(V& v, T& x) {
  v("completions", x.completions);
  v("flips", x.flips);
  v("layers", x.layers);
  v("flipped", x.flipped);
  v("token_diverged", x.token_diverged);
  v("flip_first", x.flip_first);
  v("flip_same_step", x.flip_same_step);
  v("fragile", x.fragile);
  v("min_margin", x.min_margin);
  v("first_flip", x.first_flip);
}

template <class V, Is<ModeSummary> T>
void describe(V& v, T& x) {
  v("mode", x.mode);
  v("precision", x.precision);
  v("cases", x.cases);
  v("divergent_cases", x.divergent_cases);
  v.only_if(x.no_answer_cases > 0, "no_answer_cases", x.no_answer_cases);
  v("tarr_rate", x.tarr_rate);
  v("mean_unique", x.mean_unique);
  v("bit_divergent_share", x.bit_divergent_share);
  v("throughput_ratio", x.throughput_ratio);
  v.only_if(x.throughput_ratio_n > 0, "throughput_ratio_sd", x.throughput_ratio_sd);
  v.only_if(x.throughput_ratio_n > 0, "throughput_ratio_n", x.throughput_ratio_n);
  v("errors", x.errors);
  v("gated", x.gated);
  v("verdict", x.verdict);
  v("drift_size", x.drift_size);
  v("gate", x.gate);
  v("requests", x.requests);
  v("failed_requests", x.failed_requests);
  v("error_rate", x.error_rate);
  v.only_if(x.structured.has_value(), "structured", x.structured);  // plan with a JSON Schema only
  v.only_if(x.response_cache.has_value(), "response_cache", x.response_cache);  // endpoints only
  v.only_if(x.isolation.n > 0, "isolation", x.isolation);                        // --isolation only
  v.only_if(x.isolation.n > 0, "isolation_finding", x.isolation_finding);
  v.only_if(!x.tp.empty(), "tp", x.tp);                                           // run --tp only
  v.only_if(!x.tp.empty(), "tp_finding", x.tp_finding);
  v.only_if(!x.devices.empty(), "devices", x.devices);                            // run --devices only
  v.only_if(!x.devices.empty(), "device_finding", x.device_finding);
  v.only_if(!x.speculative.empty(), "speculative", x.speculative);                // run --speculative only
  v.only_if(!x.speculative.empty(), "spec_groups", x.spec_groups);
  v.only_if(!x.speculative.empty(), "spec_finding", x.spec_finding);
  v.only_if(x.routing.has_value(), "routing", x.routing);                         // a mixture of experts only
  v.only_if(x.routing.has_value(), "routing_finding", x.routing_finding);
}

template <class V, Is<PromptVariant> T>
void describe(V& v, T& x) {
  v("prompt_id", x.prompt_id);
  v("task", x.task);
  v("variant", x.variant);
}

template <class V, Is<VariantResult> T>
void describe(V& v, T& x) {
  v("task", x.task);
  v("variant", x.variant);
  v("prompt_id", x.prompt_id);
  v("cases", x.cases);
  v("completions", x.completions);
  v("errors", x.errors);
  v("tarr", x.tarr);
  v.only_if(x.tara.has_value(), "tara", x.tara);  // with an answer extractor only
  v("token_differ", x.token_differ);
  v("bit_differ", x.bit_differ);
  v("mean_unique", x.mean_unique);
  v("rank", x.rank);
}

template <class V, Is<TaskVariants> T>
void describe(V& v, T& x) {
  v("task", x.task);
  v("overall", x.overall);
  v("variants", x.variants);
  v("best", x.best);
  v("significant", x.significant);
  v("finding", x.finding);
}

template <class V, Is<BaselineResult> T>
void describe(V& v, T& x) {
  v("file", x.file);
  v("report_sha256", x.report_sha256);
  v("digest_ok", x.digest_ok);
  v("drift", x.drifted);
  v("config_changes", x.config_changes);
  v("changes", x.changes);
}

template <class V, Is<Thresholds> T>
void describe(V& v, T& x) {
  v("max_divergent", x.max_divergent);
  v("min_tarr", x.min_tarr);
  v("modes", x.modes);
  v("max_error_rate", x.max_error_rate);
}

template <class V, Is<Summary> T>
void describe(V& v, T& x) {
  v("cases", x.cases);
  v("divergent_cases", x.divergent_cases);
  v("max_unique", x.max_unique);
  v("completions", x.completions);
  v("errors", x.errors);
  v("verdict", x.verdict);
  v("interrupted", x.interrupted);
  v("modes", x.modes);
  v.only_if(!x.tp_findings.empty(), "tp_findings", x.tp_findings);  // run --tp only
  v.only_if(!x.device_findings.empty(), "device_findings", x.device_findings);  // run --devices, a device skipped
}

template <class V, Is<ShardHost> T>
void describe(V& v, T& x) {
  v("hostname", x.hostname);
  v("fingerprint", x.fingerprint);
}

template <class V, Is<ShardInfo> T>
void describe(V& v, T& x) {
  v("plan_sha256", x.plan_sha256);
  v("index", x.index);
  v("count", x.count);
  v("replicate", x.replicate);
  v("scheduler", x.scheduler);
  v("source", x.source);
  v("cases", x.cases);
  v("host", x.host);
}

template <class V, Is<MergedShard> T>
void describe(V& v, T& x) {
  v("index", x.index);
  v("file", x.file);
  v("report_sha256", x.report_sha256);
  v("source", x.source);
  v("host", x.host);
  v.only_if(!x.host_label.empty(), "host_label", x.host_label);
  v("cases", x.cases);
  v("completions", x.completions);
}

template <class V, Is<HostAgreement> T>
void describe(V& v, T& x) {
  v("host", x.host);
  v("cases", x.cases);
  v("identical", x.identical);
  v("token_differ", x.token_differ);
  v("bit_differ", x.bit_differ);
  v("first_difference", x.first_difference);
}

template <class V, Is<MergeInfo> T>
void describe(V& v, T& x) {
  v("plan_sha256", x.plan_sha256);
  v("count", x.count);
  v("replicate", x.replicate);
  v("complete", x.complete);
  v("shards", x.shards);
  v("missing_shards", x.missing_shards);
  v("missing_cases", x.missing_cases);
  v.only_if(x.replicate, "hosts", x.hosts);
}

template <class V, Is<Advice> T>
void describe(V& v, T& x) {
  v("about", x.about);
  v("action", x.action);
  v("because", x.because);
  v("cost", x.cost);
  v("limits", x.limits);
  v("source", x.source);
}

// "digests" is derived (to_json(json&, const AuditReport&)) and not read back.
template <class V, Is<AuditReport> T>
void describe(V& v, T& x) {
  v("schema", x.schema);
  v("created", x.created);
  v("profile", x.profile);
  v("plan", x.plan);  // free-form here; its keys come from the plan option table (audit/plan_options)
  v("thresholds", x.thresholds);
  v("answer_regex", x.answer_regex);
  v("answer_json_path", x.answer_json_path);
  v("fragile_margin", x.fragile_margin);
  v("summary", x.summary);
  v("cases", x.cases);
  v("cross_mode", x.cross_mode);
  v("throughput", x.throughput);
  v("tradeoff", x.tradeoff);
  v("completions", x.completions);
  v("environment", x.environment, kEmptyObjectIfNull);  // free-form, written by the runner
  v("prompts", x.prompts);
  v("token_text", x.token_text);
  v.only_if(x.prompt_token_ids.is_object() && !x.prompt_token_ids.empty(), "prompt_token_ids",
            x.prompt_token_ids);  // local runs
  v.only_if(x.baseline.has_value(), "baseline", x.baseline);  // run --baseline only
  v.only_if(!x.prompt_variants.empty(), "prompt_variants", x.prompt_variants);  // prompts file with variants
  v.only_if(!x.variants.empty(), "variants", x.variants);
  v.only_if(!x.evidence.empty(), "evidence", x.evidence);  // endpoints only
  v.only_if(!x.panel.empty(), "panel", x.panel);           // two or more endpoints
  v.only_if(x.shard.has_value(), "shard", x.shard);  // run --shard only
  v.only_if(x.merge.has_value(), "merge", x.merge);  // report merge only
  v.only_if(!x.advice.empty(), "advice", x.advice);  // what to do (src/audit/advice.cpp)
}

struct Writer;
struct Reader;
template <class T>
concept Described = requires(Writer& w, const T& t) { describe(w, t); };

// ============================================================================ values: writing

json enc(const std::string& v) { return v; }
json enc(bool v) { return v; }
json enc(int v) { return v; }
json enc(int64_t v) { return v; }
json enc(uint64_t v) { return v; }
json enc(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }  // no JSON form: null
// A float as the double closest to its shortest round-trip decimal ("-0.25", "-1.2345"), so the JSON
// carries the digits the float has, not the 17 of its widening to double ("-1.2345000505447388");
// read back, it is the same float. When the detour would not give the float back, its widening.
json enc(float v) {
  if (!std::isfinite(v)) return nullptr;
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  if (res.ec == std::errc()) {
    const double d = std::strtod(std::string(buf, res.ptr).c_str(), nullptr);
    if (static_cast<float>(d) == v) return d;
  }
  return static_cast<double>(v);
}
json enc(const json& v) { return v; }
template <class T>
json enc(const std::optional<T>& v);
template <class T>
json enc(const std::vector<T>& v);
json enc(const std::map<std::string, std::string>& v);
template <Described T>
json enc(const T& v);

struct Writer {
  json j = json::object();
  template <class M>
  void operator()(const char* key, const M& m, unsigned opt = kPlain) {
    json v = enc(m);
    if ((opt & kEmptyObjectIfNull) && v.is_null()) v = json::object();
    j[key] = std::move(v);
  }
  template <class M>
  void only_if(bool cond, const char* key, const M& m) {
    if (cond) (*this)(key, m);
  }
};

template <class T>
json enc(const std::optional<T>& v) {
  return v ? enc(*v) : json(nullptr);
}
template <class T>
json enc(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& x : v) a.push_back(enc(x));
  return a;
}
json enc(const std::map<std::string, std::string>& v) { return json(v); }
template <Described T>
json enc(const T& v) {
  Writer w;
  describe(w, v);
  return std::move(w.j);
}

// ============================================================================ values: reading

[[noreturn]] void fail(const std::string& why) { throw SchemaError{"", why}; }

template <class I>
void dec_int(const json& j, I& out) {
  if (!j.is_number_integer()) fail("expected an integer");
  if constexpr (std::is_unsigned_v<I>) {
    if (!j.is_number_unsigned()) fail("expected a non-negative integer");
    out = j.get<I>();
  } else {
    if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<I>::max())
                               : j.get<int64_t>() < std::numeric_limits<I>::min() ||
                                     j.get<int64_t>() > std::numeric_limits<I>::max())
      fail("integer out of range");
    out = static_cast<I>(j.get<int64_t>());
  }
}

void dec(const json& j, std::string& out) {
  if (!j.is_string()) fail("expected a string");
  out = j.get<std::string>();
}
void dec(const json& j, bool& out) {
  if (!j.is_boolean()) fail("expected true or false");
  out = j.get<bool>();
}
void dec(const json& j, int& out) { dec_int(j, out); }
void dec(const json& j, int64_t& out) { dec_int(j, out); }
void dec(const json& j, uint64_t& out) { dec_int(j, out); }
void dec(const json& j, double& out) {
  if (!j.is_number()) fail("expected a number");
  out = j.get<double>();
}
// A float in a list (logprobs): null stands for a value without JSON form, read back as -inf.
void dec(const json& j, float& out) {
  if (j.is_null()) {
    out = -std::numeric_limits<float>::infinity();
    return;
  }
  if (!j.is_number()) fail("expected a number or null");
  out = j.get<float>();
}
void dec(const json& j, json& out) { out = j; }
template <class T>
void dec(const json& j, std::optional<T>& out);
template <class T>
void dec(const json& j, std::vector<T>& out);
void dec(const json& j, std::map<std::string, std::string>& out);
template <Described T>
void dec(const json& j, T& out);

struct Reader {
  const json& j;
  template <class M>
  void operator()(const char* key, M& m, unsigned = kPlain) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;  // missing or null: the structure's default
    try {
      dec(*it, m);
    } catch (SchemaError& e) {
      e.where = "." + std::string(key) + e.where;
      throw;
    }
  }
  template <class M>
  void only_if(bool, const char* key, M& m) {
    (*this)(key, m);
  }
};

template <class T>
void dec(const json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
    return;
  }
  T v{};
  dec(j, v);
  out = std::move(v);
}
template <class T>
void dec(const json& j, std::vector<T>& out) {
  if (!j.is_array()) fail("expected an array");
  out.clear();
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    T v{};
    try {
      dec(j[i], v);
    } catch (SchemaError& e) {
      e.where = "[" + std::to_string(i) + "]" + e.where;
      throw;
    }
    out.push_back(std::move(v));
  }
}
void dec(const json& j, std::map<std::string, std::string>& out) {
  if (!j.is_object()) fail("expected an object of strings");
  out.clear();
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) throw SchemaError{"." + k, "expected a string"};
    out[k] = v.get<std::string>();
  }
}
template <Described T>
void dec(const json& j, T& out) {
  if (!j.is_object()) fail("expected an object");
  Reader r{j};
  describe(r, out);
}

// Entry point for the public from_json: paths start without a leading dot.
template <class T>
void read_value(const json& j, T& out) {
  try {
    dec(j, out);
  } catch (SchemaError& e) {
    std::string where = e.where;
    if (!where.empty() && where[0] == '.') where.erase(0, 1);
    throw UsageError((where.empty() ? std::string("top level") : where) + ": " + e.why);
  }
}

// ============================================================================ values: rewriting strings

using StringFn = std::function<std::string(const std::string&)>;

void rewrite_json(json& j, const StringFn& f) {
  if (j.is_string()) {
    j = f(j.get_ref<const std::string&>());
  } else if (j.is_array()) {
    for (auto& e : j) rewrite_json(e, f);
  } else if (j.is_object()) {
    json out = json::object();
    for (auto& [k, v] : j.items()) {
      rewrite_json(v, f);
      out[f(k)] = std::move(v);
    }
    j = std::move(out);
  }
}

// Walks the same field lists as Writer and Reader: every string of every described structure.
struct Rewriter {
  const StringFn& f;
  template <class M>
  void operator()(const char*, M& m, unsigned = kPlain) {
    rw(m);
  }
  template <class M>
  void only_if(bool, const char*, M& m) {
    rw(m);
  }
  void rw(std::string& s) { s = f(s); }
  void rw(json& j) { rewrite_json(j, f); }
  template <class T>
  requires std::is_arithmetic_v<T>
  void rw(T&) {}
  template <class T>
  void rw(std::optional<T>& o) {
    if (o) rw(*o);
  }
  template <class T>
  void rw(std::vector<T>& v) {
    for (auto& x : v) rw(x);
  }
  void rw(std::map<std::string, std::string>& m) {
    std::map<std::string, std::string> out;
    for (auto& [k, v] : m) out[f(k)] = f(v);
    m = std::move(out);
  }
  template <Described T>
  void rw(T& x) {
    describe(*this, x);
  }
};

// A digest recorded by the runner in the environment, as environment[key], environment[obj].sha256
// or environment.digests[key] (src/audit/provenance.cpp), the first one present.
void copy_digest(const json& env, json& digests, const char* out, const char* key, const char* obj) {
  if (!env.is_object()) return;
  if (auto it = env.find(key); it != env.end() && it->is_string()) {
    digests[out] = *it;
    return;
  }
  if (auto it = env.find(obj); it != env.end() && it->is_object())
    if (auto s = it->find("sha256"); s != it->end() && s->is_string()) {
      digests[out] = *s;
      return;
    }
  if (auto it = env.find("digests"); it != env.end() && it->is_object())
    if (auto s = it->find(key); s != it->end() && s->is_string() && !s->get<std::string>().empty()) digests[out] = *s;
}

}  // namespace

// ============================================================================ type mapping

void to_json(json& j, const DecodingConfig& v) { j = enc(v); }
void to_json(json& j, const Completion& v) { j = enc(v); }
void to_json(json& j, const Cluster& v) { j = enc(v); }
void to_json(json& j, const FactorTable& v) { j = enc(v); }
void to_json(json& j, const CrossModeTable& v) { j = enc(v); }
void to_json(json& j, const CaseResult& v) { j = enc(v); }
void to_json(json& j, const ThroughputRow& v) { j = enc(v); }
void to_json(json& j, const ModeSummary& v) { j = enc(v); }
void to_json(json& j, const Thresholds& v) { j = enc(v); }
void to_json(json& j, const Summary& v) { j = enc(v); }
void to_json(json& j, const EndpointPosture& v) { j = enc(v); }
void to_json(json& j, const AuditReport& v) {
  j = enc(v);
  j["schema"] = kReportSchema;
  json digests = json::object();
  // The one prompts digest (repro/audit/provenance.hpp), over the prompts this report holds.
  digests["prompts_sha256"] = prompts_digest(report_prompts(v));
  copy_digest(v.environment, digests, "model_sha256", "model_sha256", "model");
  copy_digest(v.environment, digests, "profile_sha256", "profile_sha256", "profile");
  j["digests"] = std::move(digests);
}

void rewrite_strings(json& j, const std::function<std::string(const std::string&)>& f) {
  rewrite_json(j, f);
}
void rewrite_strings(Completion& c, const std::function<std::string(const std::string&)>& f) {
  Rewriter r{f};
  r.rw(c);
}
void rewrite_strings(AuditReport& report, const std::function<std::string(const std::string&)>& f) {
  Rewriter r{f};
  r.rw(report);
  for (auto& c : report.cases) c.prompt_text = f(c.prompt_text);  // a copy of prompts[prompt_id]
}

void from_json(const json& j, DecodingConfig& v) { read_value(j, v); }
void from_json(const json& j, Completion& v) { read_value(j, v); }
void from_json(const json& j, Cluster& v) { read_value(j, v); }
void from_json(const json& j, FactorTable& v) { read_value(j, v); }
void from_json(const json& j, CrossModeTable& v) { read_value(j, v); }
void from_json(const json& j, CaseResult& v) { read_value(j, v); }
void from_json(const json& j, ThroughputRow& v) { read_value(j, v); }
void from_json(const json& j, ModeSummary& v) { read_value(j, v); }
void from_json(const json& j, Thresholds& v) { read_value(j, v); }
void from_json(const json& j, Summary& v) { read_value(j, v); }
void from_json(const json& j, AuditReport& v) {
  read_value(j, v);
  for (auto& c : v.cases)
    if (auto p = v.prompts.find(c.prompt_id); p != v.prompts.end()) c.prompt_text = p->second;
}

}  // namespace repro
