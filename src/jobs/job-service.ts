import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Subject } from 'rxjs';
import type { Logger } from 'pino';
import { InvalidInputError, NotFoundError, UnavailableError } from '../errors.js';
import { isMediaPath } from './media-runner.js';
import { NATIVE, type JobOwner } from '../actors/job-mapping.js';
import { JobStore, type JobRow } from '../stores/job-store.js';
import { UnwrittenEnds } from './unwritten-ends.js';
import { PendingPlans } from './pending-plans.js';
import { runBenchmark, type RouterTarget } from './benchmark-runner.js';
import { describePlan, isRecipeCommand, type Command, type RecipeCommand } from './commands.js';
import { runMedia } from './media-runner.js';
import type { RecipeLifecycle, RecipeResult } from '../recipes/recipe-lifecycle.js';

/** How long a plan's confirmation token stays valid. */
export const CONFIRMATION_TTL_MS = 120_000;
const HEARTBEAT_MS = 1_000;
/** Shortest spacing of the "job store cannot be written" log lines. */
const WRITE_REPORT_MS = 10_000;

export interface PlanResult {
  operation_id: string;
  command: string;
  plan: string[];
  confirmation_token: string;
  expires_at: string;
}

export interface JobServiceOptions {
  readonly now?: () => number;
  /** The node's recipe lifecycle (`[node] recipes_dir`); without it recipe commands are 503. */
  readonly recipes?: RecipeLifecycle;
  /** `[node] media_dir`: the only directory media jobs read from; without it media jobs are 503. */
  readonly mediaDir?: string;
}

/** Steps of a recipe operation: approved, prepared (read), submitted (written), verified. */
const RECIPE_STEPS = 4;

const newId = (prefix: string): string => `${prefix}_${randomBytes(12).toString('hex')}`;
const digest = (t: string): string => createHash('sha256').update(t).digest('hex');

/**
 * The node's lifecycle side: owner stores (operations, benchmark jobs, media jobs), the
 * plan/apply confirmation boundary, and the runners. Reads never come here: actors read the
 * stores through read-only handles.
 */
export class JobService {
  readonly stores: Readonly<Record<JobOwner, JobStore>>;
  readonly paths: Readonly<Record<JobOwner, string>>;
  /** Emits the owner whose store changed (actors read sooner). */
  readonly changes = new Subject<JobOwner>();
  private readonly pending = new PendingPlans({
    ttlMs: CONFIRMATION_TTL_MS,
    beatMs: HEARTBEAT_MS,
    onExpire: (p) => this.endOp(p.opId, { native_state: NATIVE.expired, outcome: 'timeout' }),
    onBeat: (ids) => {
      this.persist(ids[0]!, () => this.stores.controller.heartbeatAll(ids, this.now()));
      this.changes.next('controller');
    },
  });
  private readonly running = new Map<string, AbortController>();
  private readonly tasks = new Set<Promise<void>>();
  private closing = false;
  private readonly now: () => number;
  private readonly recipes: RecipeLifecycle | undefined;
  private readonly mediaDir: string | undefined;
  /** Settles when the last recipe operation applied so far has ended (see runRecipe). */
  private recipeTurn: Promise<void> = Promise.resolve();
  /** Store writes from background work that failed since the last report line (see persist). */
  private failedWrites = 0;
  private lastWriteReport = 0;
  /** End states the store could not take yet: `status` answers with them (see finish). */
  private readonly unwritten = new UnwrittenEnds();

  constructor(
    stateDir: string,
    private readonly router: RouterTarget | undefined,
    private readonly logger: Logger,
    opts: JobServiceOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
    this.recipes = opts.recipes;
    this.mediaDir = opts.mediaDir;
    this.paths = {
      controller: join(stateDir, 'controller.db'),
      benchmark: join(stateDir, 'benchmark.db'),
      media: join(stateDir, 'media.db'),
    };
    this.stores = {
      controller: JobStore.openForOwner(this.paths.controller),
      benchmark: JobStore.openForOwner(this.paths.benchmark),
      media: JobStore.openForOwner(this.paths.media),
    };
    this.reconcile();
  }

  /** Work a previous process left active has no runner now: say so instead of showing it running. */
  private reconcile(): void {
    const t = this.now();
    for (const owner of ['controller', 'benchmark', 'media'] as const) {
      for (const row of this.stores[owner].inStates([
        NATIVE.queued,
        NATIVE.awaitingApproval,
        NATIVE.preparing,
        NATIVE.submitting,
        NATIVE.running,
      ])) {
        const state = row.native_state === NATIVE.awaitingApproval ? NATIVE.expired : NATIVE.interrupted;
        this.stores[owner].update(
          row.id,
          { native_state: state, outcome: state === NATIVE.expired ? 'timeout' : 'unknown' },
          t,
        );
      }
    }
  }

