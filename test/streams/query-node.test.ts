import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Owner } from '../../src/schema/enums.js';
import { resolveFilters, type FilterArgs } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot, type NodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, ROUTER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, done, rec } from '../support/records.js';

const H = 'node-a';
const STALE = 30_000;
const ALL: Owner[] = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];

function node(records: Partial<Record<Owner, WorkloadRecord[]>>, at = T0): NodeSnapshot {
  const s = createNodeSnapshot(H);
  for (const owner of ALL) foldBatch(s, batch(H, owner, { seq: 1, at, upserts: records[owner] ?? [] }));
  return s;
}
const q = (s: NodeSnapshot, f: FilterArgs = {}, now = T0, owners = CONTROLLER_OWNERS) =>
  queryNode(s, resolveFilters(f), now, { staleAfterMs: STALE, owners });
const ids = (r: ReturnType<typeof q>) => r.sources.flatMap((s) => s.records.map((x) => x.id));

describe('node query', () => {
  it('a healthy empty node is complete with zero omitted', () => {
    const r = q(node({}));
    assert.equal(r.status, 'complete');
    assert.deepEqual(r.truncation, { returned: 0, omitted: 0 });
    assert.equal(r.sources.length, 6);
  });

  it('default window: active work, terminal within recent_seconds, and current records', () => {
    const s = node({
      media: [
        rec(H, 'media', 'live', { at: T0 - 3 * 86_400_000 + 1 }),
        done(H, 'media', 'recent', T0 - 3_599_000),
        done(H, 'media', 'old', T0 - 3_601_000),
      ],
      recipe: [rec(H, 'recipe', 'cfg', { at: T0 - 80_000_000 })],
    });
    const r = q(s);
    const got = new Set(ids(r));
    assert.ok(got.has(rec(H, 'media', 'live').id));
    assert.ok(got.has(done(H, 'media', 'recent', 0).id));
    assert.ok(!got.has(done(H, 'media', 'old', 0).id));
    assert.ok(got.has(rec(H, 'recipe', 'cfg').id));
    assert.ok(q(s, { recent_seconds: 3602 }).sources[3]!.records.some((x) => x.id === done(H, 'media', 'old', 0).id));
  });

  it('sorts newest updated_at first, ties by id ascending', () => {
    const recs = ['a', 'b', 'c', 'd'].map((n, i) => rec(H, 'benchmark', n, { at: T0 - (i < 2 ? 0 : i) * 1000 }));
    const r = q(node({ benchmark: recs }));
    const got = r.sources[2]!.records;
    for (let i = 1; i < got.length; i++) {
      const a = got[i - 1]!;
      const b = got[i]!;
      assert.ok(a.updated_at > b.updated_at || (a.updated_at === b.updated_at && a.id < b.id));
    }
  });

  it('applies filters before the limit and counts the rest exactly', () => {
    const recs = Array.from({ length: 10 }, (_, i) => rec(H, 'media', `j${i}`, { at: T0 - i }));
    recs.push(done(H, 'media', 'fin', T0 + 5));
    const r = q(node({ media: recs }), { owner: 'media', state: 'running', limit: 3 });
    assert.equal(r.sources[3]!.records.length, 3);
    assert.ok(r.sources[3]!.records.every((x) => x.state === 'running'));
    assert.deepEqual(r.truncation, { returned: 3, omitted: 7 });
    assert.equal(r.status, 'partial', 'a bound that left records out is not complete');
  });

  it('caps a source at 200 and a node at limit, trimming the oldest across sources', () => {
    const many = (owner: Owner, n: number, offset: number) =>
      Array.from({ length: n }, (_, i) => rec(H, owner, `x${i}`, { at: T0 - offset - i * 10 }));
    const s = node({
      media: many('media', 300, 0),
      benchmark: many('benchmark', 300, 5),
      controller: many('controller', 300, 7),
    });
    const r = q(s, { limit: 1000 });
    for (const src of r.sources) assert.ok(src.records.length <= 200);
    assert.equal(r.truncation.returned, 600);
    assert.equal(r.truncation.omitted, 300);
    const r2 = q(s, { limit: 250 });
    assert.equal(r2.truncation.returned, 250);
    assert.equal(r2.truncation.omitted, 650);
    const sum = r2.sources.reduce((n, x) => n + x.truncation.returned, 0);
    assert.equal(sum, 250);
    for (const src of r2.sources) if (src.truncation.omitted !== null) assert.ok(src.truncation.omitted >= 0);
  });

  it('active_only keeps fresh active work and drops terminal, current and stale actives', () => {
    const fresh = rec(H, 'media', 'fresh', { at: T0 });
    const staleActive = rec(H, 'media', 'stale', { at: T0 - 10 * 60_000 });
    const s = node({ media: [fresh, staleActive, done(H, 'media', 'd', T0)], recipe: [rec(H, 'recipe', 'cfg')] });
    const r = q(s, { active_only: true });
    assert.deepEqual(ids(r), [fresh.id]);
    const all = q(s);
    const labelled = all.sources[3]!.records.find((x) => x.id === staleActive.id)!;
    assert.equal(labelled.observation_quality, 'stale');
    assert.equal(labelled.state, 'running');
  });

  it('host filters records without selecting the node', () => {
    const s = node({ media: [rec(H, 'media', 'a')] });
    const r = q(s, { host: 'other' });
    assert.equal(r.expected_host, H);
    assert.deepEqual(ids(r), []);
  });

  it('an unavailable source makes the node partial with omitted null', () => {
    const s = createNodeSnapshot(H);
    foldBatch(s, batch(H, 'media', { seq: 1, upserts: [rec(H, 'media', 'a')] }));
    const r = q(s);
    assert.equal(r.status, 'partial');
    assert.deepEqual(r.truncation, { returned: 1, omitted: null });
  });

  it('a source excluded by owner or kind keeps its honest status but does not spoil the answer', () => {
    const s = createNodeSnapshot(H);
    foldBatch(s, batch(H, 'media', { seq: 1, upserts: [rec(H, 'media', 'a')] }));
    const r = q(s, { owner: 'media' });
    assert.equal(r.status, 'complete');
    assert.deepEqual(r.truncation, { returned: 1, omitted: 0 });
    assert.equal(r.sources.find((x) => x.owner === 'router')!.status, 'unavailable');
    const k = q(s, { kind: 'media-job' });
    assert.equal(k.status, 'complete');
  });

  it('a router view has exactly one source', () => {
    const r = q(node({ router: [rec(H, 'router', 'r1')] }), {}, T0, ROUTER_OWNERS);
    assert.deepEqual(
      r.sources.map((x) => x.owner),
      ['router'],
    );
    assert.equal(r.truncation.returned, 1);
  });

  it('never reports omitted 0 when a relevant count is unknown', () => {
    const s = node({ media: [rec(H, 'media', 'a')] }, T0 - STALE - 1);
    const r = q(s);
    assert.equal(r.truncation.omitted, null);
    assert.equal(r.collected_at, formatTimestamp(T0));
  });
});
