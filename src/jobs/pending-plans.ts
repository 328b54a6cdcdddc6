import type { Command } from './commands.js';

/** Plans awaiting approval at once (each lives its TTL); the next is refused until one ends. */
export const MAX_PENDING_PLANS = 256;

export interface PendingPlan {
  readonly opId: string;
  readonly command: Command;
  readonly expiresAt: number;
  /** recipe.apply: the digest of the recipe the plan described (apply refuses another). */
  readonly digest?: string;
}

export interface PendingPlansOptions {
  /** How long a plan waits for its apply. */
  readonly ttlMs: number;
  readonly beatMs: number;
  /** A plan nobody applied in time (already taken out). */
  readonly onExpire: (plan: PendingPlan) => void;
  /** Every second while plans wait: their operations' ids, to beat their heartbeats. */
  readonly onBeat: (opIds: string[]) => void;
}

/**
 * Plans awaiting approval, by their token's digest, in memory only. An operation awaiting
 * approval is held by this process (its expiry timer runs here), so its heartbeat is beaten
 * like a runner's: it reads as live while held, and ages into `stale` if this process stops
 * (a restart marks it expired). One timer beats them all, and stops when none is left.
 */
export class PendingPlans {
  private readonly plans = new Map<string, PendingPlan>();
  private beat: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly o: PendingPlansOptions) {}

  /** True when MAX_PENDING_PLANS wait: a new plan is refused before anything is written. */
  get full(): boolean {
    return this.plans.size >= MAX_PENDING_PLANS;
  }

  /** Holds `plan` until it is taken or its TTL passes. */
  add(key: string, plan: PendingPlan): void {
    this.plans.set(key, plan);
    setTimeout(() => {
      const p = this.take(key);
      if (p) this.o.onExpire(p);
    }, this.o.ttlMs + 10).unref();
    this.startBeat();
  }

  /** The plan of `key`, no longer pending; undefined when unknown, used or expired. */
  take(key: string): PendingPlan | undefined {
    const p = this.plans.get(key);
    if (p) this.plans.delete(key);
    return p;
  }

  close(): void {
    this.closed = true;
    clearInterval(this.beat);
    this.beat = undefined;
  }

  private startBeat(): void {
    if (this.beat !== undefined || this.closed) return;
    this.beat = setInterval(() => {
      if (this.plans.size === 0 || this.closed) {
        clearInterval(this.beat);
        this.beat = undefined;
        return;
      }
      this.o.onBeat([...this.plans.values()].map((p) => p.opId));
    }, this.o.beatMs);
    this.beat.unref();
  }
}
