import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { RouterRegistry, type ActiveRequest } from '../../../src/router/records/router-registry.js';
import { GENERATED_ID_RE, checkTerminalRecord, type TerminalRecord } from '../../../src/schema/terminal-record.js';
import { DEFAULT_FLUSH_DELAY_MS, DecisionLog } from '../../../src/router/records/decision-log.js';
import { parseDecision, scanDecisionFiles } from '../../../src/router/records/decision-lines.js';
import {
  BodyAborted,
  BodyTooLarge,
  UploadsFull,
  collect,
  newGatewayId,
  readBody,
} from '../../../src/router/relay-support.js';
import { UploadBudget } from '../../../src/router/upload-budget.js';
import type { IncomingMessage } from 'node:http';
import { gid, hex, rec } from '../../support/terminal-records.js';

describe('generated request ids', () => {
  it('are req_ + 32 lowercase hex and never repeat, also across refills of the random pool', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) {
      const id = newGatewayId();
      assert.match(id, GENERATED_ID_RE);
      assert.match(id, /^req_[0-9a-f]{32}$/);
      seen.add(id);
    }
    assert.equal(seen.size, 2_000);
  });
});

describe('bounded body collection', () => {
  it('joins the chunks; refuses past the limit (after onOver); a stream that closes early or is gone is aborted', async () => {
    const whole = new PassThrough();
    const p = collect(whole, 10, () => assert.fail('not over'));
    whole.write('abc');
    whole.end('def');
    assert.equal((await p).toString(), 'abcdef');

    const big = new PassThrough();
    let over = 0;
    const q = collect(big, 4, (s) => {
      over++;
      s.destroy();
    });
    big.write('abc');
    big.write('def');
    await assert.rejects(q, BodyTooLarge);
    assert.equal(over, 1);

    const cut = new PassThrough();
    const r = collect(cut, 10, () => undefined);
    cut.write('ab');
    cut.destroy();
    await assert.rejects(r, BodyAborted);

    const gone = new PassThrough();
    gone.destroy();
    await assert.rejects(
      collect(gone, 10, () => undefined),
      BodyAborted,
    );
  });

  it('bodies held while they arrive share one budget: a declared length counts at once, a chunked body as it comes; 429 beyond it', async () => {
    const upload = (length?: number) =>
      Object.assign(new PassThrough(), {
        headers: length === undefined ? {} : { 'content-length': String(length) },
      }) as unknown as IncomingMessage & PassThrough;
    const budget = new UploadBudget(150);
    // A slow client that declared 100 bytes holds them from the start.
    const slow = upload(100);
    const slowBody = readBody(slow, 1000, budget);
    await assert.rejects(readBody(upload(100), 1000, budget), UploadsFull);
    // A chunked body fits while its bytes do.
    const chunked = upload();
    const chunkedBody = readBody(chunked, 1000, budget);
    chunked.write(Buffer.alloc(40));
    chunked.write(Buffer.alloc(40));
    await assert.rejects(chunkedBody, UploadsFull);
    // Once the slow body is whole, its share is free again.
    slow.end(Buffer.alloc(100));
    assert.equal((await slowBody).byteLength, 100);
    const next = upload(150);
    const nextBody = readBody(next, 1000, budget);
    next.end(Buffer.alloc(150));
    assert.equal((await nextBody).byteLength, 150, 'the whole budget again: nothing was left counted');
  });
});

