import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { createHttpApp, listen, DEFAULT_REQUEST_TIMEOUT_MS } from '../../src/http/http-app.js';

/** Sends `head` and part of a body, then waits: what came back, and whether the server closed. */
function unfinished(
  url: string,
  head: string,
  part: string,
  waitMs: number,
): Promise<{ answer: string; closed: boolean; ms: number }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const s = connect(Number(port), hostname);
    let answer = '';
    const give = (closed: boolean): void => {
      clearTimeout(t);
      s.destroy();
      resolve({ answer, closed, ms: Date.now() - t0 });
    };
    const t = setTimeout(() => give(false), waitMs);
    s.on('data', (d) => (answer += d.toString('latin1')));
    s.on('close', () => give(true));
    s.on('error', reject);
    s.write(head + part);
  });
}

describe('Fastify servers: a request that never finishes arriving', () => {
  it('is cut with the fixed 400 once the request timeout passes, not held open forever', async () => {
    const app = createHttpApp({
      logger: pino({ level: 'silent' }),
      requestTimeoutMs: 400,
      connectionsCheckIntervalMs: 100,
    });
    app.post('/tools/call', async () => ({ ok: true }));
    const url = await listen(app, '127.0.0.1', 0);
    try {
      const head =
        'POST /tools/call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n';
      const r = await unfinished(url, head, '{"name":"node_', 5_000);
      assert.equal(r.closed, true, 'the server closed the connection');
      assert.match(r.answer, /^HTTP\/1\.1 400 /);
      assert.match(r.answer, /application\/problem\+json/);
      assert.match(r.answer, /"type":"urn:svc-serving:problem:invalid-input"/);
      assert.doesNotMatch(r.answer, /node_|tools\/call|timeout/i);
      // A whole request still gets its answer.
      const ok = await fetch(`${url}/tools/call`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      assert.equal(ok.status, 200);
    } finally {
      await app.close();
    }
  });

  it("a fault while a request's body arrives is answered by answerFault when it takes it; else the fixed 400, and the connection closes", async () => {
    const taken: string[] = [];
    const app = createHttpApp({
      logger: pino({ level: 'silent' }),
      // As the router builds its server: its own timeouts, the relay in front of Fastify.
      serverFactory: (handler) =>
        createServer({ requestTimeout: 400, headersTimeout: 400, connectionsCheckingInterval: 100 }, (req, res) => {
          if (req.url !== '/own') return handler(req, res);
          req.resume();
        }),
      openAiErrors: (path) => path === '/data',
      // The owner of /own answers its faults itself (the router: an error object and a record).
      answerFault: (res, err) => {
        if (res.req.url !== '/own') return false;
        taken.push(err.code ?? '');
        res.shouldKeepAlive = false;
        res.writeHead(400, { 'content-type': 'application/json', 'content-length': 9 }).end('{"own":1}');
        return true;
      },
    });
    // Routes whose body is read (a body sent where no route takes it is answered at once).
    app.post('/x', async () => ({}));
    app.post('/data', async () => ({}));
    const url = await listen(app, '127.0.0.1', 0);
    try {
      const head = 'POST /own HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n';
      const r = await unfinished(url, head, '{"model":', 5_000);
      assert.equal(r.closed, true);
      assert.match(r.answer, /^HTTP\/1\.1 400 /);
      assert.ok(r.answer.endsWith('\r\n\r\n{"own":1}'), r.answer);
      assert.equal(r.answer.match(/HTTP\/1\.1 /g)?.length, 1, 'one answer');
      // A malformed chunk size is a fault too.
      const chunked = await unfinished(
        url,
        'POST /own HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
        '2\r\n{"\r\nzz\r\n',
        5_000,
      );
      assert.equal(chunked.closed, true);
      assert.ok(chunked.answer.endsWith('{"own":1}'), chunked.answer);
      assert.deepEqual(taken, ['ERR_HTTP_REQUEST_TIMEOUT', 'HPE_INVALID_CHUNK_SIZE']);
      // Elsewhere (not taken) the fixed problem.
      const other = await unfinished(url, head.replace('/own', '/x'), '{', 5_000);
      assert.equal(other.closed, true);
      assert.match(other.answer, /^HTTP\/1\.1 400 /);
      assert.match(other.answer, /"type":"urn:svc-serving:problem:invalid-input"/);
      // On a data-plane path (openAiErrors), the OpenAI error object of the fault.
      const data = await unfinished(url, head.replace('/own', '/data'), '{', 5_000);
      assert.equal(data.closed, true);
      assert.match(data.answer, /^HTTP\/1\.1 400 /);
      assert.match(data.answer, /\r\ncontent-type: application\/json\r\n/i);
      assert.match(data.answer, /"code":"incomplete_body"/);
    } finally {
      await app.close();
    }
  });

  it('an Expect other than 100-continue: answerExpectation answers it when it takes it; else the fixed 400 in the shape of its path', async () => {
    const app = createHttpApp({
      logger: pino({ level: 'silent' }),
      openAiErrors: (path) => path === '/data',
      answerExpectation: (req, res) => {
        if (req.url !== '/own') return false;
        res.writeHead(400, { 'content-length': 9 }).end('{"own":1}');
        return true;
      },
    });
    for (const path of ['/own', '/data', '/x']) app.post(path, async () => ({}));
    const url = await listen(app, '127.0.0.1', 0);
    try {
      const ask = (path: string) =>
        unfinished(url, `POST ${path} HTTP/1.1\r\nHost: x\r\nExpect: later\r\nContent-Length: 2\r\n\r\n`, '{}', 5_000);
      const own = await ask('/own');
      assert.ok(own.answer.endsWith('{"own":1}'), own.answer);
      assert.match(own.answer, /\r\nconnection: close\r\n/i);
      assert.equal(own.closed, true);
      const data = await ask('/data');
      assert.match(data.answer, /^HTTP\/1\.1 400 /);
      assert.match(data.answer, /\r\ncontent-type: application\/json\r\n/i);
      assert.match(data.answer, /"code":"invalid_expectation"/);
      assert.equal(data.closed, true);
      const other = await ask('/x');
      assert.match(other.answer, /^HTTP\/1\.1 400 /);
      assert.match(other.answer, /"type":"urn:svc-serving:problem:invalid-input"/);
      assert.equal(other.closed, true);
    } finally {
      await app.close();
    }
  });

  it('a request answered before its body arrived, whose body then stalls, gets no second answer', async () => {
    const app = createHttpApp({
      logger: pino({ level: 'silent' }),
      requestTimeoutMs: 400,
      connectionsCheckIntervalMs: 100,
    });
    app.post('/tools/call', async () => ({ ok: true }));
    const url = await listen(app, '127.0.0.1', 0);
    try {
      // No Host: refused at once, before the body; then the body never finishes.
      const r = await unfinished(
        url,
        'POST /tools/call HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n',
        '{"na',
        5_000,
      );
      assert.equal(r.closed, true, 'the stalled connection is closed at the timeout');
      assert.equal(r.answer.match(/HTTP\/1\.1 400 /g)?.length, 1, r.answer);
    } finally {
      await app.close();
    }
  });

  it('has a bounded default (Fastify alone would wait forever)', async () => {
    const app = createHttpApp({ logger: pino({ level: 'silent' }) });
    try {
      assert.equal(app.server.requestTimeout, DEFAULT_REQUEST_TIMEOUT_MS);
      assert.ok(DEFAULT_REQUEST_TIMEOUT_MS > 0 && DEFAULT_REQUEST_TIMEOUT_MS <= 120_000);
    } finally {
      await app.close();
    }
  });
});

describe('request log lines', () => {
  it('refused requests write at most 100 lines a second (the rest counted); answered ones each write one', async () => {
    const lines: string[] = [];
    const logger = pino(
      { ...LOG_OPTIONS, level: 'info' },
      new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    );
    const app = createHttpApp({ logger });
    app.get('/ok', async () => ({ ok: true }));
    const url = await listen(app, '127.0.0.1', 0);
    try {
      // 600 refusals, 50 at a time: a second or two here.
      const t0 = Date.now();
      for (let i = 0; i < 12; i++) {
        const statuses = await Promise.all(Array.from({ length: 50 }, async () => (await fetch(`${url}/nope`)).status));
        assert.ok(statuses.every((s) => s === 404));
      }
      // Wall-clock seconds the storm touched: the budget is per second.
      const seconds = Math.floor(Date.now() / 1000) - Math.floor(t0 / 1000) + 1;
      for (let i = 0; i < 5; i++) assert.equal((await fetch(`${url}/ok`)).status, 200);
      const requestLines = lines
        .map((l) => JSON.parse(l) as { msg: string; status?: number; skipped?: number })
        .filter((l) => l.msg === 'request');
      const refused = requestLines.filter((l) => l.status === 404).length;
      assert.ok(refused <= 100 * seconds, `${refused} lines over ${seconds} wall-clock seconds`);
      assert.equal(requestLines.filter((l) => l.status === 200).length, 5, 'answered requests are each logged');
    } finally {
      await app.close();
    }
  });
});

describe('a body where no route takes it', () => {
  it('is not judged: 404 for an unknown path and 405 for a wrong method, whatever its size, type or framing; a body on a known read is still 400', async () => {
    const app = createHttpApp({ logger: pino({ level: 'silent' }), bodyLimit: 1024 });
    app.get('/read', async () => ({ ok: true }));
    app.post('/write', async () => ({ ok: true }));
    const url = await listen(app, '127.0.0.1', 0);
    const big = JSON.stringify({ x: 'a'.repeat(100_000) });
    const problem = async (res: Response): Promise<string> => ((await res.json()) as { type: string }).type;
    try {
      const send = (path: string, method: string, body: string, ct = 'application/json') =>
        fetch(`${url}${path}`, { method, headers: { 'content-type': ct }, body });
      let res = await send('/nope', 'POST', big);
      assert.equal(res.status, 404);
      assert.equal(await problem(res), 'urn:svc-serving:problem:not-found');
      res = await send('/read', 'POST', big);
      assert.equal(res.status, 405);
      assert.equal(res.headers.get('allow'), 'GET, HEAD');
      await res.arrayBuffer();
      assert.equal((await send('/nope', 'POST', 'not json', 'text/plain')).status, 404);
      assert.equal((await send('/write', 'PUT', '{"a":', 'application/json')).status, 405);
      // A small declared body to nowhere is read and dropped: the connection carries the next request.
      const small = await unfinished(
        url,
        `POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n`,
        `${'b'.repeat(500)}GET /read HTTP/1.1\r\nHost: x\r\n\r\n`,
        1_500,
      );
      assert.match(small.answer, /^HTTP\/1\.1 404 /);
      assert.match(small.answer, /HTTP\/1\.1 200 [\s\S]*\{"ok":true\}$/);
      // A chunked body (size unknown) or one declared past the limit is not read at all: the
      // 404, then the connection closes (a server never takes in an unbounded upload nobody reads).
      for (const framing of ['Transfer-Encoding: chunked', `Content-Length: ${100_000_000_000}`]) {
        const r = await unfinished(
          url,
          `POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`,
          `${(50_000).toString(16)}\r\n${'b'.repeat(50_000)}\r\n`,
          3_000,
        );
        assert.match(r.answer, /^HTTP\/1\.1 404 /, framing);
        assert.match(r.answer, /\r\nconnection: close\r\n/i, framing);
        assert.equal(r.closed, true, framing);
      }
      // GET with a body: to nowhere 404; to a read route 400 (filters sent there would be ignored).
      const getWithBody = (path: string) =>
        unfinished(
          url,
          `GET ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n`,
          '{"a":1}',
          1_500,
        );
      assert.match((await getWithBody('/nope')).answer, /^HTTP\/1\.1 404 /);
      assert.match((await getWithBody('/read')).answer, /^HTTP\/1\.1 400 /);
      // Where a route takes it, the body is judged as before.
      assert.equal((await send('/write', 'POST', big)).status, 413);
      // A refusal before any route reads the body (no Host) settles it the same way: a body
      // past the limit is not taken in, the connection closes after the 400.
      const noHost = await unfinished(
        url,
        `POST /write HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n`,
        'c'.repeat(60_000),
        3_000,
      );
      assert.match(noHost.answer, /^HTTP\/1\.1 400 /);
      assert.equal(noHost.closed, true);
    } finally {
      await app.close();
    }
  });

  it('a body to nowhere that stalls: the 404 at once, then the connection closed at the request timeout without a second answer', async () => {
    const app = createHttpApp({
      logger: pino({ level: 'silent' }),
      requestTimeoutMs: 400,
      connectionsCheckIntervalMs: 100,
    });
    const url = await listen(app, '127.0.0.1', 0);
    try {
      const r = await unfinished(
        url,
        'POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n',
        '{"a":',
        5_000,
      );
      assert.equal(r.closed, true);
      assert.match(r.answer, /^HTTP\/1\.1 404 /);
      assert.equal(r.answer.match(/HTTP\/1\.1 /g)?.length, 1, r.answer);
      assert.ok(r.ms < 4_000, `closed after ${r.ms} ms`);
    } finally {
      await app.close();
    }
  });
});
