import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SAMPLED, TerminalRing } from '../../../src/router/records/terminal-ring.js';
import {
  FINISH_REASONS,
  REQUEST_OUTCOMES,
  ROUTES,
  USAGE_SOURCES,
  type TerminalRecord,
} from '../../../src/schema/terminal-record.js';
import { gid, rec } from '../../support/terminal-records.js';

/** A deterministic pseudo-random sequence (the same every run). */
function rng(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
}

/** Records of varied sizes (ids up to 128 characters, optional members on and off) and values. */
function varied(n: number, r: () => number): TerminalRecord {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const id = (len: number): string => `${n}-`.padEnd(len, 'abcdefghij'[n % 10]!);
  const measured = (): number | null => (r() < 0.2 ? null : Math.round(r() * 1e6) / 1000);
  const out = rec({
    request_id: r() < 0.5 ? gid(n) : id(1 + Math.floor(r() * 127)),
    model: pick(['chat', 'embed', 'a-much-longer-model-alias/with:parts']),
    route: pick(ROUTES),
    outcome: pick(REQUEST_OUTCOMES),
    status_code: pick([0, 200, 429, 502, 504]),
    latency_ms: measured(),
    readiness_check_ms: measured(),
    admission_wait_ms: measured(),
    upstream_duration_ms: measured(),
    time_to_first_content_ms: measured(),
    finish_reason: r() < 0.3 ? null : pick(FINISH_REASONS),
    usage: {
      prompt_tokens: r() < 0.3 ? null : Math.floor(r() * 5000),
      completion_tokens: r() < 0.3 ? null : Math.floor(r() * 5000),
      prompt_source: pick(USAGE_SOURCES),
      completion_source: pick(USAGE_SOURCES),
    },
    // Multi-byte text: byte lengths and character lengths differ.
    package_version: r() < 0.1 ? 'vé-ü-€' : '0.1.0',
  });
  if (r() < 0.5) out.session_id = id(1 + Math.floor(r() * 127));
  if (r() < 0.3) out.workbench_run_id = id(128);
  if (r() < 0.3) out.task_id = id(128);
  return out;
}

