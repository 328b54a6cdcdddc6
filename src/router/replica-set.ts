import type { Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import type { ModelRoute, UpstreamTarget } from '../config/router-config.js';
import { Readiness } from './readiness.js';
import type { UpstreamCall } from './upstream-call.js';

/**
 * 5xx answers in a row after which a replica is skipped until its readiness probe passes
 * (a connection failure skips it at once). docs/decisions/0050.
 */
export const DOWN_AFTER_5XX = 3;

/** Engine answers that another replica may answer better: failed over while nothing reached the client. */
const FAIL_OVER_STATUS: ReadonlySet<number> = new Set([502, 503]);

/**
 * Errors of an upstream that could not be reached or dropped the connection before any
 * answer (undici passes the socket's code through): the request is failed over, and the
 * replica is skipped until its probe passes.
 */
const CONNECTION_FAILED: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
]);

function connectionFailed(err: unknown): boolean {
  return CONNECTION_FAILED.has((err as { code?: string } | undefined)?.code ?? '');
}

/** One upstream request, its path relative to the replica's base path (`/chat/completions`). */
export type ReplicaRequest = Dispatcher.DispatchOptions;

/** What a dispatch did, for the terminal record (`upstream_replica`, `attempts`). */
export interface DispatchTally {
  upstreamReplica: number | null;
  attempts: number;
}

/** What a dispatch needs of the relay's abort (RelayAbort is one). */
export interface CallLink {
  readonly aborted: boolean;
  /** The upstream request in flight: the abort cancels it. */
  upstream: { cancel(): void } | undefined;
}

/**
 * One replica of an alias: its connection pool (made when first needed, closed once the
 * replica is retired by a reload and idle), its cached readiness, and the requests it holds.
 */
export class Replica {
  /** Upstream requests sent here and not yet over (the least-outstanding choice reads it). */
  outstanding = 0;
  /** 5xx answers in a row. */
  private failures = 0;
  readonly readiness: Readiness;
  private pool: Pool | undefined;
  /** Requests and probes using the pool now. */
  private busy = 0;
  private retired = false;

  constructor(
    readonly index: number,
    readonly target: UpstreamTarget,
    private readonly connections: number,
    readinessPath: string,
    readinessTtlMs: number,
  ) {
    this.readiness = new Readiness((fn) => this.using(fn), readinessPath, readinessTtlMs);
  }

  /** Sends one upstream request here; `call` hears how it went. */
  send(req: ReplicaRequest, call: UpstreamCall): void {
    this.outstanding++;
    this.busy++;
    call.owner = this;
    this.open().dispatch(req, call);
  }

  /** UpstreamCall's end hook: the request is over; a failure of the replica's own counts against it. */
  callEnded(call: UpstreamCall, err: Error | undefined): void {
    this.outstanding--;
    this.release();
    if (err !== undefined && !call.cancelled && connectionFailed(err)) this.readiness.markDown();
    else if (call.status >= 500) {
      if (++this.failures >= DOWN_AFTER_5XX) {
        this.failures = 0;
        this.readiness.markDown();
      }
    } else this.failures = 0;
  }

  /** No longer in the routing table: its pool closes as soon as nothing uses it. */
  retire(): void {
    this.retired = true;
    if (this.busy === 0) void this.closePool();
  }

  /** Closes the pool now (requests still on it finish first). */
  closePool(): Promise<void> {
    const p = this.pool;
    this.pool = undefined;
    return p ? p.close().catch(() => undefined) : Promise.resolve();
  }

  private open(): Pool {
    // A request of the configuration before a reload may still come after its pool closed.
    this.pool ??= new Pool(this.target.origin, {
      connections: this.connections,
      keepAliveTimeout: 30_000,
      pipelining: 1,
    });
    return this.pool;
  }

  private async using<T>(fn: (pool: Dispatcher) => Promise<T>): Promise<T> {
    this.busy++;
    try {
      return await fn(this.open());
    } finally {
      this.release();
    }
  }

  private release(): void {
    this.busy--;
    if (this.retired && this.busy === 0) void this.closePool();
  }
}

/**
 * The replicas of one alias: readiness (ready when one of them is), the choice of a replica
 * (least outstanding requests among the ready ones, ties taken in turn), and failover to
 * another replica on a connection failure or an engine 502/503, while no byte has reached
 * the client, up to `max_attempts` in all. docs/decisions/0050.
 */
export class ReplicaSet {
  readonly replicas: readonly Replica[];
  readonly maxAttempts: number;
  /** Where the next tie-break starts (round robin among equally loaded replicas). */
  private turn = 0;

  constructor(route: ModelRoute, readinessTtlMs: number) {
    this.replicas = route.replicas.map(
      (t, i) => new Replica(i, t, route.maxConcurrency + 2, route.readinessPath, readinessTtlMs),
    );
    this.maxAttempts = Math.min(route.maxAttempts, this.replicas.length);
  }

  /**
   * True when at least one replica is ready: cached answers are used as they are, stale ones
   * are probed (in the background when another replica is ready already). Never throws.
   */
  ready(): Promise<boolean> | boolean {
    const rs = this.replicas;
    if (rs.length === 1) return rs[0]!.readiness.check();
    let any = false;
    let pending: Promise<boolean>[] | undefined;
    for (const r of rs) {
      const c = r.readiness.check();
      if (c === true) any = true;
      else if (c !== false) (pending ??= []).push(c);
    }
    if (any || pending === undefined) return any;
    return firstTrue(pending);
  }

