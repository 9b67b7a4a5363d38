// The engine flags, declared once (see repro/cli/flags.hpp).
#include "repro/cli/flags.hpp"

#include <cstdlib>

#include "repro/audit/plan_options.hpp"
#include "repro/common/error.hpp"
#include "repro/common/json.hpp"
#include "repro/common/util.hpp"
#include "repro/model/synth.hpp"
#include "repro/remote/client.hpp"

namespace repro::cli {

void add_engine_flags(CLI::App& sub, EngineFlags& f, const EngineFlagSpec& spec) {
  auto* model = sub.add_option("--model", f.models, spec.model_help);
  if (!spec.model_repeatable) model->multi_option_policy(CLI::MultiOptionPolicy::Throw)->expected(1);
  if (spec.model_must_exist)
    model->check(CLI::Validator(
        [](std::string& s) -> std::string { return is_synth_spec(s) ? std::string() : CLI::ExistingFile(s); }, "FILE"));
  sub.add_option("--tokenizer", f.tokenizer, "llama2.c tokenizer .bin (default: beside the model)");
  sub.add_option("--device", f.device, "Device the engine runs on: cpu | cuda")->capture_default_str();
  if (spec.mode)
    sub.add_option("--mode", f.mode, "Kernel mode: default | batch-invariant | deterministic | tp-invariant")->capture_default_str();
  sub.add_option("--threads", f.threads,
                 spec.threads_list ? "Comma-separated engine thread counts" : "Engine threads")
      ->capture_default_str();
  sub.add_option("--precision", f.precision,
                 "Activation precision between ops (matmul, attention and norm outputs, KV cache): f32 | bf16 | f16")
      ->capture_default_str();
  if (spec.tp) {
    sub.add_option("--tp", f.tp,
                   "Simulated tensor-parallel size: 1, 2, 4 or 8; the attention output and FFN down matmuls split their "
                   "reduction into this many shards, added by --allreduce (docs/ENGINE.md)")
        ->capture_default_str();
    sub.add_option("--allreduce", f.allreduce,
                   "Order in which --tp adds the ranks' partials: ring | tree (tp-invariant mode: one fixed tree)")
        ->capture_default_str();
  }
  if (spec.speculative)
    sub.add_option("--speculative", f.speculative,
                   "Speculative decoding: off | ngram:K (prompt lookup: the K tokens after the latest earlier "
                   "occurrence of the last 4..2 tokens) | draft:FILE:K (a draft model with the same vocabulary); K "
                   "from 1 to 32 tokens drafted per step, verified in one forward step (CPU only; docs/ENGINE.md)")
        ->capture_default_str();
  if (spec.chat_template)
    sub.add_option("--chat-template", f.chat_template,
                   "Chat template for `messages` prompts on the local engine: " + chat_template_names() +
                       ", or a file holding a Jinja chat template (default: the model's tokenizer.chat_template)");
  if (spec.stop_token)
    sub.add_option("--stop-token", f.stop_tokens,
                   "A token that ends generation besides the model's end-of-generation set (`model info` lists it): "
                   "its id, or its text as the vocabulary spells it (repeatable)")
        ->type_name("ID|TEXT");
  if (spec.parse_special) {
    // The help of run's plan option of that name: one text for every subcommand.
    sub.add_flag("--parse-special", f.parse_special, find_plan_option_by_key("parse_special")->help);
  }
}

namespace {

// --stop-token ID|TEXT: a decimal id inside the vocabulary, else a token's text (find_token).
int stop_token_id(const Tokenizer& tok, const std::string& arg) {
  const int n = tok.vocab_size();
  const bool digits = !arg.empty() && arg.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    if (arg.size() > 10 || std::stoll(arg) >= n)
      throw UsageError("--stop-token " + arg + ": no such token id; the vocabulary has ids 0.." + std::to_string(n - 1));
    return std::stoi(arg);
  }
  const int id = tok.find_token(arg);
  if (id < 0)
    throw UsageError("--stop-token '" + arg + "': no token of the vocabulary has this text; give a token id (0.." +
                     std::to_string(n - 1) + ") or a token's text as the vocabulary spells it, e.g. <|eot_id|>");
  return id;
}

}  // namespace

std::unique_ptr<Model> EngineFlags::load(const std::string& path) const {
  // The option is checked before the model is read, so a typo fails fast.
  ChatTemplate tmpl;
  if (!chat_template.empty()) tmpl = chat_template_from_option(chat_template);
  auto m = load_model(resolve_model_spec(path), tokenizer);
  if (!chat_template.empty()) {
    tmpl.eos_token = m->chat_template.eos_token;
    tmpl.bos_token = m->chat_template.bos_token;
    tmpl.tokenizer_adds_bos = m->chat_template.tokenizer_adds_bos;
    m->chat_template = tmpl;
  }
  for (const std::string& t : stop_tokens) m->tokenizer->add_eog(stop_token_id(*m->tokenizer, t));
  return m;
}

void EngineFlags::load_draft(EngineOptions& o) const {
  if (o.speculative.kind != DraftKind::Model) return;
  try {
    o.speculative.draft = std::shared_ptr<const Model>(load_model(resolve_model_spec(o.speculative.draft_file)));
  } catch (const UsageError& e) {
    throw UsageError("--speculative " + speculative_name(o.speculative) + ": " + e.what());
  }
}

