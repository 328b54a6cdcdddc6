import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RouterRegistry, type ActiveRequest } from '../../../src/router/records/router-registry.js';
import { recordId } from '../../../src/schema/record-id.js';
import { DecisionLog } from '../../../src/router/records/decision-log.js';
import { LineBudget } from '../../../src/http/line-budget.js';
import { InflightJournal, lockDecisionLog } from '../../../src/router/records/inflight.js';
import { processStartTime } from '../../../src/stores/process-lock.js';
import { ConfigError } from '../../../src/errors.js';
import { writeFileSync } from 'node:fs';
import { appendFileSync, existsSync, readFileSync, rmSync, statSync, utimesSync } from 'node:fs';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../../src/logger.js';
import { gid, rec } from '../../support/terminal-records.js';
import { eventually } from '../../support/processes.js';

const HOUR = 3_600_000;

function active(n: number, startedAt: number): ActiveRequest {
  return {
    gid: gid(n),
    requestId: gid(n),
    model: 'm',
    route: 'chat.completions',
    startedAt,
    phase: 'checking',
    phaseAt: startedAt,
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
  };
}

/** A registry over a fresh log; `finish(n, at)` ends request n at epoch ms `at`. */
function setup(bufferSize: number, path = join(mkdtempSync(join(tmpdir(), 'svc-restore-')), 'd.jsonl')) {
  const log = new DecisionLog(path, 1 << 22, 2);
  log.open();
  const reg = new RouterRegistry({ host: 'node-a', bufferSize, log });
  return {
    path,
    log,
    reg,
    finish(n: number, at: number) {
      const a = active(n, at - 10);
      reg.begin(a);
      reg.finish(
        a,
        rec({
          request_id: gid(n),
          started_at: new Date(at - 10).toISOString(),
          finished_at: new Date(at).toISOString(),
        }),
        at,
      );
    },
  };
}
const ids = (recs: readonly { id: string }[]) => recs.map((r) => r.id);
const wl = (n: number) => recordId('node-a', 'router', 'router-request', gid(n));

