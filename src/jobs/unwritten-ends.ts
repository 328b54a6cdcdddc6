import type { JobStore, JobRow } from '../stores/job-store.js';

/** How often end states a full store refused are tried again. */
const RETRY_WRITE_MS = 2_000;

/**
 * End states of jobs their store could not take (a full disk): kept here, read over the
 * stored row (`over`), and written as soon as the store takes writes again (tried every
 * RETRY_WRITE_MS), so a job stopped by a full disk is never shown running for good.
 */
export class UnwrittenEnds {
  private readonly ends = new Map<
    string,
    { store: JobStore; fields: Partial<JobRow>; t: number; written: () => void }
  >();
  private timer: NodeJS.Timeout | undefined;

  /** Keeps an end the store refused; `written` is called once it is on disk. */
  keep(store: JobStore, id: string, fields: Partial<JobRow>, t: number, written: () => void): void {
    this.ends.set(id, { store, fields, t, written });
    this.timer ??= setInterval(() => this.writeAll(), RETRY_WRITE_MS).unref();
  }

  /** The stored row with its unwritten end, if any, over it. */
  over(id: string, row: JobRow): JobRow {
    const u = this.ends.get(id);
    return u ? { ...row, ...u.fields } : row;
  }

  /** Writes the kept ends, oldest first; stops at the first the store still refuses. */
  writeAll(): void {
    for (const [id, u] of this.ends) {
      try {
        u.store.update(id, u.fields, u.t);
      } catch {
        return; // still failing: the next turn tries again (the failure was reported when it was kept)
      }
      this.ends.delete(id);
      u.written();
    }
    this.stop();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
