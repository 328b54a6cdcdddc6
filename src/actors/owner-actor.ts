import { randomBytes } from 'node:crypto';
import {
  Subject,
  asyncScheduler,
  auditTime,
  concat,
  concatMap,
  from,
  interval,
  map,
  merge,
  of,
  throttleTime,
  type SchedulerLike,
  type Subscription,
} from 'rxjs';
import type { Logger } from 'pino';
import type { Owner } from '../schema/enums.js';
import { MAX_SNAPSHOT_PARTS, type ObservationBatch } from '../schema/envelopes.js';
import { formatTimestamp } from '../schema/primitives.js';
import { SCHEMA_ID, isValidRecord, type WorkloadRecord } from '../schema/record.js';
import { resilientSubscription, type Bus } from '../streams/bus.js';
import { observationSubject, resyncSubject } from '../schema/subjects.js';
import { MAX_BATCH_BYTES } from '../streams/decode-batch.js';
import { DEFAULT_WINDOW_CAP, boundWindow, type OwnerReading } from './window.js';

export interface OwnerActorOptions {
  readonly host: string;
  readonly owner: Owner;
  readonly bus: Bus;
  /** Reads the owner's authority and maps it (pure mapping per owner); may throw. */
  readonly read: () => OwnerReading | Promise<OwnerReading>;
  readonly now?: () => number;
  /** How often the authority is read for changes. */
  readonly pollMs?: number;
  /** Change notifications are coalesced to at most one read per this many ms. */
  readonly minIntervalMs?: number;
  /** A full batch goes out at least every half of this. */
  readonly staleAfterMs?: number;
  readonly cap?: number;
  readonly maxPayload?: number;
  readonly logger?: Logger;
  /**
   * Every batch this actor publishes, handed over as the object it encoded, for a fold in the
   * same process (the router's own view): no encode, decode or validation on that path. The
   * batch is shared and must not be mutated. When the bus says nobody else listens
   * (`hasInterest`), batches go only here and are not encoded at all.
   */
  readonly local?: (batch: ObservationBatch) => void;
  /**
   * With `local`: while the bus says nobody else listens, the rounds that polls and change
   * notifications start read nothing and publish nothing; a local reader calls `refresh()`
   * before it reads the fold. A busy owner (the router, thousands of changes a second) then
   * spends nothing on a window nobody looks at. Once someone listens, rounds run as usual,
   * the first of them a full window.
   */
  readonly onDemand?: boolean;
  /** Timers of the resync throttle (tests pass a virtual-time scheduler). */
  readonly scheduler?: SchedulerLike;
}

/**
 * However often a resync is asked for, an actor sends at most one full window per this many
 * ms (CONTRACT.md, request/reply trust): the first request at once, later ones within the
 * second folded into one more window at its end. A flood of resync requests (a loop, or a
 * request whose reply subject was pointed at this subject) then costs one window a second.
 */
export const RESYNC_MIN_INTERVAL_MS = 1_000;

const encoder = new TextEncoder();
// Records are immutable once built; owners that hand the same object again (a finished
// request) are not serialized again just to see that nothing changed.
const fingerprints = new WeakMap<WorkloadRecord, string>();
function fingerprint(r: WorkloadRecord): string {
  let f = fingerprints.get(r);
  if (f === undefined) fingerprints.set(r, (f = JSON.stringify(r)));
  return f;
}

/** A malformed record's `owner records left out` line comes at most this often per actor. */
const MALFORMED_REPORT_MS = 60_000;

/**
 * An owner actor: reads its authority, bounds the window, and publishes ObservationBatches
 * on its observation subject (schema/subjects.ts): a full batch at start, on a resync request and at least
 * every half stale threshold; upserts and removals in between; `seq` +1 per batch.
 */
export class OwnerActor {
  private seq = 0;
  private lastFullAt = Number.NEGATIVE_INFINITY;
  /** What the last batch left subscribers holding, by record id. */
  private published = new Map<string, WorkloadRecord>();
  private nudged = false;
  private forceFull = true;
  /** Rounds were skipped while nobody listened: the next round that publishes on the bus is full. */
  private owedRemoteFull = false;
  private readonly nudges = new Subject<void>();
  private sub: Subscription | undefined;
  private readonly now: () => number;
  private lastMalformedReportAt = Number.NEGATIVE_INFINITY;
  /** Records found well formed (the schema, every record rule, this actor's host and owner): an object handed again is not checked again. */
  private readonly wellFormed = new WeakSet<WorkloadRecord>();

