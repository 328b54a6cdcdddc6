import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  KIND_OF_OWNER,
  KINDS,
  OUTCOMES,
  OWNERS,
  PHASES_OF_STATE,
  QUALITIES,
  RECIPE_QUALITIES,
  SOURCE_REASONS,
  STATES,
  STATES_OF_KIND,
  type Outcome,
  type Owner,
  type Phase,
  type Quality,
  type ResultStatus,
  type SourceReason,
  type State,
} from '../../src/schema/enums.js';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import { nodeResultJson } from '../../src/schema/result-json.js';
import { resolveFilters, type FilterArgs, type Filters } from '../../src/schema/filters.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { isValidRecord, type WorkloadRecord } from '../../src/schema/record.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot, DEFAULT_MIRROR_CAP } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, ROUTER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { T0, batch, rec } from '../support/records.js';

const H = 'node-a';
const NOW = T0;
const DAY_MS = 86_400_000;
const SOURCE_CAP = 200;
const NODE_CAP = 1000;

// Written out here rather than imported, so that the reference does not share src's tables.
const ACTIVE: ReadonlySet<State> = new Set(['checking', 'admitted', 'dispatched', 'streaming', 'queued', 'running']);

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/** How one record looks, relative to NOW. */
interface RecSpec {
  readonly state: State;
  readonly phase: Phase;
  readonly outcome: Outcome | undefined;
  readonly quality: Quality;
  /** now - updated_at; a few are negative (an owner clock slightly ahead). */
  readonly updatedAgo: number;
  /** now - the record's own source_timestamp. */
  readonly sourceAgo: number;
  readonly createdBefore: number;
}

/** How far the node can trust one owner, as the fold will have seen it. */
type SourceSpec =
  | { readonly heard: false }
  | {
      readonly heard: true;
      /** now - the batch's source_timestamp. */
      readonly age: number;
      readonly status: ResultStatus;
      readonly reason: SourceReason | undefined;
      readonly omitted: number | null;
      /** A delta after the full batch skips a seq. */
      readonly gap: boolean;
      readonly records: readonly RecSpec[];
    };

interface Scenario {
  readonly staleAfterMs: number;
  readonly mirrorCap: number;
  readonly owners: readonly Owner[];
  readonly sources: Readonly<Record<Owner, SourceSpec>>;
  readonly args: FilterArgs;
}

function recSpec(owner: Owner, stale: number): fc.Arbitrary<RecSpec> {
  const recipeLike = owner === 'recipe' || owner === 'manifest';
  const states = [...STATES_OF_KIND[KIND_OF_OWNER[owner]]];
  const qualities = recipeLike ? [...RECIPE_QUALITIES] : [...QUALITIES];
  return fc
    .record({
      state: fc.constantFrom(...states),
      pick: fc.nat(),
      outcome: fc.constantFrom(...OUTCOMES),
      // Owner-reported `stale` is valid: an owner may label its own observation.
      quality: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom(...qualities.filter((q) => q !== 'stale')) },
        { weight: 1, arbitrary: fc.constant<Quality>('stale') },
      ),
      updatedAgo: fc.oneof(
        // Coarse seconds make updated_at ties common, so the id tie-break is exercised.
        fc.integer({ min: -2, max: 20 }).map((s) => s * 1000),
        fc.constantFrom(3_600_000, 3_600_001, DAY_MS, DAY_MS + 1),
        fc.integer({ min: 0, max: 2 * DAY_MS }),
      ),
      sourceAgo: fc.oneof(fc.constantFrom(0, stale, stale + 1), fc.integer({ min: 0, max: 4 * stale })),
      createdBefore: fc.integer({ min: 0, max: DAY_MS }),
    })
    .map(({ state, pick, outcome, ...rest }) => {
      const phases = PHASES_OF_STATE[state];
      // Active, configured and absent records carry no outcome; terminal, unavailable and unsupported do.
      const needsOutcome = state === 'terminal' || state === 'unavailable' || state === 'unsupported';
      return { state, phase: phases[pick % phases.length]!, outcome: needsOutcome ? outcome : undefined, ...rest };
    });
}

/** Small windows most of the time, big ones (past the 200 and 1000 caps) often enough. */
function recSpecs(owner: Owner, stale: number): fc.Arbitrary<RecSpec[]> {
  const one = recSpec(owner, stale);
  // Plain arrays (not a chained length) so that a counterexample shrinks to a few records.
  return fc.oneof(
    { weight: 3, arbitrary: fc.array(one, { maxLength: 12 }) },
    { weight: 2, arbitrary: fc.array(one, { maxLength: 320, size: 'max' }) },
  );
}

