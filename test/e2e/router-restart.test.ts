import { ErrorCode, openAiError } from '../../src/errors.js';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { appendFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { CLI } from '../support/processes.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { recordId } from '../../src/schema/record-id.js';

const GID = /^req_[0-9a-f]{32}$/;

describe('router restart: kill -9 keeps every looked-up record (rotated decision log, torn last line)', () => {
  let h: RouterHarness;

  before(async () => {
    // Small files so the records span several rotated files.
    h = await startRouterHarness({
      models: [{ alias: 'chat' }],
      server: { decision_log_max_bytes: 4096, decision_log_max_files: 50 },
    });
  });
  after(() => h?.stop());

  const chat = (
    content: string,
    extra: Record<string, unknown> = {},
    headers: Record<string, string> = {},
    signal?: AbortSignal,
  ) =>
    fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content }], ...extra }),
      signal: signal ?? AbortSignal.timeout(10_000),
    });
  /** Every parsed line of every retained file, and the gateway ids among them. */
  const logged = (): { lines: string[]; gids: string[] } => {
    const lines = h.logFiles().flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .filter((l) => l.length > 0),
    );
    const gids: string[] = [];
    for (const l of lines) {
      try {
        const g = (JSON.parse(l) as { gateway_request_id?: unknown }).gateway_request_id;
        if (typeof g === 'string') gids.push(g);
      } catch {
        // the torn fragment
      }
    }
    return { lines, gids };
  };

  it('records found before the kill are found after restart; the log holds each gateway id once', async () => {
    const session = `sess-${randomBytes(4).toString('hex')}`;
    const legacy = `legacy-${randomBytes(4).toString('hex')}`;
    const seen = new Map<string, TerminalRecord>();
    const sessionIds: string[] = [];
    const cases: Array<[string, Record<string, unknown>, Record<string, string>]> = [
      ['plain', {}, {}],
      ['stream', { stream: true, stream_options: { include_usage: true } }, {}],
      ['sim:reject=context', {}, {}],
      ['sim:status=503', {}, {}],
      ['sim:fail_after=1', { stream: true }, {}],
      ['sim:finish=tool_calls', {}, {}],
      ['first legacy', { max_tokens: 2 }, { 'x-request-id': legacy }],
      ['second legacy', { max_tokens: 3 }, { 'x-request-id': legacy }],
    ];
    for (let i = 0; i < 18; i++) {
      const [content, extra, headers] = cases[i % cases.length]!;
      const res = await chat(content, extra, { ...headers, 'x-svc-session-id': session });
      const id = res.headers.get('x-svc-request-id') ?? '';
      assert.match(id, GID);
      await res.text();
      const r = await h.lookup(id);
      assert.equal(r.status, 200);
      seen.set(id, r.body.request as TerminalRecord);
      sessionIds.push(id);
    }
    assert.ok(h.logFiles().length >= 2, 'the log rotated');
    const newestLegacy = (await h.lookup(legacy)).body.request as TerminalRecord;
    // One request still streaming when the router dies: it cannot write its record, but the
    // in-flight journal knows it; the next start records it.
    const inflight = await chat(
      'sim:tokens=500 sim:token_delay_ms=20',
      { stream: true, stream_options: { include_usage: true } },
      { 'x-svc-session-id': session },
      AbortSignal.timeout(10_000),
    );
    const inflightId = inflight.headers.get('x-svc-request-id')!;
    await inflight.body!.getReader().read();
    await new Promise((r) => setTimeout(r, 1_300));

    assert.equal(await h.stopRouter('SIGKILL'), null, 'killed, not exited');
    // A crash mid-write leaves a torn last line without a newline.
    appendFileSync(h.logPath!, `{"request_id":"req_${'ab'.repeat(16)}","model":"chat","outcome":"succ`);
    await h.startRouter();

    for (const [id, before] of seen) {
      const r = await h.lookup(id);
      assert.equal(r.status, 200, `record ${id} after restart`);
      assert.deepEqual(r.body.request, before);
    }
    assert.deepEqual((await h.lookup(legacy)).body.request, newestLegacy);
    assert.equal(newestLegacy.output_limit?.requested, 3);
    const cut = await h.lookup(inflightId);
    assert.equal(cut.status, 200, 'the request the router died with has its one record');
    const cr = cut.body.request as TerminalRecord;
    assert.deepEqual(
      [cr.outcome, cr.status_code, cr.finish_reason, cr.latency_ms, cr.session_id],
      ['error', 0, 'unknown', null, session],
    );
    assert.deepEqual(cr.usage, {
      prompt_tokens: null,
      completion_tokens: null,
      prompt_source: 'unknown',
      completion_source: 'unknown',
    });
    // The process that ran it wrote its identity into the journal: the record carries it.
    const status = (await (await h.get('/v1/router/status')).json()) as {
      routing_config_hash: string;
      package_version: string;
    };
    assert.equal(cr.routing_config_hash, status.routing_config_hash);
    assert.equal(cr.package_version, status.package_version);
    assert.equal((await h.lookup(`req_${'ab'.repeat(16)}`)).status, 404, 'the torn line is not a record');

    // The router's workload window holds the records of before the kill again (refilled from
    // the decision log), not an empty "complete" inventory.
    const wl = await h.get('/v1/workloads?owner=router&limit=200', h.readerToken);
    assert.equal(wl.status, 200);
    const inv = (await wl.json()) as { sources: Array<{ records: Array<{ id: string; state: string }> }> };
    const terminal = inv.sources[0]!.records.filter((r) => r.state === 'terminal').map((r) => r.id);
    for (const id of seen.keys())
      assert.ok(
        terminal.includes(recordId('node-a', 'router', 'router-request', id)),
        `${id} is in the window after restart`,
      );

    const hist = await h.get(`/v1/requests?session_id=${session}&history=1`);
    assert.equal(hist.status, 200);
    const body = (await hist.json()) as {
      requests: TerminalRecord[];
      truncation: { returned: number; omitted: number | null };
    };
    // After a kill, requests of its last moments may have no record at all: how many the
    // history leaves out is unknown, not 0 (and stays unknown after later restarts).
    assert.deepEqual(body.truncation, { returned: 19, omitted: null });
    assert.deepEqual(
      body.requests.slice(1),
      [...sessionIds].reverse().map((id) => seen.get(id)),
    );
    assert.equal(body.requests[0]!.request_id, inflightId, 'newest: the interrupted one');

    // The restarted router appends whole lines after the torn one.
    const res = await chat('after restart');
    const afterId = res.headers.get('x-svc-request-id')!;
    await res.text();
    assert.equal((await h.lookup(afterId)).body.request.outcome, 'success');
    const { lines, gids } = logged();
    const sorted = [...gids].sort();
    assert.deepEqual(sorted, [...seen.keys(), inflightId, afterId].sort(), 'each gateway id exactly once');
    assert.equal(new Set(gids).size, gids.length);
    const bad = lines.filter((l) => {
      try {
        JSON.parse(l);
        return false;
      } catch {
        return true;
      }
    });
    assert.equal(bad.length, 1, 'only the torn fragment does not parse');
    assert.ok(bad[0]!.endsWith('"outcome":"succ'));
  });

  it('requests that began a moment before a kill -9 still get their one record after the restart (the journal names them within 20 ms)', async () => {
    const streams = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        chat(`sim:tokens=500 sim:token_delay_ms=20 late-${i}`, { stream: true }, {}, AbortSignal.timeout(10_000)),
      ),
    );
    const ids = streams.map((s) => s.headers.get('x-svc-request-id')!);
    for (const id of ids) assert.match(id, GID);
    // Their clients hold their ids and their first bytes: well within the second in which the
    // journal used to be written only once.
    await Promise.all(streams.map((s) => s.body!.getReader().read()));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await h.stopRouter('SIGKILL'), null, 'killed, not exited');
    await h.startRouter();
    for (const id of ids) {
      const r = await h.lookup(id);
      assert.equal(r.status, 200, `the request ${id} the router died with has its record`);
      assert.deepEqual([r.body.request.outcome, r.body.request.status_code], ['error', 0]);
    }
    const { gids } = logged();
    assert.equal(new Set(gids).size, gids.length, 'each gateway id once');
  });

  it('a graceful stop lets a stream in flight finish and records it; the next start serves every record', async () => {
    const res = await chat('sim:tokens=15 sim:token_delay_ms=40', { stream: true });
    const id = res.headers.get('x-svc-request-id')!;
    const reader = res.body!.getReader();
    await reader.read();
    const stopping = h.stopRouter();
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString('utf8');
    }
    assert.match(text, /data: \[DONE\]/);
    assert.equal(await stopping, 0);
    const { gids } = logged();
    assert.ok(gids.includes(id), 'recorded before exit');
    await h.startRouter();
    for (const g of gids) assert.equal((await h.lookup(g)).status, 200, g);
    assert.equal((await h.lookup(id)).body.request.outcome, 'success');
    const status = await h.get('/v1/router/status');
    assert.equal(status.status, 200);
  });

  it("a stream still running when a graceful stop cuts it ends with an error event and is recorded as the router's error, not a client cancel", async () => {
    const res = await chat('sim:tokens=400 sim:token_delay_ms=25', { stream: true });
    const id = res.headers.get('x-svc-request-id')!;
    const reader = res.body!.getReader();
    await reader.read();
    const t0 = Date.now();
    const stopping = h.stopRouter();
    let text = '';
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) break;
      text += Buffer.from(value!).toString('utf8');
    }
    assert.ok(Date.now() - t0 >= 4_500, 'the stream had its grace period');
    assert.match(
      text,
      /event: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"unavailable"/,
    );
    assert.doesNotMatch(text, /\[DONE\]/);
    assert.equal(await stopping, 0);
    await h.startRouter();
    const r = (await h.lookup(id)).body.request as TerminalRecord;
    assert.equal(r.outcome, 'error');
    assert.equal(r.finish_reason, 'cancelled', 'the router cancelled it; an engine failure finishes error');
    assert.equal(r.usage.completion_source, 'estimated', 'what was relayed before the cut is counted');
  });

  it('a stream with nothing relayed yet when a graceful stop cuts it gets the plain 503 error', async () => {
    // The engine has answered with its headers but no token: the client has been sent nothing.
    const pending = chat('sim:ttft_ms=30000', { stream: true });
    await new Promise((r) => setTimeout(r, 500));
    const stopping = h.stopRouter();
    const res = await pending;
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('content-type'), 'application/json');
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'unavailable');
    const id = res.headers.get('x-svc-request-id')!;
    assert.equal(await stopping, 0);
    await h.startRouter();
    const r = (await h.lookup(id)).body.request as TerminalRecord;
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['error', 503, 'error']);
  });

  it('a request whose body is still arriving when a graceful stop cuts it gets the 503 error with its id and its record, not a closed connection', async () => {
    const url = new URL(h.routerUrl);
    const sock = connect(Number(url.port), url.hostname);
    let answer = '';
    sock.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    const closed = new Promise<void>((r) => sock.on('close', () => r()));
    sock.on('error', () => undefined);
    // Headers promise 100,000 bytes; a few arrive, then the client trickles.
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"model":"chat",`,
    );
    const trickle = setInterval(() => sock.writable && sock.write(' '), 1_000);
    try {
      await new Promise((r) => setTimeout(r, 300));
      const stopping = h.stopRouter();
      await closed;
      assert.match(answer, /^HTTP\/1\.1 503 /);
      assert.match(answer, /\r\nx-svc-request-id: req_[0-9a-f]{32}\r\n/i);
      assert.ok(answer.endsWith(JSON.stringify(openAiError(ErrorCode.UNAVAILABLE))), answer);
      assert.equal(await stopping, 0);
    } finally {
      clearInterval(trickle);
      sock.destroy();
    }
    await h.startRouter();
  });

  it("a request whose upload begins after a graceful stop's cut, and is cut with its connection, is recorded as the router's error, not a client that left", async () => {
    const url = new URL(h.routerUrl);
    const sock = connect(Number(url.port), url.hostname);
    let answer = '';
    const closed = new Promise<void>((r) => sock.on('close', () => r()));
    sock.on('error', () => undefined);
    const head = (extra: string, length: number) =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${length}\r\n\r\n`;
    // First an answer the engine holds back past the grace period: the cut answers it 503.
    const first = JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'sim:ttft_ms=30000' }] });
    // Then at once, on the same connection (before the router's idle sweep closes it), a
    // request whose body never arrives whole: the router's last close cuts it, not its client.
    let second = false;
    sock.on('data', (d: Buffer) => {
      answer += d.toString('latin1');
      if (second || !answer.endsWith(JSON.stringify(openAiError(ErrorCode.UNAVAILABLE)))) return;
      second = true;
      sock.write(`${head('X-Request-Id: cut-after-stop-1\r\n', 100_000)}{"model":"chat",`);
    });
    sock.write(head('', Buffer.byteLength(first)) + first);
    await new Promise((r) => setTimeout(r, 300));
    const stopping = h.stopRouter();
    await closed;
    assert.ok(second, 'the first request was answered 503 by the cut');
    assert.equal(await stopping, 0);
    await h.startRouter();
    const found = await h.lookup('cut-after-stop-1');
    assert.equal(found.status, 200, 'the second request left its record');
    const r = found.body.request as TerminalRecord;
    assert.deepEqual([r.outcome, r.status_code, r.refusal], ['error', 0, undefined]);
  });

  it("a second router started on the same configuration is refused before it touches the first one's records", async () => {
    const res = await chat('sim:tokens=60 sim:token_delay_ms=20', { stream: true });
    const id = res.headers.get('x-svc-request-id')!;
    await new Promise((r) => setTimeout(r, 1_200)); // the journal now lists the stream
    const second = spawnSync(process.execPath, [CLI, 'router', 'serve', '--config', h.configPath], {
      env: { PATH: process.env['PATH'] ?? '', ...h.routerEnv },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(second.status, 2, second.stderr);
    assert.match(second.stderr, /decision_log_path is in use by another running router process/);
    await res.text();
    const r = await h.lookup(id);
    assert.equal(r.body.request.outcome, 'success');
    assert.equal(logged().gids.filter((g) => g === id).length, 1, 'one record, not an extra "interrupted" one');
  });

  it('a decision-log folder removed while the router runs is made again with its lock: a second router is still refused', async () => {
    const folder = dirname(h.logPath!);
    rmSync(folder, { recursive: true, force: true });
    const res = await chat('after the folder went');
    assert.equal(res.status, 200);
    const id = res.headers.get('x-svc-request-id')!;
    await res.text();
    // A lookup writes what is queued first: the file, its folder and the lock are back.
    assert.equal((await h.lookup(id)).body.request.outcome, 'success');
    assert.ok(existsSync(`${h.logPath!}.lock`), 'the lock is taken again');
    const second = spawnSync(process.execPath, [CLI, 'router', 'serve', '--config', h.configPath], {
      env: { PATH: process.env['PATH'] ?? '', ...h.routerEnv },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(second.status, 2, second.stderr);
    assert.match(second.stderr, /decision_log_path is in use by another running router process/);
  });
});
