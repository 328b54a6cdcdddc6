import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mapJob, type JobOwner } from '../../src/actors/job-mapping.js';
import { recordRuleViolation } from '../../src/schema/record.js';
import type { JobRow } from '../../src/stores/job-store.js';

const T = Date.parse('2026-11-25T12:00:00.000Z');
const row = (native: string, over: Partial<JobRow> = {}): JobRow => ({
  id: 'bench_0123456789abcdef01234567',
  kind: 'benchmark',
  native_state: native,
  outcome: null,
  progress_completed: 3,
  progress_total: 10,
  created_at: T,
  updated_at: T + 1000,
  heartbeat_at: T + 5000,
  summary: null,
  ...over,
});

describe('job mapping: native store states -> canonical records', () => {
  const table: [string, string, string, string | undefined][] = [
    ['queued', 'queued', 'queued', undefined],
    ['awaiting_approval', 'queued', 'awaiting-approval', undefined],
    ['preparing', 'running', 'preparing', undefined],
    ['submitting', 'running', 'submitting', undefined],
    ['running', 'running', 'running', undefined],
    ['succeeded', 'terminal', 'completed', 'success'],
    ['failed', 'terminal', 'failed', 'error'],
    ['cancelled', 'terminal', 'cancelled', 'cancelled'],
    ['expired', 'terminal', 'cancelled', 'timeout'],
    ['interrupted', 'terminal', 'failed', 'unknown'],
  ];
  for (const owner of ['controller', 'benchmark', 'media'] as JobOwner[]) {
    for (const [native, state, phase, outcome] of table) {
      it(`${owner}: ${native} -> ${state}/${phase}${outcome ? `/${outcome}` : ''}`, () => {
        const r = mapJob(owner, 'node-a', row(native));
        assert.equal(r.state, state);
        assert.equal(r.phase, phase);
        assert.equal(r.outcome, outcome);
        assert.equal(recordRuleViolation(r), null);
        assert.equal(r.owner, owner);
        assert.equal(r.progress?.unit, { controller: 'steps', benchmark: 'requests', media: 'items' }[owner]);
      });
    }
  }
  it('an unknown native state is unsupported and its raw value never appears', () => {
    const r = mapJob('media', 'node-a', row('RAW-STATE-CANARY'));
    assert.equal(r.state, 'unsupported');
    assert.equal(r.outcome, 'unknown');
    assert.equal(recordRuleViolation(r), null);
    assert.ok(!JSON.stringify(r).includes('CANARY'));
  });
  it('active jobs carry the heartbeat as evidence; terminal ones their last update', () => {
    assert.equal(mapJob('benchmark', 'h', row('running')).source_timestamp, new Date(T + 5000).toISOString());
    assert.equal(mapJob('benchmark', 'h', row('succeeded')).source_timestamp, new Date(T + 1000).toISOString());
  });
  it('a failure keeps a fixed outcome the runner stored, and ignores anything else', () => {
    assert.equal(mapJob('media', 'h', row('failed', { outcome: 'timeout' })).outcome, 'timeout');
    assert.equal(mapJob('media', 'h', row('failed', { outcome: 'weird' })).outcome, 'error');
  });
  it('progress beyond its total drops the total instead of lying', () => {
    const r = mapJob('media', 'h', row('running', { progress_completed: 12, progress_total: 10 }));
    assert.deepEqual(r.progress, { completed: 12, total: null, unit: 'items' });
  });
});
