import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodeAnswer } from '../../src/schema/answer-checks.js';
import { OWNERS } from '../../src/schema/enums.js';
import type { FleetResult, NodeResult } from '../../src/schema/envelopes.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { SCHEMA_ID } from '../../src/schema/record.js';
import { composeFleet, type DeclaredNode } from '../../src/streams/compose-fleet.js';
import { applyFleetDelta, diffFleet, fleetDigest, type FleetDelta } from '../../src/dashboard/view-delta.js';
import { T0, rec } from '../support/records.js';

const F = resolveFilters({});
const DECLARED: DeclaredNode[] = [{ hostId: 'node-a' }, { hostId: 'node-b' }, { hostId: 'node-c' }];

/** A node controller's answer: all six sources, one manifest record, read at `at`. */
function reply(host: string, at: number): NodeAnswer {
  const r = rec(host, 'manifest', `${host}-model`, { at: T0 });
  const node: NodeResult = {
    schema: SCHEMA_ID,
    expected_host: host,
    status: 'complete',
    collected_at: formatTimestamp(at),
    sources: OWNERS.map((owner) => ({
      owner,
      status: 'complete' as const,
      records: owner === 'manifest' ? [r] : [],
      truncation: { returned: owner === 'manifest' ? 1 : 0, omitted: 0 },
    })),
    truncation: { returned: 1, omitted: 0 },
  };
  return { kind: 'reply', data: new TextEncoder().encode(JSON.stringify(node)) };
}

/** The fleet as the fleet controller composes it at `at` (a failed node is dated by the fleet's read). */
const fleetAt = (at: number, answers: NodeAnswer[]): FleetResult => composeFleet(DECLARED, answers, F, at);

/** What the page does with a delta (the same module), checked as the page checks it. */
function pageApplies(prev: FleetResult, next: FleetResult): { delta: FleetDelta; view: FleetResult } {
  const delta = diffFleet(prev, next);
  // The delta travels as JSON: what the page gets is what survives it.
  const view = applyFleetDelta(prev, JSON.parse(JSON.stringify(delta)) as FleetDelta);
  assert.equal(fleetDigest(view), fleetDigest(next), "the page's view is the fresh read");
  return { delta, view };
}

const hostsIn = (d: FleetDelta) => d.nodes.map((n) => n.host);

describe('fleet deltas: a failed node is sent only when something about it changed', () => {
  const down = (): NodeAnswer => ({ kind: 'unreachable' });

  it('an unreachable node that stays unreachable is not sent again; its date follows the fleet read', () => {
    let prev = fleetAt(T0, [reply('node-a', T0), reply('node-b', T0), down()]);
    for (let i = 1; i <= 5; i++) {
      const at = T0 + i * 2_000;
      const next = fleetAt(at, [reply('node-a', at), reply('node-b', at), down()]);
      const { delta, view } = pageApplies(prev, next);
      assert.ok(!hostsIn(delta).includes('node-c'), `round ${i}: node-c is not resent`);
      assert.equal(view.nodes[2]!.collected_at, formatTimestamp(at), 'its age on the page is the latest try');
      assert.equal(delta.hosts, undefined, 'the same declared hosts are not listed again');
      assert.ok(JSON.stringify(delta).length < 800, `a round costs ${JSON.stringify(delta).length} bytes`);
      prev = view;
    }
  });

  it('a node that recovers is sent whole, and one that fails again is sent whole', () => {
    const t1 = T0 + 2_000;
    const t2 = T0 + 4_000;
    const before = fleetAt(T0, [reply('node-a', T0), reply('node-b', T0), down()]);
    const back = fleetAt(t1, [reply('node-a', t1), reply('node-b', t1), reply('node-c', t1)]);
    const r1 = pageApplies(before, back);
    const c1 = r1.delta.nodes.find((n) => n.host === 'node-c');
    assert.ok(c1 && 'node' in c1 && c1.node.condition === undefined, 'recovered: the whole node, with records');
    const again = fleetAt(t2, [reply('node-a', t2), reply('node-b', t2), down()]);
    const r2 = pageApplies(r1.view, again);
    const c2 = r2.delta.nodes.find((n) => n.host === 'node-c');
    assert.ok(c2 && 'node' in c2 && c2.node.condition === 'unreachable', 'failed again: the whole failed node');
  });

  it('a node that fails differently (unreachable, then an answer that cannot be believed) is sent', () => {
    const t1 = T0 + 2_000;
    const before = fleetAt(T0, [reply('node-a', T0), reply('node-b', T0), down()]);
    const garbled: NodeAnswer = { kind: 'reply', data: new TextEncoder().encode('{"schema":') };
    const next = fleetAt(t1, [reply('node-a', t1), reply('node-b', t1), garbled]);
    const { delta } = pageApplies(before, next);
    const c = delta.nodes.find((n) => n.host === 'node-c');
    assert.ok(c && 'node' in c && c.node.condition === 'malformed');
  });

  it('a failed node dated apart from the fleet read (another fleet controller) is sent when its date moves', () => {
    const before = fleetAt(T0, [reply('node-a', T0), reply('node-b', T0), down()]);
    const next = fleetAt(T0 + 2_000, [reply('node-a', T0), reply('node-b', T0), down()]);
    // Its own date, not the fleet's: the page cannot guess it, so it travels.
    const own = {
      ...next,
      nodes: next.nodes.map((n, i) => (i === 2 ? { ...n, collected_at: formatTimestamp(T0 + 1_000) } : n)),
    };
    const { delta } = pageApplies(before, own);
    assert.ok(hostsIn(delta).includes('node-c'));
    // And the reverse: a node dated on its own before, now at the fleet's read.
    const ownBefore = {
      ...before,
      nodes: before.nodes.map((n, i) => (i === 2 ? { ...n, collected_at: formatTimestamp(T0 - 5_000) } : n)),
    };
    assert.ok(hostsIn(pageApplies(ownBefore, next).delta).includes('node-c'));
  });

  it('declared hosts travel only when they change (order, a node added or gone)', () => {
    const t1 = T0 + 2_000;
    const before = fleetAt(T0, [reply('node-a', T0), reply('node-b', T0), down()]);
    const two = composeFleet(DECLARED.slice(0, 2), [reply('node-a', t1), reply('node-b', t1)], F, t1);
    assert.deepEqual(pageApplies(before, two).delta.hosts, ['node-a', 'node-b']);
    const swapped = composeFleet(
      [DECLARED[1]!, DECLARED[0]!, DECLARED[2]!],
      [reply('node-b', t1), reply('node-a', t1), down()],
      F,
      t1,
    );
    assert.deepEqual(pageApplies(before, swapped).delta.hosts, ['node-b', 'node-a', 'node-c']);
  });

  it('a sleeping node stays out of the deltas while it sleeps', () => {
    const declared = [...DECLARED.slice(0, 2), { hostId: 'node-c', sleeping: true }];
    const at = (t: number) =>
      composeFleet(declared, [reply('node-a', t), reply('node-b', t), { kind: 'sleeping' }], F, t);
    const { delta } = pageApplies(at(T0), at(T0 + 2_000));
    assert.deepEqual(hostsIn(delta), ['node-a', 'node-b']);
  });
});
