import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createJobActor } from '../../src/actors/job-actor.js';
import type { ObservationBatch } from '../../src/schema/envelopes.js';
import { JobStore } from '../../src/stores/job-store.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { eventually } from '../support/processes.js';

/** A started benchmark actor of node-a over the store at `path`, the batches it published, and its end. */
function running(path: string) {
  const bus = new InProcessBus();
  const batches: ObservationBatch[] = [];
  const sub = bus
    .subscribe('svc.v1.node-a.obs.benchmark')
    .subscribe((m) => batches.push(JSON.parse(new TextDecoder().decode(m.data)) as ObservationBatch));
  const actor = createJobActor({ host: 'node-a', owner: 'benchmark', storePath: path, bus, staleAfterMs: 30_000 });
  actor.start();
  return {
    batches,
    actor,
    async end() {
      actor.stop();
      actor.closeStore();
      sub.unsubscribe();
      await bus.close();
    },
  };
}

describe('job actor', () => {
  it('rows no record can carry (a count past the contract, a time past any timestamp) are left out; the rest stay, the source partial (malformed, count unknown)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-jobactor-'));
    const path = join(dir, 'benchmark.db');
    const store = JobStore.openForOwner(path);
    const t = Date.now();
    const row = (id: string, over: Record<string, number>) => ({
      id: `bench_${id}`,
      kind: 'benchmark',
      native_state: 'running',
      outcome: null,
      progress_completed: 1,
      progress_total: 10,
      created_at: t,
      updated_at: t,
      heartbeat_at: t,
      summary: null,
      ...over,
    });
    store.insert(row('0123456789abcdef01234567', {}));
    store.insert(
      row('1123456789abcdef01234567', { progress_completed: 1_000_000_000_001, progress_total: 2_000_000_000_000 }),
    );
    // A time no timestamp can say, written behind the store's back (an edited file).
    store.insert(row('2123456789abcdef01234567', {}));
    const raw = new Database(path);
    raw
      .prepare('update jobs set created_at = ?, updated_at = ? where id = ?')
      .run(1e20, 1e20, 'bench_2123456789abcdef01234567');
    raw.close();
    const { batches, end } = running(path);
    try {
      const b = await eventually(() => batches.find((x) => x.full), 5_000);
      assert.equal(b.status, 'partial');
      assert.equal(b.reason, 'malformed');
      assert.equal(b.omitted, null);
      // The runaway count leaves progress unknown; the record itself stays.
      assert.equal(b.upserts.length, 2);
      const big = b.upserts.find((r) => r.progress === undefined);
      assert.ok(big, 'the record with a count past the contract is kept without progress');
      assert.deepEqual(b.upserts.find((r) => r.progress !== undefined)?.progress, {
        completed: 1,
        total: 10,
        unit: 'requests',
      });
    } finally {
      store.close();
      await end();
    }
  });

  it('a store removed under the controller (its state_dir deleted) makes the source unavailable, not current', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-jobactor-'));
    const path = join(dir, 'benchmark.db');
    const store = JobStore.openForOwner(path);
    const t = Date.now();
    store.insert({
      id: 'bench_0123456789abcdef01234567',
      kind: 'benchmark',
      native_state: 'running',
      outcome: null,
      progress_completed: 1,
      progress_total: 10,
      created_at: t,
      updated_at: t,
      heartbeat_at: t,
      summary: null,
    });
    const { batches, actor, end } = running(path);
    try {
      await eventually(() => batches.some((b) => b.status === 'complete' && b.upserts.length === 1), 5_000);
      rmSync(dir, { recursive: true, force: true });
      actor.notify();
      const last = await eventually(() => batches.find((b) => b.status === 'unavailable'), 5_000);
      assert.equal(last.reason, 'inspection-error');
    } finally {
      store.close();
      await end();
    }
  });
});
