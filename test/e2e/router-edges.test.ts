/**
 * The router at its edges, as real processes at the default log level: bodies nested deeper
 * than any stack, slow uploads, clients that leave before the answer, wrong methods, URLs the
 * framework cannot route, session header precedence, a request waiting in the admission queue
 * and the log line every failed request leaves.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { GID, PROBLEM, raw, user } from '../support/router-e2e.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { eventually } from '../support/processes.js';

const T = { timeout: 120_000 };

describe('router edges (real processes, default log level)', T, () => {
  let h: RouterHarness;
  // An upstream whose readiness answer takes 1.5 s and says "not ready" (its inference route
  // is never reached): a client still there would get a 502.
  const slowReady = createServer((req, res) => {
    if (req.url === '/health') setTimeout(() => res.writeHead(503).end(), 1_500);
    else res.writeHead(500).end();
  });
  before(async () => {
    await new Promise<void>((r) => slowReady.listen(0, '127.0.0.1', r));
    h = await startRouterHarness({
      models: [
        { alias: 'slowready', upstream: `http://127.0.0.1:${(slowReady.address() as AddressInfo).port}/v1` },
        { alias: 'chat', max_output_tokens: 16 },
        { alias: 'plain', max_output_tokens: 64 },
        { alias: 'one', max_concurrency: 1, max_queue: 1 },
        { alias: 'down', upstream: 'http://127.0.0.1:1/v1' },
      ],
      server: { max_body_bytes: 1_048_576 },
    });
  });
  after(async () => {
    await h?.stop();
    slowReady.closeAllConnections();
    slowReady.close();
  });

  const post = (path: string, body: string | object, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${h.routerUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: signal ?? AbortSignal.timeout(10_000),
    });
  const record = async (id: string): Promise<TerminalRecord> => {
    const r = await eventually(
      async () => {
        const got = await h.lookup(id);
        return got.status === 200 ? got : undefined;
      },
      3000,
      20,
    );
    assert.ok(checkTerminalRecord.Check(r.body.request));
    return r.body.request as TerminalRecord;
  };
  const problem = async (res: Response, status: number, slug: string): Promise<string> => {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', PROBLEM);
    const text = await res.text();
    const body = JSON.parse(text) as Record<string, unknown>;
    assert.deepEqual(Object.keys(body).sort(), ['code', 'status', 'title', 'type']);
    assert.deepEqual([body['type'], body['status']], [`urn:svc-serving:problem:${slug}`, status]);
    return text;
  };
  /** A data-plane (inference and model routes) OpenAI error object with this status and code. */
  const openAiError = async (res: Response, status: number, code: string): Promise<string> => {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json(?:; charset=utf-8)?$/);
    const text = await res.text();
    const body = JSON.parse(text) as { error: Record<string, unknown> };
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(body.error['code'], code);
    return text;
  };
  const alive = async (): Promise<void> => {
    assert.equal(h.router.proc.exitCode, null, 'the router process is still running');
    const res = await post('/v1/chat/completions', { model: 'chat', messages: user('still there?') });
    assert.equal(res.status, 200);
    await res.text();
  };

  it('a body nested thousands deep is refused or relayed, and never takes the router down', async () => {
    const nested = (depth: number, model: string, extra = '') =>
      `{"model":"${model}"${extra},"messages":[{"role":"user","content":${'['.repeat(depth)}${']'.repeat(depth)}}]}`;
    // The alias's output ceiling is filled in, so the body is serialized again: too deep for that.
    const res = await post('/v1/chat/completions', nested(5_000, 'chat'));
    assert.match(res.headers.get('x-svc-request-id') ?? '', GID);
    await openAiError(res, 400, 'invalid_json');
    // Passed through as sent (nothing to rewrite): the prompt estimate must not recurse either.
    const deep = await post('/v1/chat/completions', nested(100_000, 'plain', ',"max_tokens":8'));
    await deep.arrayBuffer();
    assert.ok(deep.status < 500 || deep.status === 502, `answered ${deep.status}`);
    await alive();
  });

  it('latency excludes the client upload: a body sent over a second is measured from its arrival', async () => {
    const body = Buffer.from(JSON.stringify({ model: 'chat', messages: user('slow upload sim:ttft_ms=0') }));
    const url = new URL(h.routerUrl);
    const started = Date.now();
    const { id, status } = await new Promise<{ id: string; status: number }>((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: '/v1/chat/completions',
          headers: {
            authorization: `Bearer ${h.key}`,
            'content-type': 'application/json',
            'content-length': body.byteLength,
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ id: String(res.headers['x-svc-request-id']), status: res.statusCode ?? 0 }));
        },
      );
      req.on('error', reject);
      const parts = 4;
      const size = Math.ceil(body.byteLength / parts);
      let i = 0;
      const next = (): void => {
        const chunk = body.subarray(i * size, (i + 1) * size);
        i++;
        if (i >= parts) req.end(chunk);
        else {
          req.write(chunk);
          setTimeout(next, 300);
        }
      };
      next();
    });
    assert.equal(status, 200);
    assert.ok(Date.now() - started >= 900, 'the upload itself took about a second');
    const r = await record(id);
    assert.ok(r.latency_ms !== null && r.latency_ms < 600, `latency_ms ${r.latency_ms} leaves the upload out`);
    assert.ok(r.time_to_first_content_ms !== null && r.time_to_first_content_ms < 600);
    const span = Date.parse(r.finished_at) - Date.parse(r.started_at);
    assert.ok(span < 600, `started_at is the backend entry too (${span} ms)`);
  });

  it('a client that leaves before a buffered answer arrives: completion count unknown, not an estimated zero', async () => {
    const url = new URL(h.routerUrl);
    const body = JSON.stringify({ model: 'chat', messages: user('sim:ttft_ms=1500'), stream: false });
    const rid = `legacy-abort-${Date.now()}`;
    const text = `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nX-Request-Id: ${rid}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const { connect } = await import('node:net');
    await new Promise<void>((resolve) => {
      const sock = connect(Number(url.port), url.hostname, () => {
        sock.write(text);
        setTimeout(() => sock.destroy(), 300);
      });
      sock.on('close', () => resolve());
      sock.on('error', () => undefined);
    });
    const r = await record(rid);
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.status_code, 0);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [null, 'unknown']);
    assert.equal(r.usage.prompt_source, 'estimated', 'the prompt was sent: its estimate stands');
  });

  /** Sends `text` on one connection and closes it after `ms`, without reading the answers. */
  const sendAndLeave = async (text: string, ms: number): Promise<void> => {
    const url = new URL(h.routerUrl);
    const { connect } = await import('node:net');
    await new Promise<void>((resolve) => {
      const sock = connect(Number(url.port), url.hostname, () => {
        sock.write(text);
        setTimeout(() => sock.destroy(), ms);
      });
      sock.on('close', () => resolve());
      sock.on('error', () => undefined);
    });
  };
  const chatText = (rid: string, content: string, alias = 'chat'): string => {
    const body = JSON.stringify({ model: alias, messages: user(content) });
    return `POST /v1/chat/completions HTTP/1.1\r\nHost: ${new URL(h.routerUrl).host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nX-Request-Id: ${rid}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  };

  it('pipelined requests whose client leaves are all recorded disconnected, and their engine work is cut', async () => {
    const tag = Date.now();
    // Two requests back to back on one connection, the client gone after 300 ms: the second
    // has no answer of its own on the socket yet, and must not run on for nobody.
    await sendAndLeave(
      chatText(`pipe-${tag}-0`, 'sim:ttft_ms=1500') + chatText(`pipe-${tag}-1`, 'sim:ttft_ms=1500'),
      300,
    );
    for (const i of [0, 1]) {
      const r = await record(`pipe-${tag}-${i}`);
      assert.deepEqual([r.outcome, r.status_code], ['disconnected', 0], `request ${i}`);
      assert.ok(
        r.upstream_duration_ms === null || r.upstream_duration_ms < 1_000,
        `request ${i} was cut (${r.upstream_duration_ms} ms upstream)`,
      );
    }
    // Deep pipelining costs the connection one listener, not one per request (node would warn
    // on stderr, outside the JSON log, at the eleventh).
    const many = Array.from({ length: 14 }, (_, i) => chatText(`pipe-${tag}-deep-${i}`, 'sim:ttft_ms=1500')).join('');
    await sendAndLeave(many, 300);
    assert.equal((await record(`pipe-${tag}-deep-13`)).outcome, 'disconnected');
    assert.doesNotMatch(h.routerOutput(), /MaxListenersExceededWarning/);
  });

  it('a client that leaves during the readiness check was sent nothing: disconnected with status 0, not a 502', async () => {
    const rid = `ready-gone-${Date.now()}`;
    await sendAndLeave(chatText(rid, 'hello', 'slowready'), 300);
    const r = await record(rid);
    assert.deepEqual([r.outcome, r.status_code], ['disconnected', 0]);
    assert.ok(
      r.readiness_check_ms !== null && r.readiness_check_ms >= 1_000,
      `the check's time is kept (${r.readiness_check_ms} ms)`,
    );
  });

  it('absolute-form request targets (RFC 9112 3.2.2) reach the same routes as origin-form ones', async () => {
    const url = new URL(h.routerUrl);
    const body = JSON.stringify({ model: 'chat', messages: user('absolute') });
    const answer = await raw(
      url,
      `POST http://${url.host}/v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
    assert.match(answer, /^HTTP\/1\.1 200 /);
    const id = /x-svc-request-id: (req_[0-9a-f]{32})/i.exec(answer)?.[1];
    assert.ok(id, 'answered with its id');
    assert.equal((await record(id)).outcome, 'success');
    const wrong = await raw(
      url,
      `POST http://${url.host}/v1/models HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
    );
    assert.match(wrong, /^HTTP\/1\.1 405 /);
    assert.match(wrong, /\r\nallow: GET, HEAD\r\n/i);
  });

  it('a transfer coding other than plain chunked, or chunked on HTTP/1.0, is the fixed 400 (the body is not guessed at)', async () => {
    const url = new URL(h.routerUrl);
    const body = JSON.stringify({ model: 'chat', messages: user('framing') });
    const chunked = `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    for (const [version, te] of [
      ['1.1', 'gzip, chunked'],
      ['1.0', 'chunked'],
    ] as const) {
      const answer = await raw(
        url,
        `POST /v1/chat/completions HTTP/${version}\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: ${te}\r\nConnection: close\r\n\r\n${chunked}`,
      );
      assert.match(answer, /^HTTP\/1\.1 400 /, `${version} ${te}`);
      assert.match(answer, /x-svc-request-id: req_[0-9a-f]{32}/i);
    }
    // Plain chunked on HTTP/1.1 is read as usual.
    const ok = await raw(
      url,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked}`,
    );
    assert.match(ok, /^HTTP\/1\.1 200 /);
  });

  it('a body no route reads is not judged: a wrong method stays 405 and an unknown path 404, whatever the body; a body on a GET is refused', async () => {
    const models = await post('/v1/models', 'not json');
    await openAiError(models, 405, 'method_not_allowed');
    assert.equal(models.headers.get('allow'), 'GET, HEAD');
    await problem(await post('/v2/nothing', 'not json'), 404, 'not-found');
    // Filters sent in a GET body would be ignored: refused, never answered unfiltered.
    const url = new URL(h.routerUrl);
    const body = '{"owner":"media"}';
    const answer = await raw(
      url,
      `GET /v1/router/status HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    assert.match(answer, /^HTTP\/1\.1 400 /);
    assert.match(answer, /invalid-input/);
  });

  it('wrong methods on known routes are 405 with Allow; unknown paths stay 404', async () => {
    const get = await fetch(`${h.routerUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${h.key}` } });
    await openAiError(get, 405, 'method_not_allowed');
    assert.equal(get.headers.get('allow'), 'POST');
    const models = await post('/v1/models', {});
    await openAiError(models, 405, 'method_not_allowed');
    assert.equal(models.headers.get('allow'), 'GET, HEAD');
    const del = await fetch(`${h.routerUrl}/v1/requests/req_${'0'.repeat(32)}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${h.key}` },
    });
    await problem(del, 405, 'method-not-allowed');
    await problem(await fetch(`${h.routerUrl}/v1/nope`), 404, 'not-found');
  });

  it('URLs the framework cannot route are the fixed 400 problem, never echoing the URL or query', async () => {
    const url = new URL(h.routerUrl);
    for (const path of [
      '/v1/requests/%zz?token=SECRETQ',
      `/v1/requests/${'a'.repeat(600)}?token=SECRETQ`,
      '/nope/%zz?token=SECRETQ',
    ]) {
      const answer = await raw(
        url,
        `GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nConnection: close\r\n\r\n`,
      );
      assert.match(answer, /^HTTP\/1\.1 400 /, path);
      assert.match(answer, /content-type: application\/problem\+json; charset=utf-8/i);
      assert.ok(!answer.includes('SECRETQ') && !answer.includes('%zz') && !answer.includes('aaaa'), answer);
    }
  });

  it('X-Session-Affinity is the session only when X-Svc-Session-Id is absent, not when it is malformed', async () => {
    const a = await post(
      '/v1/chat/completions',
      { model: 'chat', messages: user('s1') },
      { 'x-svc-session-id': 'bad session', 'x-session-affinity': 'aff-2' },
    );
    const ra = await record(String(a.headers.get('x-svc-request-id')));
    await a.text();
    assert.equal(ra.session_id, undefined);
    const b = await post(
      '/v1/chat/completions',
      { model: 'chat', messages: user('s2') },
      { 'x-session-affinity': 'aff-2' },
    );
    await b.text();
    assert.equal((await record(String(b.headers.get('x-svc-request-id')))).session_id, 'aff-2');
  });

  it('a request waiting in the admission queue shows its wait growing in ?active=1', async () => {
    const first = await post('/v1/chat/completions', {
      model: 'one',
      stream: true,
      messages: user('sim:tokens=60 sim:token_delay_ms=25'),
    });
    const firstId = String(first.headers.get('x-svc-request-id'));
    const second = post('/v1/chat/completions', { model: 'one', messages: user('queued one') });
    const queued = await eventually(
      async () => {
        const r = (await (await h.get('/v1/requests?active=1')).json()) as { requests: Array<Record<string, unknown>> };
        const q = r.requests.find((x) => x['request_id'] !== firstId && x['model'] === 'one');
        return q && typeof q['admission_wait_ms'] === 'number' && (q['admission_wait_ms'] as number) >= 100
          ? q
          : undefined;
      },
      3000,
      25,
    );
    assert.equal(queued['phase'], 'checking');
    await first.text();
    const done = await second;
    assert.equal(done.status, 200);
    const r = await record(String(done.headers.get('x-svc-request-id')));
    assert.ok(r.admission_wait_ms !== null && r.admission_wait_ms >= 100);
  });

  it('every request that did not succeed leaves a log line with its gateway_request_id at the default level', async () => {
    const res = await post('/v1/chat/completions', { model: 'down', messages: user('hello') });
    const id = String(res.headers.get('x-svc-request-id'));
    await openAiError(res, 502, 'upstream_failed');
    const line = await eventually(
      () =>
        h
          .routerOutput()
          .split('\n')
          .find((l) => l.includes(id)),
      3000,
      20,
    );
    const parsed = JSON.parse(line) as Record<string, unknown>;
    assert.equal(parsed['gateway_request_id'], id);
    assert.equal(parsed['outcome'], 'rejected');
    assert.equal(parsed['model'], 'down');
    // Successes stay out of the log at this level (one line per success would be the log's whole volume).
    const ok = await post('/v1/chat/completions', { model: 'chat', messages: user('fine') });
    const okId = String(ok.headers.get('x-svc-request-id'));
    await ok.text();
    await record(okId);
    assert.ok(!h.routerOutput().includes(okId));
  });
});
