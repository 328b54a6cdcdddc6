import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatTimestamp, isHostId, parseTimestamp } from '../../src/schema/primitives.js';
import { recordId } from '../../src/schema/record-id.js';
import { canonicalRecord, isValidRecord, recordRuleViolation } from '../../src/schema/record.js';
import { done, rec } from '../support/records.js';

describe('record id', () => {
  it('is wl_ + 32 hex, deterministic, and separates its inputs', () => {
    const a = recordId('node-a', 'router', 'router-request', 'x');
    assert.match(a, /^wl_[0-9a-f]{32}$/);
    assert.equal(a, recordId('node-a', 'router', 'router-request', 'x'));
    assert.notEqual(a, recordId('node-b', 'router', 'router-request', 'x'));
    // The NUL separator keeps "ab"+"c" apart from "a"+"bc".
    assert.notEqual(
      recordId('node-a', 'router', 'router-request', 'ab'),
      recordId('node-a', 'router', 'router-request', 'a\0b'),
    );
  });
  it('matches the contract digest', async () => {
    const { createHash } = await import('node:crypto');
    const want = 'wl_' + createHash('sha256').update('h\0media\0media-job\0j1').digest('hex').slice(0, 32);
    assert.equal(recordId('h', 'media', 'media-job', 'j1'), want);
  });
});

describe('host id grammar', () => {
  for (const ok of ['a', 'node-a', 'N_1', 'a'.repeat(64)])
    it(`accepts ${ok.slice(0, 10)}`, () => assert.ok(isHostId(ok)));
  for (const bad of ['', '1a', '-a', 'a.b', 'a b', 'a'.repeat(65), 'nöde', 'a\n'])
    it(`rejects ${JSON.stringify(bad).slice(0, 12)}`, () => assert.ok(!isHostId(bad)));
});

describe('timestamps', () => {
  it('parses only RFC 3339 UTC with milliseconds', () => {
    assert.equal(parseTimestamp('2026-11-25T21:49:10.123Z'), Date.parse('2026-11-25T21:49:10.123Z'));
    for (const bad of ['2026-11-25T21:49:10Z', '2026-11-25T21:49:10.123+00:00', '2026-02-30T00:00:00.000Z', 'x']) {
      assert.ok(Number.isNaN(parseTimestamp(bad)), bad);
    }
  });

  it('formats exactly as Date#toISOString does, within a second, across seconds and at the edges', () => {
    const at = Date.parse('2026-11-25T21:49:59.990Z');
    // Within one second (the cached prefix), across a second, a minute and a day boundary.
    const cases = [at, at + 5, at + 9.7, at + 10, at + 109, at + 1_000, 0, 1, 999, 1_000, 86_399_999, 86_400_000];
    cases.push(
      Date.parse('2026-12-31T23:59:59.999Z'),
      Date.parse('2027-01-01T00:00:00.000Z'),
      253_402_300_799_999,
      253_402_300_800_000,
      -1,
      -1_500,
    );
    for (const ms of cases) assert.equal(formatTimestamp(ms), new Date(ms).toISOString(), String(ms));
    // Out of a Date's range: the same RangeError.
    assert.throws(() => formatTimestamp(Number.NaN), RangeError);
    for (let i = 0; i < 2_000; i++) {
      const ms = at + i * 7.3;
      assert.equal(formatTimestamp(ms), new Date(ms).toISOString(), String(ms));
    }
  });
});

describe('record rules', () => {
  it('a well-formed running job and a terminal one are valid', () => {
    assert.ok(isValidRecord(rec('h', 'benchmark', 'j')));
    assert.ok(isValidRecord(done('h', 'media', 'j', Date.now())));
  });
  const cases: [string, Record<string, unknown>, string][] = [
    ['owner/kind pairing', { kind: 'media-job' }, 'owner-kind'],
    ['outcome on an active record', { outcome: 'success' }, 'outcome-presence'],
    ['terminal without outcome', { state: 'terminal', phase: 'completed' }, 'outcome-presence'],
    ['phase outside its state', { phase: 'completed' }, 'state-phase'],
    ['authority of another owner', { source_authority: 'media-store' }, 'owner-authority'],
    ['completed beyond total', { progress: { completed: 5, total: 3, unit: 'items' } }, 'progress-bounds'],
  ];
  for (const [name, over, rule] of cases) {
    it(`rejects ${name}`, () => {
      const r = { ...rec('h', 'benchmark', 'j'), ...over } as never;
      assert.equal(recordRuleViolation(r), rule);
      assert.ok(!isValidRecord(r));
    });
  }
  it('recipe records never claim healthy-identity', () => {
    const r = rec('h', 'recipe', 'r', { state: 'running', phase: 'running', observation_quality: 'healthy-identity' });
    assert.equal(recordRuleViolation(r), 'quality-ceiling');
  });
  it('configured and absent records carry no outcome; unavailable and unsupported do', () => {
    assert.equal(
      recordRuleViolation(rec('h', 'recipe', 'r', { state: 'absent', phase: 'absent', observation_quality: 'absent' })),
      null,
    );
    assert.equal(
      recordRuleViolation(rec('h', 'recipe', 'r', { state: 'unsupported', phase: 'unsupported' })),
      'outcome-presence',
    );
    assert.equal(
      recordRuleViolation(rec('h', 'recipe', 'r', { state: 'unsupported', phase: 'unsupported', outcome: 'unknown' })),
      null,
    );
  });
  it('rejects extra members and JSON null outcome', () => {
    assert.ok(!isValidRecord({ ...rec('h', 'media', 'j'), prompt: 'x' }));
    assert.ok(!isValidRecord({ ...rec('h', 'media', 'j'), outcome: null }));
  });
  it('canonical order is the contract order', () => {
    const r = rec('h', 'media', 'j', { progress: { completed: 1, total: null, unit: 'items' } });
    const shuffled = Object.fromEntries(Object.entries(r).reverse()) as typeof r;
    assert.deepEqual(Object.keys(canonicalRecord(shuffled)), [
      'schema',
      'id',
      'host',
      'owner',
      'kind',
      'state',
      'phase',
      'progress',
      'source_authority',
      'observation_quality',
      'created_at',
      'updated_at',
      'source_timestamp',
    ]);
  });
});
