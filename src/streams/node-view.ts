import { BehaviorSubject, interval, map, merge, scan, type Observable, type Subscription } from 'rxjs';
import type { Logger } from 'pino';
import type { NodeResult, ObservationBatch } from '../schema/envelopes.js';
import type { Filters } from '../schema/filters.js';
import { observationPattern, resyncSubject } from '../schema/subjects.js';
import { resilientSubscription, type Bus } from './bus.js';
import { foldNode, type FoldEvent } from './fold-node.js';
import {
  createNodeSnapshot,
  DEFAULT_MIRROR_CAP,
  DROP_REASONS,
  noDrops,
  type DropCounts,
  type FoldOutcome,
  type NodeSnapshot,
} from './node-snapshot.js';
import { queryNode, type QueryOptions } from './query-node.js';

export interface NodeViewOptions {
  readonly host: string;
  readonly bus: Bus;
  readonly staleAfterMs: number;
  readonly owners: QueryOptions['owners'];
  readonly now?: () => number;
  readonly tickMs?: number;
  readonly mirrorCap?: number;
  readonly logger?: Logger;
  /**
   * Batches of this process's own actors, as objects (OwnerActorOptions.local): folded
   * instead of subscribing to the host's observation subjects on the bus. Resync requests
   * still go out on the bus, where the actors listen.
   */
  readonly local?: Observable<ObservationBatch>;
  /** Called with the fate of every batch (folded, or dropped and why): the controller's metrics count them. */
  readonly onFold?: (outcome: FoldOutcome) => void;
}

/** Resync requests after a gap are sent at most this often. */
const RESYNC_MIN_INTERVAL_MS = 1000;
/** Batches the fold dropped are reported in one log line at most this often. */
export const DROP_REPORT_INTERVAL_MS = 60_000;

/**
 * The node's live view: folds every batch on the host's observation subjects into the snapshot with
 * RxJS `scan` over the pure `foldNode`, asks actors for full windows at start and after a
 * gap, and answers queries from the latest snapshot.
 */
export class NodeView {
  private sub: Subscription | undefined;
  private readonly now: () => number;
  private readonly snap$: BehaviorSubject<NodeSnapshot>;
  private lastResyncAt = Number.NEGATIVE_INFINITY;
  /** Drop counts as of the last `observation batches dropped` line. */
  private reportedDrops: DropCounts = noDrops();
  private lastDropReportAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly opts: NodeViewOptions) {
    this.now = opts.now ?? Date.now;
    this.snap$ = new BehaviorSubject(createNodeSnapshot(opts.host, opts.mirrorCap ?? DEFAULT_MIRROR_CAP));
  }

  /** Subscribes to observations and asks every actor of the host for a full window. */
  start(): void {
    if (this.sub) return;
    const { bus, host } = this.opts;
    const observed$: Observable<FoldEvent> = this.opts.local
      ? this.opts.local.pipe(map((batch): FoldEvent => ({ type: 'batch', batch })))
      : resilientSubscription(() => bus.subscribe(observationPattern(host)), this.opts.logger, 'observations').pipe(
          map((m): FoldEvent => ({ type: 'message', subject: m.subject, data: m.data })),
        );
    const events$: Observable<FoldEvent> = merge(
      observed$,
      interval(this.opts.tickMs ?? 10_000).pipe(map((): FoldEvent => ({ type: 'tick' }))),
    );
    this.sub = events$.pipe(scan((s, e) => foldNode(s, e, this.now()), this.snap$.value)).subscribe((s) => {
      this.snap$.next(s);
      if (s.lastFold !== undefined) this.opts.onFold?.(s.lastFold);
      this.maybeResync(s);
      this.maybeReportDrops(s.dropped);
    });
    this.resync();
  }

  /** The latest snapshot; read-only for callers. */
  get snapshot(): NodeSnapshot {
    return this.snap$.value;
  }

  /** Emits after each folded event (the same snapshot object, with a new `version`). */
  get changes(): Observable<NodeSnapshot> {
    return this.snap$.asObservable();
  }

  /** Answers a query at the current time. */
  query(filters: Filters): NodeResult {
    return queryNode(this.snap$.value, filters, this.now(), this.opts);
  }

  stop(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
  }

  private resync(): void {
    this.lastResyncAt = this.now();
    try {
      this.opts.bus.publish(resyncSubject(this.opts.host), new Uint8Array(0));
    } catch (err) {
      this.opts.logger?.warn({ err }, 'resync request failed');
    }
  }

  /**
   * One line, at most once a DROP_REPORT_INTERVAL_MS, with the batches dropped since the last:
   * warn when a batch was oversized, malformed, for another host or dated ahead of this
   * node's clock (a publisher out of step with this node: another version, a wrong host id,
   * a wrong clock), info when only out of order (a late or repeated delta, which a resync
   * mends). Counts left over are in the next line.
   */
  private maybeReportDrops(d: DropCounts): void {
    const r = this.reportedDrops;
    if (DROP_REASONS.every((k) => d[k] === r[k])) return;
    const now = this.now();
    if (now - this.lastDropReportAt < DROP_REPORT_INTERVAL_MS) return;
    const since = noDrops();
    for (const k of DROP_REASONS) since[k] = d[k] - r[k];
    this.reportedDrops = { ...d };
    this.lastDropReportAt = now;
    const level = since.oversized + since.malformed + since.wrong_host + since.clock_ahead > 0 ? 'warn' : 'info';
    this.opts.logger?.[level]({ host: this.opts.host, dropped: since }, 'observation batches dropped');
  }

  private maybeResync(s: NodeSnapshot): void {
    if (this.now() - this.lastResyncAt < RESYNC_MIN_INTERVAL_MS) return;
    for (const m of Object.values(s.sources)) {
      if (m.gap) {
        this.resync();
        return;
      }
    }
  }
}
