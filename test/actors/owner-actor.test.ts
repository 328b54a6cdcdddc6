import { describe, it } from 'node:test';
import pino from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import assert from 'node:assert/strict';
import { OwnerActor } from '../../src/actors/owner-actor.js';
import type { OwnerReading } from '../../src/actors/window.js';
import type { ObservationBatch } from '../../src/schema/envelopes.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { recordId } from '../../src/schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../../src/schema/record.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { NodeView } from '../../src/streams/node-view.js';
import { Subject } from 'rxjs';

const T0 = Date.parse('2026-11-26T00:00:00.000Z');

function terminal(n: number, finishedAt = T0 + n): WorkloadRecord {
  const at = formatTimestamp(finishedAt);
  return {
    schema: SCHEMA_ID,
    id: recordId('node-a', 'router', 'router-request', `r${n}`),
    host: 'node-a',
    owner: 'router',
    kind: 'router-request',
    state: 'terminal',
    phase: 'completed',
    outcome: 'success',
    source_authority: 'router-memory',
    observation_quality: 'recorded',
    created_at: at,
    updated_at: at,
    source_timestamp: at,
  };
}

/** An actor over an in-process bus whose reading the test sets; returns every batch it published. */
function harness(cap = 2000, busMaxPayload?: number) {
  const bus = new InProcessBus(busMaxPayload === undefined ? {} : { maxPayload: busMaxPayload });
  const batches: ObservationBatch[] = [];
  bus
    .subscribe('svc.v1.node-a.obs.router')
    .subscribe((m) => batches.push(JSON.parse(new TextDecoder().decode(m.data)) as ObservationBatch));
  let reading: OwnerReading = { status: 'complete', records: [] };
  const actor = new OwnerActor({
    host: 'node-a',
    owner: 'router',
    bus,
    read: () => reading,
    now: () => T0 + 1000,
    staleAfterMs: 3_600_000,
    cap,
  });
  return {
    batches,
    set: (r: OwnerReading) => void (reading = r),
    step: async (full = false) => {
      await actor.step(full);
      await new Promise((r) => setImmediate(r));
    },
  };
}

