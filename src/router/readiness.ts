import type { Dispatcher } from 'undici';

/**
 * Cached readiness of one upstream replica: one probe in flight at a time, its answer reused
 * for `ttlMs` (failures for a quarter of it, so recovery is noticed sooner). The caller
 * measures the time it spent here, cached path included (`readiness_check_ms`).
 *
 * A replica marked down (a connection failure, or several 5xx answers in a row) counts as
 * not ready, and its next check probes at once: it is used again only once a probe passes.
 */
export class Readiness {
  private ok = false;
  /** When the cached answer was taken; -Infinity: none (the next check probes). */
  private at = Number.NEGATIVE_INFINITY;
  private inFlight: Promise<boolean> | undefined;

  constructor(
    /** Runs a probe on the replica's pool (which counts it as in use meanwhile). */
    private readonly using: (fn: (pool: Dispatcher) => Promise<boolean>) => Promise<boolean>,
    private readonly path: string,
    private readonly ttlMs: number,
    private readonly probeTimeoutMs = 2_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Marked down and not probed since. */
  private down = false;

  /** The last answer, fresh or not (false before the first one and after markDown). */
  get lastOk(): boolean {
    return this.ok;
  }

  /** Worth a failover: the last answer was good, or there is none yet (its first probe is still out) and it was not marked down. */
  get usable(): boolean {
    return this.ok || (this.at === Number.NEGATIVE_INFINITY && !this.down);
  }

  /** True when the replica answered its readiness path with 2xx recently. Never throws. */
  check(): Promise<boolean> | boolean {
    if (this.fresh()) return this.ok;
    if (!this.inFlight) {
      this.inFlight = this.probe().then((ok) => {
        this.ok = ok;
        this.down = false;
        this.at = this.now();
        this.inFlight = undefined;
        return ok;
      });
    }
    return this.inFlight;
  }

  /** True while the cached answer is within its interval (no probe needed). */
  fresh(): boolean {
    return this.now() - this.at <= (this.ok ? this.ttlMs : this.ttlMs / 4);
  }

  /** The replica failed a request: not ready until a probe passes (the next check probes). */
  markDown(): void {
    this.down = true;
    this.ok = false;
    this.at = Number.NEGATIVE_INFINITY;
  }

  private probe(): Promise<boolean> {
    return this.using((pool) => this.probeOn(pool));
  }

  private async probeOn(pool: Dispatcher): Promise<boolean> {
    try {
      const res = await pool.request({
        method: 'GET',
        path: this.path,
        headersTimeout: this.probeTimeoutMs,
        bodyTimeout: this.probeTimeoutMs,
        signal: AbortSignal.timeout(this.probeTimeoutMs),
      });
      await res.body.dump();
      return res.statusCode >= 200 && res.statusCode < 300;
    } catch {
      return false;
    }
  }
}