  /**
   * Records the operation as awaiting approval and returns the plan with a short-lived token.
   * Thrown when (before any record is made): a benchmark or media submission on a node
   * without router settings, or a recipe command without a readable recipes directory
   * (UnavailableError: the request is valid, this node is not set up to serve it); the recipe
   * is unknown (NotFoundError).
   */
  plan(command: Command): PlanResult {
    if ((command.name === 'benchmark.start' || command.name === 'media.submit') && !this.router)
      throw new UnavailableError();
    // Cancelling a job this controller never had is refused before anyone confirms it.
    if (command.name === 'benchmark.cancel' || command.name === 'media.cancel') this.requireJob(command);
    if (command.name === 'media.submit') {
      if (this.mediaDir === undefined) throw new UnavailableError();
      // Paths inside the media directory only: relative, no `..` segment, no NUL or backslash.
      if (!command.params.files.every(isMediaPath)) throw new InvalidInputError();
    }
    const recipe = isRecipeCommand(command) ? this.requireRecipes().resolve(command.params.name) : undefined;
    // Each plan waits in memory (and is beaten every second) until applied or expired: bounded.
    if (this.pending.full) throw new UnavailableError();
    const t = this.now();
    const opId = newId('op');
    this.insert(
      'controller',
      { id: opId, kind: command.name, native_state: NATIVE.awaitingApproval, total: recipe ? RECIPE_STEPS : 3 },
      t,
    );
    const token = randomBytes(24).toString('hex');
    const expiresAt = t + CONFIRMATION_TTL_MS;
    this.pending.add(digest(token), { opId, command, expiresAt, ...(recipe ? { digest: recipe.digest } : {}) });
    return {
      operation_id: opId,
      command: command.name,
      plan: describePlan(command, recipe),
      confirmation_token: token,
      expires_at: new Date(expiresAt).toISOString(),
    };
  }

  /**
   * Carries out a planned command. Recipe commands run in the background: the answer comes
   * once the operation is `preparing`, and the status route follows it to its end.
   * Thrown when: the token is unknown, used or expired (InvalidInputError); the job to cancel
   * is unknown (NotFoundError).
   */
  apply(token: string): { operation_id: string; job_id?: string } {
    const p = this.pending.take(digest(token));
    if (!p) throw new InvalidInputError();
    if (this.now() > p.expiresAt) {
      this.endOp(p.opId, { native_state: NATIVE.expired, outcome: 'timeout' });
      throw new InvalidInputError();
    }
    const ops = this.stores.controller;
    try {
      ops.update(p.opId, { native_state: NATIVE.preparing, progress_completed: 1 }, this.now());
    } catch (err) {
      // The store refused it (a full disk): nothing was started, and the token is spent. The
      // operation ends failed (kept, and written once the store takes writes), never left
      // looking active for good.
      this.endOp(p.opId, { native_state: NATIVE.failed, outcome: 'error' });
      throw err;
    }
    this.changes.next('controller');
    if (isRecipeCommand(p.command)) {
      this.runRecipe(p.opId, p.command, p.digest ?? '');
      return { operation_id: p.opId };
    }
    let jobId: string | undefined;
    try {
      ops.update(p.opId, { native_state: NATIVE.submitting, progress_completed: 2 }, this.now());
      jobId = this.execute(p.command);
    } catch (err) {
      this.endOp(p.opId, { native_state: NATIVE.failed, outcome: err instanceof NotFoundError ? 'rejected' : 'error' });
      throw err;
    }
    // Started: the operation succeeded, whether or not the store takes that at once.
    this.endOp(p.opId, { native_state: NATIVE.succeeded, outcome: 'success', progress_completed: 3 });
    return jobId ? { operation_id: p.opId, job_id: jobId } : { operation_id: p.opId };
  }

  /** An operation's end: written now, or kept and written once the store takes writes again (see finish). */
  private endOp(opId: string, fields: Partial<JobRow>): void {
    this.finish('controller', opId, fields, this.now());
    this.changes.next('controller');
  }

