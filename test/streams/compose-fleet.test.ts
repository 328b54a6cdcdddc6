import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkFleetResult, type NodeResult } from '../../src/schema/envelopes.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import type { NodeAnswer } from '../../src/schema/answer-checks.js';
import { composeFleet } from '../../src/streams/compose-fleet.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, enc, rec } from '../support/records.js';
import type { Owner } from '../../src/schema/enums.js';

const ALL: Owner[] = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];
function nodeResult(host: string, n: number, offset = 0): NodeResult {
  const s = createNodeSnapshot(host);
  for (const owner of ALL) {
    const upserts =
      owner === 'media'
        ? Array.from({ length: n }, (_, i) => rec(host, 'media', `j${i}`, { at: T0 - offset - i }))
        : [];
    foldBatch(s, batch(host, owner, { seq: 1, upserts }));
  }
  return queryNode(s, resolveFilters({ limit: 1000 }), T0, { staleAfterMs: 30_000, owners: CONTROLLER_OWNERS });
}
const reply = (v: unknown): NodeAnswer => ({ kind: 'reply', data: enc(v) });
const F = resolveFilters({});

describe('fleet composition', () => {
  it('a node reply that claims more than its sources support is held to them; a reshaped one is malformed', () => {
    const good = nodeResult('a', 1);
    // A router source that is unavailable with an unknown count, under a node that says "complete".
    const lying = {
      ...good,
      status: 'complete',
      truncation: { returned: 1, omitted: 0 },
      sources: good.sources.map((x) =>
        x.owner === 'router'
          ? { ...x, status: 'unavailable', reason: 'timeout', truncation: { returned: 0, omitted: null } }
          : x,
      ),
    };
    const r = composeFleet([{ hostId: 'a' }], [reply(lying)], F, T0);
    assert.equal(r.nodes[0]!.status, 'partial');
    assert.deepEqual(r.nodes[0]!.truncation, { returned: 1, omitted: null });
    assert.equal(r.status, 'partial');
    // Asked only about media, the router's state does not count (as in a node's own answer).
    assert.equal(
      composeFleet([{ hostId: 'a' }], [reply(lying)], resolveFilters({ owner: 'media' }), T0).nodes[0]!.status,
      'complete',
    );
    // All relevant sources unavailable: the node is unavailable whatever it says.
    const dark = {
      ...good,
      status: 'complete',
      sources: good.sources.map((x) => ({
        ...x,
        status: 'unavailable',
        reason: 'no-observation',
        records: [],
        truncation: { returned: 0, omitted: null },
      })),
      truncation: { returned: 0, omitted: 0 },
    };
    assert.equal(composeFleet([{ hostId: 'a' }], [reply(dark)], F, T0).nodes[0]!.status, 'unavailable');
    // No sources, sources out of order, or a condition of its own: not a controller's answer.
    const shapes = [
      { ...good, sources: [], truncation: { returned: 0, omitted: 0 } },
      { ...good, sources: [...good.sources].reverse() },
      { ...good, condition: 'sleeping' },
    ];
    for (const v of shapes)
      assert.equal(
        composeFleet([{ hostId: 'a' }], [reply(v)], F, T0).nodes[0]!.condition,
        'malformed',
        JSON.stringify(v).slice(0, 120),
      );
  });

  it('a source that says complete while its count is unknown or short is partial in the fleet (complete means no known omission)', () => {
    const good = nodeResult('a', 1);
    const claims = {
      ...good,
      status: 'complete',
      sources: good.sources.map((x) =>
        x.owner === 'router' ? { ...x, status: 'complete', truncation: { returned: 0, omitted: null } } : x,
      ),
    };
    const n = composeFleet([{ hostId: 'a' }], [reply(claims)], F, T0).nodes[0]!;
    assert.equal(n.sources.find((x) => x.owner === 'router')!.status, 'partial');
    assert.equal(
      n.sources.find((x) => x.owner === 'media')!.status,
      'complete',
      'the other sources keep what they support',
    );
    assert.equal(n.status, 'partial');
    const short = {
      ...good,
      sources: good.sources.map((x) =>
        x.owner === 'router' ? { ...x, status: 'complete', truncation: { returned: 0, omitted: 3 } } : x,
      ),
      truncation: { returned: 1, omitted: 3 },
    };
    assert.equal(
      composeFleet([{ hostId: 'a' }], [reply(short)], F, T0).nodes[0]!.sources.find((x) => x.owner === 'router')!
        .status,
      'partial',
    );
    // A node that says it left out fewer than its sources did is held to its sources.
    const fewer = { ...short, status: 'complete', truncation: { returned: 1, omitted: 0 } };
    const held = composeFleet([{ hostId: 'a' }], [reply(fewer)], F, T0).nodes[0]!;
    assert.deepEqual([held.status, held.truncation], ['partial', { returned: 1, omitted: 3 }]);
  });

  it('keeps one entry per declared node, in order, with the right condition', () => {
    const declared = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((hostId) => ({ hostId }));
    const answers: NodeAnswer[] = [
      reply(nodeResult('a', 2)),
      { kind: 'unreachable' },
      reply(nodeResult('other', 1)),
      { kind: 'reply', data: new TextEncoder().encode('{"schema":"svc-workloads/v1", "broken"') },
      reply({ schema: 'svc-workloads/v2', expected_host: 'e' }),
      { kind: 'sleeping' },
      reply({ ...nodeResult('g', 1), truncation: { returned: 5, omitted: 0 } }),
    ];
    const r = composeFleet(declared, answers, F, T0);
    assert.ok(checkFleetResult.Check(r));
    assert.deepEqual(
      r.nodes.map((n) => n.expected_host),
      ['a', 'b', 'c', 'd', 'e', 'f', 'g'],
    );
    assert.deepEqual(
      r.nodes.map((n) => n.condition),
      [undefined, 'unreachable', 'wrong-identity', 'malformed', 'incompatible', 'sleeping', 'malformed'],
    );
    for (const n of r.nodes.slice(1)) {
      assert.equal(n.status, 'unavailable');
      assert.deepEqual(n.sources, []);
      assert.deepEqual(n.truncation, { returned: 0, omitted: null });
    }
    assert.equal(r.status, 'partial', 'failed nodes never make an idle complete fleet');
    assert.equal(r.truncation.omitted, null);
    assert.equal(r.truncation.returned, 2, "the healthy node's records are intact");
  });

  it('a record claiming another host inside a node reply is wrong-identity, never data', () => {
    const forged = nodeResult('a', 1);
    forged.sources[3]!.records[0] = { ...forged.sources[3]!.records[0]!, host: 'b' };
    const r = composeFleet([{ hostId: 'a' }], [reply(forged)], F, T0);
    assert.equal(r.nodes[0]!.condition, 'wrong-identity');
    assert.equal(r.status, 'unavailable');
  });

  it('a node reply that breaks the record rules, repeats a record or answers what was not asked is malformed, never data', () => {
    const media = 3; // sources[3] is media, holding nodeResult's records
    const mutate = (change: (v: NodeResult) => void): NodeResult => {
      const v = nodeResult('a', 2);
      change(v);
      return v;
    };
    const bad: Array<[string, NodeResult | string, ReturnType<typeof resolveFilters>]> = [
      [
        'owner/kind pairing',
        mutate((v) => (v.sources[media]!.records[0] = { ...v.sources[media]!.records[0]!, kind: 'benchmark-job' })),
        F,
      ],
      [
        'outcome on an active record',
        mutate((v) => (v.sources[media]!.records[0] = { ...v.sources[media]!.records[0]!, outcome: 'success' })),
        F,
      ],
      [
        'an unavailable source with records',
        mutate((v) =>
          Object.assign(v.sources[media]!, {
            status: 'unavailable',
            reason: 'timeout',
            truncation: { returned: 2, omitted: null },
          }),
        ),
        F,
      ],
      ['one record twice', mutate((v) => (v.sources[media]!.records[1] = v.sources[media]!.records[0]!)), F],
      ['records of an owner not asked for', nodeResult('a', 2), resolveFilters({ owner: 'benchmark' })],
      ['records in a state not asked for', nodeResult('a', 2), resolveFilters({ state: 'terminal' })],
      ['more records than the limit', nodeResult('a', 2), resolveFilters({ limit: 1 })],
      [
        'a stale active record under active_only',
        mutate(
          (v) => (v.sources[media]!.records[0] = { ...v.sources[media]!.records[0]!, observation_quality: 'stale' }),
        ),
        resolveFilters({ active_only: true }),
      ],
      [
        'a record that ended before recent_seconds',
        mutate((v) => {
          const r = v.sources[media]!.records[0]!;
          const ended = new Date(T0 - 3_600_000).toISOString();
          v.sources[media]!.records[0] = {
            ...r,
            state: 'terminal',
            phase: 'completed',
            outcome: 'success',
            created_at: ended,
            updated_at: ended,
            source_timestamp: ended,
          };
        }),
        resolveFilters({ recent_seconds: 60 }),
      ],
      [
        'a member named twice',
        JSON.stringify(nodeResult('a', 2)).replace('"expected_host":"a"', '"expected_host":"z","expected_host":"a"'),
        F,
      ],
    ];
    for (const [what, v, f] of bad) {
      const answer: NodeAnswer =
        typeof v === 'string' ? { kind: 'reply', data: new TextEncoder().encode(v) } : reply(v);
      const r = composeFleet([{ hostId: 'a' }], [answer], f, T0);
      assert.equal(r.nodes[0]!.condition, 'malformed', what);
      assert.equal(r.nodes[0]!.sources.length, 0, what);
    }
    // The same reply unchanged is data, also under active_only and a short recent window.
    assert.equal(composeFleet([{ hostId: 'a' }], [reply(nodeResult('a', 2))], F, T0).nodes[0]!.condition, undefined);
    assert.equal(
      composeFleet(
        [{ hostId: 'a' }],
        [reply(nodeResult('a', 2))],
        resolveFilters({ active_only: true, recent_seconds: 60 }),
        T0,
      ).nodes[0]!.condition,
      undefined,
    );
  });

  it('applies the limit across nodes, newest first, counting what it cut', () => {
    const r = composeFleet(
      [{ hostId: 'a' }, { hostId: 'b' }],
      [reply(nodeResult('a', 5, 0)), reply(nodeResult('b', 5, 100))],
      resolveFilters({ limit: 6 }),
      T0,
    );
    assert.equal(r.truncation.returned, 6);
    assert.equal(r.nodes[0]!.truncation.returned, 5, 'the newer node keeps all of its records');
    assert.equal(r.nodes[1]!.truncation.returned, 1);
    // Every node reported an unknown count (owners without records are fine, but node b's cut is counted).
    assert.equal(r.nodes[1]!.status, 'partial');
  });

  it('an empty declared fleet is complete and empty', () => {
    const r = composeFleet([], [], F, T0);
    assert.equal(r.status, 'complete');
    assert.deepEqual(r.truncation, { returned: 0, omitted: 0 });
  });

  it('all nodes failed: unavailable', () => {
    const r = composeFleet(
      [{ hostId: 'a' }, { hostId: 'b', sleeping: true }],
      [{ kind: 'unreachable' }, { kind: 'sleeping' }],
      F,
      T0,
    );
    assert.equal(r.status, 'unavailable');
  });
});
