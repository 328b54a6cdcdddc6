import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { pino } from 'pino';
import OpenAI from 'openai';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { CLI, eventually, spawnNode } from '../support/processes.js';

const MODEL = 'sim-test';

describe('engine sim', () => {
  let sim: EngineSim;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${sim.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal,
    });
  const chat = (content: string, extra: Record<string, unknown> = {}) =>
    post('/v1/chat/completions', {
      model: MODEL,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content },
      ],
      ...extra,
    });

  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 5,
      model: MODEL,
      maxModelLen: 256,
    });
  });
  after(() => sim.close());

  it('non-streaming chat: chat.completion with usage, echoing x-request-id', async () => {
    const res = await chat('hello there', {});
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, MODEL);
    assert.match(body.id, /^chatcmpl-/);
    assert.equal(body.choices[0].message.role, 'assistant');
    assert.equal(body.choices[0].message.content, 'tok '.repeat(5));
    assert.equal(body.choices[0].finish_reason, 'stop');
    // ceil((8 + 11) / 4) = 5 prompt tokens
    assert.deepEqual(body.usage, { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 });
    const echoed = await post(
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }] },
      { 'x-request-id': 'req-42' },
    );
    assert.equal(echoed.headers.get('x-request-id'), 'req-42');
    assert.equal((await chat('x')).headers.get('x-request-id'), null);
  });

  it('streaming chat: role chunk, content chunks, finish chunk, usage chunk, [DONE]', async () => {
    const res = await chat('stream please sim:token_delay_ms=5', {
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const events = await sse(res);
    assert.equal(events.at(-1), '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk');
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    const content = chunks.filter((c) => c.choices[0]?.delta.content).map((c) => c.choices[0].delta.content);
    assert.deepEqual(content, Array(5).fill('tok '));
    const finish = chunks.at(-2);
    assert.equal(finish.choices[0].finish_reason, 'stop');
    assert.equal(finish.usage, null);
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 5);
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'one id per completion');
  });

  it('streaming without include_usage sends no usage member', async () => {
    const events = await sse(await chat('hi', { stream: true }));
    for (const e of events.slice(0, -1)) assert.equal('usage' in JSON.parse(e), false);
  });

  it('max_tokens caps the output with finish_reason length (chat and completions)', async () => {
    const body = await json(await chat('hi', { max_tokens: 2 }));
    assert.equal(body.choices[0].message.content, 'tok tok ');
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.equal(body.usage.completion_tokens, 2);
    const mct = await json(await chat('hi', { max_completion_tokens: 3 }));
    assert.equal(mct.usage.completion_tokens, 3);
    const cmpl = await json(await post('/v1/completions', { model: MODEL, prompt: 'once upon', max_tokens: 1 }));
    assert.equal(cmpl.object, 'text_completion');
    assert.equal(cmpl.choices[0].text, 'tok ');
    assert.equal(cmpl.choices[0].finish_reason, 'length');
    const events = await sse(
      await post('/v1/completions', { prompt: 'sim:tokens=2', stream: true, stream_options: { include_usage: true } }),
    );
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.deepEqual(
      chunks.map((c) => c.choices[0]?.text ?? null),
      ['tok ', 'tok ', '', null],
    );
    assert.equal(chunks[2].choices[0].finish_reason, 'stop');
    assert.equal(chunks[3].usage.completion_tokens, 2);
  });

  it('finish=tool_calls streams a tool call with JSON arguments in pieces', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    const events = await sse(await chat('weather? sim:finish=tool_calls sim:tokens=3', { stream: true, tools }));
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const first = chunks[0].choices[0].delta;
    assert.equal(first.content, null);
    assert.equal(first.tool_calls[0].function.name, 'get_weather');
    assert.match(first.tool_calls[0].id, /^call_/);
    const args = chunks.map((c) => c.choices[0].delta.tool_calls?.[0].function.arguments ?? '').join('');
    assert.deepEqual(JSON.parse(args), { text: 'tok tok tok ' });
    assert.ok(chunks.filter((c) => c.choices[0].delta.tool_calls).length >= 3, 'arguments come in pieces');
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
    const body = await json(await chat('sim:finish=tool_calls', { tools }));
    assert.equal(body.choices[0].message.content, null);
    assert.equal(body.choices[0].finish_reason, 'tool_calls');
    assert.equal(typeof JSON.parse(body.choices[0].message.tool_calls[0].function.arguments), 'object');
  });

  it('passes an unknown finish reason through verbatim; usage=off drops usage even when asked', async () => {
    const body = await json(await chat('sim:finish=eos_token_weird sim:usage=off'));
    assert.equal(body.choices[0].finish_reason, 'eos_token_weird');
    assert.equal('usage' in body, false);
    const events = await sse(await chat('sim:usage=off', { stream: true, stream_options: { include_usage: true } }));
    for (const e of events.slice(0, -1)) assert.equal(JSON.parse(e).usage ?? null, null);
    assert.equal(events.filter((e) => e !== '[DONE]' && JSON.parse(e).choices.length === 0).length, 0);
  });

  it('fail_after cuts the stream after N tokens with no [DONE], and non-streaming gets no response', async () => {
    const text = await readUntilCut(
      await chat('sim:fail_after=2 sim:tokens=10 sim:token_delay_ms=2', { stream: true }),
    );
    assert.equal((text.match(/"content":"tok "/g) ?? []).length, 2);
    assert.equal(text.includes('[DONE]'), false);
    await assert.rejects(chat('sim:fail_after=0'));
    // An answer shorter than fail_after never reaches it: it ends normally, streaming or not.
    const short = await sse(await chat('sim:tokens=2 sim:fail_after=5', { stream: true }));
    assert.equal(short.at(-1), '[DONE]');
    assert.equal((await json(await chat('sim:tokens=2 sim:fail_after=5'))).choices[0].finish_reason, 'stop');
    assert.equal(
      (await json(await chat('sim:tokens=5 sim:fail_after=3', { max_tokens: 2 }))).choices[0].finish_reason,
      'length',
    );
  });

  it('reasoning counts within max_tokens, as vLLM counts it: a budget it uses up ends with length', async () => {
    const capped = await json(await chat('sim:reasoning=5 sim:tokens=1', { max_tokens: 3 }));
    assert.deepEqual(
      [capped.usage.completion_tokens, capped.choices[0].finish_reason, capped.choices[0].message.content],
      [3, 'length', ''],
    );
    const fits = await json(await chat('sim:reasoning=2 sim:tokens=2', { max_tokens: 10 }));
    assert.deepEqual(
      [fits.usage.completion_tokens, fits.choices[0].finish_reason, fits.choices[0].message.content],
      [4, 'stop', 'tok tok '],
    );
    const events = await sse(
      await chat('sim:reasoning=5 sim:tokens=1', {
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.equal(chunks.filter((c) => c.choices[0]?.delta.reasoning_content !== undefined).length, 3);
    assert.equal(chunks.filter((c) => c.choices[0]?.delta.content === 'tok ').length, 0);
    assert.equal(chunks.at(-1).usage.completion_tokens, 3);
    assert.equal(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason, 'length');
  });

  it('a long answer with no token delay arrives whole, in bursts; fail_after cuts it at the exact token', async () => {
    // A context of 8192: the 256 of this file's sim would end the answer first (below).
    const wide = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 5,
      model: MODEL,
      maxModelLen: 8192,
    });
    try {
      const on = (content: string, extra: Record<string, unknown>) =>
        fetch(`${wide.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], ...extra }),
        });
      const events = await sse(await on('sim:tokens=5000', { stream: true, stream_options: { include_usage: true } }));
      assert.equal(events.at(-1), '[DONE]');
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
      assert.equal(chunks.filter((c) => c.choices[0]?.delta.content === 'tok ').length, 5000);
      assert.equal(chunks.at(-1).usage.completion_tokens, 5000);
      const text = await readUntilCut(await on('sim:fail_after=600 sim:tokens=5000', { stream: true }));
      assert.equal((text.match(/"content":"tok "/g) ?? []).length, 600);
      assert.equal(text.includes('[DONE]'), false);
    } finally {
      await wide.close();
    }
  });

  it('without max_tokens the answer ends where the context does (finish length), as vLLM limits it', async () => {
    const body = await json(await chat('sim:tokens=1000'));
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.equal(body.usage.prompt_tokens + body.usage.completion_tokens, 256);
  });

  it('a buffered answer takes the time its tokens would (reasoning and errors after tokens included); huge waits never fire early', async () => {
    const timed = async (content: string): Promise<[number, Response]> => {
      const t = performance.now();
      const res = await chat(content);
      return [performance.now() - t, res];
    };
    const [reasoning] = await timed('sim:ttft_ms=20 sim:token_delay_ms=40 sim:tokens=1 sim:reasoning=5');
    assert.ok(reasoning >= 20 + 5 * 40 - 5, `reasoning tokens take their time (${reasoning.toFixed(0)} ms)`);
    const [failed, res] = await timed('sim:error_after=3 sim:tokens=5 sim:ttft_ms=50 sim:token_delay_ms=50');
    assert.equal(res.status, 200);
    assert.ok((await json(res)).error !== undefined);
    assert.ok(failed >= 50 + 2 * 50 - 5, `the failure comes after the tokens before it (${failed.toFixed(0)} ms)`);
    // Past what a timer can hold: still waiting after 300 ms (node would fire it after 1 ms).
    const ac = new AbortController();
    const long = post(
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'sim:tokens=4 sim:token_delay_ms=999999999' }] },
      {},
      ac.signal,
    ).then(
      () => 'answered',
      () => 'aborted',
    );
    const early = await Promise.race([long, new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    ac.abort();
    assert.equal(early, 'waiting');
  });

  it('status=503 answers an OpenAI-style error carrying the secret marker', async () => {
    const res = await chat('sim:status=503');
    assert.equal(res.status, 503);
    const body = await json(res);
    assert.equal(body.error.code, 503);
    assert.equal(typeof body.error.type, 'string');
    assert.ok(body.error.message.includes('UPSTREAM-SECRET-DETAIL'));
  });

  it('rejects over-long context: directive and real check, vLLM style', async () => {
    for (const res of [
      await chat('sim:reject=context'),
      await chat('hi', { max_tokens: 255 }),
      await chat('x'.repeat(2000)),
    ]) {
      assert.equal(res.status, 400);
      const body = await json(res);
      // vLLM 0.10.1 on: OpenAI's envelope, which the SDKs read.
      assert.deepEqual(Object.keys(body), ['error']);
      assert.equal(body.error.type, 'BadRequestError');
      assert.equal(body.error.code, 400);
      assert.match(
        body.error.message,
        /^This model's maximum context length is 256 tokens\. However, you requested \d+ tokens/,
      );
    }
    // Older vLLM's flat object, on request.
    const flat = await json(await chat('sim:reject=context_flat'));
    assert.deepEqual([flat.object, flat.type, flat.code, flat.error], ['error', 'BadRequestError', 400, undefined]);
    assert.match(flat.message, /^This model's maximum context length is 256 tokens\./);
    assert.equal((await chat('hi', { max_tokens: 200 })).status, 200);
    // The openai SDK reads the envelope's words (the flat object reads "(no body)" there).
    const client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const err = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'sim:reject=context' }] })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.match(err.message, /^400 This model's maximum context length is 256 tokens\./);
  });

  it('unknown model -> 404; bad JSON, wrong content type, bad max_tokens -> 400; huge body -> 413', async () => {
    const unknown = await post(
      '/v1/chat/completions',
      { model: 'other-CANARY', messages: [{ role: 'user', content: 'x' }] },
      { 'x-request-id': 'bad id\tCANARY' },
    );
    assert.equal(unknown.status, 404);
    assert.equal(unknown.headers.get('x-request-id'), null, 'an id of another shape is not echoed');
    const err = (await json(unknown)).error;
    assert.equal(err.code, 'model_not_found');
    assert.ok(!JSON.stringify(err).includes('CANARY'), 'the model it was sent is not echoed');
    const bad = await post('/v1/chat/completions', '{"model":');
    assert.equal(bad.status, 400);
    assert.equal(typeof (await json(bad)).error.message, 'string');
    assert.equal((await post('/v1/chat/completions', 'x', { 'content-type': 'text/plain' })).status, 400);
    assert.equal((await chat('x', { max_tokens: -1 })).status, 400);
    assert.equal((await post('/v1/chat/completions', { messages: [] })).status, 400);
    assert.equal((await post('/v1/chat/completions', 'x'.repeat(9 * 1024 * 1024))).status, 413);
    assert.equal((await chat('still alive')).status, 200);
  });

  it('a client abort mid-stream stops generation and counts in stats().aborted', async () => {
    const before = sim.stats().aborted;
    const ac = new AbortController();
    const res = await post(
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'sim:tokens=1000 sim:token_delay_ms=20' }], stream: true },
      {},
      ac.signal,
    );
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    await eventually(() => sim.stats().aborted === before + 1 && sim.stats().open === 0, 1000, 10);
  });

  it('GET /v1/models lists the one model', async () => {
    const body = await json(await fetch(`${sim.url}/v1/models`));
    assert.equal(body.object, 'list');
    assert.deepEqual(
      { ...body.data[0], created: 0 },
      { id: MODEL, object: 'model', created: 0, owned_by: 'svc-sim', max_model_len: 256 },
    );
  });

  it('a model that is no string is a 400 naming the member, not an unknown model', async () => {
    const res = await post('/v1/chat/completions', { model: 7, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(res.status, 400);
    assert.equal((await json(res)).error.param, 'model');
    assert.equal((await post('/v1/embeddings', { model: 'other', input: 'x' })).status, 404);
  });

  it('health: 200 empty, toggled to 503 and delayed via /sim/health and setHealth', async () => {
    const ok = await fetch(`${sim.url}/health`);
    // The request id is echoed only of the bounded id shape, on /health too.
    assert.equal(
      (await fetch(`${sim.url}/health`, { headers: { 'x-request-id': 'req-1' } })).headers.get('x-request-id'),
      'req-1',
    );
    assert.equal(
      (await fetch(`${sim.url}/health`, { headers: { 'x-request-id': 'bad id\tCANARY' } })).headers.get('x-request-id'),
      null,
    );
    assert.equal(ok.status, 200);
    assert.equal(await ok.text(), '');
    assert.equal((await post('/sim/health', { ok: false, delay_ms: 0 })).status, 200);
    assert.equal((await fetch(`${sim.url}/health`)).status, 503);
    assert.equal((await post('/sim/health', { ok: 'no' })).status, 400);
    sim.setHealth({ ok: true, delayMs: 120 });
    const t0 = Date.now();
    assert.equal((await fetch(`${sim.url}/health`)).status, 200);
    assert.ok(Date.now() - t0 >= 100);
    sim.setHealth({ ok: true, delayMs: 0 });
    assert.ok(sim.stats().health >= 3);
  });

  it('ttft and token delay shape the timing of a stream', async () => {
    const t0 = Date.now();
    const res = await chat('sim:ttft_ms=80 sim:token_delay_ms=30 sim:tokens=4', { stream: true });
    const reader = res.body!.getReader();
    const firstAt = await firstContentAt(reader, t0);
    assert.ok(firstAt >= 75, `first content after ttft (${firstAt} ms)`);
    while (!(await reader.read()).done);
    assert.ok(Date.now() - t0 >= 75 + 3 * 30 - 10);
  });
});

describe('engine sim CLI', () => {
  it('starts, serves, logs its URL and exits 0 on SIGTERM', async () => {
    const p = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '0',
      '--tokens',
      '3',
      '--model',
      'cli-model',
    ]);
    try {
      const body = await json(
        await fetch(`${p.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'cli-model', messages: [{ role: 'user', content: 'hi' }] }),
        }),
      );
      assert.equal(body.usage.completion_tokens, 3);
    } finally {
      assert.equal(await p.stop(), 0);
    }
  });

  it('a million-token stream starts at once and leaves the sim free to answer (bounded memory)', async () => {
    const p = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '0',
      '--tokens',
      '1000000',
      '--model',
      'cli-model',
    ]);
    const ac = new AbortController();
    try {
      const t0 = performance.now();
      const res = await fetch(`${p.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal: ac.signal,
        body: JSON.stringify({ model: 'cli-model', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      const first = await res.body!.getReader().read();
      const ttfb = performance.now() - t0;
      assert.ok(first.value && first.value.byteLength > 0);
      // Before: the whole answer (~130 MB of SSE) was built before the first byte, seconds later.
      assert.ok(ttfb < 2_000, `first byte after ${ttfb.toFixed(0)} ms`);
      // The stream is open and unread: the sim still answers, and has not built the rest.
      assert.equal((await fetch(`${p.url}/health`)).status, 200);
      const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.proc.pid}/status`, 'utf8'))?.[1]);
      assert.ok(rssKiB < 300 * 1024, `sim RSS ${rssKiB} KiB`);
    } finally {
      ac.abort();
      assert.equal(await p.stop(), 0);
    }
  });

  it('rejects an invalid number with exit 2', async () => {
    const p = await spawnNode(CLI, ['engine', 'sim', '--tokens', 'many'], { waitForListening: false });
    await eventually(() => p.proc.exitCode !== null);
    assert.equal(p.proc.exitCode, 2);
  });
});

// Response bodies are checked member by member, so an untyped view is the honest type here.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(res: Response): Promise<any> {
  return res.json();
}

/** Reads a stream the sim cuts off: what arrived before the cut (the read must fail, not end). */
async function readUntilCut(res: Response): Promise<string> {
  const reader = res.body!.getReader();
  let text = '';
  await assert.rejects(async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
  });
  return text;
}

/** Reads an SSE body into its `data:` payloads. */
async function sse(res: Response): Promise<string[]> {
  const text = await res.text();
  assert.ok(text.endsWith('\n\n'));
  return text
    .split('\n\n')
    .filter((b) => b.length > 0)
    .map((b) => {
      assert.ok(b.startsWith('data: '), b);
      return b.slice(6);
    });
}

async function firstContentAt(reader: ReadableStreamDefaultReader<Uint8Array>, t0: number): Promise<number> {
  for (;;) {
    const { done, value } = await reader.read();
    if (done) throw new Error('stream ended without content');
    if (Buffer.from(value).toString().includes('"content":"tok "')) return Date.now() - t0;
  }
}
