import { beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { Owner } from '../../src/schema/enums.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { foldNode, type FoldEvent } from '../../src/streams/fold-node.js';
import { createNodeSnapshot, type NodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, enc, rec, resetSeqs } from '../support/records.js';

const H = 'node-a';
const STALE = 30_000;
const IMPOSSIBLE = [
  '2026-02-30T00:00:00.000Z',
  '2026-11-25T24:00:00.000Z',
  '2026-11-25T12:60:00.000Z',
  '2026-11-25T12:00:60.000Z',
  '2026-04-31T00:00:00.000Z',
  '2025-02-29T00:00:00.000Z',
];
const q = (s: NodeSnapshot, now: number) =>
  queryNode(s, resolveFilters({}), now, { staleAfterMs: STALE, owners: CONTROLLER_OWNERS });
const src = (s: NodeSnapshot, now: number, owner: string) => q(s, now).sources.find((x) => x.owner === owner)!;
const msg = (b: unknown, owner = 'media'): FoldEvent => ({
  type: 'message',
  subject: `svc.v1.${H}.obs.${owner}`,
  data: enc(b),
});

describe('node fold: a date that names no instant', () => {
  let s: NodeSnapshot;
  beforeEach(() => {
    resetSeqs();
    s = createNodeSnapshot(H);
  });

  it('a batch dated 2026-02-30 is dropped as malformed and never makes its source fresh (it is unavailable after ten thresholds, as with silence)', () => {
    s = foldNode(s, msg(batch(H, 'media', { at: T0, upserts: [rec(H, 'media', 'j', { at: T0 })] })), T0);
    for (const [i, when] of IMPOSSIBLE.entries()) {
      s = foldNode(
        s,
        msg({ ...batch(H, 'media', { at: T0 + 1000 * (i + 1) }), source_timestamp: when }),
        T0 + 1000 * (i + 1),
      );
    }
    assert.equal(s.dropped.malformed, IMPOSSIBLE.length);
    assert.equal(src(s, T0 + STALE, 'media').status, 'complete');
    assert.equal(src(s, T0 + STALE + 1, 'media').status, 'partial', 'stale by its last real observation');
    const late = src(s, T0 + 10 * STALE + 1, 'media');
    assert.equal(late.status, 'unavailable');
    assert.equal(late.reason, 'timeout');
    assert.equal(late.truncation.omitted, null);
  });

  it('the order guard still holds after an impossible date: an older batch is refused, a later real one folded', () => {
    s = foldNode(s, msg(batch(H, 'media', { seq: 1, at: T0 })), T0);
    s = foldNode(s, msg({ ...batch(H, 'media', { seq: 2 }), source_timestamp: '2026-02-30T00:00:00.000Z' }), T0);
    s = foldNode(s, msg(batch(H, 'media', { seq: 3, full: false, at: T0 - 5000 })), T0);
    assert.equal(s.dropped.out_of_order, 1, 'a batch older than the last real one is still out of order');
    s = foldNode(
      s,
      msg(batch(H, 'media', { seq: 4, at: T0 + 1000, upserts: [rec(H, 'media', 'k', { at: T0 + 1000 })] })),
      T0 + 1000,
    );
    assert.equal(src(s, T0 + 1000, 'media').records.length, 1);
  });

  it('a record with an impossible date drops its whole batch (nothing of it is folded)', () => {
    const good = rec(H, 'media', 'good', { at: T0 });
    for (const member of ['created_at', 'updated_at', 'source_timestamp'] as const) {
      const bad = { ...rec(H, 'media', `bad-${member}`, { at: T0 }), [member]: '2026-02-30T00:00:00.000Z' };
      s = foldNode(s, msg(batch(H, 'media', { at: T0, upserts: [good, bad] })), T0);
    }
    assert.equal(s.dropped.malformed, 3);
    assert.equal(src(s, T0, 'media').status, 'unavailable');
  });

  it('a batch handed over in process (no decode) with an impossible date is dropped and counted too', () => {
    s = foldNode(
      s,
      { type: 'batch', batch: { ...batch(H, 'router', { at: T0 }), source_timestamp: '2026-02-30T00:00:00.000Z' } },
      T0,
    );
    const bad = { ...rec(H, 'router', 'r', { at: T0 }), updated_at: '2026-11-25T24:00:00.000Z' };
    s = foldNode(s, { type: 'batch', batch: batch(H, 'router', { at: T0, upserts: [bad] }) }, T0);
    assert.equal(s.dropped.malformed, 2);
    assert.equal(src(s, T0, 'router').status, 'unavailable');
    assert.equal(src(s, T0, 'router').reason, 'no-observation');
  });

  it('whatever dates batches carry, no NaN ever reaches a freshness or order comparison: every number the fold keeps is a real instant', () => {
    const owners: Owner[] = ['media', 'benchmark', 'router'];
    const dateArb = fc.oneof(
      fc.integer({ min: -120_000, max: 120_000 }).map((d) => formatTimestamp(T0 + d)),
      fc.constantFrom(...IMPOSSIBLE, '0000-01-01T00:00:00.000Z'),
    );
    const recordArb = fc.record({
      native: fc.constantFrom('a', 'b', 'c'),
      created: dateArb,
      updated: dateArb,
      source: dateArb,
    });
    const eventArb = fc.record({
      owner: fc.constantFrom(...owners),
      seq: fc.integer({ min: 1, max: 6 }),
      full: fc.boolean(),
      at: dateArb,
      local: fc.boolean(),
      records: fc.array(recordArb, { maxLength: 3 }),
      nowOffset: fc.integer({ min: 0, max: 60_000 }),
    });
    fc.assert(
      fc.property(fc.array(eventArb, { minLength: 1, maxLength: 12 }), (events) => {
        let snap = createNodeSnapshot(H);
        for (const e of events) {
          const upserts = e.records.map((r) => ({
            ...rec(H, e.owner, r.native),
            created_at: r.created,
            updated_at: r.updated,
            source_timestamp: r.source,
          }));
          const b = { ...batch(H, e.owner, { seq: e.seq, full: e.full, upserts }), source_timestamp: e.at };
          snap = foldNode(snap, e.local ? { type: 'batch', batch: b } : msg(b, e.owner), T0 + e.nowOffset);
        }
        for (const m of Object.values(snap.sources)) {
          if (m.heard) {
            assert.ok(Number.isFinite(m.lastObservedMs), 'last observation is a real instant');
            assert.ok(Number.isFinite(m.freshMs), 'freshness is judged by a real instant');
          }
          for (const entry of m.records.values()) {
            assert.ok(
              Number.isFinite(entry.updatedMs) && Number.isFinite(entry.sourceMs) && Number.isFinite(entry.freshMs),
            );
          }
        }
        // Long after the last real observation every source has gone unavailable: none froze.
        for (const x of q(snap, T0 + 11 * STALE + 120_000).sources) assert.equal(x.status, 'unavailable');
      }),
      { numRuns: 400 },
    );
  });
});
