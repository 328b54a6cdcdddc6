import { ACTIVE_STATES, OWNERS, type Owner, type ResultStatus, type SourceReason } from '../schema/enums.js';
import {
  MAX_RECORDS_PER_RESULT,
  MAX_RECORDS_PER_SOURCE,
  type NodeResult,
  type SourceResult,
} from '../schema/envelopes.js';
import type { Filters } from '../schema/filters.js';
import { formatTimestamp } from '../schema/primitives.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';
import { QUERY_SLACK_MS, relevant, selects } from '../schema/selects.js';
import type { MirrorEntry, NodeSnapshot, SourceMirror } from './node-snapshot.js';
import { BoundedHeap, topK } from './top-k.js';

/** Default stale threshold (SPEC.md): 30 seconds. */
export const DEFAULT_STALE_AFTER_MS = 30_000;
/** Past this many thresholds a silent source is unavailable (CONTRACT.md). */
export const UNAVAILABLE_AFTER_THRESHOLDS = 10;

export interface QueryOptions {
  readonly staleAfterMs: number;
  /** Which sources this surface composes, in order: a router serves one, a controller all six. */
  readonly owners: readonly Owner[];
}

export const CONTROLLER_OWNERS: readonly Owner[] = OWNERS;
export const ROUTER_OWNERS: readonly Owner[] = ['router'];

/** How far a source can be trusted at `now`, from its own observation age (never the read time). */
export interface SourceHealth {
  readonly status: ResultStatus;
  readonly reason: SourceReason | undefined;
  /** Records keep their states but are labelled `stale`. */
  readonly stale: boolean;
  /** The number of matching records left out can be known exactly. */
  readonly countKnown: boolean;
}

/** Pure: the health of one mirror at `now`. */
export function sourceHealth(m: SourceMirror, now: number, staleAfterMs: number): SourceHealth {
  if (!m.heard) return { status: 'unavailable', reason: 'no-observation', stale: false, countKnown: false };
  const age = now - m.freshMs;
  if (age > staleAfterMs * UNAVAILABLE_AFTER_THRESHOLDS)
    return { status: 'unavailable', reason: 'timeout', stale: false, countKnown: false };
  if (m.ownerStatus === 'unavailable')
    return { status: 'unavailable', reason: m.ownerReason ?? 'inspection-error', stale: false, countKnown: false };
  const stale = age > staleAfterMs;
  const doubtful = stale || m.gap || m.overflow || m.ownerStatus === 'partial' || m.ownerOmitted !== 0;
  if (!doubtful) return { status: 'complete', reason: undefined, stale: false, countKnown: true };
  return { status: 'partial', reason: stale ? 'timeout' : m.ownerReason, stale, countKnown: false };
}

interface Match {
  readonly e: MirrorEntry;
  readonly stale: boolean;
  readonly owner: Owner;
}

/** Newest `updated_at` first, ties by record ID ascending (SPEC.md query rule 3). */
function newestFirst(a: Match, b: Match): number {
  const d = b.e.updatedMs - a.e.updatedMs;
  if (d !== 0) return d;
  return a.e.rec.id < b.e.rec.id ? -1 : a.e.rec.id > b.e.rec.id ? 1 : 0;
}

/** Entry order: newest `updated_at` first, ties by record ID ascending. */
function entryNewestFirst(a: MirrorEntry, b: MirrorEntry): number {
  const d = b.updatedMs - a.updatedMs;
  if (d !== 0) return d;
  return a.rec.id < b.rec.id ? -1 : a.rec.id > b.rec.id ? 1 : 0;
}

/**
 * The records of one mirror that the filters select: their count, and the `k` newest with
 * their stale labels. Only candidates that could enter the top `k` allocate anything.
 */
