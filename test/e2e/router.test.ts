import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { pino } from 'pino';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { startEngineSim, type EngineSim } from '../../src/servers/engine-sim.js';
import { eventually } from '../support/processes.js';
import { startRecordingUpstream, startRouterHarness, type RecordingUpstream, type RouterHarness } from '../support/router-harness.js';

const GID = /^req_[0-9a-f]{32}$/;
// One spelling from the raw relay and the Fastify routes alike.
const PROBLEM = /^application\/problem\+json; charset=utf-8$/;
/** The `chat` alias's output ceiling (`max_output_tokens`). */
const CEIL = 16;
const MAX_BODY = 65_536;
const UPSTREAM_KEY = `upstream-${randomBytes(12).toString('hex')}`;
const user = (content: string) => [{ role: 'user' as const, content }];

describe('router end to end (engine sim and router as real processes, OpenAI SDK client)', () => {
  let h: RouterHarness;
  let rec: RecordingUpstream;
  let inproc: EngineSim;
  let client: OpenAI;
  /** Error responses the SDK saw (clones, so their bodies can be read again). */
  const errors: Response[] = [];
  const capture: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (res.status >= 400) errors.push(res.clone());
    return res;
  };

  const post = (path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> =>
    fetch(`${h.routerUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
      signal: signal ?? AbortSignal.timeout(10_000),
    });
  const chat = (content: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}, model = 'chat') =>
    post('/v1/chat/completions', { model, messages: user(content), ...extra }, headers);
  /** The terminal record of a request, by the id the router answered with. */
  const record = async (id: string): Promise<TerminalRecord> => {
    const r = await h.lookup(id);
    assert.equal(r.status, 200, `lookup of ${id}`);
    assert.deepEqual(Object.keys(r.body), ['request']);
    assert.ok(checkTerminalRecord.Check(r.body.request), 'a valid terminal record');
    return r.body.request as TerminalRecord;
  };
  const gidOf = (res: { headers: Headers }): string => {
    const id = res.headers.get('x-svc-request-id');
    assert.match(id ?? '', GID);
    return id!;
  };
  const assertProblem = async (res: Response, status: number, slug: string): Promise<string> => {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', PROBLEM);
    const text = await res.text();
    const body = JSON.parse(text) as Record<string, unknown>;
    assert.deepEqual(Object.keys(body).sort(), ['status', 'title', 'type']);
    assert.equal(body['type'], `urn:svc-serving:problem:${slug}`);
    assert.equal(body['status'], status);
    assert.equal(typeof body['title'], 'string');
    return text;
  };
  /** Reads an SSE response until `n` data events arrived; returns the reader and what was read. */
  const readEvents = async (res: Response, n: number) => {
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while ((text.match(/^data: /gm) ?? []).length < n) {
      const { done, value } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    return { reader, text };
  };

  before(async () => {
    rec = await startRecordingUpstream('recorded-model');
    inproc = await startEngineSim({ host: '127.0.0.1', port: 0, logger: pino({ level: 'silent' }), ttftMs: 5, tokenDelayMs: 2, tokens: 4, model: 'inproc-model', maxModelLen: 8192 });
    h = await startRouterHarness({
      models: [
        { alias: 'chat', max_output_tokens: CEIL },
        { alias: 'timeout-model', upstream_timeout_ms: 300 },
        { alias: 'single', max_concurrency: 1, max_queue: 0 },
        { alias: 'queued', max_concurrency: 1, max_queue: 1 },
        { alias: 'recorded', upstream: rec.url, upstream_model: 'recorded-model', max_output_tokens: CEIL },
        { alias: 'recorded-keyed', upstream: rec.url, upstream_model: 'recorded-model', upstream_api_key_env: 'SVC_TEST_UPSTREAM_KEY' },
        { alias: 'inproc', upstream: `${inproc.url}/v1`, upstream_model: 'inproc-model' },
        { alias: 'whisper' },
        { alias: 'embedder' },
        // Nothing listens on port 1: its readiness check fails.
        { alias: 'down', upstream: 'http://127.0.0.1:1/v1' },
      ],
      server: { max_body_bytes: MAX_BODY },
      routerEnv: { SVC_LOG_LEVEL: 'debug', SVC_TEST_UPSTREAM_KEY: UPSTREAM_KEY },
    });
    client = h.client({ fetch: capture });
  });
  after(async () => {
    await h?.stop();
    await inproc?.close();
    await rec?.close();
  });

  it('non-streaming chat: success record with phase timings, upstream usage, output limit and router identity', async () => {
    const { data, response } = await client.chat.completions.create({ model: 'chat', messages: user('hello there') }).withResponse();
    const id = gidOf(response);
    assert.equal(data.choices[0]!.finish_reason, 'stop');
    assert.equal(data.choices[0]!.message.content, 'tok tok tok tok ');
    const r = await record(id);
    assert.equal(r.request_id, id);
    assert.equal(r.model, 'chat');
    assert.equal(r.route, 'chat.completions');
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, { prompt_tokens: data.usage!.prompt_tokens, completion_tokens: 4, prompt_source: 'upstream', completion_source: 'upstream' });
    for (const k of ['latency_ms', 'readiness_check_ms', 'admission_wait_ms', 'upstream_duration_ms', 'time_to_first_content_ms'] as const) {
      assert.equal(typeof r[k], 'number', k);
      assert.ok(r[k]! >= 0 && r[k]! <= r.latency_ms!, `${k} within the latency`);
    }
    assert.ok(r.latency_ms! > 0);
    assert.ok(r.upstream_duration_ms! > 0);
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });
    assert.match(r.routing_config_hash ?? '', /^[0-9a-f]{64}$/);
    assert.match(r.package_version ?? '', /^\d+\.\d+\.\d+/);
    assert.ok(Date.parse(r.started_at) <= Date.parse(r.finished_at));
    for (const k of ['session_id', 'workbench_run_id', 'task_id']) assert.equal(k in r, false, k);
    const status = (await (await h.get('/v1/router/status')).json()) as { routing_config_hash: string; package_version: string };
    assert.equal(r.routing_config_hash, status.routing_config_hash);
    assert.equal(r.package_version, status.package_version);
  });

  it('an output limit above the alias ceiling is clamped, and the engine really produces at most the ceiling', async () => {
    const big = await client.chat.completions.create({ model: 'chat', messages: user('sim:tokens=40'), max_tokens: 100 }).withResponse();
    assert.equal(big.data.usage!.completion_tokens, CEIL);
    assert.equal(big.data.choices[0]!.message.content, 'tok '.repeat(CEIL));
    let r = await record(gidOf(big.response));
    assert.deepEqual(r.output_limit, { requested: 100, effective: CEIL, clamped: true });
    assert.equal(r.finish_reason, 'length');

    const mct = await client.chat.completions.create({ model: 'chat', messages: user('sim:tokens=40'), max_completion_tokens: 1000 }).withResponse();
    assert.equal(mct.data.usage!.completion_tokens, CEIL);
    r = await record(gidOf(mct.response));
    assert.deepEqual(r.output_limit, { requested: 1000, effective: CEIL, clamped: true });

    const small = await client.chat.completions.create({ model: 'chat', messages: user('sim:tokens=40'), max_tokens: 3 }).withResponse();
    assert.equal(small.data.usage!.completion_tokens, 3);
    r = await record(gidOf(small.response));
    assert.deepEqual(r.output_limit, { requested: 3, effective: 3, clamped: false });
    assert.equal(r.finish_reason, 'length');

    // Both spellings at once: neither may carry more than the ceiling to the engine.
    const before = rec.requests.length;
    await client.chat.completions.create({ model: 'recorded', messages: user('x'), max_tokens: 500, max_completion_tokens: 400 });
    const sent = JSON.parse(rec.requests[before]!.body.toString('utf8')) as Record<string, unknown>;
    assert.equal(sent['model'], 'recorded-model');
    assert.ok((sent['max_tokens'] as number) <= CEIL, `max_tokens forwarded as ${String(sent['max_tokens'])}`);
    assert.ok((sent['max_completion_tokens'] as number) <= CEIL);
  });

  it('streaming chat through the SDK: every chunk arrives; usage is upstream with include_usage and estimated without', async () => {
    const withUsage = await client.chat.completions
      .create({ model: 'chat', messages: user('stream me sim:tokens=6'), stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const id = gidOf(withUsage.response);
    const content: string[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null | undefined;
    for await (const chunk of withUsage.data) {
      if (chunk.choices[0]?.delta.content) content.push(chunk.choices[0].delta.content);
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.deepEqual(content, Array(6).fill('tok '));
    assert.equal(finish, 'stop');
    assert.equal(usage?.completion_tokens, 6);
    let r = await record(id);
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, { prompt_tokens: usage!.prompt_tokens, completion_tokens: 6, prompt_source: 'upstream', completion_source: 'upstream' });
    assert.equal(typeof r.time_to_first_content_ms, 'number');

    const prompt = 'no usage please sim:tokens=5';
    const without = await client.chat.completions.create({ model: 'chat', messages: user(prompt), stream: true }).withResponse();
    let n = 0;
    for await (const chunk of without.data) if (chunk.choices[0]?.delta.content) n++;
    assert.equal(n, 5);
    r = await record(gidOf(without.response));
    assert.equal(r.outcome, 'success');
    assert.deepEqual(r.usage, { prompt_tokens: Math.ceil(prompt.length / 4), completion_tokens: 5, prompt_source: 'estimated', completion_source: 'estimated' });
  });

  it('completions route: record with route completions and upstream usage', async () => {
    const { data, response } = await client.completions.create({ model: 'chat', prompt: 'once upon a time' }).withResponse();
    assert.equal(data.choices[0]!.text, 'tok tok tok tok ');
    const r = await record(gidOf(response));
    assert.equal(r.route, 'completions');
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'stop');
    assert.equal(r.usage.completion_source, 'upstream');
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });
  });

  it('finish reasons: length, tool_calls (tool-only output has no first content), unknown provider strings; usage=off is estimated', async () => {
    const len = await client.chat.completions.create({ model: 'chat', messages: user('sim:tokens=9'), max_tokens: 2 }).withResponse();
    assert.equal((await record(gidOf(len.response))).finish_reason, 'length');

    const tools = [{ type: 'function' as const, function: { name: 'lookup_weather', parameters: { type: 'object', properties: {} } } }];
    const tc = await client.chat.completions.create({ model: 'chat', messages: user('sim:finish=tool_calls'), tools }).withResponse();
    assert.equal(tc.data.choices[0]!.message.tool_calls?.[0]?.type, 'function');
    let r = await record(gidOf(tc.response));
    assert.equal(r.finish_reason, 'tool_calls');
    assert.equal(r.time_to_first_content_ms, null);

    const tcs = await client.chat.completions.create({ model: 'chat', messages: user('sim:finish=tool_calls'), tools, stream: true }).withResponse();
    let args = '';
    for await (const c of tcs.data) args += c.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? '';
    assert.deepEqual(JSON.parse(args), { text: 'tok tok tok tok ' });
    r = await record(gidOf(tcs.response));
    assert.equal(r.finish_reason, 'tool_calls');
    assert.equal(r.time_to_first_content_ms, null);
    assert.equal(r.outcome, 'success');

    // Unknown provider strings, including names an object inherits, are `unknown`, never free text.
    for (const finish of ['end_of_turn_weird', 'constructor', '__proto__', 'toString']) {
      for (const stream of [false, true]) {
        const res = await chat(`sim:finish=${finish}`, { stream });
        const id = gidOf(res);
        await res.text();
        assert.equal((await record(id)).finish_reason, 'unknown', `${finish} stream=${stream}`);
      }
    }

    const off = await client.chat.completions.create({ model: 'chat', messages: user('sim:usage=off') }).withResponse();
    assert.equal(off.data.usage, undefined);
    r = await record(gidOf(off.response));
    assert.deepEqual(r.usage, { prompt_tokens: Math.ceil('sim:usage=off'.length / 4), completion_tokens: 4, prompt_source: 'estimated', completion_source: 'estimated' });
  });

  it('context rejection: the SDK gets a 400 BadRequestError with the fixed context-length problem; record rejected', async () => {
    for (const stream of [false, true]) {
      const n = errors.length;
      const err = await client.chat.completions
        .create({ model: 'chat', messages: user('sim:reject=context'), stream })
        .then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.status, 400);
      const res = errors[n]!;
      const text = await assertProblem(res, 400, 'context-length-exceeded');
      assert.doesNotMatch(text, /maximum context length|tokens/);
      const r = await record(gidOf({ headers: err.headers! }));
      assert.equal(r.outcome, 'rejected');
      assert.equal(r.status_code, 400);
    }
  });

  it('upstream failure mid-stream: an SSE error event and never [DONE]; record error with estimated usage', async () => {
    const res = await chat('sim:fail_after=3 sim:tokens=10', { stream: true });
    const id = gidOf(res);
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.equal((text.match(/"content":"tok "/g) ?? []).length, 3);
    assert.match(text, /^event: error$/m);
    assert.doesNotMatch(text, /\[DONE\]/);
    const r = await record(id);
    assert.equal(r.outcome, 'error');
    assert.equal(r.finish_reason, 'error');
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [3, 'estimated']);

    // The SDK turns the error event into an exception instead of a silently short answer.
    const s = await client.chat.completions.create({ model: 'chat', messages: user('sim:fail_after=2 sim:tokens=10'), stream: true });
    await assert.rejects(async () => {
      for await (const _ of s) {
        // drain
      }
    }, OpenAI.APIError);
  });

  it('upstream 503: the client gets a 502 problem without the engine detail; record error', async () => {
    for (const stream of [false, true]) {
      const res = await chat('sim:status=503', { stream });
      const id = gidOf(res);
      const text = await assertProblem(res, 502, 'upstream-failed');
      assert.doesNotMatch(text, /UPSTREAM-SECRET-DETAIL|worker|srv/);
      const r = await record(id);
      assert.equal(r.outcome, 'error');
      assert.equal(r.status_code, 502);
      assert.doesNotMatch(JSON.stringify(r), /UPSTREAM-SECRET-DETAIL/);
    }
    const n = errors.length;
    await assert.rejects(client.chat.completions.create({ model: 'chat', messages: user('sim:status=500') }), (e: unknown) => e instanceof OpenAI.InternalServerError && e.status === 502);
    assert.doesNotMatch(await errors[n]!.text(), /UPSTREAM-SECRET-DETAIL/);

    // The engine's own 429 is an admission refusal, not an upstream failure.
    const busy = await chat('sim:status=429');
    const busyId = gidOf(busy);
    await assertProblem(busy, 429, 'admission-refused');
    assert.deepEqual([(await record(busyId)).outcome, (await record(busyId)).status_code], ['rejected', 429]);
  });

  it('an upstream that fails its readiness check: 503 problem, record rejected, nothing dispatched', async () => {
    const res = await chat('hello', {}, {}, 'down');
    const id = gidOf(res);
    await assertProblem(res, 503, 'unavailable');
    const r = await record(id);
    assert.equal(r.outcome, 'rejected');
    assert.equal(r.status_code, 503);
    assert.equal(typeof r.readiness_check_ms, 'number');
    assert.equal(r.upstream_duration_ms, null);
    assert.equal(r.finish_reason, null);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [null, 'unknown']);
  });

  it('client abort mid-stream: record disconnected and the upstream request is closed within a second', async () => {
    const aborted0 = inproc.stats().aborted;
    const ac = new AbortController();
    const res = await post('/v1/chat/completions', { model: 'inproc', messages: user('sim:tokens=200 sim:token_delay_ms=50'), stream: true }, {}, ac.signal);
    const id = gidOf(res);
    const { text } = await readEvents(res, 2);
    assert.match(text, /"content":"tok "/);
    const t = Date.now();
    ac.abort();
    await eventually(() => inproc.stats().aborted === aborted0 + 1, 1000, 10);
    assert.ok(Date.now() - t <= 1000);
    await eventually(() => inproc.stats().open === 0, 1000, 10);
    const r = await eventually(async () => ((await h.lookup(id)).status === 200 ? record(id) : undefined), 2000, 20);
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.finish_reason, 'cancelled');
    assert.equal(r.usage.completion_source, 'estimated');
    assert.ok(r.usage.completion_tokens! >= 1 && r.usage.completion_tokens! < 200);
  });

  it('upstream timeout: 504 problem and outcome timeout (buffered), SSE timeout event (streaming)', async () => {
    const t = Date.now();
    const n = errors.length;
    const err = await client.chat.completions.create({ model: 'timeout-model', messages: user('sim:ttft_ms=2000') }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.InternalServerError, String(err));
    assert.equal(err.status, 504);
    assert.ok(Date.now() - t < 1800, 'answered at the deadline, not after the engine');
    await assertProblem(errors[n]!, 504, 'upstream-timeout');
    let r = await record(gidOf({ headers: err.headers! }));
    assert.equal(r.outcome, 'timeout');
    assert.equal(r.status_code, 504);
    assert.ok(r.upstream_duration_ms! >= 250 && r.upstream_duration_ms! < 1800, String(r.upstream_duration_ms));

    const res = await chat('sim:ttft_ms=2000', { stream: true }, {}, 'timeout-model');
    const id = gidOf(res);
    const text = await res.text();
    assert.match(text, /^event: error$/m);
    assert.doesNotMatch(text, /\[DONE\]/);
    r = await record(id);
    assert.equal(r.outcome, 'timeout');
  });

  it('admission: a full alias refuses with 429 (record rejected); a queued request records its wait', async () => {
    const first = chat('sim:ttft_ms=600', {}, {}, 'single');
    await eventually(async () => ((await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }).requests.some((a) => a.model === 'single' && a.phase === 'dispatched'), 2000, 10);
    const second = await chat('quick', {}, {}, 'single');
    const id2 = gidOf(second);
    await assertProblem(second, 429, 'admission-refused');
    const r2 = await record(id2);
    assert.equal(r2.outcome, 'rejected');
    assert.equal(r2.status_code, 429);
    const firstRes = await first;
    assert.equal(firstRes.status, 200);
    assert.equal((await record(gidOf(firstRes))).outcome, 'success');
    await firstRes.text();

    const a = chat('sim:ttft_ms=500', {}, {}, 'queued');
    await eventually(async () => ((await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }).requests.some((x) => x.model === 'queued' && x.phase === 'dispatched'), 2000, 10);
    const b = chat('quick', {}, {}, 'queued');
    await eventually(async () => ((await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }).requests.filter((x) => x.model === 'queued').length === 2, 2000, 10);
    const c = await chat('quick', {}, {}, 'queued');
    await assertProblem(c, 429, 'admission-refused');
    const [ra, rb] = await Promise.all([a, b]);
    assert.equal(ra.status, 200);
    assert.equal(rb.status, 200);
    const recA = await record(gidOf(ra));
    const recB = await record(gidOf(rb));
    assert.ok(recA.admission_wait_ms! < 100, `first waited ${recA.admission_wait_ms}`);
    assert.ok(recB.admission_wait_ms! >= 200, `queued waited ${recB.admission_wait_ms}`);
    assert.ok(recB.admission_wait_ms! <= recB.latency_ms!);
    await Promise.all([ra.text(), rb.text()]);

    // A queued client that leaves is recorded as disconnected and takes no slot with it.
    type Active = { requests: { request_id: string; model: string; phase: string }[] };
    const activeQueued = async () => ((await (await h.get('/v1/requests?active=1')).json()) as Active).requests.filter((x) => x.model === 'queued');
    const holder = chat('sim:ttft_ms=400', {}, {}, 'queued');
    await eventually(async () => (await activeQueued()).some((x) => x.phase === 'dispatched'), 2000, 10);
    const ac = new AbortController();
    const leaving = post('/v1/chat/completions', { model: 'queued', messages: user('leaving') }, {}, ac.signal).catch(() => undefined);
    const waiting = await eventually(async () => (await activeQueued()).find((x) => x.phase === 'admitted' || x.phase === 'checking'), 2000, 10);
    ac.abort();
    await leaving;
    const left = await eventually(async () => ((await h.lookup(waiting.request_id)).status === 200 ? record(waiting.request_id) : undefined), 2000, 20);
    assert.equal(left.outcome, 'disconnected');
    assert.equal(left.status_code, 0, 'nothing was sent to it');
    assert.equal((await holder).status, 200);
    const after = await chat('after', {}, {}, 'queued');
    assert.equal(after.status, 200);
    assert.ok((await record(gidOf(after))).admission_wait_ms! < 100, 'the slot was not leaked');
    await after.text();
  });

  it('exactly one terminal record per routed request: the decision log gains one line per response id', async () => {
    await h.idle();
    const before = h.decisions().length;
    const ids: string[] = [];
    const take = async (p: Promise<Response>): Promise<void> => {
      const res = await p;
      ids.push(gidOf(res));
      await res.text();
    };
    await Promise.all([
      take(chat('plain')),
      take(chat('stream', { stream: true })),
      take(chat('sim:reject=context')),
      take(chat('sim:status=503')),
      take(chat('sim:fail_after=1', { stream: true })),
      take(chat('legacy', {}, { 'x-request-id': `legacy-${randomBytes(4).toString('hex')}` })),
      take(chat('sim:tokens=2', {}, {}, 'recorded')),
    ]);
    const slow = chat('sim:ttft_ms=400', {}, {}, 'single');
    await eventually(async () => ((await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }).requests.some((x) => x.model === 'single' && x.phase === 'dispatched'), 2000, 10);
    await take(chat('refused', {}, {}, 'single'));
    await take(slow);
    const ac = new AbortController();
    const streaming = await post('/v1/chat/completions', { model: 'chat', messages: user('sim:tokens=50 sim:token_delay_ms=30'), stream: true }, {}, ac.signal);
    ids.push(gidOf(streaming));
    await readEvents(streaming, 2);
    ac.abort();
    // Answered before routing: an identifier but no terminal record.
    const unrouted = await chat('x', {}, {}, 'no-such-alias');
    const unroutedId = gidOf(unrouted);
    await unrouted.text();
    await h.idle();
    // Finished records reach the file in grouped writes within the log's flush delay.
    await eventually(() => h.decisions().length - before >= ids.length, 2000, 10);
    await new Promise((r) => setTimeout(r, 100));
    const added = h.decisions().slice(before);
    assert.equal(added.length, ids.length);
    const logged = added.map((d) => d?.['gateway_request_id']);
    assert.deepEqual([...logged].sort(), [...ids].sort());
    assert.equal(new Set(logged).size, ids.length);
    assert.ok(!logged.includes(unroutedId));
    assert.equal((await h.lookup(unroutedId)).status, 404);
    for (const id of ids) await record(id);
  });

  it('identifiers: X-Svc-Request-Id on every authenticated inference answer, legacy and reserved caller ids, forwarding', async () => {
    const answers = [
      await chat('ok'),
      await chat('x', {}, {}, 'no-such-alias'),
      await chat('sim:status=502'),
      await post('/v1/chat/completions', '{not json'),
      await post('/v1/chat/completions', 'x', { 'content-type': 'text/plain' }),
    ];
    const ids = answers.map((r) => gidOf(r));
    assert.equal(new Set(ids).size, ids.length, 'unique');
    assert.deepEqual(answers.map((r) => r.status), [200, 404, 502, 400, 415]);
    await Promise.all(answers.map((r) => r.text()));

    // A valid legacy X-Request-Id is kept; the newest record answers for it.
    const legacy = `trace-${randomBytes(6).toString('hex')}`;
    const l1 = await chat('one', { max_tokens: 3 }, { 'x-request-id': legacy });
    const l2 = await chat('two', { max_tokens: 5 }, { 'x-request-id': legacy });
    const [g1, g2] = [gidOf(l1), gidOf(l2)];
    await Promise.all([l1.text(), l2.text()]);
    assert.equal((await record(g1)).request_id, legacy);
    assert.equal((await record(g1)).output_limit?.requested, 3);
    const newest = await record(legacy);
    assert.equal(newest.request_id, legacy);
    assert.equal(newest.output_limit?.requested, 5);
    assert.notEqual(g1, g2);

    // The reserved shape is never kept from a caller, and lookup never falls back to it.
    const reserved = `req_${randomBytes(16).toString('hex')}`;
    const rr = await chat('reserved', {}, { 'x-request-id': reserved });
    const rid = gidOf(rr);
    await rr.text();
    assert.notEqual(rid, reserved);
    assert.equal((await record(rid)).request_id, rid);
    const miss = await h.lookup(reserved);
    assert.equal(miss.status, 404);
    assert.equal(miss.body.type, 'urn:svc-serving:problem:not-found');
    assert.equal((await h.lookup(`req_${'0'.repeat(32)}`)).status, 404);
    // Invalid legacy ids fall back to the generated one.
    for (const bad of ['has space', 'x'.repeat(129)]) {
      const res = await chat('bad legacy', {}, { 'x-request-id': bad });
      const id = gidOf(res);
      await res.text();
      assert.equal((await record(id)).request_id, id);
    }

    // What reaches the engine: the generated id as x-request-id; no client credential,
    // lineage, session or arbitrary header. The engine's own response headers stay behind.
    const n = rec.requests.length;
    const res = await chat('forwarding', {}, {
      'x-request-id': legacy,
      'x-svc-session-id': 'sess-fwd',
      'x-session-affinity': 'aff-fwd',
      'x-svc-workbench-run-id': 'run-7',
      'x-svc-task-id': 'task-9',
      'x-arbitrary': 'arbitrary-value',
    }, 'recorded');
    const id = gidOf(res);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-request-id'), null, "the engine's x-request-id is not passed to the client");
    assert.equal(res.headers.get('x-engine-detail'), null);
    await res.text();
    assert.equal(rec.requests.length, n + 1);
    const seen = rec.requests[n]!;
    assert.equal(seen.path, '/v1/chat/completions');
    assert.equal(seen.headers['x-request-id'], id);
    for (const hname of ['authorization', 'x-svc-session-id', 'x-session-affinity', 'x-svc-workbench-run-id', 'x-svc-task-id', 'x-arbitrary', 'x-svc-request-id']) {
      assert.equal(seen.headers[hname], undefined, `${hname} forwarded`);
    }
    const allowed = new Set(['host', 'connection', 'content-type', 'content-length', 'x-request-id']);
    for (const hname of Object.keys(seen.headers)) assert.ok(allowed.has(hname), `unexpected upstream header ${hname}`);
    assert.doesNotMatch(seen.rawHeaders.join('\n'), new RegExp(`${h.key}|run-7|task-9|sess-fwd|aff-fwd|arbitrary-value`));
    const r = await record(id);
    assert.equal(r.request_id, legacy);
    assert.equal(r.session_id, 'sess-fwd');
    assert.equal(r.workbench_run_id, 'run-7');
    assert.equal(r.task_id, 'task-9');

    // An alias with an upstream key sends that key, never the caller's.
    const keyed = await chat('keyed', {}, {}, 'recorded-keyed');
    assert.equal(keyed.status, 200);
    await keyed.text();
    assert.equal(rec.requests.at(-1)!.headers['authorization'], `Bearer ${UPSTREAM_KEY}`);
    assert.ok(!h.routerOutput().includes(UPSTREAM_KEY), 'the upstream key is not logged');
    assert.ok(!h.routerOutput().includes(h.key), 'the data-plane key is not logged');

    // X-Session-Affinity when X-Svc-Session-Id is absent.
    const aff = await chat('affinity', {}, { 'x-session-affinity': 'aff-only' });
    const affId = gidOf(aff);
    await aff.text();
    assert.equal((await record(affId)).session_id, 'aff-only');
    // Oversized ids are dropped, never truncated into a record.
    const big = await chat('big', {}, { 'x-svc-session-id': 's'.repeat(200), 'x-svc-task-id': 't'.repeat(200) });
    const bigId = gidOf(big);
    await big.text();
    const bigRec = await record(bigId);
    assert.equal('session_id' in bigRec, false);
    assert.equal('task_id' in bigRec, false);
  });

  it('a CR in a header value or an oversized header never reaches the upstream', async () => {
    const n = rec.requests.length;
    const body = JSON.stringify({ model: 'recorded', messages: user('raw') });
    const url = new URL(h.routerUrl);
    const head = (extra: string) =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
    const cr = await raw(url, head('X-Svc-Task-Id: abc\rInjected: yes\r\n'));
    assert.match(cr, /^HTTP\/1\.1 400 /);
    const huge = await raw(url, head(`X-Svc-Session-Id: ${'a'.repeat(20_000)}\r\n`));
    assert.match(huge, /^HTTP\/1\.1 431 /);
    const nul = await raw(url, head('X-Svc-Workbench-Run-Id: a\u0000b\r\n'));
    assert.match(nul, /^HTTP\/1\.1 400 /);
    assert.equal(rec.requests.length, n, 'nothing reached the upstream');
    // The same request without the bad header does reach it.
    const ok = await raw(url, head(''));
    assert.match(ok, /^HTTP\/1\.1 200 /);
    assert.equal(rec.requests.length, n + 1);
  });

  it('active requests show a slow stream in phase streaming; workloads shows the router source', async () => {
    const session = `sess-active-${randomBytes(4).toString('hex')}`;
    const res = await chat('sim:tokens=400 sim:token_delay_ms=20', { stream: true }, { 'x-svc-session-id': session });
    const id = gidOf(res);
    const { reader } = await readEvents(res, 2);
    const active = (await (await h.get('/v1/requests?active=1')).json()) as { requests: Record<string, unknown>[]; truncation: { returned: number; omitted: number } };
    const mine = active.requests.find((x) => x['request_id'] === id);
    assert.ok(mine, 'the stream is listed');
    assert.equal(mine['phase'], 'streaming');
    assert.equal(mine['model'], 'chat');
    assert.equal(mine['session_id'], session);
    assert.equal(typeof mine['since_upstream_activity_ms'], 'number');
    assert.equal(active.truncation.returned, active.requests.length);
    assert.equal(active.truncation.omitted, 0);
    // The reader client may look too; without a credential nobody may.
    assert.equal((await h.get('/v1/requests?active=1', h.readerToken)).status, 200);
    await assertProblem(await h.get('/v1/requests?active=1', null), 401, 'unauthenticated');

    const wl = await eventually(async () => {
      const r = await h.get('/v1/workloads?owner=router&active_only=true', h.readerToken);
      const body = (await r.json()) as NodeResult;
      return r.status === 200 && body.sources[0]?.records.some((x) => x.state === 'streaming') ? body : undefined;
    }, 3000, 50);
    assert.ok(checkNodeResult.Check(wl));
    assert.equal(wl.sources.length, 1);
    assert.equal(wl.sources[0]!.owner, 'router');
    assert.doesNotMatch(JSON.stringify(wl), /req_[0-9a-f]{32}/);
    await reader.cancel();
    const r = await eventually(async () => ((await h.lookup(id)).status === 200 ? record(id) : undefined), 2000, 20);
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.session_id, session);
  });

  it('session history: newest first, at most 50, with exact truncation; malformed queries are 400 problems', async () => {
    const session = `sess-hist-${randomBytes(4).toString('hex')}`;
    const ids: string[] = [];
    for (let i = 0; i < 52; i++) {
      const res = await chat('sim:ttft_ms=0 sim:token_delay_ms=0 sim:tokens=1', {}, { 'x-svc-session-id': session });
      ids.push(gidOf(res));
      await res.text();
    }
    const other = await chat('other session', {}, { 'x-svc-session-id': `${session}-other` });
    await other.text();
    const res = await h.get(`/v1/requests?session_id=${session}&history=1`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { requests: TerminalRecord[]; truncation: { returned: number; omitted: number | null } };
    assert.equal(body.requests.length, 50);
    assert.deepEqual(body.truncation, { returned: 50, omitted: 2 });
    assert.deepEqual(body.requests.map((r) => r.request_id), ids.slice(2).reverse());
    for (const r of body.requests) assert.equal(r.session_id, session);
    for (let i = 1; i < body.requests.length; i++) assert.ok(body.requests[i - 1]!.finished_at >= body.requests[i]!.finished_at);
    assert.equal((await h.get(`/v1/requests?history=1&session_id=${session}`)).status, 200, 'order of members does not matter');

    const bad = [
      '/v1/requests', '/v1/requests?', '/v1/requests?active=0', '/v1/requests?active=true', '/v1/requests?active=1&active=1', '/v1/requests?active',
      '/v1/requests?active=1&', '/v1/requests?&active=1', '/v1/requests?ACTIVE=1', '/v1/requests?active=1&history=1',
      `/v1/requests?session_id=${session}`, `/v1/requests?session_id=${session}&history=0`, `/v1/requests?session_id=${session}&history=1&x=1`,
      '/v1/requests?session_id=bad%20id&history=1', '/v1/requests?session_id=&history=1', '/v1/requests?session_id=%zz&history=1',
      `/v1/requests?session_id=${'s'.repeat(129)}&history=1`, `/v1/requests/${ids[0]}?x=1`, '/v1/requests/bad%20id',
    ];
    for (const path of bad) await assertProblem(await h.get(path), 400, 'invalid-input');
  });

  it('read routes: workloads needs workloads:read; router status; metrics by alias without request ids', async () => {
    const wl = await h.get('/v1/workloads', h.readerToken);
    assert.equal(wl.status, 200);
    const body = (await wl.json()) as NodeResult;
    assert.ok(checkNodeResult.Check(body));
    assert.equal(body.expected_host, 'node-a');
    assert.deepEqual(body.sources.map((s) => s.owner), ['router']);
    await assertProblem(await h.get('/v1/workloads'), 403, 'forbidden');
    await assertProblem(await h.get('/v1/workloads', null), 401, 'unauthenticated');
    await assertProblem(await h.get('/v1/workloads', 'not-a-known-token'), 401, 'unauthenticated');
    await assertProblem(await h.get('/v1/workloads?owner=nobody', h.readerToken), 400, 'invalid-input');
    await assertProblem(await h.get('/v1/workloads?limit=5&limit=6', h.readerToken), 400, 'invalid-input');

    const st = await h.get('/v1/router/status');
    assert.equal(st.status, 200);
    const status = (await st.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(status).sort(), ['host', 'models', 'package_version', 'routing_config_hash', 'started_at']);
    assert.equal(status['host'], 'node-a');
    assert.match(String(status['routing_config_hash']), /^[0-9a-f]{64}$/);
    assert.match(String(status['started_at']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual(status['models'], ['chat', 'timeout-model', 'single', 'queued', 'recorded', 'recorded-keyed', 'inproc', 'whisper', 'embedder', 'down']);
    assert.equal((await h.get('/v1/router/status', h.readerToken)).status, 200);
    await assertProblem(await h.get('/v1/router/status', null), 401, 'unauthenticated');

    const m = await h.get('/metrics', null);
    assert.equal(m.status, 200);
    const text = await m.text();
    assert.match(text, /^svc_router_requests_total\{model="chat"\} \d+$/m);
    assert.doesNotMatch(text, /req_[0-9a-f]{32}|trace-|legacy-|sess-/);
    for (const line of text.split('\n').filter((l) => l.startsWith('svc_router_') && l.includes('{'))) {
      assert.match(line, /^svc_router_\w+\{model="[^"]+"\} \S+$/, line);
    }
  });

  it('bad input on every inference route: fixed problem+json, never 500 or a hang', async () => {
    const routes = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/rerank', '/v1/audio/transcriptions'];
    const send = (path: string, body: string | Uint8Array, headers: Record<string, string | undefined>) =>
      fetch(`${h.routerUrl}${path}`, { method: 'POST', headers: Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<string, string>, body, signal: AbortSignal.timeout(5000) });
    const auth = { authorization: `Bearer ${h.key}` };
    for (const path of routes) {
      const audio = path.endsWith('transcriptions');
      const goodCt = audio ? 'multipart/form-data; boundary=XyZ' : 'application/json';
      const valid = audio ? multipart('XyZ', { model: 'chat' }) : JSON.stringify({ model: 'chat', input: 'x', prompt: 'x', messages: user('x') });
      // Missing, malformed and unknown credentials: 401 before the body is looked at.
      for (const a of [{}, { authorization: 'Bearer wrong' }, { authorization: `Basic ${h.key}` }, { authorization: `Bearer ${h.readerToken}` }]) {
        await assertProblem(await send(path, '{bad', { ...a, 'content-type': goodCt }), 401, 'unauthenticated');
      }
      let res = await send(path, valid, { ...auth, 'content-type': 'text/plain' });
      gidOf(res);
      await assertProblem(res, 415, 'unsupported-media-type');
      res = await send(path, audio ? valid : '{"model": "chat"', { ...auth, 'content-type': audio ? 'application/json' : goodCt });
      gidOf(res);
      await assertProblem(res, audio ? 415 : 400, audio ? 'unsupported-media-type' : 'invalid-input');
      res = await send(path, audio ? 'not multipart at all' : '[1,2]', { ...auth, 'content-type': goodCt });
      gidOf(res);
      await assertProblem(res, 400, 'invalid-input');
      res = await send(path, audio ? multipart('XyZ', { language: 'en' }) : '{"messages":[]}', { ...auth, 'content-type': goodCt });
      await assertProblem(res, 400, 'invalid-input');
      res = await send(path, audio ? multipart('XyZ', { model: 'no-such-alias' }) : JSON.stringify({ model: 'no-such-alias' }), { ...auth, 'content-type': goodCt });
      gidOf(res);
      await assertProblem(res, 404, 'not-found');
      const pad = 'x'.repeat(MAX_BODY + 10);
      res = await send(path, audio ? multipart('XyZ', { model: 'chat', pad }) : JSON.stringify({ model: 'chat', pad }), { ...auth, 'content-type': goodCt });
      gidOf(res);
      await assertProblem(res, 413, 'body-too-large');
    }
    // Malformed output limits are the caller's error, not the engine's.
    for (const max of [-1, 1.5, '12', true, 2 ** 60]) {
      await assertProblem(await chat('x', { max_tokens: max }), 400, 'invalid-input');
    }
    // Large uploads that are refused: the client still reads the problem (no connection reset),
    // whether the length was declared or the body came chunked.
    const large = new Uint8Array(4 * 1024 * 1024).fill(0x20);
    await assertProblem(await send('/v1/chat/completions', large, { ...auth, 'content-type': 'application/json' }), 413, 'body-too-large');
    await assertProblem(await send('/v1/audio/transcriptions', large, { ...auth, 'content-type': 'multipart/form-data; boundary=XyZ' }), 413, 'body-too-large');
    await assertProblem(await send('/v1/chat/completions', large, { ...auth, 'content-type': 'text/plain' }), 415, 'unsupported-media-type');
    await assertProblem(await send('/v1/chat/completions', large, { authorization: 'Bearer wrong', 'content-type': 'application/json' }), 401, 'unauthenticated');
    const chunked = await fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: new Blob(['{"model":"chat","pad":"', 'y'.repeat(2 * 1024 * 1024), '"}']).stream(),
      duplex: 'half',
      signal: AbortSignal.timeout(5000),
    } as RequestInit);
    await assertProblem(chunked, 413, 'body-too-large');
    // The router still serves afterwards.
    const ok = await chat('still fine');
    assert.equal(ok.status, 200);
    await ok.text();
  });

  it('canary: prompt text and arbitrary header values never reach records, headers, logs, the JSONL or error bodies', async () => {
    const canary = `CANARY${randomBytes(8).toString('hex')}`;
    const hdr = { 'x-canary': canary, 'x-svc-session-id': `bad ${canary}`, 'x-request-id': `${canary} with space`, 'user-agent': canary };
    const exposed: string[] = [];
    const ids: string[] = [];
    // Successful answers carry the engine's output (rerank echoes its documents): headers only.
    const keep = async (res: Response): Promise<void> => {
      const id = res.headers.get('x-svc-request-id');
      if (id) ids.push(id);
      exposed.push(JSON.stringify([...res.headers]));
      const text = await res.text();
      if (res.status >= 400 || text.includes('event: error')) exposed.push(text);
    };
    await keep(await chat(`hello ${canary}`, { user: canary, metadata: { k: canary } }, hdr));
    await keep(await chat(`stream ${canary}`, { stream: true, stream_options: { include_usage: true } }, hdr));
    await keep(await chat(`${canary} sim:reject=context`, {}, hdr));
    await keep(await chat(`${canary} sim:status=503`, {}, hdr));
    await keep(await chat(`${canary} sim:fail_after=1`, { stream: true }, hdr));
    await keep(await chat(`${canary} sim:ttft_ms=2000`, {}, hdr, 'timeout-model'));
    await keep(await chat(canary, {}, hdr, 'recorded'));
    await keep(await chat(canary, {}, hdr, canary));
    await keep(await post('/v1/chat/completions', `{"model":"chat","x":"${canary}"`, hdr));
    await keep(await post('/v1/completions', { model: 'chat', prompt: canary }, hdr));
    await keep(await post('/v1/embeddings', { model: 'embedder', input: canary }, hdr));
    await keep(await post('/v1/rerank', { model: 'embedder', query: canary, documents: [canary] }, hdr));
    await keep(await h.get(`/v1/requests/${canary}`));
    await keep(await h.get(`/v1/requests?session_id=${canary}&history=1&${canary}=1`));
    await keep(await h.get(`/v1/workloads?${canary}=1`, h.readerToken));
    await keep(await fetch(`${h.routerUrl}/v1/${canary}`, { headers: { authorization: `Bearer ${canary}` } }));
    await h.idle();
    for (const id of ids) {
      const r = await h.lookup(id);
      if (r.status === 200) exposed.push(JSON.stringify(r.body));
    }
    exposed.push(await (await h.get('/v1/requests?active=1')).text(), await (await h.get('/metrics', null)).text());
    exposed.push(await (await h.get('/v1/workloads', h.readerToken)).text());
    const stateDir = dirname(h.logPath!);
    for (const f of readdirSync(stateDir)) exposed.push(readFileSync(join(stateDir, f), 'utf8'));
    // The router process's whole output so far (log level debug).
    await new Promise((r) => setTimeout(r, 100));
    exposed.push(h.routerOutput());
    assert.ok(ids.length >= 10);
    for (const [i, text] of exposed.entries()) assert.ok(!text.includes(canary), `canary leaked in exposure #${i}: ${text.slice(0, 300)}`);
    assert.ok(h.routerOutput().includes('gateway_request_id'), 'the log is searchable by gateway id');
  });

  it('embeddings and rerank keep the legacy 0 latency and unknown phases; audio keeps a measured latency', async () => {
    const emb = await client.embeddings.create({ model: 'embedder', input: ['alpha', 'beta'] }).withResponse();
    assert.equal(emb.data.data.length, 2);
    assert.equal(emb.data.data[0]!.embedding.length, 8);
    let r = await record(gidOf(emb.response));
    assert.equal(r.route, 'embeddings');
    assert.equal(r.outcome, 'success');
    assert.equal(r.latency_ms, 0);
    for (const k of ['readiness_check_ms', 'admission_wait_ms', 'upstream_duration_ms', 'time_to_first_content_ms', 'finish_reason', 'output_limit'] as const) {
      assert.equal(r[k], null, k);
    }
    assert.equal(r.usage.prompt_source, 'upstream');
    assert.equal(r.usage.completion_source, 'unknown');

    const rr = await post('/v1/rerank', { model: 'embedder', query: 'red fox', documents: ['a red fox', 'a blue whale'] });
    assert.equal(rr.status, 200);
    const ranked = (await rr.json()) as { results: { index: number }[] };
    assert.equal(ranked.results[0]!.index, 0);
    r = await record(gidOf(rr));
    assert.equal(r.route, 'rerank');
    assert.equal(r.latency_ms, 0);
    assert.equal(r.upstream_duration_ms, null);

    const fd = new FormData();
    fd.append('model', 'whisper');
    fd.append('file', new Blob([Buffer.alloc(6400)], { type: 'audio/wav' }), 'clip.wav');
    const au = await fetch(`${h.routerUrl}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${h.key}` }, body: fd });
    const auId = gidOf(au);
    assert.equal(au.status, 200);
    assert.deepEqual(await au.json(), { text: 'The quick brown fox jumps over the lazy dog.' });
    r = await record(auId);
    assert.equal(r.route, 'audio.transcriptions');
    assert.equal(r.model, 'whisper');
    assert.equal(r.outcome, 'success');
    assert.equal(typeof r.latency_ms, 'number');
    assert.ok(r.latency_ms! > 0);
    assert.equal(r.readiness_check_ms, null);
    assert.equal(r.time_to_first_content_ms, null);
    assert.equal(r.finish_reason, null);

    const sdk = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(Buffer.alloc(3200), 'a.wav') }).withResponse();
    assert.equal(sdk.data.text, 'The quick brown fox jumps over the lazy dog.');
    assert.equal((await record(gidOf(sdk.response))).route, 'audio.transcriptions');
  });
});

/** A multipart/form-data body of text fields. */
function multipart(boundary: string, fields: Record<string, string>): string {
  return Object.entries(fields).map(([k, v]) => `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`).join('') + `--${boundary}--\r\n`;
}

/** Sends raw bytes over one TCP connection and returns what came back before it closed. */
function raw(url: URL, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(Number(url.port), url.hostname);
    let out = '';
    sock.setTimeout(5000, () => sock.destroy(new Error('raw request timed out')));
    sock.on('data', (d: Buffer) => (out += d.toString('latin1')));
    sock.on('error', (err) => (out ? resolve(out) : reject(err)));
    sock.on('close', () => resolve(out));
    sock.write(text, 'latin1');
  });
}