  /** An operation and, for job commands, the job it started (lifecycle status route). */
  status(id: string): {
    id: string;
    state: string;
    outcome: string | null;
    progress: { completed: number | null; total: number | null };
    summary: unknown;
  } {
    for (const owner of ['controller', 'benchmark', 'media'] as const) {
      const stored = this.stores[owner].get(id);
      if (stored) {
        // An end state the store could not take yet is the job's state all the same.
        const row = this.unwritten.over(id, stored);
        return {
          id: row.id,
          state: row.native_state,
          outcome: row.outcome,
          progress: { completed: row.progress_completed, total: row.progress_total },
          summary: row.summary ? (JSON.parse(row.summary) as unknown) : null,
        };
      }
    }
    throw new NotFoundError();
  }

  private execute(c: Command): string | undefined {
    switch (c.name) {
      case 'benchmark.start':
        return this.startJob('benchmark', c.params.requests, (progress, signal) =>
          runBenchmark(c.params, this.requireRouter(), progress, signal),
        );
      case 'media.submit':
        return this.startJob('media', c.params.files.length, (progress, signal) =>
          runMedia(c.params, this.mediaDir!, this.requireRouter(), progress, signal),
        );
      case 'benchmark.cancel':
      case 'media.cancel': {
        this.requireJob(c);
        // A job that already ended (or is ending: a second cancel) is not running, which is what
        // a cancel asks for: nothing to do, and its own status says how it ended.
        this.running.get(c.params.job_id)?.abort();
        return undefined;
      }
    }
  }

  /** The job a cancel command names must be one of this controller's. Thrown when: it is not (NotFoundError). */
  private requireJob(c: { name: 'benchmark.cancel' | 'media.cancel'; params: { job_id: string } }): void {
    const owner: JobOwner = c.name === 'benchmark.cancel' ? 'benchmark' : 'media';
    if (!this.stores[owner].get(c.params.job_id)) throw new NotFoundError();
  }

  private requireRecipes(): RecipeLifecycle {
    if (!this.recipes) throw new UnavailableError();
    return this.recipes;
  }

  /**
   * Runs a recipe command; the operation record follows it: preparing -> submitting ->
   * running -> terminal. Recipe operations on a node run one at a time, in the order they
   * were applied (each waits in `preparing`): two at once would both see the same runtime
   * state, and the second would fail on what the first is creating (its container name, its
   * GPUs) instead of finding it done.
   */
  private runRecipe(opId: string, c: RecipeCommand, plannedDigest: string): void {
    const ops = this.stores.controller;
    const ctl = new AbortController();
    this.running.set(opId, ctl);
    const stopBeat = this.heartbeat('controller', opId);
    const hooks = {
      signal: ctl.signal,
      phase: (p: 'submitting' | 'running') => {
        this.persist(opId, () =>
          ops.update(
            opId,
            p === 'submitting'
              ? { native_state: NATIVE.submitting, progress_completed: 2 }
              : { native_state: NATIVE.running, progress_completed: 3 },
            this.now(),
          ),
        );
        this.changes.next('controller');
      },
    };
    const turn = this.recipeTurn;
    let release!: () => void;
    this.recipeTurn = new Promise<void>((resolve) => (release = resolve));
    const task = (async () => {
      let result: RecipeResult | undefined;
      try {
        await turn;
        if (!this.closing) {
          const recipes = this.requireRecipes();
          result = await (c.name === 'recipe.apply'
            ? recipes.apply(c.params.name, plannedDigest, hooks)
            : recipes.stop(c.params.name, hooks));
        }
      } catch (err) {
        if (!this.closing) this.logger.error({ err, operation: opId }, 'recipe operation failed');
      } finally {
        release();
        stopBeat();
        this.running.delete(opId);
      }
      if (result?.ok)
        this.endOp(opId, {
          native_state: NATIVE.succeeded,
          outcome: 'success',
          progress_completed: RECIPE_STEPS,
          summary: JSON.stringify({ action: result.action, containers: result.containers }),
        });
      else if (result)
        this.endOp(opId, {
          native_state: NATIVE.failed,
          outcome: result.outcome,
          summary: JSON.stringify({ reason: result.reason }),
        });
      // Cut short by a shutdown: what the runtime did is not known.
      else if (this.closing) this.endOp(opId, { native_state: NATIVE.interrupted, outcome: 'unknown' });
      else
        this.endOp(opId, {
          native_state: NATIVE.failed,
          outcome: 'error',
          summary: JSON.stringify({ reason: 'internal' }),
        });
    })();
    this.tasks.add(task);
    void task.finally(() => this.tasks.delete(task));
  }

  /** Beats the job's heartbeat every second until the returned function is called. */
  private heartbeat(owner: JobOwner, id: string): () => void {
    const beat = setInterval(() => {
      this.persist(id, () => this.stores[owner].heartbeat(id, this.now()));
      this.changes.next(owner);
    }, HEARTBEAT_MS);
    return () => clearInterval(beat);
  }

