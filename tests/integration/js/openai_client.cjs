// Drives `ember serve` with the official OpenAI client library (npm `openai`):
//   node openai_client.cjs OPENAI_MODULE_DIR BASE_URL MODEL
// Asserts on the parsed results and prints them as one JSON line; exits non-zero on failure.
'use strict';
const assert = require('node:assert/strict');
const OpenAI = require(process.argv[2]);
const baseURL = process.argv[3] + '/v1';
const model = process.argv[4];

async function main() {
  const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Say something about rivers.' },
  ];

  const models = await client.models.list();
  assert.equal(models.data[0].id, model);

  const plain = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, seed: 7,
  });
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices.length, 1);
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.equal(typeof plain.choices[0].message.content, 'string');
  assert.ok(plain.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(plain.choices[0].finish_reason));
  assert.ok(plain.usage.prompt_tokens > 0);
  assert.ok(plain.usage.completion_tokens > 0 && plain.usage.completion_tokens <= 10);
  assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, seed: 7, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].delta.content ?? '';
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
  }
  // Greedy: the streamed reply is the plain one, token for token.
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  // The repeated prompt is reused from the slot.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);

  let notFound = null;
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages });
  } catch (e) {
    notFound = e;
  }
  assert.ok(notFound instanceof OpenAI.NotFoundError, String(notFound));
  assert.equal(notFound.status, 404);
  assert.equal(notFound.code, 'model_not_found');

  let badRequest = null;
  try {
    await client.chat.completions.create({ model, messages, temperature: 7 });
  } catch (e) {
    badRequest = e;
  }
  assert.ok(badRequest instanceof OpenAI.BadRequestError, String(badRequest));
  assert.equal(badRequest.status, 400);
  assert.equal(badRequest.param, 'temperature');

  const completion = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0,
  });
  assert.equal(completion.object, 'text_completion');
  assert.equal(completion.usage.completion_tokens, 5);

  console.log(JSON.stringify({
    reply: plain.choices[0].message.content, streamed: text, chunks,
    usage, not_found: notFound.message, bad_request: badRequest.message,
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