function sourceSpec(owner: Owner, stale: number): fc.Arbitrary<SourceSpec> {
  const heard = fc.record({
    heard: fc.constant(true as const),
    age: fc.oneof(
      { weight: 6, arbitrary: fc.integer({ min: 0, max: stale }) },
      { weight: 1, arbitrary: fc.constantFrom(stale, stale + 1, 10 * stale, 10 * stale + 1) },
      { weight: 2, arbitrary: fc.integer({ min: stale + 1, max: 12 * stale }) },
    ),
    status: fc.oneof(
      { weight: 6, arbitrary: fc.constant<ResultStatus>('complete') },
      { weight: 1, arbitrary: fc.constantFrom<ResultStatus>('partial', 'unavailable') },
    ),
    reason: fc.option(fc.constantFrom(...SOURCE_REASONS), { nil: undefined }),
    omitted: fc.oneof(
      { weight: 6, arbitrary: fc.constant<number | null>(0) },
      { weight: 1, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 50 }) },
    ),
    gap: fc.oneof({ weight: 6, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
    records: recSpecs(owner, stale),
  });
  return fc.oneof({ weight: 8, arbitrary: heard }, { weight: 1, arbitrary: fc.constant({ heard: false as const }) });
}

/** Present now and then: with every filter at 50%, few queries would select enough to hit the caps. */
const sometimes = <T>(a: fc.Arbitrary<T>, weight: number): fc.Arbitrary<T | undefined> =>
  fc.oneof({ weight: 10 - weight, arbitrary: fc.constant(undefined) }, { weight, arbitrary: a });

const filterArgs: fc.Arbitrary<FilterArgs> = fc
  .record({
    owner: sometimes(fc.constantFrom(...OWNERS), 2),
    kind: sometimes(fc.constantFrom(...KINDS), 1),
    state: sometimes(fc.constantFrom(...STATES), 2),
    // Records are all on H (decodeBatch drops others), so another host must select nothing.
    host: sometimes(fc.constantFrom(H, H, 'node-b'), 2),
    active_only: sometimes(fc.boolean(), 3),
    recent_seconds: sometimes(fc.oneof(fc.constantFrom(1, 60, 3600, 86_400), fc.integer({ min: 1, max: 86_400 })), 5),
    limit: sometimes(fc.oneof(fc.constantFrom(1, 50, 199, 200, 201, 1000), fc.integer({ min: 1, max: 1000 })), 7),
  })
  // Only present filters travel (CONTRACT.md: no nulls for absent options).
  .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as FilterArgs);

const scenario: fc.Arbitrary<Scenario> = fc.constantFrom(30_000, 10_000).chain((stale) =>
  fc.record({
    staleAfterMs: fc.constant(stale),
    // A small mirror cap sometimes, so that eviction (overflow) makes counts unknown.
    mirrorCap: fc.oneof(
      { weight: 8, arbitrary: fc.constant(DEFAULT_MIRROR_CAP) },
      { weight: 1, arbitrary: fc.integer({ min: 20, max: 250 }) },
    ),
    owners: fc.oneof(
      { weight: 4, arbitrary: fc.constant(CONTROLLER_OWNERS) },
      { weight: 1, arbitrary: fc.constant(ROUTER_OWNERS) },
    ),
    sources: fc.record({
      router: sourceSpec('router', stale),
      controller: sourceSpec('controller', stale),
      benchmark: sourceSpec('benchmark', stale),
      media: sourceSpec('media', stale),
      recipe: sourceSpec('recipe', stale),
      manifest: sourceSpec('manifest', stale),
    }),
    args: filterArgs,
  }),
);

// ---------------------------------------------------------------------------------------------
// Building the snapshot through the real fold
// ---------------------------------------------------------------------------------------------

function toRecord(owner: Owner, i: number, s: RecSpec): WorkloadRecord {
  const updated = NOW - s.updatedAgo;
  const r = rec(H, owner, `n${i}`, {
    state: s.state,
    phase: s.phase,
    observation_quality: s.quality,
    created_at: formatTimestamp(updated - s.createdBefore),
    updated_at: formatTimestamp(updated),
    source_timestamp: formatTimestamp(NOW - s.sourceAgo),
  });
  if (s.outcome !== undefined) r.outcome = s.outcome;
  return r;
}

interface Built {
  readonly snap: ReturnType<typeof createNodeSnapshot>;
  /** The records each owner's mirror holds after folding (what the reference reads). */
  readonly held: Record<Owner, WorkloadRecord[]>;
  readonly overflow: Record<Owner, boolean>;
}

