/**
 * The node's runners in the background (recipe operations, benchmark and media jobs): each
 * registered by its record's id with its abort controller while it runs (a cancel aborts it),
 * its task kept until it settles (close aborts them all and waits).
 */
export class BackgroundWork {
  private readonly running = new Map<string, AbortController>();
  private readonly tasks = new Set<Promise<void>>();
  private stopping = false;

  /** True once close began: work cut short ends `interrupted` (what the engine did is not known). */
  get closing(): boolean {
    return this.stopping;
  }

  /** A new abort controller for the runner of `id`, registered until `ended(id)`. */
  begin(id: string): AbortController {
    const ctl = new AbortController();
    this.running.set(id, ctl);
    return ctl;
  }

  ended(id: string): void {
    this.running.delete(id);
  }

  /** Aborts the runner of `id`; nothing when none runs (it ended, or never ran here). */
  abort(id: string): void {
    this.running.get(id)?.abort();
  }

  /** Keeps `task` until it settles: close waits for it. */
  track(task: Promise<void>): void {
    this.tasks.add(task);
    void task.finally(() => this.tasks.delete(task));
  }

  /** Marks closing, aborts every runner and waits for every task. */
  async close(): Promise<void> {
    this.stopping = true;
    for (const ctl of this.running.values()) ctl.abort();
    await Promise.allSettled([...this.tasks]);
  }
}
