/*
 * Span work run a batch at a time (docs/decisions/0035). A request span made the moment its
 * request ends runs its code cold: between two requests the router runs everything else, and
 * side by side (`router-ab`) the same work cost the router about twice as much done one span
 * at a time as done for dozens in a row. The work is queued and run when the batch is
 * full or a short delay has passed, whichever comes first; the span's times come from its
 * record, so when it is made changes nothing in it.
 */

/** Spans a batch holds before it is run. */
export const SPAN_BATCH_SIZE = 256;
/** Longest a span waits for its batch, in milliseconds. */
export const SPAN_BATCH_DELAY_MS = 50;

export class SpanBatch {
  private tasks: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  /** `onError`: what a task threw (the others still run). */
  constructor(
    private readonly onError: (err: unknown) => void,
    private readonly size = SPAN_BATCH_SIZE,
    private readonly delayMs = SPAN_BATCH_DELAY_MS,
  ) {}

  /** Queues `task`; runs the batch when it is full. */
  add(task: () => void): void {
    this.tasks.push(task);
    if (this.tasks.length >= this.size) this.run();
    else if (this.timer === undefined) {
      this.timer = setTimeout(this.run, this.delayMs);
      // A batch waiting never holds the process open (a stop runs it first).
      this.timer.unref();
    }
  }

  /** Runs every queued task now. */
  readonly run = (): void => {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const tasks = this.tasks;
    this.tasks = [];
    for (const task of tasks) {
      try {
        task();
      } catch (err) {
        this.onError(err);
      }
    }
  };
}
