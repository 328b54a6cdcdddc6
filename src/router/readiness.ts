import type { Dispatcher } from 'undici';

interface Cached {
  ok: boolean;
  at: number;
}

/**
 * Cached readiness per upstream: one probe in flight at a time, its answer reused for
 * `ttlMs` (failures for a quarter of it, so recovery is noticed sooner). The caller measures
 * the time it spent here, cached path included (`readiness_check_ms`).
 */
export class Readiness {
  private readonly cache = new Map<string, Cached>();
  private readonly inFlight = new Map<string, Promise<boolean>>();

  constructor(
    private readonly ttlMs: number,
    private readonly probeTimeoutMs = 2_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** True when the upstream answered its readiness path with 2xx recently. Never throws. */
  check(key: string, pool: Dispatcher, path: string): Promise<boolean> | boolean {
    const c = this.cache.get(key);
    const ttl = c?.ok ? this.ttlMs : this.ttlMs / 4;
    if (c && this.now() - c.at <= ttl) return c.ok;
    let p = this.inFlight.get(key);
    if (!p) {
      p = this.probe(pool, path).then((ok) => {
        this.cache.set(key, { ok, at: this.now() });
        this.inFlight.delete(key);
        return ok;
      });
      this.inFlight.set(key, p);
    }
    return p;
  }

  /** Forget a cached success (an upstream connection failed), so the next request probes. */
  invalidate(key: string): void {
    this.cache.delete(key);
  }

  private async probe(pool: Dispatcher, path: string): Promise<boolean> {
    try {
      const res = await pool.request({
        method: 'GET',
        path,
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
