import type { Subject } from 'rxjs';
import type { Logger } from 'pino';
import { NotFoundError, UnavailableError } from '../errors.js';
import { NATIVE, type JobOwner } from '../actors/job-mapping.js';
import type { JobRow } from '../stores/job-store.js';
import { runBenchmark, type RouterTarget } from './benchmark-runner.js';
import { runMedia } from './media-runner.js';
import type { Command } from './commands.js';
import { newId, type JobStores, type JobWrites } from './job-writes.js';
import type { BackgroundWork } from './background-work.js';

type JobCommand = Extract<Command, { name: 'benchmark.start' | 'media.submit' }>;
type CancelCommand = Extract<Command, { name: 'benchmark.cancel' | 'media.cancel' }>;

export interface JobRunsOptions {
  readonly stores: JobStores;
  readonly writes: JobWrites;
  readonly work: BackgroundWork;
  readonly changes: Subject<JobOwner>;
  /** The router the jobs send their load to; without it job commands are 503. */
  readonly router: RouterTarget | undefined;
  /** `[node] media_dir`: the only directory media jobs read from. */
  readonly mediaDir: string | undefined;
  readonly logger: Logger;
  readonly now: () => number;
}

/**
 * Benchmark and media jobs: started as a record `queued` then `running`, their progress and
 * heartbeat written while they run, and their end (succeeded, failed, cancelled or, at a
 * shutdown, interrupted) written with the summary of what they did.
 */
export class JobRuns {
  constructor(private readonly o: JobRunsOptions) {}

  /** The job a cancel command names must be one of this controller's. Thrown when: it is not (NotFoundError). */
  requireJob(c: { name: 'benchmark.cancel' | 'media.cancel'; params: { job_id: string } }): void {
    const owner: JobOwner = c.name === 'benchmark.cancel' ? 'benchmark' : 'media';
    if (!this.o.stores[owner].get(c.params.job_id)) throw new NotFoundError();
  }

  /** Starts the job in the background and returns its id. Thrown when: no router (UnavailableError), the store refuses its record. */
  start(c: JobCommand): string {
    switch (c.name) {
      case 'benchmark.start':
        return this.startJob('benchmark', c.params.requests, (progress, signal) =>
          runBenchmark(c.params, this.requireRouter(), progress, signal),
        );
      case 'media.submit':
        return this.startJob('media', c.params.files.length, (progress, signal) =>
          runMedia(c.params, this.o.mediaDir!, this.requireRouter(), progress, signal),
        );
    }
  }

  /** Thrown when: the job is not one of this controller's (NotFoundError). */
  cancel(c: CancelCommand): void {
    this.requireJob(c);
    // A job that already ended (or is ending: a second cancel) is not running, which is what
    // a cancel asks for: nothing to do, and its own status says how it ended.
    this.o.work.abort(c.params.job_id);
  }

  private requireRouter(): RouterTarget {
    if (!this.o.router) throw new UnavailableError();
    return this.o.router;
  }

  private startJob(
    owner: 'benchmark' | 'media',
    total: number,
    run: (progress: (n: number) => void, signal: AbortSignal) => Promise<object>,
  ): string {
    if (!this.o.router) throw new UnavailableError();
    const { writes, work, changes, now } = this.o;
    const id = newId(owner === 'benchmark' ? 'bench' : 'media');
    const store = this.o.stores[owner];
    writes.insert(owner, { id, kind: owner, native_state: NATIVE.queued, total }, now());
    const ctl = work.begin(id);
    let lastWrite = 0;
    let lastN = 0;
    const stopBeat = writes.heartbeat(owner, id);
    // A job whose progress cannot be recorded is stopped: load nobody can follow is not sent.
    // Its record keeps its last written state, and its heartbeat ages into `stale`.
    let storeFailed = false;
    const record = (fields: Partial<JobRow>, t: number): void => {
      if (writes.persist(id, () => store.update(id, fields, t))) return;
      storeFailed = true;
      ctl.abort();
    };
    const task = (async () => {
      record({ native_state: NATIVE.running, progress_completed: 0 }, now());
      changes.next(owner);
      try {
        const summary = await run((n) => {
          lastN = n;
          const t = now();
          if (n === total || t - lastWrite >= 200) {
            lastWrite = t;
            record({ progress_completed: n }, t);
            changes.next(owner);
          }
        }, ctl.signal);
        const { state, outcome } = jobEnd(summary, { closing: work.closing, storeFailed, aborted: ctl.signal.aborted });
        // Progress writes are spaced 200 ms apart: the last count is written with the end, so
        // the record's progress and its summary agree (requests still in flight at a cancel end after it).
        writes.finish(
          owner,
          id,
          { native_state: state, outcome, progress_completed: lastN, summary: JSON.stringify(summary) },
          now(),
        );
      } catch (err) {
        this.o.logger.error({ err, job: id }, 'job failed');
        writes.finish(owner, id, { native_state: NATIVE.failed, outcome: 'error' }, now());
      } finally {
        stopBeat();
        work.ended(id);
        changes.next(owner);
      }
    })();
    work.track(task);
    return id;
  }
}

/** How a job whose runner returned `summary` ended: its native state and outcome. */
function jobEnd(
  summary: object,
  how: { closing: boolean; storeFailed: boolean; aborted: boolean },
): { state: string; outcome: string } {
  const outcomes = (summary as { outcomes?: Record<string, number> }).outcomes ?? {};
  const failed = Object.entries(outcomes).some(([k, v]) => k !== 'success' && k !== 'cancelled' && v > 0);
  // Stopped by a shutdown rather than a cancel command: what the engine finished is unknown.
  // Stopped because its store failed: a failure of the node, not a user's cancel.
  const state = how.closing
    ? NATIVE.interrupted
    : how.storeFailed
      ? NATIVE.failed
      : how.aborted
        ? NATIVE.cancelled
        : failed
          ? NATIVE.failed
          : NATIVE.succeeded;
  const outcomeOf: Record<string, string> = {
    [NATIVE.succeeded]: 'success',
    [NATIVE.cancelled]: 'cancelled',
    [NATIVE.interrupted]: 'unknown',
  };
  return { state, outcome: outcomeOf[state] ?? 'error' };
}