describe('terminal ring (records kept as text outside the heap)', () => {
  it('holds the newest `capacity` records exactly, through wraps and growth of its byte buffer, and names each one it pushes out', () => {
    const r = rng(7);
    const CAP = 120;
    const ring = new TerminalRing(CAP);
    const pushed: { gid: string; record: TerminalRecord; finishedMs: number }[] = [];
    let grew = 0;
    let bytes = ring.byteCapacity;
    for (let n = 1; n <= 3_000; n++) {
      const record = varied(n, r);
      const g = gid(n);
      const evicted = ring.push(g, record, JSON.stringify(record), 1_700_000_000_000 + n);
      pushed.push({ gid: g, record, finishedMs: 1_700_000_000_000 + n });
      if (ring.byteCapacity !== bytes) {
        grew++;
        bytes = ring.byteCapacity;
      }
      if (n <= CAP) assert.equal(evicted, undefined);
      else assert.deepEqual(evicted, { gid: gid(n - CAP), finishedMs: 1_700_000_000_000 + n - CAP }, `push ${n}`);
      if (n % 97 === 0 || n > 2_950) {
        const live = [...ring.newestFirst()];
        assert.equal(live.length, Math.min(n, CAP));
        live.forEach((slot, i) => {
          const want = pushed[pushed.length - 1 - i]!;
          assert.deepEqual(ring.record(slot), want.record, `record ${want.gid} after ${n} pushes`);
          assert.equal(ring.gid(slot), want.gid);
          assert.equal(ring.requestId(slot), want.record.request_id);
          assert.equal(ring.sessionId(slot), want.record.session_id);
          assert.equal(ring.finishedMs(slot), want.finishedMs);
          assert.equal(ring.slotOf(want.gid), slot);
        });
        if (n > CAP) assert.equal(ring.slotOf(gid(n - CAP)), undefined, 'an evicted id is no longer found');
      }
    }
    assert.ok(grew >= 1, '120 records of up to ~1.5 KiB each outgrew the first 64 KiB');
    // Bounded: at most about twice what the largest records need.
    assert.ok(ring.byteCapacity <= 4 * CAP * 2048, String(ring.byteCapacity));
  });

  it('after a burst of large records its byte buffer shrinks back to what the ring holds, records intact', () => {
    const CAP = 16;
    const ring = new TerminalRing(CAP);
    const pushed: TerminalRecord[] = [];
    const push = (n: number, record: TerminalRecord): void => {
      ring.push(gid(n), record, JSON.stringify(record), n);
      pushed.push(record);
    };
    for (let n = 1; n <= CAP; n++) push(n, rec({ package_version: `${n}-`.padEnd(100_000, 'x') }));
    const burst = ring.byteCapacity;
    assert.ok(burst >= CAP * 100_000, String(burst));
    // The writing wraps to the start once the end of the big buffer is reached: then it shrinks.
    for (let n = CAP + 1; n <= 400 * CAP; n++) push(n, rec({ request_id: gid(n) }));
    assert.ok(ring.byteCapacity <= 256 * 1024, `shrank from ${burst} to ${ring.byteCapacity}`);
    const live = [...ring.newestFirst()];
    assert.equal(live.length, CAP);
    live.forEach((slot, i) => assert.deepEqual(ring.record(slot), pushed[pushed.length - 1 - i]));
    // And grows again when it must.
    for (let n = 400 * CAP + 1; n <= 401 * CAP; n++) push(n, rec({ package_version: `${n}-`.padEnd(50_000, 'y') }));
    [...ring.newestFirst()].forEach((slot, i) => assert.deepEqual(ring.record(slot), pushed[pushed.length - 1 - i]));
  });

  it('summaries carry what the metrics read, newest first, for every record', () => {
    const r = rng(11);
    const ring = new TerminalRing(40);
    const pushed: TerminalRecord[] = [];
    for (let n = 1; n <= 100; n++) {
      const record = varied(n, r);
      ring.push(gid(n), record, JSON.stringify(record), n);
      pushed.push(record);
    }
    const seen: unknown[] = [];
    ring.forEachSummary((s) => seen.push({ ...s, samples: [...s.samples] }));
    const want = pushed
      .slice(-40)
      .reverse()
      .map((x) => ({
        model: x.model,
        route: x.route,
        outcome: x.outcome,
        finish: x.finish_reason,
        promptSource: x.usage.prompt_source,
        completionSource: x.usage.completion_source,
        promptTokens: x.usage.prompt_tokens,
        completionTokens: x.usage.completion_tokens,
        samples: SAMPLED.map((k) => x[k]),
      }));
    assert.deepEqual(seen, want);
  });

  it("a window builds each slot's workload record once, and again only for the record that replaced it", () => {
    const ring = new TerminalRing(2);
    let built = 0;
    const map = (g: string, r: TerminalRecord) => {
      built++;
      return { id: g, outcome: r.outcome } as never;
    };
    ring.push(gid(1), rec(), JSON.stringify(rec()), 1);
    const slot = ring.slotOf(gid(1))!;
    const first = ring.workload(slot, map);
    assert.equal(ring.workload(slot, map), first);
    assert.equal(built, 1);
    ring.push(gid(2), rec(), JSON.stringify(rec()), 2);
    ring.push(gid(3), rec({ outcome: 'error' }), JSON.stringify(rec({ outcome: 'error' })), 3);
    const again = ring.workload(ring.slotOf(gid(3))!, map);
    assert.notEqual(again, first);
    assert.deepEqual(again, { id: gid(3), outcome: 'error' });
    assert.equal(built, 2);
  });

  it('a ring of one keeps the newest record only', () => {
    const ring = new TerminalRing(1);
    ring.push(gid(1), rec(), JSON.stringify(rec()), 1);
    assert.deepEqual(ring.push(gid(2), rec({ model: 'x' }), JSON.stringify(rec({ model: 'x' })), 2), {
      gid: gid(1),
      finishedMs: 1,
    });
    assert.deepEqual(
      [...ring.newestFirst()].map((s) => ring.record(s).model),
      ['x'],
    );
    assert.throws(() => new TerminalRing(0), RangeError);
  });
});