function matchSource(
  m: SourceMirror,
  health: SourceHealth,
  f: Filters,
  now: number,
  staleAfterMs: number,
  k: number,
): { matched: number; top: Match[] } {
  const heap = new BoundedHeap<Match>(k, newestFirst);
  let matched = 0;
  for (const e of m.records.values()) {
    const r = e.rec;
    // The node's verdict on staleness: the source's age, the record's own label, and for
    // active work the age of its last observation (selects() weighs it for active work only;
    // emit() labels such records `stale`).
    const aged = now - e.freshMs > staleAfterMs;
    if (!selects(r, f, now, QUERY_SLACK_MS, health.stale || r.observation_quality === 'stale' || aged, e.updatedMs))
      continue;
    matched++;
    const worst = heap.worst();
    if (heap.full && worst && entryNewestFirst(e, worst.e) >= 0) continue;
    heap.offer({
      e,
      stale: health.stale || r.observation_quality === 'stale' || (aged && ACTIVE_STATES.has(r.state)),
      owner: m.owner,
    });
  }
  return { matched, top: heap.sorted() };
}

function emit(m: Match): WorkloadRecord {
  return m.stale ? { ...m.e.rec, observation_quality: 'stale' } : m.e.rec;
}

/**
 * Pure: answers `node_workloads` (or the router's `/v1/workloads`) from a node snapshot.
 * Filters apply before the limit; each source returns at most 200 records and the node at
 * most `limit`; `omitted` is null whenever a relevant source's count cannot be known. A
 * source the owner/kind filters exclude keeps its honest status but cannot change the
 * node's status or counts (docs/api.md).
 */
export function queryNode(snap: NodeSnapshot, f: Filters, now: number, opts: QueryOptions): NodeResult {
  const perSource = Math.min(MAX_RECORDS_PER_SOURCE, f.limit);
  const perNode = Math.min(MAX_RECORDS_PER_RESULT, f.limit);
  const parts = opts.owners.map((owner) => {
    const m = snap.sources[owner];
    const health = sourceHealth(m, now, opts.staleAfterMs);
    const isRelevant = relevant(owner, f);
    const sel =
      isRelevant && health.status !== 'unavailable'
        ? matchSource(m, health, f, now, opts.staleAfterMs, perSource)
        : { matched: 0, top: [] };
    return { owner, health, isRelevant, matched: sel.matched, top: sel.top };
  });
  const kept = topK(
    parts.flatMap((p) => p.top),
    perNode,
    newestFirst,
  );
  const keptPerOwner = new Map<Owner, WorkloadRecord[]>();
  for (const m of kept) {
    let list = keptPerOwner.get(m.owner);
    if (!list) keptPerOwner.set(m.owner, (list = []));
    list.push(emit(m));
  }

  let returned = 0;
  let omitted: number | null = 0;
  let relevantCount = 0;
  let unavailableCount = 0;
  let allComplete = true;
  const sources: SourceResult[] = parts.map((p) => {
    const records = keptPerOwner.get(p.owner) ?? [];
    const srcOmitted = p.health.countKnown ? p.matched - records.length : null;
    let status: ResultStatus = p.health.status;
    if (status === 'complete' && srcOmitted !== 0) status = 'partial';
    if (p.isRelevant) {
      relevantCount++;
      returned += records.length;
      omitted = omitted === null || srcOmitted === null ? null : omitted + srcOmitted;
      if (status === 'unavailable') unavailableCount++;
      if (status !== 'complete') allComplete = false;
    }
    const src: SourceResult = { owner: p.owner, status } as SourceResult;
    if (status !== 'complete' && p.health.reason !== undefined) src.reason = p.health.reason;
    src.records = records;
    src.truncation = { returned: records.length, omitted: srcOmitted };
    return src;
  });

  let status: ResultStatus = 'complete';
  if (relevantCount > 0 && unavailableCount === relevantCount) status = 'unavailable';
  else if (!allComplete || omitted !== 0) status = 'partial';
  return {
    schema: SCHEMA_ID,
    expected_host: snap.host,
    status,
    collected_at: formatTimestamp(now),
    sources,
    truncation: { returned, omitted },
  };
}
