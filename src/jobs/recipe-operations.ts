import type { Subject } from 'rxjs';
import type { Logger } from 'pino';
import { UnavailableError } from '../errors.js';
import { NATIVE, type JobOwner } from '../actors/job-mapping.js';
import type { JobRow } from '../stores/job-store.js';
import type { RecipeLifecycle, RecipeResult } from '../recipes/recipe-lifecycle.js';
import type { RecipeCommand } from './commands.js';
import type { JobStores, JobWrites } from './job-writes.js';
import type { BackgroundWork } from './background-work.js';

/** Steps of a recipe operation: approved, prepared (read), submitted (written), verified. */
export const RECIPE_STEPS = 4;

export interface RecipeOperationsOptions {
  /** The node's recipe lifecycle (`[node] recipes_dir`); without it recipe commands are 503. */
  readonly recipes: RecipeLifecycle | undefined;
  readonly stores: JobStores;
  readonly writes: JobWrites;
  readonly work: BackgroundWork;
  readonly changes: Subject<JobOwner>;
  readonly logger: Logger;
  readonly now: () => number;
}

/**
 * Applied recipe commands (recipe.apply, recipe.stop), run in the background one at a time,
 * each followed by its operation record.
 */
export class RecipeOperations {
  /** Settles when the last recipe operation applied so far has ended (see run). */
  private recipeTurn: Promise<void> = Promise.resolve();

  constructor(private readonly o: RecipeOperationsOptions) {}

  /** The recipe lifecycle. Thrown when: this node has none (UnavailableError). */
  requireRecipes(): RecipeLifecycle {
    if (!this.o.recipes) throw new UnavailableError();
    return this.o.recipes;
  }

  /**
   * Runs a recipe command; the operation record follows it: preparing -> submitting ->
   * running -> terminal. Recipe operations on a node run one at a time, in the order they
   * were applied (each waits in `preparing`): two at once would both see the same runtime
   * state, and the second would fail on what the first is creating (its container name, its
   * GPUs) instead of finding it done.
   */
  run(opId: string, c: RecipeCommand, plannedDigest: string): void {
    const { writes, work, logger } = this.o;
    const ctl = work.begin(opId);
    const stopBeat = writes.heartbeat('controller', opId);
    const hooks = { signal: ctl.signal, phase: (p: 'submitting' | 'running') => this.phase(opId, p) };
    const turn = this.recipeTurn;
    let release!: () => void;
    this.recipeTurn = new Promise<void>((resolve) => (release = resolve));
    const task = (async () => {
      let result: RecipeResult | undefined;
      try {
        await turn;
        if (!work.closing) {
          const recipes = this.requireRecipes();
          result = await (c.name === 'recipe.apply'
            ? recipes.apply(c.params.name, plannedDigest, hooks)
            : recipes.stop(c.params.name, hooks));
        }
      } catch (err) {
        if (!work.closing) logger.error({ err, operation: opId }, 'recipe operation failed');
      } finally {
        release();
        stopBeat();
        work.ended(opId);
      }
      writes.endOp(opId, recipeEnd(result, work.closing));
    })();
    work.track(task);
  }

  /** Closes the recipe lifecycle, if any (after the operations have ended). */
  async close(): Promise<void> {
    await this.o.recipes?.close();
  }

  /** The operation reached `p` (the lifecycle's hook): recorded, a failing write logged. */
  private phase(opId: string, p: 'submitting' | 'running'): void {
    const ops = this.o.stores.controller;
    this.o.writes.persist(opId, () =>
      ops.update(
        opId,
        p === 'submitting'
          ? { native_state: NATIVE.submitting, progress_completed: 2 }
          : { native_state: NATIVE.running, progress_completed: 3 },
        this.o.now(),
      ),
    );
    this.o.changes.next('controller');
  }
}

/** The end of a recipe operation that returned `result` (undefined: it threw, or never ran). */
function recipeEnd(result: RecipeResult | undefined, closing: boolean): Partial<JobRow> {
  if (result?.ok)
    return {
      native_state: NATIVE.succeeded,
      outcome: 'success',
      progress_completed: RECIPE_STEPS,
      summary: JSON.stringify({ action: result.action, containers: result.containers }),
    };
  if (result)
    return {
      native_state: NATIVE.failed,
      outcome: result.outcome,
      summary: JSON.stringify({ reason: result.reason }),
    };
  // Cut short by a shutdown: what the runtime did is not known.
  if (closing) return { native_state: NATIVE.interrupted, outcome: 'unknown' };
  return { native_state: NATIVE.failed, outcome: 'error', summary: JSON.stringify({ reason: 'internal' }) };
}
