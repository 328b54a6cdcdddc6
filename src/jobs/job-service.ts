import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Subject } from 'rxjs';
import type { Logger } from 'pino';
import { InvalidInputError, NotFoundError, UnavailableError } from '../errors.js';
import { isMediaPath } from './media-runner.js';
import { NATIVE, type JobOwner } from '../actors/job-mapping.js';
import { JobStore } from '../stores/job-store.js';
import { PendingPlans } from './pending-plans.js';
import type { RouterTarget } from './benchmark-runner.js';
import { describePlan, isRecipeCommand, type Command } from './commands.js';
import type { RecipeLifecycle } from '../recipes/recipe-lifecycle.js';
import { HEARTBEAT_MS, JobWrites, newId, reconcile } from './job-writes.js';
import { BackgroundWork } from './background-work.js';
import { JobRuns } from './job-runs.js';
import { RECIPE_STEPS, RecipeOperations } from './recipe-operations.js';

/** How long a plan's confirmation token stays valid. */
export const CONFIRMATION_TTL_MS = 120_000;

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

const digest = (t: string): string => createHash('sha256').update(t).digest('hex');

/**
 * The node's lifecycle side: owner stores (operations, benchmark jobs, media jobs), the
 * plan/apply confirmation boundary, and the runners (job-runs.ts, recipe-operations.ts; their
 * store writes in job-writes.ts). Reads never come here: actors read the stores through
 * read-only handles.
 */
export class JobService {
  readonly stores: Readonly<Record<JobOwner, JobStore>>;
  readonly paths: Readonly<Record<JobOwner, string>>;
  /** Emits the owner whose store changed (actors read sooner). */
  readonly changes = new Subject<JobOwner>();
  private readonly pending = new PendingPlans({
    ttlMs: CONFIRMATION_TTL_MS,
    beatMs: HEARTBEAT_MS,
    onExpire: (p) => this.writes.endOp(p.opId, { native_state: NATIVE.expired, outcome: 'timeout' }),
    onBeat: (ids) => {
      this.writes.persist(ids[0]!, () => this.stores.controller.heartbeatAll(ids, this.now()));
      this.changes.next('controller');
    },
  });
  private readonly work = new BackgroundWork();
  private readonly now: () => number;
  private readonly mediaDir: string | undefined;
  private readonly writes: JobWrites;
  private readonly jobs: JobRuns;
  private readonly recipes: RecipeOperations;

  constructor(
    stateDir: string,
    private readonly router: RouterTarget | undefined,
    logger: Logger,
    opts: JobServiceOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
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
    reconcile(this.stores, this.now());
    const shared = { stores: this.stores, work: this.work, changes: this.changes, logger, now: this.now };
    this.writes = new JobWrites(this.stores, this.changes, logger, this.now);
    this.jobs = new JobRuns({ ...shared, writes: this.writes, router, mediaDir: opts.mediaDir });
    this.recipes = new RecipeOperations({ ...shared, writes: this.writes, recipes: opts.recipes });
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
    if (command.name === 'benchmark.cancel' || command.name === 'media.cancel') this.jobs.requireJob(command);
    if (command.name === 'media.submit') {
      if (this.mediaDir === undefined) throw new UnavailableError();
      // Paths inside the media directory only: relative, no `..` segment, no NUL or backslash.
      if (!command.params.files.every(isMediaPath)) throw new InvalidInputError();
    }
    const recipe = isRecipeCommand(command) ? this.recipes.requireRecipes().resolve(command.params.name) : undefined;
    // Each plan waits in memory (and is beaten every second) until applied or expired: bounded.
    if (this.pending.full) throw new UnavailableError();
    const t = this.now();
    const opId = newId('op');
    this.writes.insert(
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
      this.writes.endOp(p.opId, { native_state: NATIVE.expired, outcome: 'timeout' });
      throw new InvalidInputError();
    }
    const ops = this.stores.controller;
    try {
      ops.update(p.opId, { native_state: NATIVE.preparing, progress_completed: 1 }, this.now());
    } catch (err) {
      // The store refused it (a full disk): nothing was started, and the token is spent. The
      // operation ends failed (kept, and written once the store takes writes), never left
      // looking active for good.
      this.writes.endOp(p.opId, { native_state: NATIVE.failed, outcome: 'error' });
      throw err;
    }
    this.changes.next('controller');
    if (isRecipeCommand(p.command)) {
      this.recipes.run(p.opId, p.command, p.digest ?? '');
      return { operation_id: p.opId };
    }
    let jobId: string | undefined;
    try {
      ops.update(p.opId, { native_state: NATIVE.submitting, progress_completed: 2 }, this.now());
      jobId = this.execute(p.command);
    } catch (err) {
      this.writes.endOp(p.opId, {
        native_state: NATIVE.failed,
        outcome: err instanceof NotFoundError ? 'rejected' : 'error',
      });
      throw err;
    }
    // Started: the operation succeeded, whether or not the store takes that at once.
    this.writes.endOp(p.opId, { native_state: NATIVE.succeeded, outcome: 'success', progress_completed: 3 });
    return jobId ? { operation_id: p.opId, job_id: jobId } : { operation_id: p.opId };
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
        const row = this.writes.over(id, stored);
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

  /** A job command, applied: the id of the job it started, if it started one. */
  private execute(c: Exclude<Command, { name: 'recipe.apply' | 'recipe.stop' }>): string | undefined {
    switch (c.name) {
      case 'benchmark.start':
      case 'media.submit':
        return this.jobs.start(c);
      case 'benchmark.cancel':
      case 'media.cancel':
        this.jobs.cancel(c);
        return undefined;
    }
  }

  /** Stops runners; their jobs are marked interrupted (their engine work is not known). */
  async close(): Promise<void> {
    this.pending.close();
    await this.work.close();
    // A last try for end states still unwritten (the next start marks what is left interrupted).
    this.writes.flush();
    await this.recipes.close();
    for (const s of Object.values(this.stores)) s.close();
  }
}
