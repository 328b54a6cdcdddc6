import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import OpenAI from 'openai';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { MAX_STORED_RESPONSES, ResponseStore } from '../../src/engine-sim/engine-sim-response-store.js';
import { eventually } from '../support/processes.js';

const MODEL = 'sim-responses';

/** The events of an SSE body: each `event:` name, its parsed `data:` and whether the two agree. */
function events(text: string): Array<{ name: string; data: Record<string, any> }> {
  return text
    .split('\n\n')
    .filter((e) => e.length > 0)
    .map((e) => {
      const lines = e.split('\n');
      assert.equal(lines.length, 2, `one event line and one data line: ${e}`);
      assert.match(lines[0]!, /^event: /);
      assert.match(lines[1]!, /^data: /);
      const data = JSON.parse(lines[1]!.slice(6)) as Record<string, any>;
      return { name: lines[0]!.slice(7), data };
    });
}

describe('engine sim: POST /v1/responses as vLLM answers it', () => {
  let sim: EngineSim;
  let client: OpenAI;
  const post = (body: unknown) =>
    fetch(`${sim.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 3,
      model: MODEL,
      maxModelLen: 256,
    });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => sim.close());

  it('non-streaming: a Response with output[].content[].text, status, incomplete_details and usage', async () => {
    const r = await client.responses.create({ model: MODEL, input: 'hello there', instructions: 'be brief' });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.model, MODEL);
    assert.equal(r.status, 'completed');
    assert.equal(r.incomplete_details, null);
    assert.equal(r.error, null);
    assert.equal(r.instructions, 'be brief');
    assert.equal(r.output.length, 1);
    const msg = r.output[0]!;
    assert.equal(msg.type, 'message');
    assert.ok(msg.type === 'message' && msg.role === 'assistant');
    assert.deepEqual(msg.type === 'message' ? msg.content.map((c) => c.type === 'output_text' && c.text) : [], [
      'tok tok tok ',
    ]);
    assert.equal(r.output_text, 'tok tok tok ');
    // ceil((11 + 8) / 4) = 5 input tokens: the instructions count.
    assert.deepEqual(
      { input: r.usage?.input_tokens, output: r.usage?.output_tokens, total: r.usage?.total_tokens },
      { input: 5, output: 3, total: 8 },
    );
  });

  it('streaming: the event sequence, each event named as its type and numbered in order, ending at response.completed without [DONE]', async () => {
    const res = await post({ model: MODEL, input: 'go sim:tokens=2', stream: true });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const text = await res.text();
    assert.doesNotMatch(text, /\[DONE\]/);
    const evs = events(text);
    for (const e of evs) assert.equal(e.data['type'], e.name);
    assert.deepEqual(
      evs.map((e) => e.data['sequence_number']),
      evs.map((_, i) => i),
    );
    assert.deepEqual(
      evs.map((e) => e.name),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assert.equal(evs[0]!.data['response'].status, 'in_progress');
    assert.equal(evs[6]!.data['text'], 'tok tok ');
    const final = evs.at(-1)!.data['response'];
    assert.equal(final.status, 'completed');
    assert.equal(final.output[0].content[0].text, 'tok tok ');
    assert.equal(final.usage.output_tokens, 2);
  });

  it('streaming through the SDK: reasoning first (its own item), then the answer; the final Response holds both', async () => {
    const stream = await client.responses.create({ model: MODEL, input: 'think sim:reasoning=2', stream: true });
    const names: string[] = [];
    let final: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      names.push(e.type);
      if (e.type === 'response.completed') final = e.response;
    }
    assert.equal(names.filter((n) => n === 'response.reasoning_text.delta').length, 2);
    assert.ok(names.indexOf('response.reasoning_text.done') < names.indexOf('response.output_text.delta'));
    assert.deepEqual(
      final?.output.map((o) => o.type),
      ['reasoning', 'message'],
    );
    assert.equal(final?.usage?.output_tokens, 5);
    assert.equal(final?.usage?.output_tokens_details.reasoning_tokens, 2);
  });

  it('max_output_tokens bounds the answer: status incomplete, reason max_output_tokens (streamed and not)', async () => {
    const r = await client.responses.create({ model: MODEL, input: 'sim:tokens=10', max_output_tokens: 4 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output_text, 'tok '.repeat(4));
    assert.equal(r.max_output_tokens, 4);
    const evs = events(
      await (await post({ model: MODEL, input: 'sim:tokens=10', max_output_tokens: 4, stream: true })).text(),
    );
    // vLLM ends a cut answer with response.completed too; the status inside says it was cut.
    assert.equal(evs.at(-1)!.name, 'response.completed');
    assert.equal(evs.at(-1)!.data['response'].status, 'incomplete');
    assert.equal(evs.filter((e) => e.name === 'response.output_text.delta').length, 4);
  });

  it('directives: finish words become status and reason; tool_calls is a function call; usage=off has no usage; ttft holds the first delta', async () => {
    const filtered = await client.responses.create({ model: MODEL, input: 'sim:finish=content_filter' });
    assert.equal(filtered.status, 'incomplete');
    assert.deepEqual(filtered.incomplete_details, { reason: 'content_filter' });
    const call = await client.responses.create({
      model: MODEL,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'sim:finish=tool_calls' }] }],
      tools: [{ type: 'function', name: 'lookup', parameters: {}, strict: false }],
    });
    assert.equal(call.status, 'completed');
    const fc = call.output[0]!;
    assert.ok(fc.type === 'function_call');
    assert.equal(fc.type === 'function_call' && fc.name, 'lookup');
    assert.deepEqual(fc.type === 'function_call' && JSON.parse(fc.arguments), { text: 'tok tok tok ' });
    assert.equal((await client.responses.create({ model: MODEL, input: 'sim:usage=off' })).usage, null);
    const t0 = Date.now();
    const res = await post({ model: MODEL, input: 'sim:ttft_ms=150', stream: true });
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    assert.match(first, /^event: response\.created\n/);
    assert.doesNotMatch(first, /output_text\.delta/);
    assert.ok(Date.now() - t0 < 150, 'response.created comes before the first token');
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    assert.ok(Date.now() - t0 >= 150);
    assert.match(rest, /response\.completed/);
  });

  it('failures: error_after is an error event in the stream and a failed Response buffered; fail_after cuts the connection', async () => {
    const evs = events(
      await (await post({ model: MODEL, input: 'sim:tokens=5 sim:error_after=2', stream: true })).text(),
    );
    assert.equal(evs.filter((e) => e.name === 'response.output_text.delta').length, 2);
    assert.equal(evs.at(-1)!.name, 'error');
    assert.equal(evs.at(-1)!.data['code'], 'server_error');
    const failed = (await (await post({ model: MODEL, input: 'sim:error_after=1' })).json()) as Record<string, any>;
    assert.equal(failed['status'], 'failed');
    assert.equal(failed['error'].code, 'server_error');
    const cut = await post({ model: MODEL, input: 'sim:tokens=5 sim:fail_after=2', stream: true });
    await assert.rejects(cut.text());
    const status = await post({ model: MODEL, input: 'sim:status=503' });
    assert.equal(status.status, 503);
  });

  it('bad requests: another model 404, input missing or malformed, a bad max_output_tokens or stream 400 naming the member; a context overflow 400', async () => {
    const cases: Array<[unknown, number, string | null]> = [
      [{ model: 'other', input: 'x' }, 404, 'model'],
      [{ model: MODEL }, 400, 'input'],
      [{ model: MODEL, input: [] }, 400, 'input'],
      [{ model: MODEL, input: [1] }, 400, 'input'],
      [{ model: MODEL, input: 'x', max_output_tokens: 0 }, 400, 'max_output_tokens'],
      [{ model: MODEL, input: 'x', max_output_tokens: '5' }, 400, 'max_output_tokens'],
      [{ model: MODEL, input: 'x', stream: 'yes' }, 400, 'stream'],
      [{ model: MODEL, input: 'x', max_output_tokens: 1000 }, 400, null],
      [{ model: MODEL, input: 'x', store: 'no' }, 400, 'store'],
      [{ model: MODEL, input: 'x', background: 1 }, 400, 'background'],
      [{ model: MODEL, input: 'x', background: true, store: false }, 400, 'background'],
      [{ model: MODEL, input: 'x', background: true, stream: true }, 400, 'stream'],
    ];
    for (const [body, status, param] of cases) {
      const res = await post(body);
      assert.equal(res.status, status, JSON.stringify(body));
      const b = (await res.json()) as { error: { param: string | null; message: string } };
      assert.equal(b.error.param, param, JSON.stringify(body));
    }
  });

  it('kept responses: GET /v1/responses/{id} reads back what was answered (buffered and streamed); store false is not kept', async () => {
    const made = await client.responses.create({ model: MODEL, input: 'keep me', instructions: 'kept' });
    const back = await client.responses.retrieve(made.id);
    assert.deepEqual(back, made);
    const stream = await client.responses.create({ model: MODEL, input: 'sim:tokens=2', stream: true });
    let final: OpenAI.Responses.Response | undefined;
    for await (const e of stream) if (e.type === 'response.completed') final = e.response;
    // (The SDK adds `output_text` to what retrieve returns, not to the stream's last event.)
    const { output_text: _, ...retrieved } = await client.responses.retrieve(final!.id);
    assert.deepEqual(retrieved, final);
    const failed = (await (await post({ model: MODEL, input: 'sim:error_after=1' })).json()) as { id: string };
    assert.equal((await client.responses.retrieve(failed.id)).status, 'failed');
    const unkept = await client.responses.create({ model: MODEL, input: 'x', store: false });
    await assert.rejects(client.responses.retrieve(unkept.id), OpenAI.NotFoundError);
    // vLLM's 400 for an id that does not begin with resp; a cancel of a finished response is its 400 too.
    await assert.rejects(client.responses.retrieve('nope'), OpenAI.BadRequestError);
    await assert.rejects(client.responses.cancel(made.id), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.match(err.message, /Cannot cancel a synchronous response/);
      return true;
    });
    await assert.rejects(client.responses.cancel('resp_unknown'), OpenAI.NotFoundError);
    // vLLM serves no delete and no input items.
    await assert.rejects(
      client.responses.delete(made.id),
      (err: unknown) => (err as InstanceType<typeof OpenAI.APIError>).status === 405,
    );
    await assert.rejects(client.responses.inputItems.list(made.id), OpenAI.NotFoundError);
  });

  it('background: answered at once queued; in_progress from the first token; the finished Response when the last is due; cancel stops it', async () => {
    const r = await client.responses.create({
      model: MODEL,
      input: 'sim:tokens=3 sim:ttft_ms=150 sim:token_delay_ms=50',
      background: true,
    });
    assert.equal(r.status, 'queued');
    assert.equal(r.background, true);
    assert.deepEqual(r.output, []);
    assert.equal(r.usage, null);
    assert.equal((await client.responses.retrieve(r.id)).status, 'queued');
    await eventually(async () => (await client.responses.retrieve(r.id)).status === 'in_progress', 2000, 10);
    const done = await eventually(
      async () => {
        const got = await client.responses.retrieve(r.id);
        return got.status === 'completed' ? got : undefined;
      },
      3000,
      10,
    );
    assert.equal(done.output_text, 'tok tok tok ');
    assert.equal(done.usage?.output_tokens, 3);
    const slow = await client.responses.create({
      model: MODEL,
      input: 'sim:tokens=3 sim:ttft_ms=5000',
      background: true,
    });
    const cancelled = await client.responses.cancel(slow.id);
    assert.equal(cancelled.status, 'cancelled');
    assert.equal((await client.responses.retrieve(slow.id)).status, 'cancelled');
    await assert.rejects(client.responses.cancel(slow.id), OpenAI.BadRequestError);
    const failing = await client.responses.create({
      model: MODEL,
      input: 'sim:tokens=3 sim:error_after=1',
      background: true,
    });
    await eventually(async () => (await client.responses.retrieve(failing.id)).status === 'failed', 2000, 10);
  });

  it('the store is bounded: the oldest response goes first, and its timers with it', () => {
    const store = new ResponseStore(2);
    let fired = false;
    const t = setTimeout(() => {
      fired = true;
    }, 5);
    store.put({ id: 'resp_a', status: 'queued' }, [t]);
    store.put({ id: 'resp_b', status: 'completed' });
    store.put({ id: 'resp_c', status: 'completed' });
    assert.equal(store.get('resp_a'), undefined);
    assert.equal(store.get('resp_c')?.['status'], 'completed');
    assert.equal(store.cancel('resp_b'), 'sync');
    assert.ok(MAX_STORED_RESPONSES >= 1000);
    return new Promise<void>((resolve) =>
      setTimeout(() => {
        assert.equal(fired, false, 'the evicted response changes no more');
        resolve();
      }, 20),
    );
  });
});
