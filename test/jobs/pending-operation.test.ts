import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { JobService } from '../../src/jobs/job-service.js';
import { MAX_PENDING_PLANS } from '../../src/jobs/pending-plans.js';
import { UnavailableError } from '../../src/errors.js';
import { JobStore } from '../../src/stores/job-store.js';
import { mapJob } from '../../src/actors/job-mapping.js';
import { parseTimestamp } from '../../src/schema/primitives.js';
import { eventually } from '../support/processes.js';

describe('an operation awaiting approval', () => {
  it('reads as live while this controller holds it: its evidence time keeps up, and stops when the controller closes', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'svc-pending-'));
    // A benchmark is planned against a router that is never called: it is never applied.
    const jobs = new JobService(stateDir, { url: 'http://127.0.0.1:9', key: 'k' }, pino({ level: 'silent' }));
    const plan = jobs.plan({
      name: 'benchmark.start',
      params: { alias: 'm', requests: 10, concurrency: 1, prompt_tokens: 8, max_tokens: 4 },
    });
    const store = jobs.stores.controller;
    const created = store.get(plan.operation_id)!.created_at;
    // More than two beats later, the record's source time is recent, not its creation time:
    // a reader judging freshness by source age (30 s by default, seconds in tests) sees it live.
    await eventually(() => store.get(plan.operation_id)!.heartbeat_at >= created + 2_000, 5_000);
    const rec = mapJob('controller', 'h', store.get(plan.operation_id)!);
    assert.deepEqual([rec.state, rec.phase], ['queued', 'awaiting-approval']);
    assert.ok(
      parseTimestamp(rec.source_timestamp) >= created + 2_000,
      `source_timestamp ${rec.source_timestamp} keeps up with the beat`,
    );
    assert.equal(rec.updated_at, rec.created_at, 'a beat is evidence, not a change of the record');
    await jobs.close();
    // Closed: nobody holds it any more, so its evidence ages (a restart marks it expired).
    const reader = JobStore.openReadOnly(jobs.paths.controller);
    const beat = reader.get(plan.operation_id)!.heartbeat_at;
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(reader.get(plan.operation_id)!.heartbeat_at, beat, 'no beat after the controller closed');
    reader.close();
  });

  it('at most MAX_PENDING_PLANS wait at once (the next plan is 503, unavailable), and all of them are beaten each second', async () => {
    const jobs = new JobService(
      mkdtempSync(join(tmpdir(), 'svc-pending-')),
      { url: 'http://127.0.0.1:9', key: 'k' },
      pino({ level: 'silent' }),
    );
    const command = {
      name: 'benchmark.start' as const,
      params: { alias: 'm', requests: 10, concurrency: 1, prompt_tokens: 8, max_tokens: 4 },
    };
    const ids = Array.from({ length: MAX_PENDING_PLANS }, () => jobs.plan(command).operation_id);
    assert.throws(() => jobs.plan(command), UnavailableError);
    const store = jobs.stores.controller;
    await eventually(
      () =>
        ids.every((id) => {
          const row = store.get(id)!;
          return row.heartbeat_at > row.created_at;
        }),
      5_000,
    );
    await jobs.close();
  });
});
