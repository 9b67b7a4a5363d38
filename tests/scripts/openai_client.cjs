// The official OpenAI Node.js client (npm package `openai`) against `repro-audit serve`.
// Usage: node openai_client.cjs NODE_MODULES_DIR BASE_URL API_KEY MODEL
// Prints one JSON object with what each call returned; exits 1 with a message on the first failure.
'use strict';
const path = require('path');

const [modules, baseURL, apiKey, model] = process.argv.slice(2);
const openai = require(path.join(modules, 'openai'));
const OpenAI = openai.OpenAI || openai.default || openai;

function fail(msg) {
  process.stderr.write('openai-client: ' + msg + '\n');
  process.exit(1);
}

async function main() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  const out = {};

  // Models list.
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  // Chat, greedy.
  const messages = [{ role: 'user', content: 'Once upon a time' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  out.chat = chat.choices[0].message.content;
  out.chat_finish = chat.choices[0].finish_reason;
  out.chat_usage = chat.usage;
  out.chat_fingerprint = chat.system_fingerprint;

  // Chat, streamed: the deltas joined.
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length && chunk.choices[0].delta && chunk.choices[0].delta.content)
      text += chunk.choices[0].delta.content;
    if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  out.stream = text;
  out.stream_chunks = chunks;
  out.stream_finish = finish;

  // Chat with top_logprobs: the number of alternatives per token.
  const lp = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  out.chat_top = lp.choices[0].logprobs.content.map((e) => e.top_logprobs.length);
  out.chat_top_first_is_chosen = lp.choices[0].logprobs.content.every(
    (e) => e.top_logprobs[0].token === e.token && e.top_logprobs[0].logprob === e.logprob);

  // Completions with logprobs: N.
  const comp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 2 });
  out.completion = comp.choices[0].text;
  out.completion_tokens = comp.choices[0].logprobs.tokens.length;
  out.completion_top = comp.choices[0].logprobs.top_logprobs.map((m) => Object.keys(m).length);

  // An error: 400 as the client's BadRequestError, with the server's message.
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: -1 });
    fail('temperature -1 was accepted');
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) fail('not an APIError: ' + e);
    out.error_status = e.status;
    out.error_class = e.constructor.name;
    out.error_message = e.message;
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => fail(String(e && e.stack ? e.stack : e)));
