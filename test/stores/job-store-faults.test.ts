import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { JobService } from '../../src/jobs/job-service.js';
import type { JobStore } from '../../src/stores/job-store.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { eventually } from '../support/processes.js';

/** A disk that fills up under a running job: what SQLite throws then. */
function diskFull(): never {
  throw Object.assign(new Error('disk I/O error'), { name: 'SqliteError', code: 'SQLITE_IOERR_WRITE' });
}

describe('job store faults', () => {
  let sim: EngineSim;
  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 20,
      tokenDelayMs: 5,
      tokens: 4,
      model: 'm',
      maxModelLen: 8192,
    });
  });
  after(() => sim.close());

  it('a job whose store can no longer be written is stopped and logged once, its end answered at once and written when the store heals', async () => {
    const lines: string[] = [];
    const logger = pino(
      { ...LOG_OPTIONS, level: 'info' },
      new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    );
    const stateDir = mkdtempSync(join(tmpdir(), 'svc-state-'));
    const jobs = new JobService(stateDir, { url: sim.url, key: 'k' }, logger);
    const plan = jobs.plan({
      name: 'benchmark.start',
      params: { alias: 'm', requests: 100_000, concurrency: 2, prompt_tokens: 8, max_tokens: 4 },
    });
    const { job_id: jobId } = jobs.apply(plan.confirmation_token);
    assert.ok(jobId);
    await eventually(() => (jobs.status(jobId).progress.completed ?? 0) > 0, 10_000);
    // The disk fills: every write of the job store fails from now on (progress and heartbeat).
    const stores = (jobs as unknown as { stores: Record<string, JobStore> }).stores;
    stores['benchmark']!.update = diskFull;
    stores['benchmark']!.heartbeat = diskFull;
    // The runner stops sending load: the engine's request count stops growing. (Once the job
    // has ended: between two requests no connection is open while a live runner goes on.)
    await eventually(() => jobs.status(jobId).state === 'failed', 10_000);
    await eventually(() => sim.stats().open === 0, 10_000);
    const sent = sim.stats().requests;
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(sim.stats().requests, sent, 'no load is sent for a job nobody can follow');
    // Its stored record keeps the last state written (running: a reader sees its heartbeat
    // age), but the lifecycle status says how it ended: a follower (`bench run`) is not left
    // waiting on a job that will never move again.
    const store = stores['benchmark']!;
    assert.equal(store.get(jobId)!.native_state, 'running');
    assert.deepEqual([jobs.status(jobId).state, jobs.status(jobId).outcome], ['failed', 'error']);
    const failures = lines.filter((l) => l.includes('job store cannot be written'));
    assert.equal(failures.length, 1, 'one line per 10 s, not one per write');
    assert.match(failures[0]!, /SQLITE_IOERR_WRITE/);
    // The disk has room again: the end state is written, and the record stops showing it running.
    delete (store as { update?: unknown }).update;
    delete (store as { heartbeat?: unknown }).heartbeat;
    await eventually(() => store.get(jobId)!.native_state === 'failed', 5_000);
    assert.equal(store.get(jobId)!.outcome, 'error');
    await jobs.close();
  });

  it('an apply the full store refuses (503) ends its operation failed, written when the store heals; never left active', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'svc-state-'));
    const jobs = new JobService(stateDir, { url: sim.url, key: 'k' }, pino({ level: 'silent' }));
    const stores = (jobs as unknown as { stores: Record<string, JobStore> }).stores;
    const ops = stores['controller']!;
    for (const failAt of ['preparing', 'job']) {
      const plan = jobs.plan({
        name: 'benchmark.start',
        params: { alias: 'm', requests: 5, concurrency: 1, prompt_tokens: 8, max_tokens: 4 },
      });
      // The disk fills between plan and apply: the operation's first write fails, or the job's insert.
      if (failAt === 'preparing') ops.update = diskFull;
      else stores['benchmark']!.insert = diskFull;
      assert.throws(() => jobs.apply(plan.confirmation_token), /disk I\/O error/);
      assert.deepEqual(
        [jobs.status(plan.operation_id).state, jobs.status(plan.operation_id).outcome],
        ['failed', 'error'],
        failAt,
      );
      delete (ops as { update?: unknown }).update;
      delete (stores['benchmark'] as { insert?: unknown }).insert;
      await eventually(() => ops.get(plan.operation_id)!.native_state === 'failed', 5_000);
      assert.equal(ops.get(plan.operation_id)!.outcome, 'error');
    }
    await jobs.close();
  });

  it("a job stopped by a store failure that then heals ends failed, never as a user's cancel", async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'svc-state-'));
    const jobs = new JobService(stateDir, { url: sim.url, key: 'k' }, pino({ level: 'silent' }));
    const plan = jobs.plan({
      name: 'benchmark.start',
      params: { alias: 'm', requests: 100_000, concurrency: 2, prompt_tokens: 8, max_tokens: 4 },
    });
    const { job_id: jobId } = jobs.apply(plan.confirmation_token);
    assert.ok(jobId);
    await eventually(() => (jobs.status(jobId).progress.completed ?? 0) > 0, 10_000);
    const store = (jobs as unknown as { stores: Record<string, JobStore> }).stores['benchmark']!;
    const update = store.update.bind(store);
    let failures = 1;
    // One write fails (a moment of a full disk), the next ones work again.
    store.update = (...a: Parameters<JobStore['update']>) => (failures-- > 0 ? diskFull() : update(...a));
    const ended = await eventually(() => {
      const st = jobs.status(jobId);
      return st.state !== 'running' ? st : undefined;
    }, 10_000);
    assert.deepEqual([ended.state, ended.outcome], ['failed', 'error']);
    await jobs.close();
  });
});