function build(sc: Scenario): Built {
  const snap = createNodeSnapshot(H, sc.mirrorCap);
  const held = {} as Record<Owner, WorkloadRecord[]>;
  const overflow = {} as Record<Owner, boolean>;
  for (const owner of OWNERS) {
    const spec = sc.sources[owner];
    held[owner] = [];
    overflow[owner] = false;
    if (!spec.heard) continue;
    const records = spec.records.map((s, i) => toRecord(owner, i, s));
    for (const r of records) assert.ok(isValidRecord(r), `generator made an invalid record ${JSON.stringify(r)}`);
    const at = NOW - spec.age;
    const common = { at, status: spec.status, omitted: spec.omitted, ...(spec.reason ? { reason: spec.reason } : {}) };
    foldBatch(snap, batch(H, owner, { ...common, seq: 1, full: true, upserts: records }));
    // An empty delta that skips seq 2: the fold must distrust the window until the next full batch.
    if (spec.gap) foldBatch(snap, batch(H, owner, { ...common, seq: 3, full: false, upserts: [] }));
    const mirror = snap.sources[owner].records;
    const byId = new Map(records.map((r) => [r.id, r]));
    for (const id of mirror.keys()) assert.ok(byId.has(id), 'the fold invented a record');
    overflow[owner] = records.length > sc.mirrorCap;
    if (!overflow[owner]) assert.equal(mirror.size, records.length, 'a full batch below the cap is held whole');
    else assert.equal(mirror.size, sc.mirrorCap, 'an overflowing window is cut to the cap');
    held[owner] = [...mirror.keys()].map((id) => byId.get(id)!);
  }
  return { snap, held, overflow };
}

// ---------------------------------------------------------------------------------------------
// The naive reference: filter everything, sort fully, slice
// ---------------------------------------------------------------------------------------------

interface RefSource {
  readonly owner: Owner;
  readonly relevant: boolean;
  readonly status: ResultStatus;
  /** Matching records, fully sorted, with the quality they must be emitted with. */
  readonly matched: readonly { rec: WorkloadRecord; quality: Quality }[];
  readonly countKnown: boolean;
}

const ms = (t: string): number => Date.parse(t);

