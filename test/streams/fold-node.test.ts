import { beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolveFilters } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { foldNode } from '../../src/streams/fold-node.js';
import { createNodeSnapshot, type NodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, done, enc, rec, resetSeqs } from '../support/records.js';

const H = 'node-a';
const STALE = 30_000;
const q = (s: NodeSnapshot, now: number, f = {}) =>
  queryNode(s, resolveFilters(f), now, { staleAfterMs: STALE, owners: CONTROLLER_OWNERS });
const msg = (b: unknown, owner = 'media', host = H) => ({
  type: 'message' as const,
  subject: `svc.v1.${host}.obs.${owner}`,
  data: enc(b),
});
const qr = (s: NodeSnapshot, now: number) =>
  queryNode(s, resolveFilters({}), now, { staleAfterMs: STALE, owners: ['router'] });
const src = (r: ReturnType<typeof q>, owner: string) => r.sources.find((s) => s.owner === owner)!;

describe('node fold', () => {
  let s: NodeSnapshot;
  beforeEach(() => {
    resetSeqs();
    s = createNodeSnapshot(H);
  });

  it('a node that heard nothing reports every source unavailable, never an empty complete', () => {
    const r = q(s, T0);
    assert.equal(r.status, 'unavailable');
    assert.deepEqual(
      r.sources.map((x) => x.owner),
      ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'],
    );
    for (const x of r.sources) {
      assert.equal(x.status, 'unavailable');
      assert.equal(x.reason, 'no-observation');
      assert.deepEqual(x.truncation, { returned: 0, omitted: null });
    }
    assert.deepEqual(r.truncation, { returned: 0, omitted: null });
  });

  it('folds a full batch and serves its records', () => {
    const j = rec(H, 'media', 'j1', { progress: { completed: 2, total: 10, unit: 'items' } });
    s = foldNode(s, msg(batch(H, 'media', { upserts: [j] })), T0);
    const m = src(q(s, T0 + 1000), 'media');
    assert.equal(m.status, 'complete');
    assert.deepEqual(m.records, [j]);
    assert.deepEqual(m.truncation, { returned: 1, omitted: 0 });
  });

  it('a batch or record dated more than a minute ahead of the node is not believed: the source does not freeze', () => {
    const future = T0 + 10 * 365 * 86_400_000;
    const forged = rec(H, 'media', 'forged', { state: 'running', phase: 'running', at: future });
    s = foldNode(s, msg(batch(H, 'media', { at: future, upserts: [forged] })), T0);
    assert.equal(s.dropped.clock_ahead, 1);
    assert.equal(src(q(s, T0), 'media').status, 'unavailable', 'nothing believable was heard');
    // The real actor's batches are folded as usual; a future record inside one is refused,
    // counted, and the source no longer claims to be whole (a record it sent is missing).
    const real = rec(H, 'media', 'real', { at: T0 });
    s = foldNode(s, msg(batch(H, 'media', { at: T0, upserts: [real, forged] })), T0);
    let m = src(q(s, T0 + 1000), 'media');
    assert.equal(s.dropped.clock_ahead, 2);
    assert.equal(m.status, 'partial');
    assert.deepEqual(m.truncation, { returned: 1, omitted: null });
    assert.deepEqual(
      m.records.map((r) => r.id),
      [real.id],
    );
    // Within a minute of the node's clock is ordinary skew between hosts.
    const soon = rec(H, 'media', 'soon', { at: T0 + 30_000 });
    s = foldNode(s, msg(batch(H, 'media', { at: T0 + 30_000, upserts: [real, soon] })), T0);
    m = src(q(s, T0 + 1_000), 'media');
    assert.deepEqual(m.records.map((r) => r.id).sort(), [real.id, soon.id].sort());
    assert.equal(m.status, 'complete', 'a full window without a refused record makes the count known again');
  });

  it('an observation dated ahead of the node (within the allowed skew) is as fresh as one dated now, not fresh until its date', () => {
    const ahead = T0 + 50_000;
    const running = rec(H, 'media', 'run', { state: 'running', phase: 'running', at: ahead });
    s = foldNode(s, msg(batch(H, 'media', { at: ahead, upserts: [running] })), T0);
    assert.equal(src(q(s, T0 + 1000), 'media').status, 'complete');
    // One stale threshold after it was heard, with nothing newer: stale, although its own
    // date is still 19 s in the future of this read.
    const m = src(q(s, T0 + STALE + 1000), 'media');
    assert.equal(m.status, 'partial');
    assert.equal(m.reason, 'timeout');
    assert.equal(m.records[0]!.observation_quality, 'stale');
    assert.equal(m.records[0]!.state, 'running', 'a stale record keeps its state');
  });

  it('a seq gap makes the source partial with unknown count until the next full batch', () => {
    s = foldNode(s, msg(batch(H, 'media', { upserts: [rec(H, 'media', 'a')] })), T0);
    s = foldNode(s, msg(batch(H, 'media', { seq: 3, full: false, upserts: [rec(H, 'media', 'b')] })), T0);
    let m = src(q(s, T0), 'media');
    assert.equal(m.status, 'partial');
    assert.equal(m.truncation.omitted, null);
    assert.equal(m.records.length, 2, 'records that survived are still served');
    s = foldNode(s, msg(batch(H, 'media', { seq: 4, upserts: [rec(H, 'media', 'b')] })), T0 + 10);
    m = src(q(s, T0 + 10), 'media');
    assert.equal(m.status, 'complete');
    assert.equal(m.records.length, 1, 'the full batch replaced the window');
  });

  it('a first batch that is not full leaves the source partial', () => {
    s = foldNode(s, msg(batch(H, 'media', { full: false, upserts: [rec(H, 'media', 'a')] })), T0);
    assert.equal(src(q(s, T0), 'media').status, 'partial');
  });

  it('stale after the threshold keeps states, labels records stale; unavailable after ten times it', () => {
    const j = rec(H, 'benchmark', 'j');
    s = foldNode(s, msg(batch(H, 'benchmark', { upserts: [j] }), 'benchmark'), T0);
    let b = src(q(s, T0 + STALE), 'benchmark');
    assert.equal(b.status, 'complete');
    assert.equal(b.records[0]!.observation_quality, 'recorded');
    b = src(q(s, T0 + STALE + 1), 'benchmark');
    assert.equal(b.status, 'partial');
    assert.equal(b.reason, 'timeout');
    assert.equal(b.records[0]!.state, 'running');
    assert.equal(b.records[0]!.observation_quality, 'stale');
    assert.equal(b.records[0]!.source_timestamp, j.source_timestamp, 'a reader never rewrites owner evidence');
    assert.equal(b.truncation.omitted, null);
    b = src(q(s, T0 + 10 * STALE + 1), 'benchmark');
    assert.equal(b.status, 'unavailable');
    assert.equal(b.reason, 'timeout');
    assert.deepEqual(b.records, []);
    assert.equal(b.truncation.omitted, null);
  });

  it('freshness is judged by the observation time, not the time it was received', () => {
    s = foldNode(s, msg(batch(H, 'media', { at: T0, upserts: [rec(H, 'media', 'a')] })), T0 + 10 * STALE);
    assert.equal(src(q(s, T0 + 2 * STALE), 'media').status, 'partial');
  });

  it('an older observation never moves a record backwards', () => {
    const newer = rec(H, 'benchmark', 'j', {
      at: T0 + 5000,
      created_at: formatTimestamp(T0),
      progress: { completed: 5, total: 10, unit: 'requests' },
    });
    const older = rec(H, 'benchmark', 'j', {
      at: T0 + 1000,
      created_at: formatTimestamp(T0),
      progress: { completed: 1, total: 10, unit: 'requests' },
    });
    s = foldNode(s, msg(batch(H, 'benchmark', { at: T0 + 5000, upserts: [newer] }), 'benchmark'), T0);
    s = foldNode(s, msg(batch(H, 'benchmark', { at: T0 + 6000, full: false, upserts: [older] }), 'benchmark'), T0);
    assert.deepEqual(src(q(s, T0 + 6000), 'benchmark').records[0]!.progress, newer.progress);
  });

  it('a terminal record never becomes active again', () => {
    const fin = done(H, 'media', 'j', T0 + 1000);
    const revived = rec(H, 'media', 'j', { at: T0 + 2000 });
    s = foldNode(s, msg(batch(H, 'media', { at: T0 + 1000, upserts: [fin] })), T0);
    s = foldNode(s, msg(batch(H, 'media', { at: T0 + 2000, full: false, upserts: [revived] })), T0);
    assert.equal(src(q(s, T0 + 2000), 'media').records[0]!.state, 'terminal');
  });

  it("an active record ends even when its end is dated before its last active observation (the owner's clock stepped back)", () => {
    const created = formatTimestamp(T0);
    const streaming = rec(H, 'router', 'r', { at: T0 + 5000, created_at: created });
    s = foldNode(s, msg(batch(H, 'router', { at: T0 + 5000, upserts: [streaming] }), 'router'), T0 + 5000);
    // The clock went back 3 s: the end is dated 2 s after the start, before the streaming view.
    const ended = done(H, 'router', 'r', T0 + 2000);
    s = foldNode(
      s,
      msg(batch(H, 'router', { at: T0 + 6000, upserts: [{ ...ended, created_at: created }] }), 'router'),
      T0 + 6000,
    );
    const r = src(qr(s, T0 + 6000), 'router');
    assert.deepEqual([r.records[0]!.state, r.records[0]!.outcome], ['terminal', 'success']);
    assert.equal(r.status, 'complete');
  });

  it("an active record never steps back along its kind's path (DESIGN.md transitions), even when the observation is newer", () => {
    const created = formatTimestamp(T0);
    s = foldNode(
      s,
      msg(
        batch(H, 'router', { at: T0 + 1000, upserts: [rec(H, 'router', 'r', { at: T0 + 1000, created_at: created })] }),
        'router',
      ),
      T0,
    );
    s = foldNode(
      s,
      msg(
        batch(H, 'router', {
          at: T0 + 2000,
          full: false,
          upserts: [
            rec(H, 'router', 'r', { at: T0 + 2000, created_at: created, state: 'checking', phase: 'checking' }),
          ],
        }),
        'router',
      ),
      T0,
    );
    assert.equal(src(qr(s, T0 + 2000), 'router').records[0]!.state, 'streaming');
    s = foldNode(
      s,
      msg(
        batch(H, 'benchmark', {
          at: T0 + 1000,
          upserts: [rec(H, 'benchmark', 'j', { at: T0 + 1000, created_at: created })],
        }),
        'benchmark',
      ),
      T0,
    );
    s = foldNode(
      s,
      msg(
        batch(H, 'benchmark', {
          at: T0 + 2000,
          full: false,
          upserts: [rec(H, 'benchmark', 'j', { at: T0 + 2000, created_at: created, state: 'queued', phase: 'queued' })],
        }),
        'benchmark',
      ),
      T0,
    );
    assert.equal(src(q(s, T0 + 2000), 'benchmark').records[0]!.state, 'running');
    // Forward along the path is taken (queued -> running).
    s = foldNode(
      s,
      msg(
        batch(H, 'media', {
          at: T0 + 1000,
          upserts: [rec(H, 'media', 'm', { at: T0 + 1000, created_at: created, state: 'queued', phase: 'queued' })],
        }),
      ),
      T0,
    );
    s = foldNode(
      s,
      msg(
        batch(H, 'media', {
          at: T0 + 2000,
          full: false,
          upserts: [rec(H, 'media', 'm', { at: T0 + 2000, created_at: created })],
        }),
      ),
      T0,
    );
    assert.equal(src(q(s, T0 + 2000), 'media').records[0]!.state, 'running');
  });

  it('how a terminal record ended never changes', () => {
    const ok = done(H, 'controller', 'op', T0 + 1000);
    s = foldNode(s, msg(batch(H, 'controller', { at: T0 + 1000, upserts: [ok] }), 'controller'), T0);
    const rewritten = done(H, 'controller', 'op', T0 + 2000, 'error');
    s = foldNode(
      s,
      msg(batch(H, 'controller', { at: T0 + 2000, full: false, upserts: [rewritten] }), 'controller'),
      T0,
    );
    const r = src(q(s, T0 + 2000), 'controller').records[0]!;
    assert.deepEqual([r.phase, r.outcome], ['completed', 'success']);
    // The same end observed again (later) is taken: nothing about how it ended moved.
    const again = {
      ...done(H, 'controller', 'op', T0 + 3000),
      progress: { completed: 3, total: 3, unit: 'steps' as const },
    };
    s = foldNode(s, msg(batch(H, 'controller', { at: T0 + 3000, full: false, upserts: [again] }), 'controller'), T0);
    assert.deepEqual(src(q(s, T0 + 3000), 'controller').records[0]!.progress, again.progress);
  });

  it('a batch with an older source timestamp or a repeated seq is ignored and counted', () => {
    s = foldNode(s, msg(batch(H, 'media', { at: T0 + 1000, upserts: [rec(H, 'media', 'a')] })), T0);
    s = foldNode(s, msg(batch(H, 'media', { at: T0, upserts: [] })), T0);
    s = foldNode(
      s,
      msg(batch(H, 'media', { seq: 1, at: T0 + 2000, full: false, removals: [rec(H, 'media', 'a').id] })),
      T0,
    );
    assert.equal(src(q(s, T0 + 2000), 'media').records.length, 1);
    assert.equal(s.dropped.out_of_order, 2);
  });

  it('drops and counts malformed, oversized and wrong-host messages, never folding them', () => {
    s = foldNode(
      s,
      { type: 'message', subject: `svc.v1.${H}.obs.media`, data: new TextEncoder().encode('{not json') },
      T0,
    );
    s = foldNode(s, msg({ ...batch(H, 'media'), extra: 1 }), T0);
    s = foldNode(s, msg(batch(H, 'media', { upserts: [{ ...rec(H, 'media', 'a'), prompt: 'hi' } as never] })), T0);
    s = foldNode(s, msg(batch(H, 'media', { upserts: [rec(H, 'media', 'a', { outcome: 'success' })] })), T0);
    s = foldNode(s, msg(batch('node-b', 'media', { upserts: [rec('node-b', 'media', 'a')] })), T0);
    s = foldNode(s, msg(batch(H, 'media', { upserts: [rec('node-b', 'media', 'a')] })), T0);
    s = foldNode(s, msg(batch(H, 'benchmark')), T0); // owner does not match the subject
    s = foldNode(s, { type: 'message', subject: `svc.v1.${H}.obs.media`, data: new Uint8Array(1024 * 1024 + 1) }, T0);
    assert.deepEqual({ ...s.dropped }, { oversized: 1, malformed: 5, wrong_host: 2, out_of_order: 0, clock_ahead: 0 });
    assert.equal(src(q(s, T0), 'media').status, 'unavailable');
  });

  it('an owner-reported unknown count makes omitted null, never zero', () => {
    s = foldNode(s, msg(batch(H, 'media', { omitted: null, upserts: [rec(H, 'media', 'a')] })), T0);
    const r = q(s, T0, { owner: 'media' });
    assert.equal(src(r, 'media').truncation.omitted, null);
    assert.equal(r.truncation.omitted, null);
    assert.equal(r.status, 'partial');
  });

  it('an owner cap above zero also makes query counts unknown', () => {
    s = foldNode(s, msg(batch(H, 'media', { omitted: 3, upserts: [rec(H, 'media', 'a')] })), T0);
    assert.equal(src(q(s, T0), 'media').truncation.omitted, null);
  });

  it('an owner that reports itself unavailable shows no records and its reason', () => {
    s = foldNode(
      s,
      msg(batch(H, 'recipe', { status: 'unavailable', reason: 'inspection-error', upserts: [] }), 'recipe'),
      T0,
    );
    const r = src(q(s, T0), 'recipe');
    assert.equal(r.status, 'unavailable');
    assert.equal(r.reason, 'inspection-error');
  });

  it('assembles a full window split in parts only when every part arrived', () => {
    const a = rec(H, 'media', 'a');
    const b2 = rec(H, 'media', 'b');
    s = foldNode(s, msg(batch(H, 'media', { upserts: [rec(H, 'media', 'old')] })), T0);
    s = foldNode(
      s,
      msg(batch(H, 'media', { at: T0 + 1, snapshot: { id: 's1', part: 1, parts: 2 }, upserts: [a] })),
      T0,
    );
    assert.deepEqual(
      src(q(s, T0 + 1), 'media').records.map((r) => r.id),
      [rec(H, 'media', 'old').id],
      'half a window changes nothing',
    );
    s = foldNode(
      s,
      msg(batch(H, 'media', { at: T0 + 2, snapshot: { id: 's1', part: 2, parts: 2 }, upserts: [b2] })),
      T0,
    );
    assert.deepEqual(
      src(q(s, T0 + 2), 'media')
        .records.map((r) => r.id)
        .sort(),
      [a.id, b2.id].sort(),
    );
  });

  it("two split windows interleaved (neither whole in time): the old window is no longer the owner's, so the source is partial, not complete", () => {
    const old = rec(H, 'media', 'old');
    s = foldNode(s, msg(batch(H, 'media', { seq: 1, upserts: [old] })), T0);
    assert.equal(src(q(s, T0), 'media').status, 'complete');
    const part = (seq: number, id: string, n: number, r: string) =>
      msg(batch(H, 'media', { seq, at: T0 + seq, snapshot: { id, part: n, parts: 2 }, upserts: [rec(H, 'media', r)] }));
    s = foldNode(s, part(2, 'D', 1, 'n1'), T0);
    s = foldNode(s, part(3, 'E', 1, 'n1'), T0);
    s = foldNode(s, part(4, 'D', 2, 'n2'), T0);
    s = foldNode(s, part(5, 'E', 2, 'n2'), T0);
    const r = src(q(s, T0 + 5), 'media');
    assert.equal(r.status, 'partial');
    assert.notEqual(r.truncation.omitted, 0);
    // A whole window heals it.
    s = foldNode(
      s,
      msg(batch(H, 'media', { seq: 6, at: T0 + 6, upserts: [rec(H, 'media', 'n1'), rec(H, 'media', 'n2')] })),
      T0,
    );
    assert.equal(src(q(s, T0 + 6), 'media').status, 'complete');
  });

  it('evicts beyond the mirror cap, keeping active work, and says the count is unknown', () => {
    s = createNodeSnapshot(H, 3);
    const ups = [
      rec(H, 'media', 'live', { at: T0 - 5000 }),
      done(H, 'media', 'd1', T0 - 1),
      done(H, 'media', 'd2', T0 - 2),
      done(H, 'media', 'd3', T0 - 3),
    ];
    s = foldNode(s, msg(batch(H, 'media', { upserts: ups })), T0);
    const m = src(q(s, T0), 'media');
    assert.equal(m.records.length, 3);
    assert.ok(m.records.some((r) => r.state === 'running'));
    assert.equal(m.truncation.omitted, null);
  });

  it('a tick forgets terminal records older than a day', () => {
    s = foldNode(s, msg(batch(H, 'media', { upserts: [done(H, 'media', 'd', T0)] })), T0);
    s = foldNode(s, { type: 'tick' }, T0 + 86_400_001);
    assert.equal(s.sources.media.records.size, 0);
  });
});
