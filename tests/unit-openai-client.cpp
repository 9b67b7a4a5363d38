// ctest-labels: model remote openai-client
// The official OpenAI Node.js client (npm package `openai`, tests/scripts/openai_client.cjs) against
// `serve` on loopback: models list, chat, chat streaming, completions, top_logprobs / logprobs N and a
// 400 error. Needs `node` and the package: REPRO_OPENAI_NODE_MODULES names its node_modules folder
// (default: .npm-openai/node_modules beside the checkout, made by `scripts/deps.sh --test`);
// without them the test skips with a message.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "repro/engine/engine.hpp"
#include "repro/serve/server.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;

TEST_CASE(
    "serve answers the official OpenAI client: models, chat, streaming, completions, logprobs, errors") {
  REPRO_REQUIRE_MODELS(dir);
  const char* env = std::getenv("REPRO_OPENAI_NODE_MODULES");
  const fs::path modules =
      env ? fs::path(env) : fs::path(REPRO_SOURCE_DIR) / ".." / ".npm-openai" / "node_modules";
  if (test::run_shell("command -v node").code != 0) {
    MESSAGE("SKIPPED: node (Node.js) not found; install nodejs to run the OpenAI client test");
    return;
  }
  if (!fs::exists(modules / "openai" / "package.json")) {
    MESSAGE("SKIPPED: the npm package 'openai' not found in "
            << modules.string() << "; run `scripts/deps.sh --test` (npm install openai@6 there) or set "
            << "REPRO_OPENAI_NODE_MODULES");
    return;
  }
  auto model = load_model((dir / "stories260K.gguf").string());
  const std::string key = "sk-openai-client-test-77";
  ServerOptions so;
  so.port = 0;
  so.api_key = key;
  Server server(*model, {Mode::BatchInvariant, 1}, so);
  server.start();
  auto r = test::run_shell("timeout 120 node '" + std::string(REPRO_SOURCE_DIR) +
                           "/tests/scripts/openai_client.cjs' '" + modules.string() + "' '" + server.url() +
                           "/v1' '" + key + "' '" + server.model_name() + "'");
  server.stop();
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const nlohmann::json out = nlohmann::json::parse(r.output.substr(r.output.find('{')));

  // Models.
  REQUIRE(out["models"].is_array());
  CHECK(out["models"].size() == 1);
  CHECK(out["models"][0] == server.model_name());
  // Chat: the engine's greedy output for the rendered conversation, streamed or not.
  Engine engine(*model, {Mode::BatchInvariant, 1});
  CHECK(out["chat"].is_string());
  CHECK(!out["chat"].get<std::string>().empty());
  CHECK(out["chat_usage"]["completion_tokens"].get<int>() <= 8);
  CHECK(out["chat_fingerprint"] == server.fingerprint());
  CHECK(out["stream"] == out["chat"]);
  CHECK(out["stream_chunks"].get<int>() >= 2);
  CHECK(out["stream_finish"] == out["chat_finish"]);
  // top_logprobs 3: three alternatives per token, the chosen one first (greedy).
  REQUIRE(out["chat_top"].is_array());
  CHECK(!out["chat_top"].empty());
  for (const auto& n : out["chat_top"]) CHECK(n == 3);
  CHECK(out["chat_top_first_is_chosen"] == true);
  // Completions: the text equals local greedy generation; logprobs 2 gives up to 2 per token.
  GenRequest g;
  g.prompt = model->tokenizer->encode("Once upon a time", true);
  g.params.max_tokens = 8;
  GenResult local = engine.generate({g})[0];
  CHECK(out["completion"] == local.text);
  CHECK(out["completion_tokens"] == local.tokens.size());
  for (const auto& n : out["completion_top"]) CHECK((n == 1 || n == 2));
  // The error reaches the client as a 400 with the server's message.
  CHECK(out["error_status"] == 400);
  CHECK(out["error_class"] == "BadRequestError");
  CHECK(out["error_message"].get<std::string>().find("temperature") != std::string::npos);
}