  constructor(private readonly opts: OwnerActorOptions) {
    this.now = opts.now ?? Date.now;
  }

  get owner(): Owner {
    return this.opts.owner;
  }

  /** Starts polling and publishing; idempotent. */
  start(): void {
    if (this.sub) return;
    const pollMs = this.opts.pollMs ?? 1000;
    const resync$ = resilientSubscription(
      () => this.opts.bus.subscribe(resyncSubject(this.opts.host)),
      this.opts.logger,
      'resync',
    ).pipe(
      throttleTime(RESYNC_MIN_INTERVAL_MS, this.opts.scheduler ?? asyncScheduler, { leading: true, trailing: true }),
      map(() => true),
    );
    const nudges$ = this.nudges.pipe(auditTime(this.opts.minIntervalMs ?? 100));
    const ticks$ = merge(interval(pollMs).pipe(map(() => false)), nudges$.pipe(map(() => false)), resync$);
    this.sub = concat(of(true), ticks$)
      .pipe(concatMap((full) => from(this.step(full))))
      .subscribe();
  }

  /** The authority changed: read and publish soon instead of at the next poll. */
  notify(): void {
    // One nudge per round is enough (the next step reads everything); later ones cost nothing.
    if (this.nudged) return;
    this.nudged = true;
    this.nudges.next();
  }

  /**
   * A record the schema or a record rule refuses (a store row out of range, say) would make
   * every batch of this owner malformed, and the node would drop them all: the source would
   * read as silent, then timed out, for as long as that one record exists. It is left out
   * instead, and the source says so: `partial` (reason `malformed`) with an unknown count of
   * left-out records, since what the record would have matched is unknown. One warn line a
   * minute at most names the owner and how many, never their values.
   */
  private leaveOutMalformed(reading: OwnerReading, now: number): OwnerReading {
    const { host, owner } = this.opts;
    let bad = 0;
    for (const r of reading.records) {
      if (this.wellFormed.has(r)) continue;
      if (isValidRecord(r) && r.host === host && r.owner === owner) this.wellFormed.add(r);
      else bad++;
    }
    if (bad === 0) return reading;
    if (now - this.lastMalformedReportAt >= MALFORMED_REPORT_MS) {
      this.lastMalformedReportAt = now;
      this.opts.logger?.warn({ owner, records: bad }, 'owner records left out (malformed)');
    }
    return {
      ...reading,
      records: reading.records.filter((r) => this.wellFormed.has(r)),
      status: reading.status === 'complete' ? 'partial' : reading.status,
      reason: reading.reason ?? 'malformed',
      countUnknown: true,
    };
  }

  stop(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
  }

  /**
   * Brings the local fold up to date now (a round that runs even when nobody else listens);
   * resolves once the batch, if any, has been handed to `local`.
   */
  refresh(): Promise<void> {
    return this.step(false, true);
  }

