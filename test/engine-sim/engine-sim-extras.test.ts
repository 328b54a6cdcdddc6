import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';

const MODEL = 'sim-test';

describe('engine sim: embeddings, rerank and transcription', () => {
  let sim: EngineSim;
  const post = (path: string, body: unknown) =>
    fetch(`${sim.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
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

  it('embeddings: float and base64, one vector per input', async () => {
    const body = await json(await post('/v1/embeddings', { model: MODEL, input: ['alpha', 'beta'] }));
    assert.equal(body.data.length, 2);
    assert.deepEqual(
      body.data.map((d: { index: number }) => d.index),
      [0, 1],
    );
    assert.equal(body.data[0].object, 'embedding');
    assert.equal(body.data[0].embedding.length, 8);
    assert.ok(body.usage.prompt_tokens > 0 && body.usage.total_tokens === body.usage.prompt_tokens);
    const b64 = await json(await post('/v1/embeddings', { input: 'alpha', encoding_format: 'base64' }));
    const buf = Buffer.from(b64.data[0].embedding, 'base64');
    const floats = Array.from(new Float32Array(buf.buffer, buf.byteOffset, 8));
    assert.deepEqual(floats, body.data[0].embedding);
    assert.equal((await post('/v1/embeddings', { input: '' })).status, 400);
  });

  it('embeddings and rerank refuse an input longer than --max-model-len as vLLM does (400, its context message)', async () => {
    // 256 tokens of context; the sim counts a token per 4 characters.
    const long = 'x'.repeat(4 * 300);
    for (const res of [
      await post('/v1/embeddings', { model: MODEL, input: ['short', long] }),
      await post('/v1/embeddings', { model: MODEL, input: [Array.from({ length: 257 }, () => 1)] }),
      await post('/v1/rerank', { model: MODEL, query: 'q', documents: ['fine', long] }),
    ]) {
      assert.equal(res.status, 400);
      const body = await json(res);
      assert.match(
        body.error.message,
        /^This model's maximum context length is 256 tokens\. However, you requested \d+ tokens in the input for (embedding generation|score)\./,
      );
    }
    assert.equal((await post('/v1/embeddings', { model: MODEL, input: 'x'.repeat(4 * 256) })).status, 200);
  });

  it('rerank: results ordered by relevance, top_n honoured', async () => {
    const res = await post('/v1/rerank', {
      model: MODEL,
      query: 'red apple',
      documents: ['blue sky', 'a red apple', 'red car'],
      top_n: 2,
    });
    const body = await json(res);
    assert.equal(body.model, MODEL);
    assert.ok(body.usage.total_tokens > 0);
    assert.deepEqual(
      body.results.map((r: { index: number }) => r.index),
      [1, 2],
    );
    assert.equal(body.results[0].document.text, 'a red apple');
    assert.ok(body.results[0].relevance_score > body.results[1].relevance_score);
  });

  it('transcription: multipart file is parsed; json and verbose_json', async () => {
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(64_000)], { type: 'audio/wav' }), 'a.wav');
    form.append('model', MODEL);
    form.append('response_format', 'verbose_json');
    const body = await json(await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: form }));
    assert.equal(typeof body.text, 'string');
    assert.equal(body.duration, 2);
    const plain = new FormData();
    plain.append('file', new Blob([new Uint8Array(10)]), 'b.wav');
    const res = await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: plain });
    assert.deepEqual(Object.keys(await json(res)), ['text']);
    const noFile = new FormData();
    noFile.append('model', MODEL);
    assert.equal((await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: noFile })).status, 400);
    assert.equal((await post('/v1/audio/transcriptions', { file: 'x' })).status, 400);
  });

  it('transcription stream=true: vLLM transcription.chunk events, usage on request, [DONE]; a bad stream value is 400', async () => {
    const form = (fields: Record<string, string>): FormData => {
      const f = new FormData();
      f.append('file', new Blob([new Uint8Array(16_000)], { type: 'audio/wav' }), 'a.wav');
      for (const [k, v] of Object.entries(fields)) f.append(k, v);
      return f;
    };
    const res = await fetch(`${sim.url}/v1/audio/transcriptions`, {
      method: 'POST',
      body: form({ stream: 'true', stream_include_usage: 'true' }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const events = (await res.text()).split('\n\n').filter((e) => e.length > 0);
    assert.equal(events.at(-1), 'data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')));
    assert.equal(
      chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
      'The quick brown fox jumps over the lazy dog.',
    );
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'stop');
    assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: 25, completion_tokens: 9, total_tokens: 34 });
    // Without stream_include_usage: no usage chunk; `stream=false` is the whole answer.
    const noUsage = await (
      await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: form({ stream: 'TRUE' }) })
    ).text();
    assert.doesNotMatch(noUsage, /usage/);
    assert.deepEqual(
      await json(
        await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: form({ stream: 'false' }) }),
      ),
      { text: 'The quick brown fox jumps over the lazy dog.' },
    );
    // Directives in the prompt field: a stream cut after two words, without [DONE].
    const cut = await fetch(`${sim.url}/v1/audio/transcriptions`, {
      method: 'POST',
      body: form({ stream: 'true', prompt: 'sim:fail_after=2' }),
    });
    await assert.rejects(cut.text());
    // Past the nine words of the text it starts over, each word after the first with its space.
    const long = (
      await (
        await fetch(`${sim.url}/v1/audio/transcriptions`, {
          method: 'POST',
          body: form({ stream: 'yes', prompt: 'sim:tokens=11' }),
        })
      ).text()
    )
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)).choices[0]?.delta.content ?? '')
      .join('');
    assert.equal(long, 'The quick brown fox jumps over the lazy dog. The quick');
    const bad = await fetch(`${sim.url}/v1/audio/transcriptions`, { method: 'POST', body: form({ stream: 'maybe' }) });
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.param, 'stream');
  });
});

// Response bodies are checked member by member, so an untyped view is the honest type here.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(res: Response): Promise<any> {
  return res.json();
}