describe('owner actor', () => {
  it('a record the schema or a rule refuses is left out, not published: the others stay, the source partial (malformed) with an unknown count', async () => {
    const bus = new InProcessBus();
    const batches: ObservationBatch[] = [];
    bus
      .subscribe('svc.v1.node-a.obs.router')
      .subscribe((m) => batches.push(JSON.parse(new TextDecoder().decode(m.data)) as ObservationBatch));
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { ...LOG_OPTIONS, level: 'info' },
      { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) },
    );
    const good = terminal(1);
    const broken = [
      { ...terminal(2), phase: 'running' }, // a terminal record in a live phase
      { ...terminal(3), progress: { completed: 1_000_000_000_001, total: null, unit: 'requests' } }, // a count past the contract
      { ...terminal(4), host: 'node-b' }, // another node's
    ] as unknown as WorkloadRecord[];
    let reading: OwnerReading = { status: 'complete', records: [good, ...broken] };
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => reading,
      now: () => T0 + 1000,
      staleAfterMs: 3_600_000,
      logger,
    });
    await actor.step(true);
    await new Promise((r) => setImmediate(r));
    assert.equal(batches.length, 1);
    assert.equal(batches[0]!.status, 'partial');
    assert.equal(batches[0]!.reason, 'malformed');
    assert.equal(batches[0]!.omitted, null);
    assert.deepEqual(
      batches[0]!.upserts.map((r) => r.id),
      [good.id],
    );
    const warned = lines.filter((l) => l['msg'] === 'owner records left out (malformed)');
    assert.equal(warned.length, 1);
    assert.equal(warned[0]!['records'], 3);
    assert.ok(!JSON.stringify(lines).includes('node-b'), 'no value of a left-out record is logged');
    // Within the minute: no second line. Once the records are mended, the source is complete again.
    await actor.step(true);
    assert.equal(lines.filter((l) => l['msg'] === 'owner records left out (malformed)').length, 1);
    reading = { status: 'complete', records: [good, terminal(2)] };
    await actor.step(true);
    await new Promise((r) => setImmediate(r));
    assert.equal(batches.at(-1)!.status, 'complete');
    assert.equal(batches.at(-1)!.omitted, 0);
    assert.equal(batches.at(-1)!.upserts.length, 2);
  });

  it('publishes a full window first, then only what changed: new, changed and removed records', async () => {
    const h = harness();
    const [a, b, c] = [terminal(1), terminal(2), terminal(3)];
    h.set({ status: 'complete', records: [a, b] });
    await h.step(true);
    assert.equal(h.batches.length, 1);
    assert.equal(h.batches[0]!.full, true);
    assert.deepEqual(h.batches[0]!.upserts.map((r) => r.id).sort(), [a.id, b.id].sort());

    // The same objects handed again: nothing to publish.
    await h.step();
    assert.equal(h.batches.length, 1);

    // A new object with the same content is not a change either.
    h.set({ status: 'complete', records: [{ ...a }, b] });
    await h.step();
    assert.equal(h.batches.length, 1, 'equal content is not republished');

    // A new record, a changed record and a removed one.
    const bChanged = { ...b, outcome: 'error' as const, phase: 'failed' as const };
    h.set({ status: 'complete', records: [bChanged, c] });
    await h.step();
    const d = h.batches[1]!;
    assert.equal(d.full, false);
    assert.equal(d.seq, h.batches[0]!.seq + 1);
    assert.deepEqual(d.upserts.map((r) => r.id).sort(), [b.id, c.id].sort());
    assert.deepEqual(d.removals, [a.id]);
  });

  it("a window over what the bus carries (a server's small max_payload) is split into parts that fit, not refused", async () => {
    const h = harness(2000, 4096);
    const records = Array.from({ length: 40 }, (_, i) => terminal(i + 1));
    h.set({ status: 'complete', records });
    await h.step(true);
    assert.ok(h.batches.length > 1, 'split');
    const id = h.batches[0]!.snapshot?.id;
    assert.ok(id !== undefined);
    for (const [i, b] of h.batches.entries()) {
      assert.ok(Buffer.byteLength(JSON.stringify(b)) <= 4096, 'each part fits');
      assert.deepEqual(b.snapshot, { id, part: i + 1, parts: h.batches.length });
    }
    assert.deepEqual(h.batches.flatMap((b) => b.upserts.map((r) => r.id)).sort(), records.map((r) => r.id).sort());
    // A delta over the bound goes out as a split full window too.
    const more = Array.from({ length: 30 }, (_, i) => terminal(100 + i));
    h.set({ status: 'complete', records: [...records, ...more] });
    const before = h.batches.length;
    await h.step();
    const after = h.batches.slice(before);
    assert.ok(after.length > 1 && after.every((b) => b.full && Buffer.byteLength(JSON.stringify(b)) <= 4096));
    assert.equal(after.flatMap((b) => b.upserts).length, 70);
  });

  it('a window whose parts of two records do not fit goes out one record a part, whatever its size (3, 5, 7 records)', async () => {
    // Sizes as published: a one-record batch fits the bus, a two-record one does not.
    const probe = harness();
    probe.set({ status: 'complete', records: [terminal(1), terminal(2)] });
    await probe.step(true);
    const two = Buffer.byteLength(JSON.stringify(probe.batches[0]));
    const limit = two - 60;
    for (const n of [3, 5, 7]) {
      const h = harness(2000, limit);
      const records = Array.from({ length: n }, (_, i) => terminal(i + 1));
      h.set({ status: 'complete', records });
      await h.step(true);
      assert.equal(h.batches.length, n, `${n} records: ${n} parts`);
      assert.ok(
        h.batches.every(
          (b) => b.upserts.length === 1 && b.snapshot?.parts === n && Buffer.byteLength(JSON.stringify(b)) <= limit,
        ),
      );
      assert.deepEqual(h.batches.map((b) => b.upserts[0]!.id).sort(), records.map((r) => r.id).sort());
    }
  });

  it("a record too large for the bus alone: nothing goes on the bus, but the owner's own fold still gets the window", async () => {
    const bus = new InProcessBus({ maxPayload: 300 });
    const seen: ObservationBatch[] = [];
    bus.subscribe('svc.v1.node-a.obs.router').subscribe(() => seen.push({} as ObservationBatch));
    const local: ObservationBatch[] = [];
    const records = [terminal(1), terminal(2), terminal(3)];
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => ({ status: 'complete', records }),
      now: () => T0 + 1000,
      staleAfterMs: 3_600_000,
      local: (b) => local.push(b),
    });
    await actor.step(true);
    await new Promise((r) => setImmediate(r));
    assert.equal(seen.length, 0);
    assert.equal(local.length, 1);
    assert.deepEqual(local[0]!.upserts.map((r) => r.id).sort(), records.map((r) => r.id).sort());
  });

  it('a reading the owner already bounded is published as handed over, with its own omitted count', async () => {
    const h = harness(3);
    // Deliberately not in boundWindow's order: a bounded reading is not re-sorted.
    const recs = [terminal(1), terminal(3), terminal(2)];
    h.set({ status: 'complete', records: recs, bounded: true, omittedBefore: 7 });
    await h.step(true);
    assert.deepEqual(
      h.batches[0]!.upserts.map((r) => r.id),
      recs.map((r) => r.id),
    );
    assert.equal(h.batches[0]!.omitted, 7);
  });

  it('a bounded reading over the cap is bounded again: newest kept, the excess counted', async () => {
    const h = harness(2);
    const recs = [terminal(1), terminal(2), terminal(3)];
    h.set({ status: 'complete', records: recs, bounded: true, omittedBefore: 1 });
    await h.step(true);
    assert.deepEqual(
      h.batches[0]!.upserts.map((r) => r.id),
      [recs[2]!.id, recs[1]!.id],
    );
    assert.equal(h.batches[0]!.omitted, 2);
  });

  it('hands every batch to a local fold; with nobody on the bus it encodes nothing, and a late subscriber gets the same batches', async () => {
    const bus = new InProcessBus();
    const local: ObservationBatch[] = [];
    let reading: OwnerReading = { status: 'complete', records: [terminal(1), terminal(2)] };
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => reading,
      now: () => T0 + 1000,
      staleAfterMs: 3_600_000,
      local: (b) => local.push(b),
    });
    const subject = 'svc.v1.node-a.obs.router';
    assert.equal(bus.hasInterest(subject), false);
    await actor.step(true);
    reading = { status: 'complete', records: [terminal(2), terminal(3)] };
    await actor.step(false);
    assert.deepEqual(
      local.map((b) => [b.seq, b.full]),
      [
        [1, true],
        [2, false],
      ],
    );
    assert.deepEqual(local[1]!.removals, [terminal(1).id]);

    // Someone subscribes (a wildcard, as a controller's view does): batches go on the bus too,
    // byte for byte what the local fold was handed.
    const onBus: ObservationBatch[] = [];
    const sub = bus
      .subscribe('svc.v1.node-a.obs.*')
      .subscribe((m) => onBus.push(JSON.parse(new TextDecoder().decode(m.data)) as ObservationBatch));
    assert.equal(bus.hasInterest(subject), true);
    reading = { status: 'complete', records: [terminal(3), terminal(4)] };
    await actor.step(false);
    await actor.step(true);
    await new Promise<void>((r) => setImmediate(r));
    assert.deepEqual(onBus, JSON.parse(JSON.stringify(local.slice(2))));
    assert.deepEqual(
      onBus.map((b) => [b.seq, b.full]),
      [
        [3, false],
        [4, true],
      ],
    );
    sub.unsubscribe();
    assert.equal(bus.hasInterest(subject), false, 'interest ends with the last subscription');
  });

  it('a node view fed locally answers from the actor without subscribing to observations on the bus', async () => {
    const bus = new InProcessBus();
    const own = new Subject<ObservationBatch>();
    const reading: OwnerReading = { status: 'complete', records: [terminal(1), terminal(2)] };
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => reading,
      now: () => T0 + 1000,
      staleAfterMs: 3_600_000,
      local: (b) => own.next(b),
    });
    const view = new NodeView({
      host: 'node-a',
      bus,
      staleAfterMs: 3_600_000,
      owners: ['router'],
      now: () => T0 + 2000,
      local: own,
    });
    view.start();
    assert.equal(bus.hasInterest('svc.v1.node-a.obs.router'), false);
    await actor.step(true);
    const res = view.query({ active_only: false, recent_seconds: 86_400, limit: 100 });
    assert.equal(res.status, 'complete');
    assert.deepEqual(res.sources[0]!.records.map((r) => r.id).sort(), [terminal(1).id, terminal(2).id].sort());
    view.stop();
  });

  it('on demand: with nobody on the bus a round reads nothing until a local reader asks; a late subscriber gets a whole window first', async () => {
    const bus = new InProcessBus();
    const local: ObservationBatch[] = [];
    let reads = 0;
    let reading: OwnerReading = { status: 'complete', records: [terminal(1), terminal(2)] };
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => (reads++, reading),
      now: () => T0 + 1000,
      staleAfterMs: 3_600_000,
      local: (b) => local.push(b),
      onDemand: true,
    });
    await actor.step(false);
    await actor.step(true);
    assert.deepEqual([reads, local.length], [0, 0], 'nothing read or built while nobody looks');
    await actor.refresh();
    assert.equal(reads, 1);
    assert.deepEqual(
      local.map((b) => [b.seq, b.full, b.upserts.length]),
      [[1, true, 2]],
    );
    reading = { status: 'complete', records: [terminal(2), terminal(3)] };
    await actor.refresh();
    assert.deepEqual(
      local.map((b) => [b.seq, b.full]),
      [
        [1, true],
        [2, false],
      ],
    );
    assert.deepEqual([local[1]!.upserts.map((r) => r.id), local[1]!.removals], [[terminal(3).id], [terminal(1).id]]);

    // A controller starts listening: the next round runs and is a whole window, on the bus too.
    const onBus: ObservationBatch[] = [];
    const sub = bus
      .subscribe('svc.v1.node-a.obs.*')
      .subscribe((m) => onBus.push(JSON.parse(new TextDecoder().decode(m.data)) as ObservationBatch));
    await actor.step(false);
    await new Promise<void>((r) => setImmediate(r));
    assert.deepEqual(
      onBus.map((b) => [b.seq, b.full, b.upserts.length]),
      [[3, true, 2]],
    );
    reading = { status: 'complete', records: [terminal(3)] };
    await actor.step(false);
    await new Promise<void>((r) => setImmediate(r));
    assert.deepEqual(
      onBus.map((b) => [b.seq, b.full]),
      [
        [3, true],
        [4, false],
      ],
      'then changes only, as usual',
    );
    sub.unsubscribe();
  });
});
