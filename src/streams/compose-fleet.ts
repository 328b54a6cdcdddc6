import type { NodeCondition } from '../schema/enums.js';
import { MAX_RECORDS_PER_RESULT, type FleetResult, type NodeResult } from '../schema/envelopes.js';
import type { Filters } from '../schema/filters.js';
import { formatTimestamp, parseTimestamp } from '../schema/primitives.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';
import { classifyAnswer, fleetTotals, type NodeAnswer } from '../schema/answer-checks.js';
import { BoundedHeap } from './top-k.js';

export interface DeclaredNode {
  readonly hostId: string;
  readonly sleeping?: boolean;
}

/** The entry for a node that could not answer trustworthily: no records, count unknown. */
export function failedNode(hostId: string, condition: NodeCondition, now: number): NodeResult {
  return {
    schema: SCHEMA_ID,
    expected_host: hostId,
    status: 'unavailable',
    collected_at: formatTimestamp(now),
    sources: [],
    truncation: { returned: 0, omitted: null },
    condition,
  };
}

/** A record kept for the fleet's newest-first cut: its time, and its node (the last tie-break). */
type Ref = { r: WorkloadRecord; t: number; node: number };

/** Newest `updated_at` first, ties by record ID ascending, then by node (a total order). */
function newestFirst(a: Ref, b: Ref): number {
  return b.t - a.t || (a.r.id < b.r.id ? -1 : a.r.id > b.r.id ? 1 : a.node - b.node);
}

/**
 * The fleet result built one node answer at a time, as the answers arrive: each is checked
 * when it comes (the fleet's work overlaps the wait for the slowest node, and the raw bytes
 * are let go at once), and only its records that are still among the newest `limit` seen so
 * far are kept. A record that falls out can never come back (the cut only gets stricter), so
 * the result is the one composeFleet gives for the same answers, counts and statuses included:
 * every record cut is counted in its source's and its node's `omitted`, whenever it is cut.
 * Pure apart from the state it holds; time comes in as `now`.
 */
export class FleetComposer {
  readonly #declared: readonly DeclaredNode[];
  readonly #f: Filters;
  readonly #nodes: (NodeResult | NodeCondition | undefined)[];
  readonly #kept: BoundedHeap<Ref>;
  #offered = 0;

  constructor(declared: readonly DeclaredNode[], f: Filters) {
    this.#declared = declared;
    this.#f = f;
    this.#nodes = new Array(declared.length).fill(undefined);
    this.#kept = new BoundedHeap<Ref>(Math.min(f.limit, MAX_RECORDS_PER_RESULT), newestFirst);
  }

  /** Node `i`'s answer (the first one given counts; a node never given one is unreachable). */
  add(i: number, answer: NodeAnswer): void {
    const d = this.#declared[i];
    if (d === undefined || this.#nodes[i] !== undefined) return;
    const c = classifyAnswer(d.hostId, answer, this.#f);
    this.#nodes[i] = c;
    if (typeof c === 'string') return;
    // The reply was parsed for this call alone, so it is ours to trim in place (no copy).
    let outNow: Set<WorkloadRecord> | undefined;
    for (const s of c.sources) {
      for (const r of s.records) {
        const ref: Ref = { r, t: parseTimestamp(r.updated_at), node: i };
        this.#offered++;
        const worst = this.#kept.worst();
        if (this.#kept.full && worst !== undefined && newestFirst(ref, worst) >= 0) (outNow ??= new Set()).add(r);
        else this.#kept.offer(ref);
      }
    }
    if (outNow !== undefined) cut(c, outNow, false);
  }

  /** The fleet result at `now` (failed nodes are dated `now`). */
  result(now: number): FleetResult {
    const nodes = this.#declared.map((d, i) => {
      const c = this.#nodes[i] ?? 'unreachable';
      return typeof c === 'string' ? failedNode(d.hostId, c, now) : c;
    });
    // Records kept on arrival that newer ones pushed out later leave now.
    if (this.#offered > this.#kept.size) {
      const keep = new Set(this.#kept.sorted().map((x) => x.r));
      for (const n of nodes) if (n.condition === undefined) cut(n, keep, true);
    }
    const { status, returned, omitted } = fleetTotals(nodes);
    return { schema: SCHEMA_ID, status, collected_at: formatTimestamp(now), nodes, truncation: { returned, omitted } };
  }
}

/**
 * Removes a node's records that the fleet's newest-first cut leaves out (`inSet`: whether the
 * set names the records to keep or the ones to drop), counting each one it removes.
 */
function cut(n: NodeResult, set: ReadonlySet<WorkloadRecord>, inSet: boolean): void {
  let total = 0;
  for (const s of n.sources) {
    const before = s.records.length;
    if (before === 0) continue;
    s.records = s.records.filter((r) => set.has(r) === inSet);
    const dropped = before - s.records.length;
    if (dropped === 0) continue;
    total += dropped;
    s.truncation = {
      returned: s.records.length,
      omitted: s.truncation.omitted === null ? null : s.truncation.omitted + dropped,
    };
    if (s.status === 'complete') s.status = 'partial';
  }
  if (total > 0) {
    n.truncation = {
      returned: n.truncation.returned - total,
      omitted: n.truncation.omitted === null ? null : n.truncation.omitted + total,
    };
    if (n.status === 'complete') n.status = 'partial';
  }
}

/**
 * Pure: the fleet result. One entry per declared node in declaration order; the filters'
 * order and `limit` (at most 1000) apply across nodes, trimming the oldest; `omitted` is null
 * whenever any node's count is unknown. A fleet with failed nodes is never `complete`.
 */
export function composeFleet(
  declared: readonly DeclaredNode[],
  answers: readonly NodeAnswer[],
  f: Filters,
  now: number,
): FleetResult {
  const c = new FleetComposer(declared, f);
  declared.forEach((_, i) => c.add(i, answers[i] ?? { kind: 'unreachable' }));
  return c.result(now);
}
