import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type OpenAI from 'openai';
import { toFile } from 'openai';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import { recordId } from '../../src/schema/record-id.js';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { MAX_BODY, UPSTREAM_KEY, multipart, useRouterE2E, user } from '../support/router-e2e.js';
import type { RouterHarness } from '../support/router-harness.js';
import { eventually } from '../support/processes.js';

describe('router end to end: read routes, bad input, secrets, embeddings, rerank and audio', () => {
  const e = useRouterE2E();
  const { post, chat, record, gidOf, assertProblem, assertError } = e;
  let h: RouterHarness;
  let client: OpenAI;
  before(() => {
    ({ h, client } = e);
  });

  it('read routes: workloads needs workloads:read; router status; metrics by alias without request ids', async () => {
    // One finished request of this file's own, so that the metrics have something to count.
    const done = await chat('metrics');
    await record(gidOf(done));
    const wl = await h.get('/v1/workloads', h.readerToken);
    assert.equal(wl.status, 200);
    const body = (await wl.json()) as NodeResult;
    assert.ok(checkNodeResult.Check(body));
    assert.equal(body.expected_host, 'node-a');
    assert.deepEqual(
      body.sources.map((s) => s.owner),
      ['router'],
    );
    // Asked right after the request finished: the answer already holds it (the router's view is
    // brought up to date when asked, not at its next round).
    const fresh = await chat('asked at once');
    const freshId = recordId('node-a', 'router', 'router-request', gidOf(fresh));
    const now = (await (await h.get('/v1/workloads?owner=router&limit=1000', h.readerToken)).json()) as NodeResult;
    assert.equal(now.sources[0]!.records.find((r) => r.id === freshId)?.state, 'terminal');
    await assertProblem(await h.get('/v1/workloads'), 403, 'forbidden');
    await assertProblem(await h.get('/v1/workloads', null), 401, 'unauthenticated');
    await assertProblem(await h.get('/v1/workloads', 'not-a-known-token'), 401, 'unauthenticated');
    await assertProblem(await h.get('/v1/workloads?owner=nobody', h.readerToken), 400, 'invalid_input');
    await assertProblem(await h.get('/v1/workloads?limit=5&limit=6', h.readerToken), 400, 'invalid_input');

    const st = await h.get('/v1/router/status');
    assert.equal(st.status, 200);
    const status = (await st.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(status).sort(), [
      'host',
      'models',
      'package_version',
      'routing_config_hash',
      'started_at',
    ]);
    assert.equal(status['host'], 'node-a');
    assert.match(String(status['routing_config_hash']), /^[0-9a-f]{64}$/);
    assert.match(String(status['started_at']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual(status['models'], [
      'chat',
      'timeout-model',
      'single',
      'queued',
      'recorded',
      'recorded-keyed',
      'inproc',
      'flaky',
      'stall',
      'whisper',
      'embedder',
      'down',
    ]);
    assert.equal((await h.get('/v1/router/status', h.readerToken)).status, 200);
    await assertProblem(await h.get('/v1/router/status', null), 401, 'unauthenticated');
    // A caller id of the longest legal length (128, with characters that are percent-encoded
    // in a path) is found by lookup: the route takes every id the router keeps.
    const longId = `legacy/${'x'.repeat(100)}:${'y'.repeat(20)}`;
    assert.equal(longId.length, 128);
    const sent = await chat('long id', {}, { 'x-request-id': longId });
    assert.equal(sent.status, 200);
    await sent.text();
    const found = await h.get(`/v1/requests/${encodeURIComponent(longId)}`);
    assert.equal(found.status, 200);
    assert.equal(((await found.json()) as { request: { request_id: string } }).request.request_id, longId);
    await assertProblem(await h.get(`/v1/requests/${'z'.repeat(129)}`), 400, 'invalid_input');
    // Parameter names are percent-decoded like their values (as the workload filters are), so
    // an encoded name is the same parameter, and naming it twice that way is still twice.
    assert.equal((await h.get('/v1/requests?%61ctive=1')).status, 200);
    await assertProblem(await h.get('/v1/requests?active=1&%61ctive=1'), 400, 'invalid_input');
    await assertProblem(await h.get('/v1/requests?%E0%A4%A=1'), 400, 'invalid_input');
    // Routes without parameters refuse a query string rather than ignore it.
    for (const path of [
      '/v1/router/status?x=1',
      '/v1/models?limit=5',
      '/metrics?name=svc_router_requests_total',
      '/v1/router/status?verbose',
    ]) {
      // `/v1/models` is a data-plane route: an OpenAI error object; the others are problems.
      if (path.startsWith('/v1/models')) await assertError(await h.get(path), 400, 'unsupported_parameter');
      else await assertProblem(await h.get(path), 400, 'invalid_input');
    }
    await assertError(await h.get('/v1/models?x=1', null), 401, 'unauthenticated');
    await assertError(await h.get('/v1/models', h.readerToken), 403, 'forbidden');
    assert.equal((await h.get('/v1/router/status?')).status, 200);

    const m = await h.get('/metrics', null);
    assert.equal(m.status, 200);
    const text = await m.text();
    assert.match(
      text,
      /^svc_router_requests_total\{alias="chat",route="chat.completions",outcome="success",status_class="2xx"\} [1-9]\d*$/m,
    );
    // Every configured alias has an in-flight series, 0 when idle: a readable zero, not an absent figure.
    assert.match(text, /^svc_router_in_flight\{alias="embedder"\} 0$/m);
    assert.doesNotMatch(text, /req_[0-9a-f]{32}|trace-|legacy-|sess-/);
    // Bounded labels only: the alias is a configured one or `-`.
    for (const line of text.split('\n').filter((l) => l.startsWith('svc_router_') && l.includes('{'))) {
      assert.match(line, /^svc_router_\w+\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\} \S+$/, line);
      if (line.includes('alias=')) assert.match(line, /alias="(chat|embedder|[-a-z0-9]+)"/, line);
    }
  });

  it('a malformed or over-long path parameter, or a query string, on the model, stored-response and lookup routes: an error naming what is wrong and where, never the generic sentence or the value', async () => {
    const long = 'q'.repeat(400);
    const body = async (res: Response): Promise<Record<string, unknown>> => {
      const text = await res.clone().text();
      assert.equal(text.includes(long), false, 'the value is echoed');
      return JSON.parse(text) as Record<string, unknown>;
    };
    const errorOf = async (res: Response) => (await body(res))['error'] as Record<string, unknown>;
    // A query string on a model route: what is wrong, in words.
    for (const path of ['/v1/models?limit=5', '/v1/models/chat?x=1']) {
      const res = await h.get(path);
      const err = await errorOf(res);
      await assertError(res, 400, 'unsupported_parameter');
      assert.match(String(err['message']), /takes no query parameters/);
    }
    // A model path no alias can be (longer than any, or bad percent-encoding): the unknown
    // model's answer, naming `model`, as for any name that is no alias.
    for (const path of [`/v1/models/${long}`, '/v1/models/%ZZ', '/v1/models/a%E2%82']) {
      const res = await h.get(path);
      assert.equal((await errorOf(res))['param'], 'model', path);
      await assertError(res, 404, 'model_not_found');
    }
    // A response id no response can have: 404 response_not_found, naming `response_id`.
    for (const [method, path] of [
      ['GET', `/v1/responses/${long}`],
      ['GET', '/v1/responses/resp_%ZZ'],
      ['POST', `/v1/responses/${long}/cancel`],
    ] as const) {
      const res = await fetch(`${h.routerUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${h.key}` },
        signal: AbortSignal.timeout(10_000),
      });
      assert.equal((await errorOf(res))['param'], 'response_id', path);
      await assertError(res, 404, 'response_not_found');
    }
    // The same through the SDK: a NotFoundError that names the model, not a BadRequestError.
    await assert.rejects(client.models.retrieve(long), (err: { status?: number; code?: unknown; param?: unknown }) => {
      assert.equal(err.status, 404);
      assert.equal(err.code, 'model_not_found');
      assert.equal(err.param, 'model');
      return true;
    });
    // A lookup id the route cannot read: the problem names `id`.
    for (const path of [`/v1/requests/${long}`, '/v1/requests/a%ZZ']) {
      const res = await h.get(path);
      const p = await body(res);
      await assertProblem(res, 400, 'invalid_input');
      assert.deepEqual(
        (p['invalid_params'] as { name: string }[]).map((x) => x.name),
        ['id'],
        path,
      );
    }
  });

  it('the recent list (?recent=1): the newest 50 terminal records, newest first, the rest counted; bad forms 400; lookup credentials', async () => {
    await h.idle();
    const sent: string[] = [];
    // One after another, so that each finishes after the one before.
    for (let i = 0; i < 55; i++) {
      const res = await chat(`recent ${i}`);
      assert.equal(res.status, 200);
      await res.text();
      sent.push(gidOf(res));
    }
    const res = await h.get('/v1/requests?recent=1');
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      requests: TerminalRecord[];
      truncation: { returned: number; omitted: number };
    };
    assert.deepEqual(Object.keys(body), ['requests', 'truncation']);
    assert.ok(
      body.requests.every((r) => checkTerminalRecord.Check(r)),
      'valid terminal records',
    );
    assert.deepEqual(
      body.requests.map((r) => r.request_id),
      sent.slice(5).reverse(),
      'the 50 that finished last, newest first',
    );
    // Every record of this file is still in the buffer: the rest is counted exactly.
    const held = h.decisions().filter((d) => d !== undefined).length;
    assert.ok(held >= 55);
    assert.deepEqual(body.truncation, { returned: 50, omitted: held - 50 });
    // The same record a lookup by id answers.
    assert.deepEqual(body.requests[0], await record(sent[54]!));
    for (const q of ['recent=0', 'recent=', 'recent', 'recent=1&active=1', 'recent=1&recent=1', 'recent=1&limit=5'])
      await assertProblem(await h.get(`/v1/requests?${q}`), 400, 'invalid_input');
    assert.equal((await h.get('/v1/requests?recent=1', h.readerToken)).status, 200);
    assert.equal((await h.get('/v1/requests?recent=1', h.routerEnv['SVC_TEST_REQUESTS'])).status, 200);
    await assertProblem(await h.get('/v1/requests?recent=1', h.routerEnv['SVC_TEST_MEDIA']), 403, 'forbidden');
    await assertProblem(await h.get('/v1/requests?recent=1', null), 401, 'unauthenticated');
  });

  it('bad input on every inference route: fixed problem+json, never 500 or a hang', async () => {
    const routes = [
      '/v1/chat/completions',
      '/v1/completions',
      '/v1/embeddings',
      '/v1/rerank',
      '/v1/audio/transcriptions',
    ];
    const send = (path: string, body: string | Uint8Array, headers: Record<string, string | undefined>) =>
      fetch(`${h.routerUrl}${path}`, {
        method: 'POST',
        headers: Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<
          string,
          string
        >,
        body,
        signal: AbortSignal.timeout(5000),
      });
    const auth = { authorization: `Bearer ${h.key}` };
    for (const path of routes) {
      const audio = path.endsWith('transcriptions');
      const goodCt = audio ? 'multipart/form-data; boundary=XyZ' : 'application/json';
      const valid = audio
        ? multipart('XyZ', { model: 'chat' })
        : JSON.stringify({ model: 'chat', input: 'x', prompt: 'x', messages: user('x') });
      // Missing, malformed and unknown credentials: 401 before the body is looked at.
      for (const a of [{}, { authorization: 'Bearer wrong' }, { authorization: `Basic ${h.key}` }]) {
        await assertError(await send(path, '{bad', { ...a, 'content-type': goodCt }), 401, 'unauthenticated');
      }
      // A policy client's token is known but is no data-plane key: 403, and no identifier.
      const reader = await send(path, '{bad', { authorization: `Bearer ${h.readerToken}`, 'content-type': goodCt });
      assert.equal(reader.headers.get('x-svc-request-id'), null);
      await assertError(reader, 403, 'forbidden');
      let res = await send(path, valid, { ...auth, 'content-type': 'text/plain' });
      gidOf(res);
      await assertError(res, 415, 'unsupported_media_type');
      res = await send(path, audio ? valid : '{"model": "chat"', {
        ...auth,
        'content-type': audio ? 'application/json' : goodCt,
      });
      gidOf(res);
      await assertError(res, audio ? 415 : 400, audio ? 'unsupported_media_type' : 'invalid_json');
      res = await send(path, audio ? 'not multipart at all' : '[1,2]', { ...auth, 'content-type': goodCt });
      gidOf(res);
      await assertError(res, 400, audio ? 'invalid_model' : 'invalid_json');
      res = await send(path, audio ? multipart('XyZ', { language: 'en' }) : '{"messages":[]}', {
        ...auth,
        'content-type': goodCt,
      });
      await assertError(res, 400, 'invalid_model');
      res = await send(
        path,
        audio ? multipart('XyZ', { model: 'no-such-alias' }) : JSON.stringify({ model: 'no-such-alias' }),
        { ...auth, 'content-type': goodCt },
      );
      const refusedId = gidOf(res);
      await assertError(res, 404, 'model_not_found');
      // Its one terminal record: rejected before routing, naming no model (never the caller's
      // string), and a log line an operator finds by its id.
      const refused = await record(refusedId);
      assert.equal(refused.model, null);
      assert.equal(refused.outcome, 'rejected');
      assert.equal(refused.refusal, 'unknown_model');
      assert.equal(refused.attempts, 0);
      await eventually(
        () =>
          h
            .routerOutput()
            .split('\n')
            .some((l) => l.includes(refusedId) && l.includes('"msg":"request refused"') && l.includes('"status":404')),
        3000,
      );
      assert.ok(!h.routerOutput().includes('no-such-alias'), 'the alias asked for is not logged');
      const pad = 'x'.repeat(MAX_BODY + 10);
      res = await send(
        path,
        audio ? multipart('XyZ', { model: 'chat', pad }) : JSON.stringify({ model: 'chat', pad }),
        { ...auth, 'content-type': goodCt },
      );
      gidOf(res);
      await assertError(res, 413, 'body_too_large');
    }
    // Malformed output limits are the caller's error, not the engine's.
    for (const max of [-1, 1.5, '12', true, 2 ** 60]) {
      await assertError(await chat('x', { max_tokens: max }), 400, 'invalid_output_limit');
    }
    // Large uploads that are refused: the client still reads the problem (no connection reset),
    // whether the length was declared or the body came chunked.
    const large = new Uint8Array(4 * 1024 * 1024).fill(0x20);
    await assertError(
      await send('/v1/chat/completions', large, { ...auth, 'content-type': 'application/json' }),
      413,
      'body_too_large',
    );
    await assertError(
      await send('/v1/audio/transcriptions', large, { ...auth, 'content-type': 'multipart/form-data; boundary=XyZ' }),
      413,
      'body_too_large',
    );
    await assertError(
      await send('/v1/chat/completions', large, { ...auth, 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    );
    await assertError(
      await send('/v1/chat/completions', large, { authorization: 'Bearer wrong', 'content-type': 'application/json' }),
      401,
      'unauthenticated',
    );
    const chunked = await fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: new Blob(['{"model":"chat","pad":"', 'y'.repeat(2 * 1024 * 1024), '"}']).stream(),
      duplex: 'half',
      signal: AbortSignal.timeout(5000),
    } as RequestInit);
    await assertError(chunked, 413, 'body_too_large');
    // A multipart `model` sent twice: the engine might read the copy the alias did not name.
    const twice =
      '--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nother\r\n--XyZ--\r\n';
    const tw = await send('/v1/audio/transcriptions', twice, {
      ...auth,
      'content-type': 'multipart/form-data; boundary=XyZ',
    });
    gidOf(tw);
    await assertError(tw, 400, 'invalid_model');
    // A percent-encoded unreserved character names the same route (RFC 3986 6.2.2.2): relayed,
    // with its id and record; an encoded slash is another path.
    const encoded = await send('/v1/chat/completion%73', JSON.stringify({ model: 'chat', messages: user('encoded') }), {
      ...auth,
      'content-type': 'application/json',
    });
    assert.equal(encoded.status, 200);
    await encoded.text();
    assert.equal((await record(gidOf(encoded))).route, 'chat.completions');
    await assertProblem(
      await send('/v1/chat%2Fcompletions', JSON.stringify({ model: 'chat', messages: user('x') }), {
        ...auth,
        'content-type': 'application/json',
      }),
      404,
      'not_found',
    );
    // The router still serves afterwards.
    const ok = await chat('still fine');
    assert.equal(ok.status, 200);
    await ok.text();
  });

  it('canary: prompt text and arbitrary header values never reach records, headers, logs, the JSONL or error bodies', async () => {
    const canary = `CANARY${randomBytes(8).toString('hex')}`;
    const hdr = {
      'x-canary': canary,
      'x-svc-session-id': `bad ${canary}`,
      'x-request-id': `${canary} with space`,
      'user-agent': canary,
    };
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
    for (const [i, text] of exposed.entries())
      assert.ok(!text.includes(canary), `canary leaked in exposure #${i}: ${text.slice(0, 300)}`);
    assert.ok(h.routerOutput().includes('gateway_request_id'), 'the log is searchable by gateway id');
  });

  it('a caller id that is itself a credential is dropped, never written to records or the decision log', async () => {
    // The router's own keys, a policy client's token, and the engine key it sends upstream.
    for (const secret of [h.key, h.readerToken, UPSTREAM_KEY]) {
      const res = await chat(
        'pasted a key',
        {},
        {
          'x-request-id': secret,
          'x-svc-session-id': secret,
          'x-svc-task-id': secret,
          'x-svc-workbench-run-id': secret,
        },
      );
      assert.equal(res.status, 200);
      await res.text();
      const r = await record(gidOf(res));
      assert.equal(r.request_id, gidOf(res), 'the generated id stands in');
      assert.equal(r.session_id, undefined);
      assert.equal(r.task_id, undefined);
      assert.equal(r.workbench_run_id, undefined);
    }
    await h.idle();
    const stateDir = dirname(h.logPath!);
    for (const f of readdirSync(stateDir)) {
      const text = readFileSync(join(stateDir, f), 'utf8');
      assert.ok(
        !text.includes(h.key) && !text.includes(h.readerToken) && !text.includes(UPSTREAM_KEY),
        `a credential in ${f}`,
      );
    }
    assert.ok(
      !h.routerOutput().includes(h.key) &&
        !h.routerOutput().includes(h.readerToken) &&
        !h.routerOutput().includes(UPSTREAM_KEY),
    );
  });

  it('embeddings and rerank keep the legacy 0 latency and unknown phases; audio keeps a measured latency', async () => {
    const emb = await client.embeddings.create({ model: 'embedder', input: ['alpha', 'beta'] }).withResponse();
    assert.equal(emb.data.data.length, 2);
    assert.equal(emb.data.data[0]!.embedding.length, 8);
    let r = await record(gidOf(emb.response));
    assert.equal(r.route, 'embeddings');
    assert.equal(r.outcome, 'success');
    assert.equal(r.latency_ms, 0);
    for (const k of [
      'readiness_check_ms',
      'admission_wait_ms',
      'upstream_duration_ms',
      'time_to_first_content_ms',
      'finish_reason',
      'output_limit',
    ] as const) {
      assert.equal(r[k], null, k);
    }
    assert.equal(r.usage.prompt_source, 'upstream');
    assert.equal(r.usage.completion_source, 'unknown');

    // An input longer than the engine's context: the router's context problem, recorded as rejected.
    const tooLong = await post('/v1/embeddings', { model: 'embedder', input: 'word '.repeat(8000) });
    await assertError(tooLong, 400, 'context_length_exceeded');
    r = await record(gidOf(tooLong));
    assert.equal(r.route, 'embeddings');
    assert.equal(r.outcome, 'rejected');
    assert.equal(r.status_code, 400);

    const rr = await post('/v1/rerank', {
      model: 'embedder',
      query: 'red fox',
      documents: ['a red fox', 'a blue whale'],
    });
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
    const au = await fetch(`${h.routerUrl}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}` },
      body: fd,
    });
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

    const sdk = await client.audio.transcriptions
      .create({ model: 'whisper', file: await toFile(Buffer.alloc(3200), 'a.wav') })
      .withResponse();
    assert.equal(sdk.data.text, 'The quick brown fox jumps over the lazy dog.');
    assert.equal((await record(gidOf(sdk.response))).route, 'audio.transcriptions');
  });

  it('a streamed transcription is relayed event by event; a cut one ends with an error event; no transcript is kept', async () => {
    const streamed = async (prompt: string): Promise<{ res: Response; text: string }> => {
      const fd = new FormData();
      fd.append('model', 'whisper');
      fd.append('stream', 'true');
      fd.append('stream_include_usage', 'true');
      fd.append('prompt', prompt);
      fd.append('file', new Blob([Buffer.alloc(32_000)], { type: 'audio/wav' }), 'clip.wav');
      const res = await fetch(`${h.routerUrl}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.key}` },
        body: fd,
      });
      return { res, text: await res.text() };
    };
    const ok = await streamed('sim:token_delay_ms=5');
    assert.equal(ok.res.status, 200);
    assert.match(ok.res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const events = ok.text.split('\n\n').filter((e) => e.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]');
    const chunks = events.slice(0, -1).map(
      (e) =>
        JSON.parse(e.slice(6)) as {
          object: string;
          choices: { delta: { content?: string } }[];
          usage?: { completion_tokens: number };
        },
    );
    assert.ok(chunks.every((c) => c.object === 'transcription.chunk'));
    assert.equal(
      chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
      'The quick brown fox jumps over the lazy dog.',
    );
    assert.equal(chunks.at(-1)!.usage!.completion_tokens, 9);
    const r = await record(gidOf(ok.res));
    assert.equal(r.route, 'audio.transcriptions');
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    assert.ok(r.latency_ms! > 0);
    assert.equal(r.usage.completion_tokens, 9);
    assert.equal(r.usage.completion_source, 'upstream');
    assert.doesNotMatch(JSON.stringify(r), /quick|brown|lazy/);

    // The engine fails after three words: the client's stream ends with the router's error
    // event, never a [DONE], and the record says error.
    const cut = await streamed('sim:fail_after=3 sim:token_delay_ms=5');
    assert.equal(cut.res.status, 200);
    assert.match(cut.text, /"content":" brown"/);
    assert.doesNotMatch(cut.text, /\[DONE\]/);
    assert.match(cut.text, /event: error|"error"/);
    const rc = await record(gidOf(cut.res));
    assert.equal(rc.outcome, 'error');
    assert.equal(rc.route, 'audio.transcriptions');
    const log = h
      .logFiles()
      .map((f) => readFileSync(f, 'utf8'))
      .join('');
    assert.ok(log.includes(gidOf(cut.res)));
    assert.doesNotMatch(log, /quick|brown|lazy/);
  });
});