describe('router registry: the window across evictions and restarts', () => {
  it('a record of the day evicted from the ring makes the left-out count unknown, not zero', () => {
    const now = Date.now();
    const a = setup(2);
    a.finish(1, now - 3 * HOUR);
    a.finish(2, now - 2 * HOUR);
    assert.deepEqual(a.reg.workloadRecords(now, 10), { records: a.reg.workloadRecords(now, 10).records, omitted: 0 });
    assert.deepEqual(a.reg.workloadRecords(now, 1).omitted, 1, 'the cap leaves one out: an exact count');
    a.finish(3, now - HOUR);
    const w = a.reg.workloadRecords(now, 10);
    assert.deepEqual(ids(w.records), [wl(3), wl(2)]);
    assert.equal(w.omitted, null, 'request 1 finished within the day and is no longer held');
    // A day after the evicted record finished, nothing of the window is missing any more.
    assert.equal(a.reg.workloadRecords(now - 3 * HOUR + 86_400_001, 10).omitted, 0);
    a.log.close();
  });

  it('records a rotation deleted are of unknown number after a restart (null, not 0), kept known when decision_log_max_files grows; exact again once a retained record is older than the day', () => {
    const now = Date.now();
    const path = join(mkdtempSync(join(tmpdir(), 'svc-restore-rot-')), 'd.jsonl');
    const size = Buffer.byteLength(JSON.stringify(rec({ request_id: gid(1) }))) + 60;
    const run = (maxFiles: number, finish: [number, number][]) => {
      const log = new DecisionLog(path, size * 4, maxFiles);
      log.open();
      const reg = new RouterRegistry({ host: 'node-a', bufferSize: 100, log });
      for (const [n, at] of finish) {
        const a = active(n, at - 10);
        reg.begin(a);
        reg.finish(
          a,
          rec({
            request_id: gid(n),
            started_at: new Date(at - 10).toISOString(),
            finished_at: new Date(at).toISOString(),
          }),
          at,
        );
      }
      log.flush();
      return { log, reg };
    };
    // 14 requests of the last hour through one file of 4 records: 10 of them are deleted.
    const first = run(
      1,
      Array.from({ length: 14 }, (_, i) => [i + 1, now - HOUR + i * 1000] as [number, number]),
    );
    assert.equal(first.reg.workloadRecords(now, 1000).omitted, 0, 'all 14 are still in the ring');
    first.log.close();
    // Restarted with more files allowed: that records were deleted is still known.
    const second = run(3, []);
    assert.equal(second.log.recordsDeleted, true);
    assert.ok(second.reg.restore(now) <= 4);
    assert.equal(second.reg.workloadRecords(now, 1000).omitted, null, 'ten records of the day are gone');
    second.log.close();

    // A log whose retained records reach back past the day: what rotation deleted is older still.
    const old = join(mkdtempSync(join(tmpdir(), 'svc-restore-rot-')), 'd.jsonl');
    const log = new DecisionLog(old, size * 20, 2);
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 100, log });
    for (let n = 1; n <= 63; n++) {
      const at = n <= 60 ? now - 30 * HOUR + n : now - HOUR + n;
      const a = active(n, at - 10);
      reg.begin(a);
      reg.finish(
        a,
        rec({
          request_id: gid(n),
          started_at: new Date(at - 10).toISOString(),
          finished_at: new Date(at).toISOString(),
        }),
        at,
      );
      log.flush();
    }
    log.close();
    const again = new DecisionLog(old, size * 20, 2);
    again.open();
    assert.equal(again.recordsDeleted, true);
    const reg2 = new RouterRegistry({ host: 'node-a', bufferSize: 100, log: again });
    assert.equal(reg2.restore(now), 3);
    assert.equal(reg2.workloadRecords(now, 1000).omitted, 0, 'the day is whole: the deleted records were older');
    again.close();
  });

  it('a restart refills the window from the decision log: newest first, lookups served from memory again', async () => {
    const now = Date.now();
    const a = setup(5);
    a.finish(1, now - 30 * HOUR); // older than the window: stays in the log only
    a.finish(2, now - 3 * HOUR);
    a.finish(3, now - 2 * HOUR);
    a.finish(4, now - HOUR);
    a.log.close();

    const b = setup(5, a.path);
    assert.equal(b.reg.restore(now), 3);
    const w = b.reg.workloadRecords(now, 10);
    assert.deepEqual(ids(w.records), [wl(4), wl(3), wl(2)]);
    assert.equal(w.omitted, 0, 'the whole day fitted');
    assert.equal((await b.reg.lookup(gid(3)))?.request_id, gid(3));
    assert.equal((await b.reg.lookup(gid(1)))?.request_id, gid(1), 'older records are still found in the log');
    // New work lands on top of the restored records.
    b.finish(5, now);
    assert.deepEqual(ids(b.reg.workloadRecords(now, 10).records).slice(0, 2), [wl(5), wl(4)]);
    b.log.close();
  });

  it('a day with more records than the ring holds: the newest are restored and the rest is an unknown count', () => {
    const now = Date.now();
    const a = setup(10);
    for (let i = 1; i <= 6; i++) a.finish(i, now - (7 - i) * 60_000);
    a.log.close();
    const b = setup(3, a.path);
    assert.equal(b.reg.restore(now), 3);
    const w = b.reg.workloadRecords(now, 10);
    assert.deepEqual(ids(w.records), [wl(6), wl(5), wl(4)]);
    assert.equal(w.omitted, null);
    b.log.close();
  });

  it('failure log lines are bounded per second; what was left out is reported once, as a count', () => {
    const skipped: number[] = [];
    const b = new LineBudget(3, (n) => skipped.push(n));
    const t = 1_000_000;
    assert.deepEqual(
      [0, 1, 2, 3, 4].map((i) => b.take(t + i)),
      [true, true, true, false, false],
    );
    assert.deepEqual(skipped, []);
    assert.equal(b.take(t + 1000), true, 'a new second');
    assert.deepEqual(skipped, [2]);
    assert.equal(b.take(t + 2000), true);
    assert.deepEqual(skipped, [2], 'nothing left out in the second before: no count line');
  });

  it('the in-flight journal: rewritten when requests come and go; what a dead process left is recorded once, as errors', async () => {
    const now = Date.now();
    const a = setup(10);
    const journal = new InflightJournal(`${a.path}.inflight`, a.reg, undefined);
    const one = active(1, now - 5000);
    const two = {
      ...active(2, now - 4000),
      phase: 'streaming' as const,
      sessionId: 'sess-9',
      workbenchRunId: 'run-3',
      taskId: 'task-4',
    };
    a.reg.begin(one);
    a.reg.begin(two);
    journal.write();
    const lines = readFileSync(journal.path, 'utf8').trim().split('\n');
    assert.equal(lines.length, 2);
    assert.ok(!lines.join('').includes('content'), 'identifiers and timing only');
    // Request 1 finishes normally; the process then dies before the journal is rewritten.
    a.reg.finish(
      one,
      rec({
        request_id: gid(1),
        started_at: new Date(now - 5000).toISOString(),
        finished_at: new Date(now - 100).toISOString(),
      }),
      now - 100,
    );
    a.log.flush();
    appendFileSync(journal.path, '{"gateway_request_id":"req_bad","model":"m"}\nnot json\n');
    a.log.close();

    const b = setup(10, a.path);
    b.reg.restore(now);
    const left = InflightJournal.read(journal.path);
    assert.equal(left.entries.length, 2, 'malformed lines are skipped');
    assert.equal(b.reg.recordInterrupted(left.entries, now - 50), 1, 'request 1 already has its record');
    const r = (await b.reg.lookup(gid(2)))!;
    assert.deepEqual(
      [r.outcome, r.status_code, r.finish_reason, r.latency_ms, r.session_id],
      ['error', 0, 'unknown', null, 'sess-9'],
    );
    assert.deepEqual([r.workbench_run_id, r.task_id], ['run-3', 'task-4'], 'lineage survives the crash');
    assert.equal(r.finished_at, new Date(now - 50).toISOString());
    assert.equal((await b.reg.lookup(gid(1)))!.outcome, 'success');
    // Recorded once: a second pass over the same journal adds nothing.
    assert.equal(b.reg.recordInterrupted(left.entries, now - 50), 0);
    b.log.flush();
    assert.equal(
      readFileSync(a.path, 'utf8')
        .trim()
        .split('\n')
        .filter((l) => l.includes(gid(2))).length,
      1,
    );
    // A graceful stop with nothing in flight removes the file, and nothing writes it again
    // (a rotation while the last records are written at close used to).
    const last = new InflightJournal(journal.path, b.reg, undefined);
    last.stop();
    assert.equal(existsSync(journal.path), false);
    last.write(true);
    assert.equal(existsSync(journal.path), false);
    b.log.close();
  });

  it("after an unclean stop (the .unclean marker) the window's left-out count is unknown for a day after the marker, not 0", () => {
    const now = Date.now();
    const a = setup(10);
    a.finish(2, now - 30 * HOUR);
    a.finish(1, now - HOUR);
    a.log.flush();
    a.log.markUnclean();
    a.log.close();
    const b = setup(10, a.path);
    assert.equal(b.reg.restore(now), 1);
    assert.equal(b.reg.workloadRecords(now, 1000).omitted, null, 'records of the day may be missing');
    b.log.close();
    // The marker is two days old: the day's records are all there is.
    utimesSync(`${a.path}.unclean`, new Date(now - 48 * HOUR), new Date(now - 48 * HOUR));
    const c = setup(10, a.path);
    assert.equal(c.reg.restore(now), 1);
    assert.equal(c.reg.workloadRecords(now, 1000).omitted, 0);
    c.log.close();
  });

  it('a rotation that deletes records tells the router at once (its in-flight journal is rewritten)', () => {
    const now = Date.now();
    const path = join(mkdtempSync(join(tmpdir(), 'svc-restore-rot-')), 'd.jsonl');
    const size = Buffer.byteLength(JSON.stringify(rec({ request_id: gid(1) }))) + 60;
    for (const maxFiles of [1, 2]) {
      const log = new DecisionLog(`${path}.${maxFiles}`, size * 2, maxFiles);
      log.open();
      let told = 0;
      log.onRotated = () => told++;
      const reg = new RouterRegistry({ host: 'node-a', bufferSize: 100, log });
      for (let n = 1; n <= 8; n++) {
        const a = active(n, now - 10);
        reg.begin(a);
        reg.finish(
          a,
          rec({
            request_id: gid(n),
            started_at: new Date(now - 10).toISOString(),
            finished_at: new Date(now).toISOString(),
          }),
          now,
        );
        log.flush();
      }
      assert.ok(told > 0, `max_files ${maxFiles}: told of the deletion`);
      log.close();
    }
  });

  it('requests recorded as interrupted at start each leave a line with their id', () => {
    const now = Date.now();
    const a = setup(10);
    const journal = new InflightJournal(`${a.path}.inflight`, a.reg, undefined);
    a.reg.begin(active(7, now - 1000));
    journal.write();
    a.log.close();
    const lines: string[] = [];
    const log = new DecisionLog(a.path, 1 << 22, 2);
    log.open();
    const reg = new RouterRegistry({
      host: 'node-a',
      bufferSize: 10,
      log,
      logger: pino({ ...LOG_OPTIONS, level: 'info' }, { write: (l: string) => void lines.push(l) }),
    });
    const left = InflightJournal.read(journal.path);
    assert.equal(reg.recordInterrupted(left.entries, now), 1);
    assert.ok(
      lines.some((l) => l.includes(gid(7)) && l.includes('"msg":"request finished"') && l.includes('"status":0')),
      lines.join(''),
    );
    log.close();
  });

  it('one router per decision log: a second live holder is refused; a lock left by a dead process is taken over', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'svc-lock-')), 'state', 'd.jsonl');
    const release = lockDecisionLog(path);
    assert.throws(
      () => {
        // Another live process holds it (this test's parent stands in for one).
        release();
        writeFileSync(`${path}.lock`, String(process.ppid));
        lockDecisionLog(path);
      },
      (err: unknown) =>
        err instanceof ConfigError &&
        /in use by another running router process/.test(err.message) &&
        !err.message.includes(path),
    );
    // The same live pid with its real start time: still refused.
    assert.throws(() => {
      writeFileSync(`${path}.lock`, `${process.ppid} ${processStartTime(process.ppid)}`);
      lockDecisionLog(path);
    }, /in use by another running router process/);
    // A live pid whose start time is not the recorded one (a reboot or a new container
    // reused the pid): taken over, not a false "in use".
    writeFileSync(`${path}.lock`, `${process.ppid} 1`);
    lockDecisionLog(path)();
    // A pid that is not running: taken over.
    writeFileSync(`${path}.lock`, '999999999');
    const again = lockDecisionLog(path);
    assert.equal(readFileSync(`${path}.lock`, 'utf8'), `${process.pid} ${processStartTime(process.pid)}`);
    again();
    assert.equal(existsSync(`${path}.lock`), false);
  });

  it('a lock held by a zombie (killed, not yet reaped) is taken over: a restart right after kill -9 is not refused', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'svc-lock-')), 'd.jsonl');
    // The shell's background child exits at once; the shell becomes `sleep` and never reaps it.
    const parent = spawn('sh', ['-c', 'sleep 0 & echo $!; exec sleep 10'], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      const zombie = Number((await once(parent.stdout!, 'data'))[0].toString().trim());
      const state = () => readFileSync(`/proc/${zombie}/stat`, 'utf8').split(') ')[1]![0];
      await eventually(() => state() === 'Z');
      writeFileSync(`${path}.lock`, `${zombie} ${processStartTime(zombie)}`);
      const release = lockDecisionLog(path);
      assert.equal(readFileSync(`${path}.lock`, 'utf8'), `${process.pid} ${processStartTime(process.pid)}`);
      release();
    } finally {
      parent.kill('SIGKILL');
    }
  });

  it('after a kill (marked on the log), session history cannot count what it leaves out; before it, it can', async () => {
    const a = setup(100);
    const now = Date.now();
    for (let i = 1; i <= 3; i++) {
      const x = active(i, now - 10);
      a.reg.begin({ ...x, sessionId: 's1' });
      a.reg.finish(
        { ...x, sessionId: 's1' },
        rec({ request_id: gid(i), session_id: 's1', finished_at: new Date(now - i).toISOString() }),
        now - i,
      );
    }
    assert.deepEqual((await a.reg.session('s1')).truncation, { returned: 3, omitted: 0 });
    a.log.markUnclean();
    assert.deepEqual((await a.reg.session('s1')).truncation, { returned: 3, omitted: null });
    a.log.close();
    // The mark outlives the process: a later start on the same log still knows.
    const b = setup(100, a.path);
    b.reg.restore();
    assert.equal(b.log.recordsMayBeMissing, true);
    assert.deepEqual((await b.reg.session('s1')).truncation, { returned: 3, omitted: null });
    b.log.close();
  });

  it('the journal is rewritten in place: it shrinks as requests finish, a rewrite cut short reads as its new lines, and a removed file is made again', () => {
    const now = Date.now();
    const a = setup(10);
    const journal = new InflightJournal(`${a.path}.inflight`, a.reg, undefined);
    const reqs = [1, 2, 3].map((i) => active(i, now - 1000 * i));
    for (const r of reqs) a.reg.begin(r);
    journal.write();
    const ino = statSync(journal.path).ino;
    const full = readFileSync(journal.path, 'utf8');
    assert.equal(full.trim().split('\n').length, 3);
    // Two finish: the journal names only the third, in the same file (no new file per write).
    for (const r of reqs.slice(0, 2))
      a.reg.finish(r, rec({ request_id: r.gid, started_at: new Date(r.startedAt).toISOString() }), now);
    a.log.flush();
    journal.write();
    assert.equal(statSync(journal.path).ino, ino);
    const now3 = readFileSync(journal.path, 'utf8');
    assert.deepEqual(
      now3
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).gateway_request_id),
      [gid(3)],
    );
    // A kill between the write and the cut leaves the old content's tail after the new lines
    // (request 3's older line, and lines of requests that finished since): request 3 is read
    // once, from its first line, and the finished ones are not recorded again.
    writeFileSync(journal.path, now3 + full.slice(now3.length - 7));
    const left = InflightJournal.read(journal.path);
    const ids = left.entries.map((e) => e.gateway_request_id);
    assert.equal(ids[0], gid(3));
    assert.equal(ids.filter((id) => id === gid(3)).length, 1);
    const b = setup(10, a.path);
    b.reg.restore(now);
    assert.equal(b.reg.recordInterrupted(left.entries, now), 1, 'only request 3 had no record');
    b.log.close();
    writeFileSync(journal.path, now3);
    // The file removed under the router: the next write makes it again.
    rmSync(journal.path);
    journal.write(true);
    assert.deepEqual(
      InflightJournal.read(journal.path).entries.map((e) => e.gateway_request_id),
      [gid(3)],
    );
    journal.stop();
    a.log.close();
  });

  it("a request begun before a reload keeps its configuration's hash in the journal, whichever phase it reaches after", () => {
    const now = Date.now();
    const a = setup(10);
    const identity = { routing_config_hash: 'b'.repeat(64), package_version: '1.0.0' };
    const journal = new InflightJournal(`${a.path}.inflight`, a.reg, undefined, identity);
    const before = { ...active(1, now - 1000), routingConfigHash: 'a'.repeat(64) };
    const after = { ...active(2, now - 500), routingConfigHash: 'b'.repeat(64) };
    a.reg.begin(before);
    a.reg.begin(after);
    journal.write();
    // The phase changes after the reload: the line is made again, with the hash it began under.
    a.reg.setPhase(before, 'dispatched');
    journal.write(true);
    const hashes = Object.fromEntries(
      InflightJournal.read(journal.path).entries.map((e) => [e.gateway_request_id, [e.phase, e.routing_config_hash]]),
    );
    assert.deepEqual(hashes, {
      [gid(1)]: ['dispatched', 'a'.repeat(64)],
      [gid(2)]: ['checking', 'b'.repeat(64)],
    });
    journal.stop();
    a.log.close();
  });

  it('a journal line with a timestamp outside the contract grammar is skipped, never fatal', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-journal-'));
    const path = join(dir, 'd.jsonl.inflight');
    const ok = {
      gateway_request_id: gid(7),
      request_id: gid(7),
      model: 'm',
      route: 'chat.completions',
      started_at: '2026-11-26T06:08:00.000Z',
      phase: 'streaming',
    };
    writeFileSync(
      path,
      [
        JSON.stringify({ ...ok, started_at: '2026-11-26T06:08:00Z' }),
        JSON.stringify({ ...ok, model: '-bad' }),
        JSON.stringify(ok),
      ].join('\n'),
    );
    assert.deepEqual(
      InflightJournal.read(path).entries.map((e) => e.gateway_request_id),
      [gid(7)],
    );
  });
});
