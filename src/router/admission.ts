import { AdmissionRefused } from '../errors.js';

export { AdmissionRefused, type AdmissionRefusal } from '../errors.js';

/** What admission needs of an abort signal (RelayAbort is one). */
export interface AbortLike {
  readonly aborted: boolean;
  once(event: 'abort', listener: () => void): unknown;
  off(event: 'abort', listener: () => void): unknown;
}

interface Waiter {
  resolve(): void;
  reject(err: AdmissionRefused): void;
  timer: NodeJS.Timeout | undefined;
  cleanup(): void;
}

/**
 * Per-alias admission: at most `concurrency` requests in flight and a bounded FIFO queue.
 * The wait is measured by the caller; a full queue refuses at once, a queued request gives
 * up after `timeoutMs` or when its client goes away.
 */
export class Admission {
  private inFlight = 0;
  private readonly queue: Waiter[] = [];

  constructor(
    private concurrency: number,
    private maxQueue: number,
    private timeoutMs: number,
  ) {}

  /**
   * New limits from a reloaded configuration: the requests in flight and waiting stay; a
   * larger concurrency admits waiters at once, a smaller one admits nobody until enough finish.
   * Requests waiting already keep the queue timeout they began with.
   */
  reconfigure(concurrency: number, maxQueue: number, timeoutMs: number): void {
    this.concurrency = concurrency;
    this.maxQueue = maxQueue;
    this.timeoutMs = timeoutMs;
    while (this.inFlight < this.concurrency && this.queue.length > 0) {
      this.inFlight++;
      const next = this.queue.shift()!;
      next.cleanup();
      next.resolve();
    }
  }

  get active(): number {
    return this.inFlight;
  }
  get queued(): number {
    return this.queue.length;
  }

  /** Takes a free slot at once when there is one and nobody waits (call release() exactly once). */
  tryAcquire(): boolean {
    if (this.inFlight < this.concurrency && this.queue.length === 0) {
      this.inFlight++;
      return true;
    }
    return false;
  }

  /** Resolves when a slot is held (call release() exactly once). Thrown when: refused (AdmissionRefused). */
  acquire(signal?: AbortLike): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    if (this.queue.length >= this.maxQueue) return Promise.reject(new AdmissionRefused('full'));
    if (signal?.aborted) return Promise.reject(new AdmissionRefused('aborted'));
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => drop(new AdmissionRefused('aborted'));
      const w: Waiter = {
        resolve,
        reject,
        timer: undefined,
        cleanup: () => {
          if (w.timer) clearTimeout(w.timer);
          signal?.off('abort', onAbort);
        },
      };
      const drop = (err: AdmissionRefused): void => {
        const i = this.queue.indexOf(w);
        if (i >= 0) this.queue.splice(i, 1);
        w.cleanup();
        reject(err);
      };
      w.timer = setTimeout(() => drop(new AdmissionRefused('timeout')), this.timeoutMs);
      signal?.once('abort', onAbort);
      this.queue.push(w);
    });
  }

  /** Frees a slot and hands it to the oldest waiter. */
  release(): void {
    // Over the limit after a reload lowered it: the slot is given up, not handed on.
    const next = this.inFlight <= this.concurrency ? this.queue.shift() : undefined;
    if (next) {
      next.cleanup();
      next.resolve();
      return;
    }
    this.inFlight = Math.max(0, this.inFlight - 1);
  }
}