  /**
   * One read-and-publish round; never throws (a failed read is published as `unavailable`).
   * `demanded`: a local reader asked for it (`refresh()`); otherwise an `onDemand` actor skips
   * the round while nobody else listens.
   */
  async step(wantFull: boolean, demanded = false): Promise<void> {
    this.nudged = false;
    const subject = observationSubject(this.opts.host, this.opts.owner);
    // Nobody on the bus (known only in process): a batch would be built for the local fold only.
    const remote = this.opts.bus.hasInterest?.(subject) ?? true;
    if (this.opts.onDemand && !demanded && !remote) {
      // Whoever starts listening gets a whole window first.
      this.owedRemoteFull = true;
      return;
    }
    const now = this.now();
    let reading: OwnerReading;
    try {
      reading = await this.opts.read();
    } catch (err) {
      this.opts.logger?.warn({ owner: this.opts.owner, err }, 'owner authority unreadable');
      reading = { status: 'unavailable', reason: 'inspection-error', records: [] };
      this.forceFull = true;
    }
    reading = this.leaveOutMalformed(reading, now);
    const stale = this.opts.staleAfterMs ?? 30_000;
    const full = wantFull || this.forceFull || (remote && this.owedRemoteFull) || now - this.lastFullAt >= stale / 2;
    const window = boundWindow(reading, now, this.opts.cap ?? DEFAULT_WINDOW_CAP);
    const base = {
      schema: SCHEMA_ID,
      host: this.opts.host,
      owner: this.opts.owner,
      source_timestamp: formatTimestamp(now),
      status: reading.status,
      ...(reading.reason ? { reason: reading.reason } : {}),
      omitted: window.omitted,
    } as const;
    const next = new Map<string, WorkloadRecord>();
    for (const r of window.records) next.set(r.id, r);
    try {
      if (full) {
        this.publishFull(base, window.records, remote);
        this.lastFullAt = now;
        this.forceFull = false;
        if (remote) this.owedRemoteFull = false;
      } else {
        const upserts: WorkloadRecord[] = [];
        for (const r of window.records) {
          const prev = this.published.get(r.id);
          // The same object handed again (a finished request) is unchanged without serializing it.
          if (prev !== r && (prev === undefined || fingerprint(prev) !== fingerprint(r))) upserts.push(r);
        }
        const removals = [...this.published.keys()].filter((id) => !next.has(id));
        if (upserts.length === 0 && removals.length === 0) return;
        const batch: ObservationBatch = { ...base, seq: ++this.seq, full: false, upserts, removals };
        if (!remote) this.opts.local?.(batch);
        else {
          const bytes = encoder.encode(JSON.stringify(batch));
          if (bytes.byteLength > this.maxPayload()) {
            this.seq--;
            this.publishFull(base, window.records, remote);
            this.lastFullAt = now;
          } else {
            this.opts.bus.publish(subject, bytes);
            this.opts.local?.(batch);
          }
        }
      }
      this.published = next;
    } catch (err) {
      // The bus is closed or refused the message: the next round publishes a full window.
      this.forceFull = true;
      this.opts.logger?.warn({ owner: this.opts.owner, err }, 'publish failed');
    }
  }

  /** The batch bound, never above what the bus carries now (a server's smaller `max_payload`). */
  private maxPayload(): number {
    return Math.min(this.opts.maxPayload ?? MAX_BATCH_BYTES, this.opts.bus.maxPayload);
  }

  /**
   * Publishes the whole window, split into `snapshot` parts when it exceeds the max payload
   * (only the encoded form has a size: with nobody on the bus, the local fold gets it whole).
   */
  private publishFull(
    base: Omit<ObservationBatch, 'seq' | 'full' | 'upserts' | 'removals'>,
    records: WorkloadRecord[],
    remote: boolean,
  ): void {
    const subject = observationSubject(this.opts.host, this.opts.owner);
    if (!remote) {
      this.opts.local?.({ ...base, seq: ++this.seq, full: true, upserts: records, removals: [] });
      return;
    }
    // 1, 2, 4, ... parts, and at last one record a part (a window of 3 whose parts of 2 do not
    // fit is sent in 3, not refused).
    const most = Math.min(Math.max(1, records.length), MAX_SNAPSHOT_PARTS);
    for (let parts = 1; ; parts = Math.min(parts * 2, most)) {
      const size = Math.ceil(records.length / parts) || 0;
      const batches: ObservationBatch[] = [];
      const encoded: Uint8Array[] = [];
      const id = parts > 1 ? randomBytes(8).toString('hex') : '';
      let fits = true;
      for (let p = 0; p < parts; p++) {
        const chunk = records.slice(p * size, (p + 1) * size);
        const batch: ObservationBatch = {
          ...base,
          seq: this.seq + p + 1,
          full: true,
          upserts: chunk,
          removals: [],
          ...(parts > 1 ? { snapshot: { id, part: p + 1, parts } } : {}),
        };
        const bytes = encoder.encode(JSON.stringify(batch));
        if (bytes.byteLength > this.maxPayload()) {
          fits = false;
          break;
        }
        batches.push(batch);
        encoded.push(bytes);
      }
      if (!fits) {
        if (parts >= most) break;
        continue;
      }
      for (const bytes of encoded) this.opts.bus.publish(subject, bytes);
      this.seq += encoded.length;
      if (this.opts.local) for (const b of batches) this.opts.local(b);
      return;
    }
    // A record alone over the limit (or more parts than a snapshot may have): the bus cannot
    // carry this window, but this process's own fold still gets it (its reads stay true).
    this.opts.local?.({ ...base, seq: ++this.seq, full: true, upserts: records, removals: [] });
    throw new Error('window record larger than max payload');
  }
}
