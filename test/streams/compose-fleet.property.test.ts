import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { OWNERS, type NodeCondition, type Owner, type ResultStatus } from '../../src/schema/enums.js';
import { checkFleetResult, type FleetResult, type NodeResult } from '../../src/schema/envelopes.js';
import { resolveFilters, type FilterArgs, type Filters } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { nodeResultJson } from '../../src/schema/result-json.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { classifyAnswer, type NodeAnswer } from '../../src/schema/answer-checks.js';
import { FleetComposer, composeFleet, failedNode, type DeclaredNode } from '../../src/streams/compose-fleet.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot, type NodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, done, rec } from '../support/records.js';

const RUNS = { numRuns: 150 };
const enc = new TextEncoder();

/** One owner on one node: never heard, or heard with some records (times in seconds before T0, few distinct, so ties happen). */
type SourceSpec = { heard: false } | { heard: true; omitted: number; records: { ago: number; terminal: boolean }[] };
type NodeSpec = { kind: 'alive'; sources: SourceSpec[] } | { kind: 'unreachable' } | { kind: 'garbage' };

const sourceArb: fc.Arbitrary<SourceSpec> = fc.oneof(
  { weight: 1, arbitrary: fc.constant({ heard: false as const }) },
  {
    weight: 6,
    arbitrary: fc.record({
      heard: fc.constant(true as const),
      // An owner whose window overflowed: its count is unknown (`omitted: null` in answers).
      omitted: fc.constantFrom(0, 0, 0, 3),
      records: fc.array(fc.record({ ago: fc.integer({ min: 0, max: 40 }), terminal: fc.boolean() }), { maxLength: 30 }),
    }),
  },
);
const nodeArb: fc.Arbitrary<NodeSpec> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('alive' as const),
      sources: fc.array(sourceArb, { minLength: 6, maxLength: 6 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'unreachable' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'garbage' as const }) },
);
const argsArb: fc.Arbitrary<FilterArgs> = fc.record(
  { limit: fc.integer({ min: 1, max: 120 }), active_only: fc.boolean(), owner: fc.constantFrom(...OWNERS) },
  { requiredKeys: [] },
);

function snapshotOf(host: string, spec: SourceSpec[]): NodeSnapshot {
  const s = createNodeSnapshot(host);
  OWNERS.forEach((owner: Owner, o) => {
    const src = spec[o]!;
    if (!src.heard) return;
    const upserts = src.records.map((r, i) => {
      const at = T0 - r.ago * 1000;
      // Recipe and manifest records are never terminal; the others may be.
      return r.terminal && owner !== 'recipe' && owner !== 'manifest'
        ? done(host, owner, `n${i}`, at)
        : rec(host, owner, `n${i}`, { at });
    });
    foldBatch(s, batch(host, owner, { seq: 1, at: T0, upserts, omitted: src.omitted }));
  });
  return s;
}

/** What each declared node answers a fleet read with filters `f` (a node controller's `serveNodeWorkloads`). */
function answersOf(specs: NodeSpec[], f: Filters): NodeAnswer[] {
  return specs.map((n, i): NodeAnswer => {
    if (n.kind === 'unreachable') return { kind: 'unreachable' };
    if (n.kind === 'garbage') return { kind: 'reply', data: enc.encode('{"schema":"svc-workloads/v1",') };
    const result = queryNode(snapshotOf(`node-${i}`, n.sources), f, T0, {
      staleAfterMs: 30_000,
      owners: CONTROLLER_OWNERS,
    });
    return { kind: 'reply', data: enc.encode(nodeResultJson(result)) };
  });
}
const declaredOf = (specs: NodeSpec[]): DeclaredNode[] => specs.map((_, i) => ({ hostId: `node-${i}` }));

/**
 * The composition as it was before answers were composed on arrival, written out plainly:
 * check every answer, then keep the newest `cap` (the limit) records across nodes and count
 * the rest.
 */