  private requireRouter(): RouterTarget {
    if (!this.router) throw new UnavailableError();
    return this.router;
  }

  private startJob(
    owner: 'benchmark' | 'media',
    total: number,
    run: (progress: (n: number) => void, signal: AbortSignal) => Promise<object>,
  ): string {
    if (!this.router) throw new UnavailableError();
    const id = newId(owner === 'benchmark' ? 'bench' : 'media');
    const store = this.stores[owner];
    this.insert(owner, { id, kind: owner, native_state: NATIVE.queued, total }, this.now());
    const ctl = new AbortController();
    this.running.set(id, ctl);
    let lastWrite = 0;
    let lastN = 0;
    const stopBeat = this.heartbeat(owner, id);
    // A job whose progress cannot be recorded is stopped: load nobody can follow is not sent.
    // Its record keeps its last written state, and its heartbeat ages into `stale`.
    let storeFailed = false;
    const record = (fields: Partial<JobRow>, t: number): void => {
      if (this.persist(id, () => store.update(id, fields, t))) return;
      storeFailed = true;
      ctl.abort();
    };
    const task = (async () => {
      record({ native_state: NATIVE.running, progress_completed: 0 }, this.now());
      this.changes.next(owner);
      try {
        const summary = await run((n) => {
          lastN = n;
          const t = this.now();
          if (n === total || t - lastWrite >= 200) {
            lastWrite = t;
            record({ progress_completed: n }, t);
            this.changes.next(owner);
          }
        }, ctl.signal);
        const outcomes = (summary as { outcomes?: Record<string, number> }).outcomes ?? {};
        const failed = Object.entries(outcomes).some(([k, v]) => k !== 'success' && k !== 'cancelled' && v > 0);
        // Stopped by a shutdown rather than a cancel command: what the engine finished is unknown.
        // Stopped because its store failed: a failure of the node, not a user's cancel.
        const state = this.closing
          ? NATIVE.interrupted
          : storeFailed
            ? NATIVE.failed
            : ctl.signal.aborted
              ? NATIVE.cancelled
              : failed
                ? NATIVE.failed
                : NATIVE.succeeded;
        const outcomeOf: Record<string, string> = {
          [NATIVE.succeeded]: 'success',
          [NATIVE.cancelled]: 'cancelled',
          [NATIVE.interrupted]: 'unknown',
        };
        const outcome = outcomeOf[state] ?? 'error';
        // Progress writes are spaced 200 ms apart: the last count is written with the end, so
        // the record's progress and its summary agree (requests still in flight at a cancel end after it).
        this.finish(
          owner,
          id,
          { native_state: state, outcome, progress_completed: lastN, summary: JSON.stringify(summary) },
          this.now(),
        );
      } catch (err) {
        this.logger.error({ err, job: id }, 'job failed');
        this.finish(owner, id, { native_state: NATIVE.failed, outcome: 'error' }, this.now());
      } finally {
        stopBeat();
        this.running.delete(id);
        this.changes.next(owner);
      }
    })();
    this.tasks.add(task);
    void task.finally(() => this.tasks.delete(task));
    return id;
  }

  /**
   * A job's end state: written now, or, when the store cannot take it, kept (status answers
   * from it) and written as soon as the store takes writes again, so a job stopped by a full
   * disk is never shown running for good.
   */
  private finish(owner: JobOwner, id: string, fields: Partial<JobRow>, t: number): void {
    if (this.persist(id, () => this.stores[owner].update(id, fields, t))) return;
    this.unwritten.keep(this.stores[owner], id, fields, t, () => this.changes.next(owner));
  }

  /**
   * A store write from background work (a runner, a heartbeat), which has nobody to answer to:
   * a failure (disk full, the state directory gone) is logged, at most one line per 10 s with
   * the count left out, never thrown out of a timer or a task (that would end the process).
   * Returns false when the write failed.
   */
  private persist(id: string, write: () => void): boolean {
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

  private insert(
    owner: JobOwner,
    r: { id: string; kind: string; native_state: string; total: number },
    t: number,
  ): void {
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

  /** Stops runners; their jobs are marked interrupted (their engine work is not known). */
  async close(): Promise<void> {
    this.closing = true;
    this.pending.close();
    for (const ctl of this.running.values()) ctl.abort();
    await Promise.allSettled([...this.tasks]);
    // A last try for end states still unwritten (the next start marks what is left interrupted).
    this.unwritten.writeAll();
    this.unwritten.stop();
    await this.recipes?.close();
    for (const s of Object.values(this.stores)) s.close();
  }
}
