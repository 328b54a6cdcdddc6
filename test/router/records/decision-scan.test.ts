import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  parseDecision,
  scanDecisionFiles,
  scanDecisionFilesAsync,
  type Decision,
} from '../../../src/router/records/decision-lines.js';
import { gid, rec } from '../../support/terminal-records.js';

/** A decision-log line as the router writes it. */
const line = (n: number, session: string): string =>
  JSON.stringify({ gateway_request_id: gid(n), ...rec({ request_id: gid(n), session_id: session }) });

/** What a plain read of the whole text finds, newest first (the reference the scanner must match). */
function naive(texts: readonly string[], needle?: string): (string | undefined)[] {
  const out: (string | undefined)[] = [];
  for (const text of texts) {
    for (const l of text.split('\n').reverse()) {
      if (needle !== undefined && !l.includes(needle)) continue;
      const d = parseDecision(l);
      if (d) out.push(d.gid);
    }
  }
  return out;
}

function scan(files: string[], budget: number, needle?: string): { gids: (string | undefined)[]; truncated: boolean } {
  const gids: (string | undefined)[] = [];
  const { truncated } = scanDecisionFiles(files, (d: Decision) => void gids.push(d.gid), { budget, needle });
  return { gids, truncated };
}

describe('scanning the decision log backwards', () => {
  // About 3.5 MiB a file: lines fall across the 1 MiB blocks the scanner reads.
  const dir = mkdtempSync(join(tmpdir(), 'svc-dscan-'));
  const lines = Array.from({ length: 12_000 }, (_, i) => line(i + 1, `s${i % 7}`));
  const newer = `${lines.slice(6_000).join('\n')}\n{"torn":`;
  const older = `${lines.slice(0, 6_000).join('\n')}\n`;
  const files = [join(dir, 'd.jsonl'), join(dir, 'd.jsonl.1')];
  writeFileSync(files[0]!, newer);
  writeFileSync(files[1]!, older);

  it('finds every decision, newest first, across block and file boundaries; a torn line is skipped', () => {
    const r = scan(files, 64 << 20);
    assert.equal(r.truncated, false);
    assert.equal(r.gids.length, 12_000);
    assert.deepEqual(r.gids, naive([newer, older]));
  });

  it('with a needle, exactly the decisions whose lines hold it, in the same order', () => {
    for (const needle of ['"session_id":"s3"', 's5', gid(1), gid(12_000), gid(7_777), 'no-such-text']) {
      assert.deepEqual(scan(files, 64 << 20, needle).gids, naive([newer, older], needle), needle);
    }
  });

  it('stops at the budget: the newest bytes only, the line it cuts skipped, truncated said', () => {
    const budget = Buffer.byteLength(newer) + 1_000_000;
    const r = scan(files, budget);
    assert.equal(r.truncated, true);
    const olderTail = older.slice(older.length - 1_000_000);
    assert.deepEqual(r.gids, naive([newer, olderTail]));
    assert.ok(r.gids.length > 6_000 && r.gids.length < 12_000);
  });

  it("the lookups' scan hands the thread back after each block it reads, and finds the same", async () => {
    let turns = 0;
    let ticking = true;
    const tick = (): void => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const gids: (string | undefined)[] = [];
    const r = await scanDecisionFilesAsync(files, (d) => void gids.push(d.gid), { needle: '"session_id":"s3"' });
    ticking = false;
    assert.equal(r.truncated, false);
    assert.deepEqual(gids, naive([newer, older], '"session_id":"s3"'));
    // About 7 MiB in 1 MiB blocks: other work ran between them.
    assert.ok(turns >= 6, `${turns} turns of the event loop during the scan`);
  });

  it('a rotation while the scan is paused (renames, a new current file) changes nothing it reads', async () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-dscan-rot-'));
    const [cur, one, two] = ['d.jsonl', 'd.jsonl.1', 'd.jsonl.2'].map((f) => join(d, f)) as [string, string, string];
    writeFileSync(cur, newer);
    writeFileSync(one, older);
    let rotated = false;
    setImmediate(() => {
      // The writer rotates: current -> .1 -> .2, and a new current file.
      renameSync(one, two);
      renameSync(cur, one);
      writeFileSync(cur, `${line(99_999, 's0')}\n`);
      rotated = true;
    });
    const gids: (string | undefined)[] = [];
    const r = await scanDecisionFilesAsync([cur, one], (x) => void gids.push(x.gid));
    assert.ok(rotated, 'the rotation happened during the scan');
    assert.equal(r.truncated, false);
    assert.deepEqual(gids, naive([newer, older]), 'each record once: none read twice, none missed');
  });

  it('a line longer than a block is skipped, not gathered without bound; the lines around it are read', () => {
    const path = join(dir, 'long.jsonl');
    writeFileSync(path, `${line(1, 'a')}\n${'x'.repeat(3 << 20)}\n${line(2, 'a')}\n`);
    assert.deepEqual(scan([path], 64 << 20).gids, [gid(2), gid(1)]);
    assert.deepEqual(scan([path], 64 << 20, '"a"').gids, [gid(2), gid(1)]);
  });
});
