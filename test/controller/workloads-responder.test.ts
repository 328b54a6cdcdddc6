import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodeResult } from '../../src/schema/envelopes.js';
import { serveNodeWorkloads } from '../../src/controller/workloads-responder.js';
import { workloadsSubject } from '../../src/schema/subjects.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { batch, rec } from '../support/records.js';
import { OwnerActor } from '../../src/actors/owner-actor.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { fleetWorkloads } from '../../src/fleet/fleet.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { NodeView } from '../../src/streams/node-view.js';
import { startNatsServer } from '../support/nats-server.js';
import { eventually } from '../support/processes.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A node of `perOwner` recent records under each of the six owners, answering on a bus. */
function node(maxPayload: number, perOwner: number) {
  const bus = new InProcessBus({ maxPayload });
  const snap = createNodeSnapshot('node-a');
  const now = Date.now();
  for (const owner of ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'] as const) {
    const upserts = Array.from({ length: perOwner }, (_, i) => rec('node-a', owner, `n${i}`, { at: now - i * 1000 }));
    foldBatch(snap, batch('node-a', owner, { seq: 1, at: now, upserts }));
  }
  const service = serveNodeWorkloads(bus, 'node-a', (f) =>
    queryNode(snap, f, Date.now(), { staleAfterMs: 3_600_000, owners: CONTROLLER_OWNERS }),
  );
  const ask = async (args: unknown): Promise<{ bytes: number; body: Record<string, unknown> }> => {
    const reply = await bus.request(workloadsSubject('node-a'), encoder.encode(JSON.stringify(args)), {
      timeoutMs: 2_000,
    });
    return { bytes: reply.byteLength, body: JSON.parse(decoder.decode(reply)) as Record<string, unknown> };
  };
  return { ask, close: async () => (service.stop(), await bus.close()) };
}

describe('node_workloads over the bus', () => {
  it('an answer over what the bus carries comes with fewer records, the rest counted as omitted, never no answer', async () => {
    const n = node(16 * 1024, 20);
    try {
      const { bytes, body } = await n.ask({ limit: 100 });
      const r = body as unknown as NodeResult;
      assert.ok(bytes <= 16 * 1024);
      assert.equal(r.status, 'partial');
      assert.ok(r.truncation.returned > 0 && r.truncation.returned < 100, String(r.truncation.returned));
      assert.equal(r.truncation.returned + (r.truncation.omitted ?? 0), 120, 'every record returned or counted');
      // An answer that fits is untouched.
      const small = (await n.ask({ limit: 5 })).body as unknown as NodeResult;
      assert.deepEqual(small.truncation, { returned: 5, omitted: 115 });
    } finally {
      await n.close();
    }
  });

  it('when not even an answer without records fits, the fixed problem', async () => {
    const n = node(600, 2);
    try {
      const { body } = await n.ask({});
      assert.deepEqual(body, {
        type: 'urn:svc-serving:problem:unavailable',
        title: 'Service unavailable',
        status: 503,
        code: 'unavailable',
      });
    } finally {
      await n.close();
    }
  });
});

describe('a node on a nats-server with a small max_payload', () => {
  it("its owner's window arrives in parts and the fleet reads the node (fewer records, the rest counted), not unreachable", {
    timeout: 30_000,
  }, async (t) => {
    const server = await startNatsServer({ configText: 'max_payload: 4096\n' });
    t.after(() => server.stop());
    const connect = () => connectNatsBus({ servers: server.url });
    const [ownerBus, controllerBus, fleetBus] = [await connect(), await connect(), await connect()];
    t.after(() => Promise.all([ownerBus, controllerBus, fleetBus].map((b) => b.close())));
    assert.equal(ownerBus.maxPayload, 4096);
    const now = Date.now();
    const records = Array.from({ length: 60 }, (_, i) => rec('node-a', 'router', `r${i}`, { at: now - i * 100 }));
    const view = new NodeView({ host: 'node-a', bus: controllerBus, staleAfterMs: 60_000, owners: CONTROLLER_OWNERS });
    view.start();
    t.after(() => view.stop());
    const responder = serveNodeWorkloads(controllerBus, 'node-a', (f) => view.query(f));
    t.after(() => responder.stop());
    await controllerBus.flush();
    const actor = new OwnerActor({
      host: 'node-a',
      owner: 'router',
      bus: ownerBus,
      read: () => ({ status: 'complete', records }),
      staleAfterMs: 60_000,
      pollMs: 200,
    });
    actor.start();
    t.after(() => actor.stop());
    // Every record of the window reached the controller's fold, though no part could carry it whole.
    await eventually(() => {
      const r = view.query(resolveFilters({ owner: 'router', limit: 100 }));
      assert.equal(r.sources.find((s) => s.owner === 'router')!.records.length, 60);
      return true;
    });
    const fleet = await fleetWorkloads(fleetBus, [{ hostId: 'node-a' }], { owner: 'router', limit: 100 }, 5_000);
    const n = fleet.nodes[0]!;
    assert.equal(n.condition, undefined, 'read, not unreachable');
    assert.equal(n.status, 'partial');
    assert.ok(n.truncation.returned > 0 && n.truncation.returned < 60);
    assert.equal(n.truncation.returned + (n.truncation.omitted ?? 0), 60);
  });
});
