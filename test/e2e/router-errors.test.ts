import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { ERRORS, ENGINE_MESSAGE_MAX, ErrorCode } from '../../src/errors.js';
import { eventually } from '../support/processes.js';
import { REFUSAL_CANARY } from '../support/recording-upstream.js';
import { GID, useRouterE2E, user } from '../support/router-e2e.js';
import { runCli } from '../cli/run-cli.js';

/**
 * What a user of the official OpenAI SDK reads from the router's errors (CONTRACT.md, HTTP,
 * revision 2): message, code, status and type; the request id it shows; one record per
 * request with an id, refusals before routing included; invalid UTF-8 and refused transfer
 * codings.
 */
describe('router end to end: errors as the OpenAI SDK reads them', () => {
  const e = useRouterE2E();

  /** The SDK error a call ends in (it must end in one). */
  const failure = async (p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> => {
    const err = await p.then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(err instanceof OpenAI.APIError, String(err));
    return err;
  };
  /** An SDK client with the SDK's default retries (2): a client mistake must not be retried. */
  const retrying = (): OpenAI => new OpenAI({ baseURL: `${e.h.routerUrl}/v1`, apiKey: e.h.key, maxRetries: 2 });
  const diagnose = async (id: string): Promise<string> => {
    const r = await runCli(['router', 'diagnose', id, '--router-url', e.h.routerUrl, '--auth-env', 'SVC_ERR_KEY'], {
      SVC_ERR_KEY: e.h.key,
    });
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };

  it('a context rejection: 400 context_length_exceeded with the fixed sentence, naming messages; record refusal context_length_exceeded', async () => {
    const err = await failure(
      e.client.chat.completions.create({ model: 'chat', messages: user('sim:reject=context') }),
    );
    assert.ok(err instanceof OpenAI.BadRequestError);
    assert.deepEqual(
      [err.status, err.code, err.type, err.param, err.message],
      [
        400,
        'context_length_exceeded',
        'invalid_request_error',
        'messages',
        `400 ${ERRORS[ErrorCode.CONTEXT_LENGTH].message}`,
      ],
    );
    const r = await e.record(err.requestID!);
    assert.deepEqual(
      [r.outcome, r.refusal, r.upstream_status, r.attempts, r.upstream_replica],
      ['rejected', 'context_length_exceeded', 400, 1, 0],
    );
    assert.match(await diagnose(err.requestID!), /Rejected with HTTP 400: the request did not fit/);
  });

  it('admission full: 429 rate_limited (rate_limit_error); record refusal admission_full', async () => {
    const slow = e.chat('sim:ttft_ms=600', {}, {}, 'single');
    await eventually(
      async () =>
        ((await (await e.h.get('/v1/requests?active=1')).json()) as { requests: { model: string }[] }).requests.some(
          (x) => x.model === 'single',
        ),
      3000,
      10,
    );
    const err = await failure(e.client.chat.completions.create({ model: 'single', messages: user('x') }));
    assert.ok(err instanceof OpenAI.RateLimitError);
    assert.deepEqual([err.status, err.code, err.type], [429, 'rate_limited', 'rate_limit_error']);
    assert.equal(err.message, `429 ${ERRORS[ErrorCode.ADMISSION_REFUSED].message}`);
    await (await slow).text();
    const r = await e.record(err.requestID!);
    assert.deepEqual([r.outcome, r.refusal, r.attempts, r.model], ['rejected', 'admission_full', 0, 'single']);
  });

  it('an unknown model: 404 model_not_found naming model; one record (model null) that router diagnose explains', async () => {
    const err = await failure(e.client.chat.completions.create({ model: 'no-such-alias-77', messages: user('x') }));
    assert.ok(err instanceof OpenAI.NotFoundError);
    assert.deepEqual(
      [err.status, err.code, err.type, err.param],
      [404, 'model_not_found', 'invalid_request_error', 'model'],
    );
    assert.doesNotMatch(err.message, /no-such-alias-77/);
    const id = err.requestID!;
    assert.match(id, GID);
    assert.equal(err.headers?.get('x-svc-request-id'), id);
    const r = await e.record(id);
    assert.deepEqual([r.model, r.outcome, r.refusal, r.status_code], [null, 'rejected', 'unknown_model', 404]);
    assert.deepEqual(
      [
        r.readiness_check_ms,
        r.admission_wait_ms,
        r.upstream_duration_ms,
        r.time_to_first_content_ms,
        r.upstream_status,
      ],
      [null, null, null, null, null],
    );
    const text = await diagnose(id);
    assert.match(text, /Refused before routing/);
    assert.match(text, /Refusal: unknown_model/);
    assert.doesNotMatch(text, /A not-found can mean/);
    assert.ok(!JSON.stringify(r).includes('no-such-alias-77'));
  });

  it('a bad parameter refused by the engine: its 400 and its message, code upstream_rejected, sent to the engine exactly once though the SDK retries', async () => {
    const before = e.inproc.stats().requests;
    const err = await failure(
      retrying().chat.completions.create({
        model: 'inproc',
        messages: 'x' as unknown as OpenAI.Chat.ChatCompletionMessageParam[],
      }),
    );
    assert.ok(err instanceof OpenAI.BadRequestError);
    assert.deepEqual([err.status, err.code, err.type], [400, 'upstream_rejected', 'invalid_request_error']);
    assert.equal(err.message, "400 'messages' is missing or malformed");
    assert.equal(e.inproc.stats().requests - before, 1, 'one engine call, no retry');
    const r = await e.record(err.requestID!);
    assert.deepEqual(
      [r.outcome, r.refusal, r.upstream_status, r.attempts, r.status_code],
      ['rejected', 'upstream_rejected', 400, 1, 400],
    );
    const text = await diagnose(err.requestID!);
    assert.match(text, /Rejected by the engine as invalid/);
    assert.doesNotMatch(text, /upstream failed/i);
  });

  it('an engine 409 is relayed as its refusal and not retried: the SDK (which retries a 409 by default) sends it once', async () => {
    const n = e.rec.requests.length;
    const err = await failure(
      retrying().chat.completions.create({ model: 'recorded', messages: user('answer-refuse=409') }),
    );
    assert.ok(err instanceof OpenAI.ConflictError);
    assert.deepEqual([err.status, err.code], [409, 'upstream_rejected']);
    assert.equal(err.headers.get('x-should-retry'), 'false');
    assert.equal(e.rec.requests.length - n, 1, 'one engine call, no retry');
    const r = await e.record(err.requestID!);
    assert.deepEqual(
      [r.outcome, r.refusal, r.upstream_status, r.status_code],
      ['rejected', 'upstream_rejected', 409, 409],
    );
  });

  it("canary: the engine's refusal text reaches its caller (cleaned, at most 1,024 characters) and nothing else: logs, decision log, record, metrics", async () => {
    const err = await failure(
      retrying().chat.completions.create({ model: 'recorded', messages: user('answer-refuse=422') }),
    );
    assert.ok(err instanceof OpenAI.UnprocessableEntityError);
    assert.deepEqual([err.status, err.code], [422, 'upstream_rejected']);
    const message = (err.error as { message: string }).message;
    assert.ok(message.startsWith(`bad parameter ${REFUSAL_CANARY}`), message);
    assert.ok(message.length <= ENGINE_MESSAGE_MAX);
    assert.doesNotMatch(message, /[\u0000-\u001f\u007f]/);
    const id = err.requestID!;
    const r = await e.record(id);
    assert.deepEqual([r.refusal, r.upstream_status, r.status_code], ['upstream_rejected', 422, 422]);
    await e.h.idle();
    const metrics = await (await e.h.get('/metrics')).text();
    const lookup = JSON.stringify((await e.h.lookup(id)).body);
    await eventually(() => e.h.decisions().some((d) => d?.['gateway_request_id'] === id), 3000, 20);
    const log = e.h.logFiles().map((f) => readFileSync(f, 'utf8'));
    for (const [where, text] of [
      ['router output', e.h.routerOutput()],
      ['metrics', metrics],
      ['lookup', lookup],
      ['decision log', log.join('\n')],
    ] as const)
      assert.ok(!text.includes(REFUSAL_CANARY), `${where} holds the engine's text`);
  });

  it('an engine 5xx stays 502 upstream_failed (the SDK may retry that one), with the engine status in the record', async () => {
    const err = await failure(e.client.chat.completions.create({ model: 'chat', messages: user('sim:status=503') }));
    assert.ok(err instanceof OpenAI.InternalServerError);
    assert.deepEqual([err.status, err.code, err.type], [502, 'upstream_failed', 'api_error']);
    const r = await e.record(err.requestID!);
    assert.deepEqual([r.outcome, r.upstream_status, r.refusal], ['error', 503, undefined]);
  });

  it('a mid-stream failure: the SDK stream throws the fixed upstream_failed error', async () => {
    const stream = await e.client.chat.completions.create({
      model: 'chat',
      messages: user('sim:fail_after=2 sim:tokens=10'),
      stream: true,
    });
    let chunks = 0;
    const err = await failure(
      (async () => {
        for await (const _ of stream) chunks++;
      })(),
    );
    assert.ok(chunks >= 2);
    assert.equal(err.code, 'upstream_failed');
    assert.equal((err.error as { message: string }).message, ERRORS[ErrorCode.UPSTREAM_FAILED].message);
  });

  it("the SDK's request id is the record's request_id: the generated id, or the caller's legacy id", async () => {
    const { data, request_id } = await e.client.chat.completions
      .create({ model: 'chat', messages: user('id please') })
      .withResponse();
    assert.match(request_id ?? '', GID);
    assert.equal((data as { _request_id?: string | null })._request_id, request_id);
    assert.equal((await e.record(request_id!)).request_id, request_id);
    const legacy = `trace-${Date.now()}`;
    const withLegacy = await e.client.chat.completions.create(
      { model: 'chat', messages: user('legacy') },
      { headers: { 'x-request-id': legacy } },
    );
    assert.equal((withLegacy as { _request_id?: string | null })._request_id, legacy);
    assert.equal((await e.record(legacy)).request_id, legacy);
  });

  it('an SDK whose base URL misses /v1 (or has another prefix) reads a 404 that says where the routes are, not "404 status code (no body)"; unknown control paths keep the problem', async () => {
    for (const base of [e.h.routerUrl, `${e.h.routerUrl}/v2`, `${e.h.routerUrl}/v1/v1`]) {
      const lost = new OpenAI({ baseURL: base, apiKey: e.h.key, maxRetries: 0 });
      for (const call of [
        () => lost.chat.completions.create({ model: 'chat', messages: user('where') }),
        () => lost.embeddings.create({ model: 'chat', input: 'where' }),
        () => lost.models.list(),
      ]) {
        const err = await failure(call());
        assert.ok(err instanceof OpenAI.NotFoundError, base);
        assert.equal(err.code, 'route_not_found', base);
        assert.match(err.message, /^404 This router serves no such route: .* under \/v1 /, base);
        assert.equal(err.requestID, null, 'no route, no id');
      }
    }
    // A trailing slash on an inference path is no route either, in the data plane's shape.
    const slash = await fetch(`${e.h.routerUrl}/v1/chat/completions/`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e.h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat', messages: user('x') }),
    });
    await e.assertError(slash, 404, 'route_not_found');
    // Paths that look like no OpenAI route, and unknown control paths: the problem, as before.
    for (const path of ['/nope', '/v1/requests/a/b', '/v1/router/nope', '/v1/requests/x/models'])
      await e.assertProblem(await e.h.get(path), 404, 'not_found');
    // A lookup of a caller id that ends like a route is still a lookup, answered as one.
    await e.assertProblem(await e.h.get('/v1/requests/completions'), 404, 'not_found');
  });

  it('invalid UTF-8 in a JSON body (overlong, surrogate, truncated) is 400 invalid_encoding and nothing reaches the engine', async () => {
    const head = Buffer.from('{"model":"recorded","messages":[{"role":"user","content":"');
    const tail = Buffer.from('"}]}');
    for (const bad of [
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
      [0xe2, 0x82],
    ]) {
      const n = e.rec.requests.length;
      const res = await e.post('/v1/chat/completions', new Uint8Array(Buffer.concat([head, Buffer.from(bad), tail])));
      const id = e.gidOf(res);
      await e.assertError(res, 400, 'invalid_encoding');
      assert.equal(e.rec.requests.length, n, 'nothing reached the engine');
      const r = await e.record(id);
      assert.deepEqual([r.outcome, r.refusal, r.model, r.attempts], ['rejected', 'invalid_request', null, 0]);
    }
  });

  it('a refused transfer coding is answered with Connection: close and the connection closes', async () => {
    const url = new URL(e.h.routerUrl);
    const body = '{"model":"chat","messages":[]}';
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const sock = connect(Number(url.port), url.hostname);
    let answer = '';
    sock.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    const closed = new Promise<void>((r) => sock.on('close', () => r()));
    sock.on('error', () => undefined);
    // No `Connection: close` from the client: the server closes on its own.
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${e.h.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${chunked}`,
    );
    const timer = setTimeout(() => sock.destroy(), 5000);
    await closed;
    clearTimeout(timer);
    assert.match(answer, /^HTTP\/1\.1 400 /);
    assert.match(answer, /\r\nconnection: close\r\n/i);
    assert.match(answer, /"code":"invalid_framing"/);
    const id = /\r\nx-svc-request-id: (req_[0-9a-f]{32})\r\n/i.exec(answer)?.[1];
    assert.ok(id, answer);
    assert.equal((await e.record(id)).refusal, 'invalid_request');
  });
});
