import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { OwnerActor } from '../../src/actors/owner-actor.js';
import type { BusMsg } from '../../src/streams/bus.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { DROP_REPORT_INTERVAL_MS, NodeView } from '../../src/streams/node-view.js';

const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 10));

/** A started node view of node-a on an in-process bus, its log lines and its clock (the test moves `clock.now`). */
function started() {
  const bus = new InProcessBus();
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { ...LOG_OPTIONS, level: 'info' },
    { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) },
  );
  const clock = { now: Date.parse('2026-11-27T06:00:00.000Z') };
  const view = new NodeView({
    host: 'node-a',
    bus,
    staleAfterMs: 30_000,
    owners: ['router'],
    now: () => clock.now,
    logger,
  });
  view.start();
  return { bus, lines, view, clock };
}

describe('node view: dropped batches', () => {
  it('reports batches the fold dropped in one line at most a minute, warn for malformed ones, info when only out of order', async () => {
    const { bus, lines, view, clock } = started();
    const dropLines = (): Record<string, unknown>[] => lines.filter((l) => l['msg'] === 'observation batches dropped');
    const enc = new TextEncoder();

    bus.publish('svc.v1.node-a.obs.router', enc.encode('not json at all'));
    await settle();
    assert.equal(dropLines().length, 1);
    assert.equal(dropLines()[0]!['level'], 40);
    assert.deepEqual(dropLines()[0]!['dropped'], {
      oversized: 0,
      malformed: 1,
      wrong_host: 0,
      out_of_order: 0,
      clock_ahead: 0,
    });
    assert.equal(dropLines()[0]!['host'], 'node-a');
    // Within the minute: counted, not logged (a flood of bad batches writes one line a minute).
    for (let i = 0; i < 50; i++) bus.publish('svc.v1.node-a.obs.router', enc.encode('{}'));
    await settle();
    assert.equal(dropLines().length, 1);
    assert.equal(view.snapshot.dropped.malformed, 51);
    // A minute on, the next event reports what was left over: the 50 since the last line.
    clock.now += DROP_REPORT_INTERVAL_MS;
    bus.publish('svc.v1.node-a.obs.router', enc.encode('[]'));
    await settle();
    assert.equal(dropLines().length, 2);
    assert.deepEqual(dropLines()[1]!['dropped'], {
      oversized: 0,
      malformed: 51,
      wrong_host: 0,
      out_of_order: 0,
      clock_ahead: 0,
    });
    // Nothing dropped since: nothing more is said, however long it runs.
    clock.now += DROP_REPORT_INTERVAL_MS;
    view.stop();
    assert.equal(dropLines().length, 2);
    assert.ok(!JSON.stringify(lines).includes('not json at all'), 'the dropped bytes are never logged');
  });

  it("a batch older than one already folded is out of order (info); one dated ahead of the node's clock is a warning", async () => {
    const { bus, lines, view, clock } = started();
    const sent: BusMsg[] = [];
    const sub = bus.subscribe('svc.v1.node-a.obs.router').subscribe((m) => sent.push(m));
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus,
      read: () => ({ status: 'complete', records: [] }),
      now: () => clock.now,
      staleAfterMs: 30_000,
    });
    await actor.step(true);
    clock.now += 1000;
    await actor.step(true);
    await settle();
    assert.equal(sent.length, 2);
    assert.equal(view.snapshot.dropped.out_of_order, 0);
    bus.publish(sent[0]!.subject, sent[0]!.data);
    await settle();
    const drop = lines.filter((l) => l['msg'] === 'observation batches dropped');
    assert.equal(drop.length, 1);
    assert.equal(drop[0]!['level'], 30);
    assert.deepEqual(drop[0]!['dropped'], {
      oversized: 0,
      malformed: 0,
      wrong_host: 0,
      out_of_order: 1,
      clock_ahead: 0,
    });
    // A publisher whose clock runs five minutes ahead: every batch of it is refused, and that
    // is a warning (no resync mends a wrong clock).
    clock.now += 60_000;
    const ahead = new OwnerActor({
      host: 'node-a',
      owner: 'media',
      bus,
      read: () => ({ status: 'complete', records: [] }),
      now: () => clock.now + 300_000,
      staleAfterMs: 30_000,
    });
    await ahead.step(true);
    await settle();
    const more = lines.filter((l) => l['msg'] === 'observation batches dropped');
    assert.equal(more.length, 2);
    assert.equal(more[1]!['level'], 40);
    assert.deepEqual(more[1]!['dropped'], {
      oversized: 0,
      malformed: 0,
      wrong_host: 0,
      out_of_order: 0,
      clock_ahead: 1,
    });
    sub.unsubscribe();
    view.stop();
  });
});
