import { randomBytes } from 'node:crypto';
import type { Subject } from 'rxjs';
import type { Logger } from 'pino';
import { NATIVE, type JobOwner } from '../actors/job-mapping.js';
import type { JobStore, JobRow } from '../stores/job-store.js';
import { UnwrittenEnds } from './unwritten-ends.js';

/** How often a held plan's or a runner's heartbeat is written. */
export const HEARTBEAT_MS = 1_000;
/** Shortest spacing of the "job store cannot be written" log lines. */
const WRITE_REPORT_MS = 10_000;

/** The owner stores of the node's lifecycle side: operations, benchmark jobs, media jobs. */
export type JobStores = Readonly<Record<JobOwner, JobStore>>;

/** A new record's id: `prefix` and 24 random hex digits. */
export const newId = (prefix: string): string => `${prefix}_${randomBytes(12).toString('hex')}`;

/**
 * Work a previous process left active has no runner now: say so instead of showing it running
 * (awaiting approval becomes expired, anything further along interrupted).
 */
export function reconcile(stores: JobStores, t: number): void {
  for (const owner of ['controller', 'benchmark', 'media'] as const) {
    for (const row of stores[owner].inStates([
      NATIVE.queued,
      NATIVE.awaitingApproval,
      NATIVE.preparing,
      NATIVE.submitting,
      NATIVE.running,
    ])) {
      const state = row.native_state === NATIVE.awaitingApproval ? NATIVE.expired : NATIVE.interrupted;
      stores[owner].update(
        row.id,
        { native_state: state, outcome: state === NATIVE.expired ? 'timeout' : 'unknown' },
        t,
      );
    }
  }
}

/**
 * The writes of the owner stores, which may fail (a full disk, the state directory gone):
 * background writes are counted and logged rather than thrown, and end states the store
 * refused are kept (read over the stored row) and written once it takes writes again. Every
 * write is announced on `changes` as the original did, so actors read sooner.
 */
export class JobWrites {
  /** Store writes from background work that failed since the last report line (see persist). */
  private failedWrites = 0;
  private lastWriteReport = 0;
  /** End states the store could not take yet: `over` answers with them (see finish). */
  private readonly unwritten = new UnwrittenEnds();

  constructor(
    private readonly stores: JobStores,
    private readonly changes: Subject<JobOwner>,
    private readonly logger: Logger,
    private readonly now: () => number,
  ) {}

  /** A new record at `t`, nothing done yet. Thrown when: the store refuses it (its error). */
  insert(owner: JobOwner, r: { id: string; kind: string; native_state: string; total: number }, t: number): void {
    const row: JobRow = {
      id: r.id,
      kind: r.kind,
      native_state: r.native_state,
      outcome: null,
      progress_completed: 0,
      progress_total: r.total,
      created_at: t,
      updated_at: t,
      heartbeat_at: t,
      summary: null,
    };
    this.stores[owner].insert(row);
    this.changes.next(owner);
  }

  /**
   * A store write from background work (a runner, a heartbeat), which has nobody to answer to:
   * a failure (disk full, the state directory gone) is logged, at most one line per 10 s with
   * the count left out, never thrown out of a timer or a task (that would end the process).
   * Returns false when the write failed.
   */
  persist(id: string, write: () => void): boolean {
    try {
      write();
      return true;
    } catch (err) {
      this.failedWrites++;
      const t = Date.now();
      if (t - this.lastWriteReport >= WRITE_REPORT_MS) {
        this.lastWriteReport = t;
        this.logger.error(
          { err, job: id, failed_writes: this.failedWrites },
          "job store cannot be written; the job's record keeps its last written state",
        );
        this.failedWrites = 0;
      }
      return false;
    }
  }

  /**
   * A job's end state: written now, or, when the store cannot take it, kept (status answers
   * from it) and written as soon as the store takes writes again, so a job stopped by a full
   * disk is never shown running for good.
   */
  finish(owner: JobOwner, id: string, fields: Partial<JobRow>, t: number): void {
    if (this.persist(id, () => this.stores[owner].update(id, fields, t))) return;
    this.unwritten.keep(this.stores[owner], id, fields, t, () => this.changes.next(owner));
  }

  /** An operation's end: written now, or kept and written once the store takes writes again (see finish). */
  endOp(opId: string, fields: Partial<JobRow>): void {
    this.finish('controller', opId, fields, this.now());
    this.changes.next('controller');
  }

  /** Beats the job's heartbeat every second until the returned function is called. */
  heartbeat(owner: JobOwner, id: string): () => void {
    const beat = setInterval(() => {
      this.persist(id, () => this.stores[owner].heartbeat(id, this.now()));
      this.changes.next(owner);
    }, HEARTBEAT_MS);
    return () => clearInterval(beat);
  }

  /** The stored row with an end state the store could not take yet, if any, over it. */
  over(id: string, row: JobRow): JobRow {
    return this.unwritten.over(id, row);
  }

  /** A last try for end states still unwritten, and no more retries (close). */
  flush(): void {
    this.unwritten.writeAll();
    this.unwritten.stop();
  }
}
