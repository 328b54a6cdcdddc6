import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { ErrorCode, openAiError } from '../../src/errors.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';
import { eventually } from '../support/processes.js';

/*
 * Requests node:http answers on its own, outside the relay (an unsupported `Expect`, a
 * connection fault while an inference body arrives, CONNECT), and the relay's own early
 * answers: every answer that carries an X-Svc-Request-Id leaves exactly one terminal record,
 * counted once in svc_router_requests_total, and an inference route answers with an OpenAI
 * error object (CONTRACT.md, HTTP). Real HTTP over raw sockets against the real router and a
 * real engine sim.
 */

const KEY = 'self-answered-key-0123456789';
const MAX_BODY = 4096;
const GID = /^req_[0-9a-f]{32}$/;

interface Answer {
  readonly status: number;
  /** Header names lowercased; a repeated header's values joined with `, `. */
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Every status line the connection carried (a `100 Continue` included). */
  readonly statusLines: string[];
  /** The server closed the connection. */
  readonly closed: boolean;
}

/** Parses the last response of what a connection carried (after any 1xx). */
function parse(text: string, closed: boolean): Answer {
  const statusLines = text.match(/^HTTP\/1\.1 \d{3} [^\r]*$/gm) ?? [];
  let rest = text;
  // Skip interim answers (100 Continue).
  while (/^HTTP\/1\.1 1\d\d /.test(rest)) rest = rest.slice(rest.indexOf('\r\n\r\n') + 4);
  const end = rest.indexOf('\r\n\r\n');
  const head = end < 0 ? rest : rest.slice(0, end);
  const lines = head.split('\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    const k = l.slice(0, i).trim().toLowerCase();
    const v = l.slice(i + 1).trim();
    headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
  }
  return { status, headers, body: end < 0 ? '' : rest.slice(end + 4), statusLines, closed };
}

/**
 * Writes `parts` on one connection (each after the previous one's `after` ms, or once `waitFor`
 * shows in what came back) and returns what came back by the time the server closed it, or
 * after `waitMs`.
 */
function exchange(
  port: number,
  parts: readonly (string | { text: string; waitFor?: RegExp; after?: number })[],
  waitMs = 5_000,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let out = '';
    let done = false;
    const finish = (closed: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(t);
      s.destroy();
      resolve(parse(out, closed));
    };
    const t = setTimeout(() => finish(false), waitMs);
    s.on('data', (d: Buffer) => (out += d.toString('latin1')));
    s.on('close', () => finish(true));
    s.on('error', (err) => (out ? finish(true) : reject(err)));
    const send = async (): Promise<void> => {
      for (const p of parts) {
        const step = typeof p === 'string' ? { text: p } : p;
        if (step.after !== undefined) await new Promise((r) => setTimeout(r, step.after));
        if (step.waitFor !== undefined) {
          const want = step.waitFor;
          await eventually(() => want.test(out) || done, 3_000, 5);
        }
        if (done || s.destroyed) return;
        s.write(step.text, 'latin1');
      }
    };
    send().catch(reject);
  });
}

const CHAT = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