function newestFirst(a: WorkloadRecord, b: WorkloadRecord): number {
  const d = ms(b.updated_at) - ms(a.updated_at);
  if (d !== 0) return d;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** CONTRACT.md freshness: fresh up to the threshold, stale up to 10x, then unavailable. */
function refHealth(
  spec: SourceSpec,
  overflow: boolean,
  stale: number,
): { status: ResultStatus; stale: boolean; countKnown: boolean } {
  if (!spec.heard) return { status: 'unavailable', stale: false, countKnown: false };
  if (spec.age > 10 * stale || spec.status === 'unavailable')
    return { status: 'unavailable', stale: false, countKnown: false };
  const isStale = spec.age > stale;
  const known = !isStale && !spec.gap && !overflow && spec.status === 'complete' && spec.omitted === 0;
  return { status: known ? 'complete' : 'partial', stale: isStale, countKnown: known };
}

function reference(
  sc: Scenario,
  built: Built,
  f: Filters,
): { sources: RefSource[]; kept: Map<string, Quality>; keptOrder: string[] } {
  const sources = sc.owners.map((owner): RefSource => {
    const health = refHealth(sc.sources[owner], built.overflow[owner], sc.staleAfterMs);
    const relevant =
      (f.owner === undefined || f.owner === owner) && (f.kind === undefined || f.kind === KIND_OF_OWNER[owner]);
    const matched: { rec: WorkloadRecord; quality: Quality }[] = [];
    if (relevant && health.status !== 'unavailable') {
      for (const r of built.held[owner]) {
        const active = ACTIVE.has(r.state);
        const stale =
          health.stale ||
          (active && NOW - ms(r.source_timestamp) > sc.staleAfterMs) ||
          r.observation_quality === 'stale';
        if (f.state !== undefined && r.state !== f.state) continue;
        if (f.host !== undefined && r.host !== f.host) continue;
        if (f.active_only && !(active && !stale)) continue;
        if (r.state === 'terminal' && NOW - ms(r.updated_at) > f.recent_seconds * 1000) continue;
        matched.push({ rec: r, quality: stale ? 'stale' : r.observation_quality });
      }
    }
    matched.sort((a, b) => newestFirst(a.rec, b.rec));
    return { owner, relevant, status: health.status, matched, countKnown: health.countKnown };
  });
  const perSource = sources.flatMap((s) => s.matched.slice(0, Math.min(SOURCE_CAP, f.limit)));
  perSource.sort((a, b) => newestFirst(a.rec, b.rec));
  const top = perSource.slice(0, Math.min(NODE_CAP, f.limit));
  return { sources, kept: new Map(top.map((m) => [m.rec.id, m.quality])), keptOrder: top.map((m) => m.rec.id) };
}

// ---------------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------------

function sortedNewestFirst(rs: readonly WorkloadRecord[]): boolean {
  for (let i = 1; i < rs.length; i++) if (newestFirst(rs[i - 1]!, rs[i]!) >= 0) return false;
  return true;
}

function satisfies(r: WorkloadRecord, owner: Owner, f: Filters): boolean {
  if (r.owner !== owner || (f.owner !== undefined && r.owner !== f.owner)) return false;
  if (f.kind !== undefined && r.kind !== f.kind) return false;
  if (f.state !== undefined && r.state !== f.state) return false;
  if (f.host !== undefined && r.host !== f.host) return false;
  if (f.active_only && (!ACTIVE.has(r.state) || r.observation_quality === 'stale')) return false;
  if (r.state === 'terminal' && NOW - ms(r.updated_at) > f.recent_seconds * 1000) return false;
  return true;
}

function checkInvariants(sc: Scenario, res: NodeResult, f: Filters, ref: ReturnType<typeof reference>): void {
  assert.ok(checkNodeResult.Check(res), 'the result matches the NodeResult schema');
  assert.deepEqual(
    res.sources.map((s) => s.owner),
    [...sc.owners],
    'sources in contract order',
  );

  const all = res.sources.flatMap((s) => s.records);
  assert.equal(new Set(all.map((r) => r.id)).size, all.length, 'no record appears twice');
  assert.ok(all.length <= Math.min(f.limit, NODE_CAP), 'node total <= min(limit, 1000)');
  assert.equal(res.truncation.returned, all.length, 'node returned counts the records');
  assert.equal(
    res.truncation.returned,
    res.sources.reduce((n, s) => n + s.truncation.returned, 0),
    'node returned == sum of sources',
  );

  let sum: number | null = 0;
  let anyDoubt = false;
  let relevantCount = 0;
  let unavailableCount = 0;
  let allComplete = true;
  for (const [i, s] of res.sources.entries()) {
    const r = ref.sources[i]!;
    assert.ok(s.records.length <= SOURCE_CAP, 'a source returns at most 200');
    assert.equal(s.truncation.returned, s.records.length);
    assert.ok(sortedNewestFirst(s.records), `${s.owner}: newest updated_at first, ties by id`);
    for (const x of s.records)
      assert.ok(satisfies(x, s.owner, f), `${s.owner}: ${x.id} breaks the filters ${JSON.stringify(f)}`);
    if (s.status === 'unavailable') {
      assert.equal(s.records.length, 0, 'nothing is returned from an unavailable source');
      assert.equal(s.truncation.omitted, null, 'an unavailable source never counts what it left out');
      assert.notEqual(s.reason, undefined, 'an unavailable source says why');
    }
    if (s.truncation.omitted !== null) assert.ok(s.truncation.omitted >= 0);
    if (!r.relevant) {
      assert.equal(s.records.length, 0, 'a source the owner/kind filters exclude returns nothing');
      continue;
    }
    relevantCount++;
    if (s.status === 'unavailable') unavailableCount++;
    if (s.status !== 'complete') {
      allComplete = false;
      anyDoubt = true;
    }
    sum = sum === null || s.truncation.omitted === null ? null : sum + s.truncation.omitted;
  }
  assert.equal(res.truncation.omitted, sum, 'node omitted == sum of relevant sources, or null when any is unknown');
  if (anyDoubt)
    assert.notEqual(res.truncation.omitted, 0, 'omitted is never 0 while a relevant source is partial or unavailable');
  if (res.status === 'complete')
    assert.ok(
      allComplete && res.truncation.omitted === 0,
      'complete means every relevant source complete and nothing omitted',
    );
  assert.equal(
    res.status === 'unavailable',
    relevantCount > 0 && unavailableCount === relevantCount,
    'unavailable iff every relevant source is',
  );

  // Against the naive reference: the same records, in the same order, with the same labels.
  // Merged across sources, the node's records are the reference's global top, newest first.
  assert.deepEqual(
    [...all].sort(newestFirst).map((x) => x.id),
    ref.keptOrder,
    'the node returns exactly the top of the naive reference',
  );
  res.sources.forEach((s, i) => {
    const r = ref.sources[i]!;
    const want = ref.keptOrder.filter((id) => r.matched.some((m) => m.rec.id === id));
    assert.deepEqual(
      s.records.map((x) => x.id),
      want,
      `${s.owner}: records and order match the reference`,
    );
    for (const x of s.records)
      assert.equal(x.observation_quality, ref.kept.get(x.id), `${s.owner}: quality label of ${x.id}`);
    assert.equal(
      s.status,
      r.status === 'complete' && r.matched.length > s.records.length ? 'partial' : r.status,
      `${s.owner}: status`,
    );
    assert.equal(
      s.truncation.omitted,
      r.countKnown ? r.matched.length - s.records.length : null,
      `${s.owner}: omitted`,
    );
  });
}

function run(sc: Scenario): void {
  const built = build(sc);
  const f = resolveFilters(sc.args);
  const res = queryNode(built.snap, f, NOW, { staleAfterMs: sc.staleAfterMs, owners: sc.owners });
  checkInvariants(sc, res, f, reference(sc, built, f));
  // The text the servers send is JSON.stringify's, byte for byte, the first time and when
  // the same records are served again (their cached texts).
  assert.equal(nodeResultJson(res), JSON.stringify(res));
  const again = queryNode(built.snap, f, NOW, { staleAfterMs: sc.staleAfterMs, owners: sc.owners });
  assert.equal(nodeResultJson(again), JSON.stringify(again));
}

// The assertion's own message tells what broke; fast-check hides it unless asked. Shrinking
// a window of hundreds of records can take minutes, so it is cut off: the report then shows
// the smallest counterexample found so far. (On a machine so slow that the runs themselves
// pass the limit, fewer runs are made; that is not reported as a failure.)
const opts = (numRuns: number) => ({ numRuns, includeErrorInReport: true, interruptAfterTimeLimit: 30_000 });

describe('node query properties', () => {
  it('random snapshots and filters keep every envelope invariant and match the naive reference', () => {
    fc.assert(fc.property(scenario, run), opts(150));
  });

  it('the same holds for healthy, full nodes queried with the default filters', () => {
    // Dense, fresh, complete sources: the caps and the cross-source cut decide everything here.
    const healthy = fc.record({
      router: recSpecs('router', 30_000),
      controller: recSpecs('controller', 30_000),
      benchmark: recSpecs('benchmark', 30_000),
      media: recSpecs('media', 30_000),
      recipe: recSpecs('recipe', 30_000),
      manifest: recSpecs('manifest', 30_000),
    });
    fc.assert(
      fc.property(healthy, fc.option(fc.integer({ min: 1, max: 1000 }), { nil: undefined }), (recs, limit) => {
        const sources = Object.fromEntries(
          OWNERS.map((o) => [
            o,
            { heard: true, age: 0, status: 'complete', reason: undefined, omitted: 0, gap: false, records: recs[o] },
          ]),
        ) as unknown as Record<Owner, SourceSpec>;
        const args: FilterArgs = limit === undefined ? {} : { limit };
        run({ staleAfterMs: 30_000, mirrorCap: DEFAULT_MIRROR_CAP, owners: CONTROLLER_OWNERS, sources, args });
      }),
      opts(60),
    );
  });

  it('active_only also excludes active records their owner labelled stale', () => {
    // SPEC.md query rule 2: `active_only` excludes stale active observations, whoever found
    // them stale. Fresh, complete sources, so that only the owner's own label can exclude.
    const ownerAndRecords = fc
      .constantFrom(...OWNERS)
      .chain((o) => fc.tuple(fc.constant(o), fc.array(recSpec(o, 30_000), { minLength: 1, maxLength: 30 })));
    fc.assert(
      fc.property(ownerAndRecords, ([o, recs]) => {
        const fresh = recs.map((r) => ({ ...r, sourceAgo: 0 }));
        const sources = Object.fromEntries(
          OWNERS.map((x) => [
            x,
            {
              heard: true,
              age: 0,
              status: 'complete',
              reason: undefined,
              omitted: 0,
              gap: false,
              records: x === o ? fresh : [],
            },
          ]),
        ) as unknown as Record<Owner, SourceSpec>;
        run({
          staleAfterMs: 30_000,
          mirrorCap: DEFAULT_MIRROR_CAP,
          owners: CONTROLLER_OWNERS,
          sources,
          args: { active_only: true },
        });
      }),
      opts(100),
    );
  });
});
