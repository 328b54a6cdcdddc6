/**
 * Load for bench/router.ts: autocannon at fixed concurrency, sequential keep-alive requests
 * at concurrency 1, and time to first chunk of streamed completions.
 */
import { Agent, request } from 'node:http';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { cpuMs, type Proc } from './router-procs.js';

/** `replicas`: the router over two engine sims; `failover`: over two, one of which answers 503 to every request. */
export type TargetKey = 'direct' | 'bare' | 'router' | 'replicas' | 'failover' | 'portkey';

export interface Target {
  readonly key: TargetKey;
  readonly label: string;
  /** http://127.0.0.1:PORT */
  readonly origin: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  /** The relay process whose CPU is measured (none for direct). */
  readonly proc: Proc | undefined;
  /** One keep-alive connection for the c=1 measurements. */
  readonly agent: Agent;
}

export function makeTarget(
  key: TargetKey,
  label: string,
  origin: string,
  headers: Record<string, string>,
  proc: Proc | undefined,
): Target {
  const port = Number(new URL(origin).port);
  if (!Number.isInteger(port) || port <= 0) throw new Error(`${label}: no port in ${origin}`);
  return {
    key,
    label,
    origin,
    path: '/v1/chat/completions',
    headers,
    proc,
    agent: new Agent({ keepAlive: true, maxSockets: 1 }),
  };
}

// ---- autocannon (no bundled types; the few fields used here) -------------------------------

interface AcHistogram {
  average: number;
  p50: number;
  p99: number;
}
interface AcResult {
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  '2xx': number;
  latency: AcHistogram;
  statusCodeStats?: Record<string, { count: number }>;
}
type Autocannon = (opts: Record<string, unknown>) => Promise<AcResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

export interface ThroughputSample {
  rps: number;
  ok: number;
  non2xx: number;
  errors: number;
  /** CPU ms of the relay process per completed request (NaN for direct). */
  cpuPerReq: number;
  /** CPU ms of the engine sim per completed request. */
  simCpuPerReq: number;
  statusCodes: string;
}

/** One autocannon round of `seconds` (or `amount` requests) at `connections` concurrent non-streaming requests. */
export async function throughputRound(
  t: Target,
  sim: Proc,
  body: string,
  connections: number,
  seconds: number,
  amount?: number,
): Promise<ThroughputSample> {
  const c0 = t.proc ? cpuMs(t.proc.pid) : Number.NaN;
  const s0 = cpuMs(sim.pid);
  const r = await autocannon({
    url: t.origin + t.path,
    method: 'POST',
    headers: { ...t.headers, 'content-type': 'application/json' },
    body,
    connections,
    pipelining: 1,
    ...(amount ? { amount } : { duration: seconds }),
    timeout: 10,
  });
  const c1 = t.proc ? cpuMs(t.proc.pid) : Number.NaN;
  const s1 = cpuMs(sim.pid);
  const ok = r['2xx'];
  const done = Math.max(1, ok + r.non2xx);
  const codes = r.statusCodeStats
    ? Object.entries(r.statusCodeStats)
        .map(([k, v]) => `${k}:${v.count}`)
        .join(' ')
    : '';
  return {
    rps: ok / (r.duration || seconds),
    ok,
    non2xx: r.non2xx,
    errors: r.errors,
    cpuPerReq: (c1 - c0) / done,
    simCpuPerReq: (s1 - s0) / done,
    statusCodes: codes,
  };
}

// ---- sequential requests ----------------------------------------------------------------

export interface OneResult {
  status: number;
  /** ms from sending the request to the first body byte. */
  firstByteMs: number;
  /** ms from sending the request to the end of the response. */
  totalMs: number;
  /** The first body chunk starts with "data:" (streamed completions). */
  firstIsData: boolean;
}

/** One request on the target's keep-alive connection; the whole body is read. */
export function once(t: Target, body: Buffer): Promise<OneResult> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let settled = false;
    const fail = (): void => {
      if (settled) return;
      settled = true;
      resolve({ status: 0, firstByteMs: Number.NaN, totalMs: performance.now() - t0, firstIsData: false });
    };
    const req = request(
      {
        host: '127.0.0.1',
        port: Number(new URL(t.origin).port),
        path: t.path,
        method: 'POST',
        agent: t.agent,
        headers: { ...t.headers, 'content-type': 'application/json', 'content-length': body.byteLength },
        timeout: 10_000,
      },
      (res) => {
        let first = Number.NaN;
        let firstIsData = false;
        res.on('data', (c: Buffer) => {
          if (Number.isNaN(first)) {
            first = performance.now() - t0;
            firstIsData = c.byteLength >= 5 && c.toString('latin1', 0, 5) === 'data:';
          }
        });
        res.on('end', () => {
          if (settled) return;
          settled = true;
          resolve({ status: res.statusCode ?? 0, firstByteMs: first, totalMs: performance.now() - t0, firstIsData });
        });
        res.on('error', fail);
        res.on('aborted', fail);
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', fail);
    req.end(body);
  });
}

export interface SeqSamples {
  /** total ms of successful requests */
  total: number[];
  /** first-byte ms of successful requests */
  first: number[];
  ok: number;
  failed: number;
  statuses: Map<number, number>;
}

export function emptySeq(): SeqSamples {
  return { total: [], first: [], ok: 0, failed: 0, statuses: new Map() };
}

/**
 * `n` sequential requests; a success is a 2xx whose body arrived (for streams: whose first
 * chunk is a `data:` line). Everything else counts as failed.
 */
export async function sequential(
  t: Target,
  body: Buffer,
  n: number,
  into: SeqSamples,
  streaming: boolean,
): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await once(t, body);
    into.statuses.set(r.status, (into.statuses.get(r.status) ?? 0) + 1);
    const ok = r.status >= 200 && r.status < 300 && (!streaming || r.firstIsData);
    if (ok) {
      into.ok++;
      into.total.push(r.totalMs);
      into.first.push(r.firstByteMs);
    } else into.failed++;
  }
}

// ---- statistics -------------------------------------------------------------------------

/** Nearest-rank percentile (q in 0..1); NaN for no samples. */
export function percentile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1));
  return s[i]!;
}

export function median(xs: readonly number[]): number {
  const v = xs.filter((x) => !Number.isNaN(x));
  if (v.length === 0) return Number.NaN;
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