describe('decision log', () => {
  const dir = () => mkdtempSync(join(tmpdir(), 'svc-dlog-'));
  const all = (log: DecisionLog, budget?: number) => {
    const out: Array<{ gid: string | undefined; record: TerminalRecord }> = [];
    const res = scanDecisionFiles(log.retainedFiles(), (d) => void out.push(d), { budget });
    return { out, truncated: res.truncated };
  };

  it('appends whole lines and scans newest first, with the gateway id', () => {
    const path = join(dir(), 'state', 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 3);
    log.open();
    for (let i = 1; i <= 3; i++) log.append(gid(i), rec({ request_id: i === 2 ? 'legacy-2' : gid(i) }));
    const { out, truncated } = all(log);
    assert.equal(truncated, false);
    assert.deepEqual(
      out.map((d) => d.gid),
      [gid(3), gid(2), gid(1)],
    );
    assert.equal(out[1]!.record.request_id, 'legacy-2');
    for (const line of readFileSync(path, 'utf8').trimEnd().split('\n'))
      assert.equal(JSON.parse(line).gateway_request_id !== undefined, true);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    log.close();
  });

  it('rotates at max bytes, keeps max files, drops the oldest, never splits a record', () => {
    const path = join(dir(), 'd.jsonl');
    const line = JSON.stringify({ ...rec(), gateway_request_id: gid(0) }).length + 1;
    const log = new DecisionLog(path, line * 3, 3);
    log.open();
    for (let i = 1; i <= 20; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flush();
    assert.ok(existsSync(`${path}.1`) && existsSync(`${path}.2`));
    assert.equal(existsSync(`${path}.3`), false);
    for (const f of [path, `${path}.1`, `${path}.2`]) assert.ok(statSync(f).size <= line * 3, f);
    const { out } = all(log);
    // 20 records, 3 per file: current holds 19-20, .1 holds 16-18, .2 holds 13-15.
    assert.deepEqual(
      out.map((d) => d.gid),
      [20, 19, 18, 17, 16, 15, 14, 13].map(gid),
    );
    log.close();
  });

  it('with max_files 1 the current file is simply restarted', () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 900, 1);
    log.open();
    for (let i = 1; i <= 5; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    assert.equal(existsSync(`${path}.1`), false);
    assert.equal(all(log).out[0]!.gid, gid(5));
    log.close();
  });

  it('a torn last line is closed off at open; torn and foreign lines are skipped', () => {
    const path = join(dir(), 'd.jsonl');
    writeFileSync(
      path,
      `${JSON.stringify({ ...rec(), gateway_request_id: gid(1) })}\n{"foreign":true}\n[1,2]\nnull\n"str"\n\n{"request_id":"req_${hex(9)}","outcome":"succ`,
    );
    const log = new DecisionLog(path, 1 << 20, 2);
    log.open();
    log.append(gid(2), rec({ request_id: gid(2) }));
    log.flush();
    const text = readFileSync(path, 'utf8');
    assert.ok(
      text.endsWith(
        '"outcome":"succ\n' + JSON.stringify({ ...rec({ request_id: gid(2) }), gateway_request_id: gid(2) }) + '\n',
      ),
    );
    assert.deepEqual(
      all(log).out.map((d) => d.gid),
      [gid(2), gid(1)],
    );
    log.close();
    // Opening again (nothing torn now) adds nothing.
    const again = new DecisionLog(path, 1 << 20, 2);
    again.open();
    assert.equal(readFileSync(path, 'utf8'), text);
    again.close();
  });

  it('reads an older version line: allowlisted members only, unknown usage provenance, normalized finish', () => {
    const old = {
      request_id: gid(5),
      model: 'm',
      route: 'chat.completions',
      outcome: 'success',
      status_code: 200,
      started_at: '2026-01-01T00:00:00.000Z',
      finished_at: '2026-01-01T00:00:01.000Z',
      latency_ms: 1000,
      readiness_check_ms: null,
      upstream_duration_ms: 900,
      time_to_first_content_ms: 100,
      finish_reason: 'eos',
      usage: { prompt_tokens: 5, completion_tokens: 6 },
      output_limit: null,
      prompt: 'SECRET PROMPT',
      headers: { authorization: 'Bearer x' },
      session_id: 's-1',
      task_id: 42,
    };
    const d = parseDecision(JSON.stringify(old))!;
    assert.ok(d, 'readable');
    assert.ok(checkTerminalRecord.Check(d.record));
    assert.equal(d.gid, gid(5), 'a reserved request_id is its own gateway id');
    assert.equal(d.record.admission_wait_ms, null);
    assert.equal(d.record.finish_reason, 'stop');
    assert.deepEqual(d.record.usage, {
      prompt_tokens: 5,
      completion_tokens: 6,
      prompt_source: 'unknown',
      completion_source: 'unknown',
    });
    assert.equal(d.record.session_id, 's-1');
    for (const k of ['prompt', 'headers', 'task_id', 'routing_config_hash', 'package_version', 'gateway_request_id'])
      assert.equal(k in d.record, false, k);
    assert.equal(
      parseDecision(JSON.stringify({ ...old, finish_reason: 'provider free text' }))!.record.finish_reason,
      'unknown',
    );
    assert.equal(parseDecision(JSON.stringify({ ...old, request_id: 'legacy-5' }))!.gid, undefined);
    assert.equal(parseDecision(JSON.stringify({ ...old, gateway_request_id: 'not-an-id' }))!.gid, gid(5));
    assert.equal(parseDecision(JSON.stringify({ ...old, outcome: 'exploded' })), undefined);
    assert.equal(parseDecision(JSON.stringify({ ...old, latency_ms: -1 })), undefined);
    for (const bad of ['', '{', '{}', '[]', 'null', '1', '"x"']) assert.equal(parseDecision(bad), undefined, bad);
  });

  it('reads within a byte budget and reports truncation only when something was left unread', () => {
    const path = join(dir(), 'd.jsonl');
    const line = JSON.stringify({ ...rec(), gateway_request_id: gid(0) }).length + 1;
    const log = new DecisionLog(path, line * 2, 5);
    log.open();
    for (let i = 1; i <= 6; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flush();
    const total = [path, `${path}.1`, `${path}.2`].reduce((n, f) => n + statSync(f).size, 0);
    assert.deepEqual(all(log, total), { out: all(log).out, truncated: false });
    assert.equal(all(log, total).out.length, 6);
    const cut = all(log, total - 1);
    assert.equal(cut.truncated, true);
    assert.equal(cut.out.length, 5, 'the oldest record fell outside the budget');
    const two = all(log, line * 2);
    assert.deepEqual([two.out.length, two.truncated], [2, true]);
    const half = all(log, Math.floor(line * 1.5));
    assert.deepEqual([half.out.length, half.truncated], [1, true], 'a cut line is not read as a record');
    log.close();
  });
});

describe('router registry with a decision log', () => {
  const active = (n: number, over: Partial<ActiveRequest> = {}): ActiveRequest => ({
    gid: gid(n),
    requestId: gid(n),
    model: 'm',
    route: 'chat.completions',
    startedAt: Date.now(),
    phase: 'checking',
    phaseAt: Date.now(),
    lastUpstreamAt: null,
    admissionWaitMs: null,
    estimatedPromptTokens: null,
    estimatedCompletionTokens: 0,
    upstreamPromptTokens: null,
    upstreamCompletionTokens: null,
    sessionId: undefined,
    workbenchRunId: undefined,
    taskId: undefined,
    queuedAt: null,
    stop: undefined,
    ...over,
  });

  it('finishes once per request; evicted records come back from the log; reserved ids never match caller ids', async () => {
    const log = new DecisionLog(join(mkdtempSync(join(tmpdir(), 'svc-reg-')), 'd.jsonl'), 1 << 20, 2);
    log.open();
    let finished = 0;
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 2, log, onFinish: () => finished++ });
    for (let i = 1; i <= 4; i++) {
      const a = active(i, {
        requestId: i <= 2 ? 'shared-legacy' : gid(i),
        sessionId: 'S',
        startedAt: Date.parse('2026-01-01T00:00:00.000Z') + i,
      });
      reg.begin(a);
      const r = rec({
        request_id: a.requestId,
        session_id: 'S',
        finished_at: new Date(Date.parse('2026-01-01T00:00:00.000Z') + i * 1000).toISOString(),
        output_limit: { requested: i, effective: i, clamped: false },
      });
      reg.finish(a, r);
      reg.finish(a, r);
    }
    assert.equal(finished, 4);
    assert.equal(reg.active.size, 0);
    log.flush();
    assert.equal(readFileSync(log.path, 'utf8').trimEnd().split('\n').length, 4, 'one line per request');
    // gid(1) and gid(2) were evicted from the 2-slot buffer: found in the log.
    assert.equal((await reg.lookup(gid(1)))?.output_limit?.requested, 1);
    assert.equal((await reg.lookup(gid(2)))?.request_id, 'shared-legacy');
    assert.equal((await reg.lookup('shared-legacy'))?.output_limit?.requested, 2, 'newest match');
    assert.equal(await reg.lookup(gid(99)), undefined);
    const s = await reg.session('S');
    assert.deepEqual(
      s.requests.map((r) => r.output_limit?.requested),
      [4, 3, 2, 1],
      'newest first, memory and log merged once',
    );
    assert.deepEqual(s.truncation, { returned: 4, omitted: 0 });
    log.close();
  });

  it('session history says its left-out count is unknown once records are gone (evicted without a log, rotated out of it)', async () => {
    const end = (reg: RouterRegistry, n: number) => {
      const a = active(n, { sessionId: 'S' });
      reg.begin(a);
      reg.finish(a, rec({ request_id: gid(n), session_id: 'S' }));
    };
    // No decision log: the third record evicts the first for good.
    const bare = new RouterRegistry({ host: 'node-a', bufferSize: 2 });
    end(bare, 1);
    end(bare, 2);
    assert.deepEqual((await bare.session('S')).truncation, { returned: 2, omitted: 0 }, 'nothing lost yet');
    end(bare, 3);
    assert.deepEqual((await bare.session('S')).truncation, { returned: 2, omitted: null });
    // A log of two small files: rotation deletes the oldest, and the count is unknown from then on.
    const dir = mkdtempSync(join(tmpdir(), 'svc-reg-'));
    const lineBytes = JSON.stringify(rec({ session_id: 'S' })).length + 70;
    const log = new DecisionLog(join(dir, 'd.jsonl'), lineBytes * 2, 2);
    log.open();
    const logged = new RouterRegistry({ host: 'node-a', bufferSize: 2, log });
    for (let i = 1; i <= 4; i++) end(logged, i);
    log.flush();
    assert.deepEqual((await logged.session('S')).truncation, { returned: 4, omitted: 0 }, 'two files hold all four');
    for (let i = 5; i <= 6; i++) end(logged, i);
    log.flush();
    const s = await logged.session('S');
    assert.equal(s.truncation.omitted, null, 'records were rotated away');
    assert.ok(s.requests.length < 6);
    log.close();
    // A restart that finds every file slot in use cannot know what an earlier rotation deleted.
    const again = new DecisionLog(join(dir, 'd.jsonl'), lineBytes * 2, 2);
    again.open();
    assert.equal(
      (await new RouterRegistry({ host: 'node-a', bufferSize: 2, log: again }).session('S')).truncation.omitted,
      null,
    );
    again.close();
  });

  it('finished records are written together, and always before a lookup, a session read or the actor can hand them out', async () => {
    const log = new DecisionLog(join(mkdtempSync(join(tmpdir(), 'svc-reg-')), 'd.jsonl'), 1 << 20, 2);
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10, log });
    const lines = () =>
      readFileSync(log.path, 'utf8')
        .split('\n')
        .filter((l) => l.length > 0).length;
    const end = (n: number) => {
      const a = active(n, { sessionId: 'S' });
      reg.begin(a);
      // Finished now: the actor's window holds the last day only.
      const at = new Date().toISOString();
      reg.finish(a, rec({ request_id: gid(n), session_id: 'S', started_at: at, finished_at: at }));
    };
    end(1);
    assert.ok(await reg.lookup(gid(1)));
    assert.equal(lines(), 1, 'on disk before the lookup answered');
    end(2);
    assert.equal((await reg.session('S')).requests.length, 2);
    assert.equal(lines(), 2, 'on disk before the session read answered');
    end(3);
    assert.equal(reg.workloadRecords(Date.now(), 10).records.length, 3);
    assert.equal(lines(), 3, 'on disk before the actor read it');
    end(4);
    end(5);
    await new Promise((r) => setTimeout(r, DEFAULT_FLUSH_DELAY_MS + 30));
    assert.equal(lines(), 5, 'written within the flush delay without any read');
    log.close();
  });

  it('a process that crashes right after finishing requests still has them on disk', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'svc-crash-')), 'd.jsonl');
    const mod = new URL('../../../src/router/records/decision-log.js', import.meta.url).href;
    const script = [
      `const { DecisionLog } = await import(${JSON.stringify(mod)});`,
      `const log = new DecisionLog(${JSON.stringify(path)}, 1 << 20, 2);`,
      'log.open();',
      `for (let i = 1; i <= 3; i++) log.append('req_' + String(i).padStart(32, '0'), ${JSON.stringify(rec())});`,
      "throw new Error('crash before any flush');",
    ].join('\n');
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.notEqual(r.status, 0, 'it crashed');
    assert.equal(readFileSync(path, 'utf8').trimEnd().split('\n').length, 3);
  });

  it('a failed deferred write is reported once, without record content, and the records stay in memory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-reg-'));
    const failures: number[] = [];
    const log = new DecisionLog(join(dir, 'd.jsonl'), 1 << 20, 2, (_err, n) => failures.push(n));
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10, log });
    // The disk refuses writes (a read-only descriptor on the same file stands in for it).
    (log as unknown as { fd: number }).fd = openSync(join(dir, 'd.jsonl'), 'r');
    const a = active(8);
    reg.begin(a);
    reg.finish(a, rec({ request_id: gid(8) }));
    await new Promise((r) => setTimeout(r, DEFAULT_FLUSH_DELAY_MS + 30));
    assert.deepEqual(failures, [1]);
    assert.equal((await reg.lookup(gid(8)))?.request_id, gid(8), 'still in memory');
  });

  it('a caller id of the reserved shape is never looked up as a legacy id, even when a record carries it', async () => {
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10 });
    const a = active(1, { requestId: 'legacy-x' });
    reg.begin(a);
    reg.finish(a, rec({ request_id: gid(7) }));
    // A stored request_id of the reserved shape that is not the gateway id answers to nothing.
    assert.equal(await reg.lookup(gid(7)), undefined);
    assert.ok(await reg.lookup(gid(1)));
  });
});
