import { ACTIVE_STATES, type State } from '../schema/enums.js';
import type { ObservationBatch } from '../schema/envelopes.js';
import { parseTimestamp } from '../schema/primitives.js';
import type { WorkloadRecord } from '../schema/record.js';
import { decodeBatch } from './decode-batch.js';
import { OWNERS, type Owner } from '../schema/enums.js';
import type { MirrorEntry, NodeSnapshot, SourceMirror } from './node-snapshot.js';

/** Terminal records older than this leave the mirror: no query can return them (CONTRACT.md window). */
export const WINDOW_MS = 86_400_000;

/**
 * Observations dated further ahead of the node's clock than this are refused (counted as out
 * of order): one batch or record from a wrong clock, or a forged one, would otherwise freeze
 * its source or record as "fresh" until that date, since nothing older may replace it.
 */
export const MAX_FUTURE_SKEW_MS = 60_000;

export type FoldEvent =
  | { readonly type: 'message'; readonly subject: string; readonly data: Uint8Array }
  | { readonly type: 'batch'; readonly batch: ObservationBatch }
  | { readonly type: 'tick' };

/**
 * The node fold: `(snapshot, event, now) -> snapshot`, driven by RxJS `scan`. Time comes in
 * as `now`; nothing else is read. It updates the snapshot it owns in place and returns it:
 * copying a 20,000-record mirror per batch would cap the fold far below the 100,000
 * upserts/s target, and no other code holds a writable reference to the snapshot.
 */
export function foldNode(snap: NodeSnapshot, event: FoldEvent, now: number): NodeSnapshot {
  switch (event.type) {
    case 'message': {
      const decoded = decodeBatch(snap.host, event.subject, event.data);
      if (!decoded.ok) {
        snap.dropped[decoded.reason]++;
        snap.lastFold = { owner: subjectOwner(event.subject), result: decoded.reason };
        snap.version++;
        return snap;
      }
      return foldDated(snap, decoded.batch, now);
    }
    case 'batch':
      return foldBatch(snap, event.batch, now);
    case 'tick':
      snap.lastFold = undefined;
      return expire(snap, now);
  }
}

/** The owner an observation subject (`svc.v1.<host>.obs.<owner>`) names, or `unknown`. */
function subjectOwner(subject: string): Owner | 'unknown' {
  const last = subject.slice(subject.lastIndexOf('.') + 1);
  return (OWNERS as readonly string[]).includes(last) ? (last as Owner) : 'unknown';
}

/**
 * Folds one already-decoded batch (its host and records were validated by decodeBatch).
 * `now` (the node's clock) bounds how far ahead of it an observation may be dated; without
 * it (tests of the fold's order rules) no bound applies.
 */
export function foldBatch(snap: NodeSnapshot, batch: ObservationBatch, now?: number): NodeSnapshot {
  // A date that names no instant (2026-02-30) parses to NaN, and NaN passes every comparison
  // in the fold as "not older, not ahead": its source would read fresh forever. decodeBatch
  // drops such batches off the bus; a batch handed over in process is checked here.
  if (!Number.isFinite(parseTimestamp(batch.source_timestamp)) || !batch.upserts.every(datesReal)) {
    snap.dropped.malformed++;
    snap.lastFold = {
      owner: (OWNERS as readonly string[]).includes(batch.owner) ? batch.owner : 'unknown',
      result: 'malformed',
    };
    snap.version++;
    return snap;
  }
  return foldDated(snap, batch, now);
}

/** foldBatch for a batch whose every date is known to name a real instant (decodeBatch checked it). */
function foldDated(snap: NodeSnapshot, batch: ObservationBatch, now?: number): NodeSnapshot {
  const m = snap.sources[batch.owner];
  const observedMs = parseTimestamp(batch.source_timestamp);
  const latest = now === undefined ? Number.POSITIVE_INFINITY : now + MAX_FUTURE_SKEW_MS;
  const heardAt = now ?? Number.POSITIVE_INFINITY;
  // An older observation never moves the source backwards; a repeated or late delta is
  // ignored; one from the future is not believed.
  if (observedMs > latest) {
    snap.dropped.clock_ahead++;
    snap.lastFold = { owner: batch.owner, result: 'clock_ahead' };
    snap.version++;
    return snap;
  }
  if (observedMs < m.lastObservedMs || (!batch.full && m.heard && batch.seq <= m.lastSeq)) {
    snap.dropped.out_of_order++;
    snap.lastFold = { owner: batch.owner, result: 'out_of_order' };
    snap.version++;
    return snap;
  }
  // Folded (a record in it dated ahead is counted apart, in `dropped`, not as the batch's fate).
  snap.lastFold = { owner: batch.owner, result: 'folded' };
  if (m.heard && batch.seq !== m.lastSeq + 1) m.gap = true;
  m.lastSeq = batch.seq;
  snap.version++;

  if (batch.snapshot && batch.snapshot.parts > 1) {
    const whole = collectPart(m, batch);
    if (!whole) return snap;
    batch = whole;
  }
  if (batch.full) {
    m.gap = false;
    // A record refused for its date leaves the window's count unknown until the next one.
    m.overflow = replaceWindow(snap, m, batch.upserts, latest, heardAt);
  } else {
    if (!m.heard) m.gap = true; // joined mid-stream: the window is unknown until a full batch
    for (const id of batch.removals) m.records.delete(id);
    for (const r of batch.upserts) if (!upsert(snap, m, r, latest, heardAt)) m.overflow = true;
  }
  m.heard = true;
  m.lastObservedMs = observedMs;
  m.freshMs = Math.min(observedMs, heardAt);
  m.ownerStatus = batch.status;
  m.ownerReason = batch.reason;
  m.ownerOmitted = batch.omitted;
  if (m.records.size > snap.mirrorCap) evictOldest(m, snap.mirrorCap);
  return snap;
}

