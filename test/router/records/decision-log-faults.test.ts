import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs, { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, rmdirSync, statSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DecisionLog } from '../../../src/router/records/decision-log.js';
import { scanDecisionFiles } from '../../../src/router/records/decision-lines.js';
import { gid, rec } from '../../support/terminal-records.js';

/** Gateway ids in the file, oldest first (torn lines skipped as a lookup would). */
function idsIn(path: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    try {
      out.push((JSON.parse(line) as { gateway_request_id: string }).gateway_request_id);
    } catch {
      // torn or empty
    }
  }
  return out;
}

/** The log's file descriptor, swapped (fault injection: a disk that refuses writes). */
function swapFd(log: DecisionLog, fd: number): number {
  const inner = log as unknown as { fd: number };
  const before = inner.fd;
  inner.fd = fd;
  return before;
}

describe('decision log faults: nothing recorded is lost while the disk can take it, and a loss is never hidden', () => {
  const dir = () => mkdtempSync(join(tmpdir(), 'svc-dlog-fault-'));

  it('records whose write failed stay queued and are written once, in order, when writes work again', () => {
    const path = join(dir(), 'd.jsonl');
    const errors: Array<[string, number]> = [];
    const log = new DecisionLog(path, 1 << 20, 2, (err, n) => errors.push([(err as { code?: string }).code ?? '', n]));
    log.open();
    log.append(gid(1), rec({ request_id: gid(1) }));
    log.flush();
    // The disk refuses writes (a read-only descriptor on the same file stands in for it).
    const good = swapFd(log, openSync(path, 'r'));
    for (let i = 2; i <= 4; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    assert.throws(() => log.flush());
    log.flushQuietly();
    log.flushQuietly();
    assert.equal(errors.length, 1, 'reported once, not once per try');
    assert.deepEqual(errors[0], ['EBADF', 3]);
    assert.deepEqual(idsIn(path), [gid(1)]);
    swapFd(log, good);
    log.append(gid(5), rec({ request_id: gid(5) }));
    log.flush();
    assert.deepEqual(idsIn(path), [1, 2, 3, 4, 5].map(gid), 'each record once, in order');
    log.close();
  });

  it("a write cut short just before a line's newline does not write that record twice", () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 2, () => undefined);
    log.open();
    log.append(gid(1), rec({ request_id: gid(1) }));
    log.append(gid(2), rec({ request_id: gid(2) }));
    const line1 = Buffer.byteLength(JSON.stringify({ ...rec({ request_id: gid(1) }), gateway_request_id: gid(1) }));
    const real = fs.writeSync;
    // The disk takes the first record's JSON, not its newline, then is full.
    let calls = 0;
    (fs as { writeSync: unknown }).writeSync = (fd: number, buf: Buffer, off: number) => {
      if (calls++ === 0) return real(fd, buf, off, line1 - off);
      throw Object.assign(new Error('no space'), { code: 'ENOSPC' });
    };
    syncBuiltinESMExports();
    try {
      assert.throws(() => log.flush());
    } finally {
      (fs as { writeSync: unknown }).writeSync = real;
      syncBuiltinESMExports();
    }
    log.flush();
    assert.deepEqual(idsIn(path), [gid(1), gid(2)], 'each record once');
    log.close();
  });

  it('while a write keeps failing, lookups do not retry it on every call (the retry waits its turn)', () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 2, () => undefined);
    log.open();
    swapFd(log, openSync(path, 'r'));
    for (let i = 1; i <= 100; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flushQuietly();
    const real = fs.writeSync;
    let tries = 0;
    (fs as { writeSync: unknown }).writeSync = (...a: Parameters<typeof real>) => {
      tries++;
      return real(...a);
    };
    syncBuiltinESMExports();
    try {
      for (let i = 0; i < 50; i++) scanDecisionFiles(log.retainedFiles(), () => undefined);
    } finally {
      (fs as { writeSync: unknown }).writeSync = real;
      syncBuiltinESMExports();
    }
    assert.equal(tries, 0, 'no write attempted by the 50 reads');
  });

  it('records that could never be written mark the log at close: a later history cannot claim to be complete', () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 2, () => undefined);
    log.open();
    swapFd(log, openSync(path, 'r'));
    log.append(gid(1), rec({ request_id: gid(1) }));
    log.close();
    assert.equal(existsSync(`${path}.unclean`), true);
    const again = new DecisionLog(path, 1 << 20, 2);
    again.open();
    assert.equal(again.recordsMayBeMissing, true);
    again.close();
  });

  it('a file removed under the router is made again (its folder too) and the loss is marked', () => {
    const folder = join(dir(), 'logs');
    const path = join(folder, 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 2);
    log.open();
    log.append(gid(1), rec({ request_id: gid(1) }));
    log.flush();
    rmSync(path);
    log.append(gid(2), rec({ request_id: gid(2) }));
    log.flush();
    assert.deepEqual(idsIn(path), [gid(2)], 'written to the path, not to the removed file');
    assert.equal(log.recordsMayBeMissing, true);
    rmSync(folder, { recursive: true });
    log.append(gid(3), rec({ request_id: gid(3) }));
    log.flush();
    assert.deepEqual(idsIn(path), [gid(3)]);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(existsSync(`${path}.unclean`), true);
    log.close();
  });

  it('a rotation that cannot rename keeps every record in the current file, past its bound, and resumes later', () => {
    const path = join(dir(), 'd.jsonl');
    const line = JSON.stringify({ ...rec(), gateway_request_id: gid(0) }).length + 1;
    const errors: unknown[] = [];
    const log = new DecisionLog(path, line * 2, 2, (err) => errors.push(err));
    log.open();
    // Something in the way of the rename (a read-only folder behaves alike for a non-root user).
    mkdirSync(`${path}.1`);
    mkdirSync(join(`${path}.1`, 'x'));
    for (let i = 1; i <= 6; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flush();
    assert.deepEqual(idsIn(path), [1, 2, 3, 4, 5, 6].map(gid));
    assert.equal(errors.length, 1);
    rmdirSync(join(`${path}.1`, 'x'));
    rmdirSync(`${path}.1`);
    log.close();
  });

  it('past the retry bound the oldest queued records are dropped, and the log says records may be missing', () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 1 << 30, 2, () => undefined);
    log.open();
    const good = swapFd(log, openSync(path, 'r'));
    for (let i = 1; i <= 20_001; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flushQuietly();
    assert.equal(log.recordsMayBeMissing, true);
    swapFd(log, good);
    log.flush();
    const ids = idsIn(path);
    assert.equal(ids.length, 20_000);
    assert.equal(ids[0], gid(2), 'the oldest was dropped');
    log.close();
  });
});