  /**
   * Sends the request to a replica and, while the answer is a connection failure or a 502/503
   * (nothing of it relayed yet), to another ready one, up to `maxAttempts` in all. Returns the
   * last call: its `answer` is the one the relay reads. `link.upstream` is each call in turn,
   * so the relay's abort (client gone, deadline, stop) cancels the one in flight. `req` is
   * the caller's, used for this request only: its `path` (relative to the base path) is
   * completed in place.
   */
  dispatch(
    req: ReplicaRequest,
    newCall: () => UpstreamCall,
    link: CallLink,
    tally: DispatchTally,
  ): UpstreamCall | Promise<UpstreamCall> {
    if (this.maxAttempts === 1) {
      // No failover possible: no wait here, no promise of its own (the common one-upstream case).
      const r = this.pick(0, true)!;
      const call = newCall();
      link.upstream = call;
      if (link.aborted) call.cancel();
      tally.attempts = 1;
      tally.upstreamReplica = r.index;
      req.path = r.target.pathPrefix + req.path;
      r.send(req, call);
      return call;
    }
    return this.dispatchWithFailover(req, newCall, link, tally);
  }

  private async dispatchWithFailover(
    req: ReplicaRequest,
    newCall: () => UpstreamCall,
    link: CallLink,
    tally: DispatchTally,
  ): Promise<UpstreamCall> {
    let tried = 0;
    const path = req.path;
    for (;;) {
      // The first attempt goes out even when no replica looks ready now (the check before
      // admission said one was); a failover only to a ready replica.
      const r = this.pick(tried, tally.attempts === 0)!;
      tried |= 1 << r.index;
      const call = newCall();
      link.upstream = call;
      if (link.aborted) call.cancel();
      tally.attempts++;
      tally.upstreamReplica = r.index;
      req.path = r.target.pathPrefix + path;
      r.send(req, call);
      if (tally.attempts >= this.maxAttempts || this.pick(tried, false) === undefined) return call;
      // Nothing of the answer is relayed before this returns: a whole body is relayed only once
      // read whole, and a stream is handed on once its first bytes are here.
      try {
        const answer = await call.answer;
        if (answer.kind === 'stream') {
          if (await firstBytes(answer.body)) return call;
          answer.body.destroy();
        } else if (!FAIL_OVER_STATUS.has(answer.status)) return call;
      } catch (err) {
        if (call.cancelled || !connectionFailed(err)) return call;
      }
      if (link.aborted || this.pick(tried, false) === undefined) return call;
    }
  }

  /**
   * The replica with the fewest outstanding requests among those not yet tried and last seen
   * ready (any untried one when `anyway` and none is), ties taken in turn; undefined when none.
   */
  pick(tried: number, anyway: boolean): Replica | undefined {
    const rs = this.replicas;
    const n = rs.length;
    if (n === 1) return tried === 0 ? rs[0] : undefined;
    let best: Replica | undefined;
    let fallback: Replica | undefined;
    for (let k = 0; k < n; k++) {
      const r = rs[(this.turn + k) % n]!;
      if ((tried & (1 << r.index)) !== 0) continue;
      if (!(anyway ? r.readiness.lastOk : r.readiness.usable)) {
        if (anyway && (fallback === undefined || r.outstanding < fallback.outstanding)) fallback = r;
        continue;
      }
      if (best === undefined || r.outstanding < best.outstanding) best = r;
    }
    const chosen = best ?? fallback;
    if (chosen !== undefined && tried === 0) this.turn = (chosen.index + 1) % n;
    return chosen;
  }

  /** Removed from the routing table by a reload: each pool closes once its requests are over. */
  retire(): void {
    for (const r of this.replicas) r.retire();
  }

  /** Closes every pool (at a stop, after the requests in flight ended). */
  async close(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.closePool()));
  }
}

/**
 * Waits for a stream's first bytes (read by nobody yet): true once some are buffered or the
 * stream ended or failed in a way that is not the connection's (the relay reads it then),
 * false when the connection failed before any byte.
 */
function firstBytes(body: Readable): Promise<boolean> {
  // A failure between this wait and the relay's first read is the relay's to see, never an
  // unheard 'error' event.
  body.on('error', ignore);
  if (body.readableLength > 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ok: boolean): void => {
      body.off('readable', onReadable);
      body.off('error', onError);
      body.off('close', onClose);
      resolve(ok);
    };
    const onReadable = (): void => done(true);
    const onError = (err: Error): void => done(!connectionFailed(err));
    const onClose = (): void => done(true);
    body.on('readable', onReadable);
    body.on('error', onError);
    body.on('close', onClose);
  });
}

function ignore(): void {
  // the relay's iterator reports it
}

/** Resolves true as soon as one resolves true; false when all resolved false. */
function firstTrue(ps: readonly Promise<boolean>[]): Promise<boolean> {
  return new Promise((resolve) => {
    let left = ps.length;
    for (const p of ps)
      void p.then((ok) => {
        if (ok) resolve(true);
        else if (--left === 0) resolve(false);
      });
  });
}