function reference(
  declared: DeclaredNode[],
  answers: NodeAnswer[],
  f: Filters,
  now: number,
  cap = Math.min(f.limit, 1000),
): FleetResult {
  const nodes = declared.map((d, i) => {
    const c = classifyAnswer(d.hostId, answers[i]!, f);
    return typeof c === 'string' ? failedNode(d.hostId, c as NodeCondition, now) : c;
  });
  const all = nodes.flatMap((n, node) =>
    n.sources.flatMap((s) => s.records.map((r) => ({ r, t: Date.parse(r.updated_at), node }))),
  );
  all.sort((a, b) => b.t - a.t || (a.r.id < b.r.id ? -1 : a.r.id > b.r.id ? 1 : a.node - b.node));
  const keep = new Set<WorkloadRecord>(all.slice(0, cap).map((x) => x.r));
  for (const n of nodes) {
    let cut = 0;
    for (const s of n.sources) {
      const kept = s.records.filter((r) => keep.has(r));
      const dropped = s.records.length - kept.length;
      if (dropped === 0) continue;
      cut += dropped;
      s.records = kept;
      s.truncation = {
        returned: kept.length,
        omitted: s.truncation.omitted === null ? null : s.truncation.omitted + dropped,
      };
      if (s.status === 'complete') s.status = 'partial';
    }
    if (cut > 0) {
      n.truncation = {
        returned: n.truncation.returned - cut,
        omitted: n.truncation.omitted === null ? null : n.truncation.omitted + cut,
      };
      if (n.status === 'complete') n.status = 'partial';
    }
  }
  let returned = 0;
  let omitted: number | null = 0;
  for (const n of nodes) {
    returned += n.truncation.returned;
    omitted = omitted === null || n.truncation.omitted === null ? null : omitted + n.truncation.omitted;
  }
  const status: ResultStatus =
    nodes.length > 0 && nodes.every((n) => n.status === 'unavailable')
      ? 'unavailable'
      : nodes.every((n) => n.status === 'complete') && omitted === 0
        ? 'complete'
        : 'partial';
  return {
    schema: 'svc-workloads/v1',
    status,
    collected_at: formatTimestamp(now),
    nodes,
    truncation: { returned, omitted },
  };
}

describe('fleet composition (properties)', () => {
  it('answers composed as they arrive, in any order, give the result of composing them all at once', () => {
    fc.assert(
      fc.property(
        fc.array(nodeArb, { minLength: 1, maxLength: 7 }),
        argsArb,
        fc.infiniteStream(fc.nat()),
        (specs, args, rnd) => {
          const f = resolveFilters(args);
          const declared = declaredOf(specs);
          const expected = reference(declared, answersOf(specs, f), f, T0);
          // Some arrival order: a shuffle driven by the generated stream.
          const order = declared.map((_, i) => i);
          const it = rnd[Symbol.iterator]();
          for (let i = order.length - 1; i > 0; i--) {
            const j = it.next().value % (i + 1);
            [order[i], order[j]] = [order[j]!, order[i]!];
          }
          const answers = answersOf(specs, f);
          const c = new FleetComposer(declared, f);
          for (const i of order) c.add(i, answers[i]!);
          const got = c.result(T0);
          assert.deepEqual(got, expected);
          assert.deepEqual(composeFleet(declared, answersOf(specs, f), f, T0), expected);
          assert.ok(checkFleetResult.Check(got));
        },
      ),
      RUNS,
    );
  });

  it("nodes asked with the fleet's own limit give the same fleet result as nodes asked for everything they may return, counts included", () => {
    fc.assert(
      fc.property(fc.array(nodeArb, { minLength: 1, maxLength: 7 }), argsArb, (specs, args) => {
        const f = resolveFilters(args);
        const declared = declaredOf(specs);
        // What the fleet does: each node gets the fleet's filters, its limit included.
        const pushed = composeFleet(declared, answersOf(specs, f), f, T0);
        // Without the pushdown: each node returns up to 1,000 records (checked as answers to
        // that), and the fleet cuts them all to its limit.
        const all = { ...f, limit: 1000 };
        const wide = reference(declared, answersOf(specs, all), all, T0, f.limit);
        assert.deepEqual(pushed, wide);
        const alive = pushed.nodes.filter((n: NodeResult) => n.condition === undefined);
        assert.equal(
          pushed.truncation.returned,
          alive.reduce((a, n) => a + n.truncation.returned, 0),
        );
      }),
      RUNS,
    );
  });

  it('a node answering twice, or one never answered, is counted once or as unreachable', () => {
    const specs: NodeSpec[] = [
      {
        kind: 'alive',
        sources: OWNERS.map(() => ({ heard: true, omitted: 0, records: [{ ago: 1, terminal: false }] })),
      },
      { kind: 'alive', sources: [] },
    ];
    const f = resolveFilters({});
    const c = new FleetComposer(declaredOf(specs), f);
    const [a] = answersOf(specs.slice(0, 1), f);
    c.add(0, a!);
    c.add(0, { kind: 'unreachable' });
    const r = c.result(T0);
    assert.equal(r.nodes[0]!.truncation.returned, 6);
    assert.equal(r.nodes[1]!.condition, 'unreachable');
  });
});