/** True when each of the record's three dates names a real instant (parsed dates are cached). */
function datesReal(r: WorkloadRecord): boolean {
  return (
    Number.isFinite(parseTimestamp(r.created_at)) &&
    Number.isFinite(parseTimestamp(r.updated_at)) &&
    Number.isFinite(parseTimestamp(r.source_timestamp))
  );
}

function entryOf(rec: WorkloadRecord, heardAt: number): MirrorEntry {
  const sourceMs = parseTimestamp(rec.source_timestamp);
  return { rec, updatedMs: parseTimestamp(rec.updated_at), sourceMs, freshMs: Math.min(sourceMs, heardAt) };
}

/**
 * Applies one record unless it would move the existing one backwards. A record dated after
 * `latest` is refused and counted (false): the caller makes its source's count unknown
 * until a full window without one (a record the owner sent is missing from the answer).
 */
function upsert(snap: NodeSnapshot, m: SourceMirror, rec: WorkloadRecord, latest: number, heardAt: number): boolean {
  const next = entryOf(rec, heardAt);
  if (next.updatedMs > latest || next.sourceMs > latest) {
    snap.dropped.clock_ahead++;
    return false;
  }
  const prev = m.records.get(rec.id);
  if (prev && !mayReplace(prev, next)) return true;
  m.records.set(rec.id, next);
  return true;
}

/**
 * Where each active state stands on its kind's one-way path (DESIGN.md): router requests
 * checking -> admitted -> dispatched -> streaming, jobs and operations queued -> running.
 * A recipe's `running` has no other ranked state beside it, so it is never compared.
 */
const ACTIVE_RANK: Readonly<Partial<Record<State, number>>> = {
  checking: 0,
  admitted: 1,
  dispatched: 2,
  streaming: 3,
  queued: 0,
  running: 1,
};

/**
 * DESIGN.md's transitions, then dates: a terminal record is final (it never becomes active
 * again, and how it ended never changes); an active record may end whatever the dates say (an
 * owner whose clock stepped back dates the end before its last active observation), but never
 * steps back along its path; otherwise an older observation never wins.
 */
function mayReplace(prev: MirrorEntry, next: MirrorEntry): boolean {
  const p = prev.rec;
  const n = next.rec;
  if (p.state === 'terminal') {
    if (n.state !== 'terminal' || n.phase !== p.phase || n.outcome !== p.outcome) return false;
  } else if (n.state === 'terminal') {
    if (ACTIVE_STATES.has(p.state)) return true;
  } else {
    const from = ACTIVE_RANK[p.state];
    const to = ACTIVE_RANK[n.state];
    if (from !== undefined && to !== undefined && to < from) return false;
  }
  if (next.updatedMs < prev.updatedMs) return false;
  if (next.updatedMs === prev.updatedMs && next.sourceMs < prev.sourceMs) return false;
  return true;
}

/** Replaces the window with `upserts`; true when some record was refused for its date. */
function replaceWindow(
  snap: NodeSnapshot,
  m: SourceMirror,
  upserts: readonly WorkloadRecord[],
  latest: number,
  heardAt: number,
): boolean {
  const incoming = new Set<string>();
  let refused = false;
  for (const r of upserts) {
    incoming.add(r.id);
    if (!upsert(snap, m, r, latest, heardAt)) refused = true;
  }
  for (const id of m.records.keys()) if (!incoming.has(id)) m.records.delete(id);
  return refused;
}

/** Buffers the parts of a split full window; returns the whole batch once every part is in. */
function collectPart(m: SourceMirror, part: ObservationBatch): ObservationBatch | undefined {
  const { id, part: n, parts } = part.snapshot!;
  if (!m.pending || m.pending.id !== id || m.pending.parts !== parts) {
    // A window left incomplete (a part of another one came first): the owner's window changed
    // and was not folded, so what is held is not its window any more, until a whole one is.
    if (m.pending) m.gap = true;
    m.pending = { id, parts, got: new Map() };
  }
  m.pending.got.set(n, part);
  if (m.pending.got.size < parts) return undefined;
  const ordered = [...m.pending.got.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
  m.pending = undefined;
  const last = ordered[ordered.length - 1]!;
  return { ...last, snapshot: undefined, upserts: ordered.flatMap((b) => b.upserts), removals: [] };
}

/** Keeps the `cap` newest records; what is evicted makes the source's counts unknown. */
function evictOldest(m: SourceMirror, cap: number): void {
  const entries = [...m.records.values()].sort((a, b) => a.updatedMs - b.updatedMs);
  // Active work is the last thing to forget: evict terminal and current records first.
  const order = [
    ...entries.filter((e) => !ACTIVE_STATES.has(e.rec.state)),
    ...entries.filter((e) => ACTIVE_STATES.has(e.rec.state)),
  ];
  for (let i = 0; m.records.size > cap && i < order.length; i++) m.records.delete(order[i]!.rec.id);
  m.overflow = true;
}

/** Forgets terminal records that no query window can reach any more. */
function expire(snap: NodeSnapshot, now: number): NodeSnapshot {
  const horizon = now - WINDOW_MS;
  for (const m of Object.values(snap.sources)) {
    for (const [id, e] of m.records) if (e.rec.state === 'terminal' && e.updatedMs < horizon) m.records.delete(id);
  }
  return snap;
}