/** A request head to the chat route (no body); `extra` header lines end with CRLF. */
function chatHead(extra: string, opts: { key?: boolean; length?: number; chunked?: boolean } = {}): string {
  const key = opts.key === false ? '' : `Authorization: Bearer ${KEY}\r\n`;
  const framing = opts.chunked ? 'Transfer-Encoding: chunked\r\n' : `Content-Length: ${opts.length ?? CHAT.length}\r\n`;
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\n${key}Content-Type: application/json\r\n${framing}${extra}\r\n`;
}

/** Asserts an OpenAI error object (CONTRACT.md, HTTP) of `code`. */
function assertOpenAiError(a: Answer, code: ErrorCode): void {
  assert.equal(a.status, 400);
  assert.match(a.headers['content-type'] ?? '', /^application\/json(; charset=utf-8)?$/);
  assert.equal(a.body, JSON.stringify(openAiError(code)));
}

/** One test router (in process) on a real engine sim, with a decision log. */
async function startTestRouter(
  p: ReturnType<typeof writeTestPolicy>,
  bus: InProcessBus,
  sim: EngineSim,
  name: string,
  deps: { requestTimeoutMs?: number; connectionsCheckIntervalMs?: number } = {},
): Promise<{ router: RouterHandle; logPath: string }> {
  const path = join(p.dir, `${name}.toml`);
  const logPath = join(p.dir, `${name}-decisions.jsonl`);
  writeFileSync(
    path,
    [
      '[server]',
      `host_id = "node-${name}"`,
      'listen = "127.0.0.1:0"',
      'api_keys_env = "UNIT_KEYS"',
      `authorization_policy = "${p.path}"`,
      `decision_log_path = "${logPath}"`,
      `max_body_bytes = ${MAX_BODY}`,
      '',
      '[[models]]',
      'alias = "m"',
      `upstream = "${sim.url}/v1"`,
      'upstream_model = "sim"',
    ].join('\n'),
  );
  const router = await startRouter(loadRouterConfig(path), {
    logger: pino({ level: 'silent' }),
    env: { ...p.env, UNIT_KEYS: KEY },
    bus,
    ...deps,
  });
  return { router, logPath };
}

describe('requests the router answers outside the relay: one terminal record per X-Svc-Request-Id, OpenAI error objects', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let sim: EngineSim;
  let router: RouterHandle;
  let slow: RouterHandle;
  let logPath: string;
  let slowLogPath: string;
  let port: number;
  let slowPort: number;

  const get = (r: RouterHandle, path: string, token = KEY): Promise<Response> =>
    fetch(`${r.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
  /** The record a lookup answers for `id` (checked against the schema), or undefined on 404. */
  const lookup = async (r: RouterHandle, id: string): Promise<TerminalRecord | undefined> => {
    const res = await get(r, `/v1/requests/${id}`);
    if (res.status === 404) {
      await res.arrayBuffer();
      return undefined;
    }
    assert.equal(res.status, 200);
    const rec = ((await res.json()) as { request: TerminalRecord }).request;
    assert.ok(checkTerminalRecord.Check(rec), 'a valid terminal record');
    return rec;
  };
  /** Decision-log lines naming `gid`: once one is written (grouped writes), and a moment more for any second. */
  const logged = async (path: string, gid: string): Promise<number> => {
    const count = (): number => {
      let text = '';
      try {
        text = readFileSync(path, 'utf8');
      } catch {
        return 0;
      }
      return text
        .split('\n')
        .filter((l) => l !== '')
        .filter((l) => (JSON.parse(l) as { gateway_request_id?: string }).gateway_request_id === gid).length;
    };
    await eventually(() => count() > 0, 2_000, 10).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 60));
    return count();
  };
  /** `svc_router_requests_total` for alias `-` / `m`, route chat.completions, by outcome and status class. */
  const counted = async (r: RouterHandle, alias: string, outcome: string, statusClass: string): Promise<number> => {
    const text = await (await get(r, '/metrics')).text();
    const want = `svc_router_requests_total{alias="${alias}",route="chat.completions",outcome="${outcome}",status_class="${statusClass}"} `;
    const line = text.split('\n').find((l) => l.startsWith(want));
    return line === undefined ? 0 : Number(line.slice(want.length));
  };
  /** Records the router holds (the recent list's exact count). */
  const held = async (r: RouterHandle): Promise<number> => {
    const body = (await (await get(r, '/v1/requests?recent=1')).json()) as {
      truncation: { returned: number; omitted: number };
    };
    return body.truncation.returned + body.truncation.omitted;
  };
  /** Asserts the one rejected record of `a`'s id: refusal, status, model null, route, log line. */
  const assertRefusalRecord = async (
    r: RouterHandle,
    log: string,
    a: Answer,
    status: number,
    refusal: string,
  ): Promise<TerminalRecord> => {
    const gid = a.headers['x-svc-request-id'] ?? '';
    assert.match(gid, GID);
    const rec = await eventually(() => lookup(r, gid), 2_000, 10);
    assert.deepEqual(
      [rec.request_id, rec.model, rec.route, rec.outcome, rec.refusal, rec.status_code, rec.attempts],
      [a.headers['x-request-id'], null, 'chat.completions', 'rejected', refusal, status, 0],
    );
    assert.equal(await logged(log, gid), 1, 'one decision-log line');
    return rec;
  };

  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 3,
      model: 'sim',
      maxModelLen: 8192,
    });
    ({ router, logPath } = await startTestRouter(p, bus, sim, 'a'));
    ({ router: slow, logPath: slowLogPath } = await startTestRouter(p, bus, sim, 'slow', {
      requestTimeoutMs: 600,
      connectionsCheckIntervalMs: 100,
    }));
    port = Number(new URL(router.url).port);
    slowPort = Number(new URL(slow.url).port);
  });
  after(async () => {
    await router?.close();
    await slow?.close();
    await sim?.close();
    await bus.close();
  });

  it('an Expect other than 100-continue, with a key: an OpenAI error object with both ids, one rejected record, counted once', async () => {
    const before = await counted(router, '-', 'rejected', '4xx');
    const a = await exchange(port, [chatHead('Expect: something-else\r\n') + CHAT]);
    assertOpenAiError(a, ErrorCode.INVALID_EXPECTATION);
    assert.match(a.body, /Expect/);
    assert.equal(a.headers['x-request-id'], a.headers['x-svc-request-id']);
    assert.equal(a.headers['connection'], 'close');
    assert.equal(a.closed, true, 'the connection closes');
    await assertRefusalRecord(router, logPath, a, 400, 'invalid_request');
    assert.equal(await counted(router, '-', 'rejected', '4xx'), before + 1);

    // A caller's legacy id is the record's request_id and comes back as X-Request-Id.
    const legacy = await exchange(port, [chatHead('Expect: x\r\nX-Request-Id: my-trace-1\r\n') + CHAT]);
    assertOpenAiError(legacy, ErrorCode.INVALID_EXPECTATION);
    assert.equal(legacy.headers['x-request-id'], 'my-trace-1');
    const rec = await assertRefusalRecord(router, logPath, legacy, 400, 'invalid_request');
    assert.equal(rec.request_id, 'my-trace-1');
    assert.equal(await counted(router, '-', 'rejected', '4xx'), before + 2);
    // Nothing reached the engine: the requests count of alias m did not move.
    assert.equal(await counted(router, 'm', 'rejected', '4xx'), 0);
  });

  it('an Expect other than 100-continue, without a key: the same error object, no identifier, no record', async () => {
    const records = await held(router);
    const rejected = await counted(router, '-', 'rejected', '4xx');
    const a = await exchange(port, [chatHead('Expect: something-else\r\n', { key: false }) + CHAT]);
    assertOpenAiError(a, ErrorCode.INVALID_EXPECTATION);
    assert.equal(a.headers['x-svc-request-id'], undefined);
    assert.equal(a.headers['x-request-id'], undefined);
    assert.equal(a.closed, true);
    assert.equal(await held(router), records);
    assert.equal(await counted(router, '-', 'rejected', '4xx'), rejected);
  });

  it('an unsupported Expect elsewhere: the model routes answer an OpenAI error object, the read routes the problem', async () => {
    const models = await exchange(port, [
      `GET /v1/models HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nExpect: x\r\n\r\n`,
    ]);
    assertOpenAiError(models, ErrorCode.INVALID_EXPECTATION);
    assert.equal(models.headers['x-svc-request-id'], undefined);
    const status = await exchange(port, [
      `GET /v1/router/status HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nExpect: x\r\n\r\n`,
    ]);
    assert.equal(status.status, 400);
    assert.match(status.headers['content-type'] ?? '', /^application\/problem\+json/);
    assert.match(status.body, /"code":"invalid_input"/);
  });

  it('Expect: 100-continue: node answers 100, the body follows, the request is relayed and recorded once', async () => {
    const before = await counted(router, 'm', 'success', '2xx');
    const a = await exchange(port, [
      chatHead('Expect: 100-continue\r\nConnection: close\r\n'),
      { text: CHAT, waitFor: /^HTTP\/1\.1 100 Continue\r\n\r\n/ },
    ]);
    assert.deepEqual(a.statusLines, ['HTTP/1.1 100 Continue', 'HTTP/1.1 200 OK']);
    assert.equal(a.status, 200);
    const gid = a.headers['x-svc-request-id'] ?? '';
    assert.match(gid, GID);
    const rec = await eventually(() => lookup(router, gid), 2_000, 10);
    assert.deepEqual([rec.model, rec.outcome, rec.status_code], ['m', 'success', 200]);
    assert.equal(await logged(logPath, gid), 1);
    assert.equal(await counted(router, 'm', 'success', '2xx'), before + 1);
  });

  it('a chunked body whose framing breaks after the headers: 400 invalid_framing error object with its ids, one record, the connection closed', async () => {
    const before = await counted(router, '-', 'rejected', '4xx');
    const records = await held(router);
    const a = await exchange(port, [
      chatHead('', { chunked: true }),
      { text: '5\r\n{"mod\r\nzz\r\nel"}\r\n0\r\n\r\n', after: 50 },
    ]);
    assertOpenAiError(a, ErrorCode.INVALID_FRAMING);
    assert.equal(a.headers['x-request-id'], a.headers['x-svc-request-id']);
    assert.equal(a.statusLines.length, 1, 'one answer');
    assert.equal(a.closed, true);
    await assertRefusalRecord(router, logPath, a, 400, 'invalid_request');
    assert.equal(await held(router), records + 1, 'exactly one record more');
    assert.equal(await counted(router, '-', 'rejected', '4xx'), before + 1);
  });

  it('a body that does not arrive whole within the request timeout: 400 error object with its ids, one record, the connection closed', async () => {
    const before = await counted(slow, '-', 'rejected', '4xx');
    const records = await held(slow);
    // Content-Length promises more than ever comes; then a chunked body that stalls.
    for (const head of [chatHead('', { length: 500 }), chatHead('', { chunked: true })]) {
      const part = head.includes('chunked') ? '4\r\n{"mo\r\n' : '{"mo';
      const a = await exchange(slowPort, [head + part], 5_000);
      assert.equal(a.closed, true, 'the connection closes');
      assertOpenAiError(a, ErrorCode.INCOMPLETE_BODY);
      assert.equal(a.statusLines.length, 1, 'one answer');
      await assertRefusalRecord(slow, slowLogPath, a, 400, 'invalid_request');
    }
    assert.equal(await held(slow), records + 2);
    assert.equal(await counted(slow, '-', 'rejected', '4xx'), before + 2);
  });

  it('bytes no parser reads behind a whole request: that request is answered and recorded once, then the connection closes', async () => {
    const ok = await counted(router, 'm', 'success', '2xx');
    const records = await held(router);
    const a = await exchange(port, [chatHead('') + CHAT + 'GARBAGE\r\n\r\n']);
    assert.equal(a.status, 200, a.statusLines.join());
    assert.equal(a.statusLines.length, 1, 'one answer');
    assert.equal(a.headers['connection'], 'close');
    assert.equal(a.closed, true);
    const gid = a.headers['x-svc-request-id'] ?? '';
    const rec = await eventually(() => lookup(router, gid), 2_000, 10);
    assert.deepEqual([rec.outcome, rec.status_code], ['success', 200]);
    assert.equal(await held(router), records + 1);
    assert.equal(await counted(router, 'm', 'success', '2xx'), ok + 1);
  });

  it('a declared body over max_body_bytes: 413 at once with its ids and one body_too_large record', async () => {
    const a = await exchange(port, [chatHead('Connection: close\r\n', { length: MAX_BODY + 1 })]);
    assert.equal(a.status, 413);
    assert.equal(a.body, JSON.stringify(openAiError(ErrorCode.BODY_TOO_LARGE)));
    await assertRefusalRecord(router, logPath, a, 413, 'body_too_large');
  });

  it('a relay that fails where nothing expected it: the 500 error object with its ids, and still one record', async () => {
    const before = await counted(router, '-', 'error', '5xx');
    const inFlight = await counted(router, 'm', 'error', '5xx');
    const begin = router.registry.begin;
    /** Runs one request with a fault injected where the relay does not catch: putting it in flight. */
    const crash = async (after: boolean): Promise<TerminalRecord> => {
      router.registry.begin = (a) => {
        router.registry.begin = begin;
        if (after) begin.call(router.registry, a);
        throw new Error('injected fault');
      };
      const a = await exchange(port, [chatHead('Connection: close\r\nX-Svc-Session-Id: crash-1\r\n') + CHAT]);
      assert.equal(router.registry.begin, begin, 'the fault was reached');
      assert.equal(a.status, 500);
      assert.equal(a.body, JSON.stringify(openAiError(ErrorCode.INTERNAL)));
      const gid = a.headers['x-svc-request-id'] ?? '';
      assert.match(gid, GID);
      const rec = await eventually(() => lookup(router, gid), 2_000, 10);
      assert.deepEqual([rec.request_id, rec.outcome, rec.status_code, rec.refusal], [gid, 'error', 500, undefined]);
      assert.equal(await logged(logPath, gid), 1);
      return rec;
    };
    // Before it was in flight: its ids only (its alias, lineage and latency unknown).
    const early = await crash(false);
    assert.deepEqual([early.model, early.latency_ms, early.session_id], [null, null, undefined]);
    assert.equal(await counted(router, '-', 'error', '5xx'), before + 1);
    // In flight: ended with its alias and lineage, and no longer listed as active.
    const late = await crash(true);
    assert.deepEqual([late.model, late.session_id], ['m', 'crash-1']);
    assert.equal(typeof late.latency_ms, 'number');
    assert.equal(await counted(router, 'm', 'error', '5xx'), inFlight + 1);
    assert.equal(router.registry.active.size, 0);
    // The router goes on serving.
    const ok = await exchange(port, [chatHead('Connection: close\r\n') + CHAT]);
    assert.equal(ok.status, 200);
  });

  it("the stored-response routes: an unsupported Expect is answered as on the inference routes (ids and one record with a key); a body cut while it arrives gets the data plane's error object", async () => {
    const before = await counted(router, '-', 'rejected', '4xx');
    const ask = (path: string, method: string, key: boolean): Promise<Answer> =>
      exchange(port, [
        `${method} ${path} HTTP/1.1\r\nHost: r\r\n${key ? `Authorization: Bearer ${KEY}\r\n` : ''}Expect: later\r\n\r\n`,
      ]);
    for (const [path, method] of [
      ['/v1/responses/resp_abc', 'GET'],
      ['/v1/responses/resp_abc/cancel', 'POST'],
      ['/v1/responses/resp_abc/input_items', 'GET'],
    ] as const) {
      const a = await ask(path, method, true);
      assertOpenAiError(a, ErrorCode.INVALID_EXPECTATION);
      assert.equal(a.closed, true);
      const rec = await eventually(() => lookup(router, a.headers['x-svc-request-id'] ?? ''), 2_000, 10);
      assert.deepEqual(
        [rec.route, rec.model, rec.outcome, rec.refusal, rec.status_code],
        ['responses', null, 'rejected', 'invalid_request', 400],
        path,
      );
      assert.equal(await logged(logPath, a.headers['x-svc-request-id'] ?? ''), 1);
      const anon = await ask(path, method, false);
      assertOpenAiError(anon, ErrorCode.INVALID_EXPECTATION);
      assert.equal(anon.headers['x-svc-request-id'], undefined);
    }
    const responses = (await (await get(router, '/metrics')).text())
      .split('\n')
      .find((l) =>
        l.startsWith('svc_router_requests_total{alias="-",route="responses",outcome="rejected",status_class="4xx"} '),
      );
    assert.equal(Number(responses?.split(' ')[1]), 3);
    assert.equal(await counted(router, '-', 'rejected', '4xx'), before, 'chat.completions unchanged');
    // A body the route never got whole (Fastify reads it before the route authenticates):
    // the data plane's error object, no id.
    const records = await held(slow);
    const cut = await exchange(
      slowPort,
      [
        `POST /v1/responses/resp_abc/cancel HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"a`,
      ],
      5_000,
    );
    assert.equal(cut.closed, true);
    assertOpenAiError(cut, ErrorCode.INCOMPLETE_BODY);
    assert.equal(cut.headers['x-svc-request-id'], undefined);
    assert.equal(await held(slow), records);
  });

  it("headers node cannot read: on an inference, model or stored-response path the data plane's error object naming the fault (no id, no record), elsewhere the problem; the connection closes", async () => {
    const records = await held(router);
    const big = `X-Big: ${'a'.repeat(20_000)}\r\n`;
    const cases: [string, ErrorCode | undefined][] = [
      [chatHead(big), ErrorCode.INVALID_HEADERS],
      [chatHead('X-Odd: a\u0001b\r\n'), ErrorCode.INVALID_HEADERS],
      [chatHead('', { key: false }).replace('POST', 'P@ST'), ErrorCode.INVALID_HEADERS],
      // Both a length and a transfer coding: a framing fault (RFC 9112 6.1).
      [chatHead('Transfer-Encoding: chunked\r\n'), ErrorCode.INVALID_FRAMING],
      [`GET /v1/models HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\n${big}\r\n`, ErrorCode.INVALID_HEADERS],
      [`GET /v1/responses/resp_x HTTP/1.1\r\nHost: r\r\n${big}\r\n`, ErrorCode.INVALID_HEADERS],
      [`GET /v1/router/status HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\n${big}\r\n`, undefined],
    ];
    for (const [text, code] of cases) {
      const a = await exchange(port, [text]);
      const line = text.slice(0, text.indexOf('\r\n'));
      assert.equal(a.closed, true, line);
      assert.equal(a.headers['x-svc-request-id'], undefined, line);
      if (code !== undefined) assertOpenAiError(a, code);
      else {
        assert.equal(a.status, 400);
        assert.match(a.headers['content-type'] ?? '', /^application\/problem\+json/);
        assert.match(a.body, /"code":"invalid_input"/);
      }
    }
    assert.equal(await held(router), records);
  });

  it("a repeated single header, no Host or a refused transfer coding on a model or stored-response route: the data plane's invalid_framing, as on the inference routes", async () => {
    for (const text of [
      `GET /v1/models HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
      `GET /v1/models/m HTTP/1.1\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
      `POST /v1/responses/resp_x/cancel HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`,
    ]) {
      const a = await exchange(port, [text]);
      assertOpenAiError(a, ErrorCode.INVALID_FRAMING);
      assert.equal(a.headers['x-svc-request-id'], undefined);
    }
    // The read routes keep the problem.
    const status = await exchange(port, [
      `GET /v1/router/status HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
    ]);
    assert.equal(status.status, 400);
    assert.match(status.headers['content-type'] ?? '', /^application\/problem\+json/);
  });

  it('a wrong method on an inference route with a key: 405 with its ids and one record; CONNECT gets no id and no record', async () => {
    const a = await exchange(port, [
      `GET /v1/chat/completions HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
    ]);
    assert.equal(a.status, 405);
    await assertRefusalRecord(router, logPath, a, 405, 'invalid_request');
    const records = await held(router);
    const connect = await exchange(port, [
      `CONNECT r:443 HTTP/1.1\r\nHost: r:443\r\nAuthorization: Bearer ${KEY}\r\n\r\n`,
    ]);
    assert.equal(connect.status, 400);
    assert.equal(connect.headers['x-svc-request-id'], undefined);
    assert.equal(connect.closed, true);
    assert.equal(await held(router), records);
  });
});