Device EngineFlags::device_value() const { return parse_device(device, "--device"); }
Precision EngineFlags::precision_value() const { return parse_precision(precision, "--precision"); }
AllReduce EngineFlags::allreduce_value() const { return parse_allreduce(allreduce, "--allreduce"); }

std::vector<int> EngineFlags::thread_counts() const {
  std::vector<int> out;
  for (const std::string& part : split(threads, ',')) {
    const std::string t = trim(part);
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || v < 1 || v > 1024)
      throw UsageError("--threads '" + threads + "': expected thread counts from 1 to 1024" +
                       (threads.find(',') == std::string::npos ? "" : ", comma-separated"));
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError("--threads is empty: give a thread count, e.g. 1");
  return out;
}

int EngineFlags::thread_count() const {
  if (threads.find(',') != std::string::npos)
    throw UsageError("--threads '" + threads + "': give one thread count here (lists are for bench)");
  return thread_counts().front();
}

EngineOptions EngineFlags::engine_options() const {
  EngineOptions o;
  o.mode = parse_mode(mode, "--mode");
  o.threads = thread_count();
  o.device = device_value();
  o.precision = precision_value();
  o.tp = tp;
  o.allreduce = allreduce_value();
  o.speculative = parse_speculative(speculative, "--speculative");
  return o;
}

nlohmann::json parse_extra_body(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  nlohmann::json extra;
  std::string err;
  if (!parse_json(text, extra, &err))
    throw UsageError("--extra-body: not valid JSON (" + err + "); give an object such as '{\"top_k\": 1}'");
  if (!extra.is_object()) throw UsageError("--extra-body: must be a JSON object");
  return extra;
}

std::vector<EndpointSpec> EndpointFlags::build() const {
  std::vector<EndpointSpec> eps;
  const std::string key = load_api_key(api_key_env, api_key_file);
  const nlohmann::json extra = parse_extra_body(extra_body);
  for (const auto& arg : endpoints) {
    EndpointSpec e = parse_endpoint_arg(arg);
    e.api_model = api_model;
    e.api = api;
    e.provider = parse_provider(provider);
    e.stream = stream;
    e.extra_body = extra;
    e.api_key = key;
    e.ca_cert = ca_cert;
    e.max_retries = max_retries;
    e.read_timeout_s = timeout;   // silence and
    e.total_timeout_s = timeout;  // the whole attempt, however slowly the bytes trickle
    e.verbose = verbose;
    e.parse_special = provider_parse_special(e.provider);
    e.parse_special_source = std::string("preset ") + provider_name(e.provider);
    validate_endpoint(e);
    for (const auto& other : eps)
      if (other.label == e.label)
        throw UsageError("--endpoint: label '" + e.label + "' is used twice; label each one (NAME=URL)");
    eps.push_back(std::move(e));
  }
  // --endpoint-parse-special [LABEL=]yes|no: what the endpoint does with special-token text in a
  // completion prompt, when the preset does not know it or the server is configured otherwise.
  for (const auto& v : parse_special) {
    const size_t eq = v.find('=');
    const std::string label = eq == std::string::npos ? "" : v.substr(0, eq);
    const std::string rule = eq == std::string::npos ? v : v.substr(eq + 1);
    if (rule != "yes" && rule != "no")
      throw UsageError("--endpoint-parse-special '" + v +
                       "': give yes or no (special-token text in completion prompts matched or not), optionally "
                       "for one endpoint: LABEL=yes");
    bool found = false;
    for (auto& e : eps)
      if (label.empty() || e.label == label) {
        e.parse_special = rule;
        e.parse_special_source = "--endpoint-parse-special";
        found = true;
      }
    if (!found)
      throw UsageError("--endpoint-parse-special '" + v + "': no --endpoint is labelled '" + label +
                       "'; use a label given as --endpoint LABEL=URL");
  }
  return eps;
}

void add_endpoint_flags(CLI::App& s, EndpointFlags& f) {
  s.add_option("--endpoint", f.endpoints, "OpenAI-compatible endpoint, [LABEL=]URL (repeatable)");
  s.add_option("--api-model", f.api_model, "Model name sent to the endpoints (Azure: deployment)");
  s.add_option("--api", f.api, "chat | completions")->capture_default_str();
  s.add_option("--provider", f.provider, "openai | azure | vllm | sglang | llamacpp | ollama | tgi")
      ->capture_default_str();
  s.add_option("--api-key-env", f.api_key_env, "Environment variable holding the API key")->capture_default_str();
  s.add_option("--api-key-file", f.api_key_file, "File holding the API key");
  s.add_option("--ca-cert", f.ca_cert, "PEM CA bundle for TLS verification");
  s.add_option("--extra-body", f.extra_body, "JSON object merged into every request");
  s.add_flag("--stream", f.stream, "Use streaming (SSE) responses");
  s.add_option("--max-retries", f.max_retries, "Retries per failed request")->capture_default_str();
  s.add_option("--timeout", f.timeout,
               "Seconds one attempt may take in total (connect, request, every byte of the answer); then it is "
               "retried or recorded as a timeout")
      ->capture_default_str();
  s.add_flag("--verbose", f.verbose, "Log requests and responses (API keys redacted) to stderr");
}

}  // namespace repro::cli
