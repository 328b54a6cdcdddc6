/*
 * The Telemetry tab's router panel (issue 27 item 4): request and error rates and p50/p95 of
 * first token and duration over the last 15 minutes, computed from successive scrapes of the
 * router's Prometheus counters and histograms, as Prometheus' rate() and histogram_quantile()
 * would over a one-minute window. Pure: no clock, no I/O; the telemetry hub feeds it.
 */

/** One scrape, summed over every alias and route: counters and cumulative bucket counts by `le`. */
export interface RouterScrape {
  /** When the scrape was read (ms since the epoch). */
  readonly t: number;
  readonly requests: number;
  /** Requests whose outcome is `error` or `timeout` (docs/operations.md's error-rate alert). */
  readonly errors: number;
  readonly firstToken: ReadonlyMap<number, number>;
  readonly duration: ReadonlyMap<number, number>;
}

/** One point of the charts: rates per second and quantiles in milliseconds (null: no data). */
export interface RatePoint {
  readonly t: number;
  readonly req_per_s: number | null;
  readonly err_per_s: number | null;
  readonly ttft_p50_ms: number | null;
  readonly ttft_p95_ms: number | null;
  readonly dur_p50_ms: number | null;
  readonly dur_p95_ms: number | null;
}

const SERIES_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^\n]{0,2048})\} (\S+)$/;
const LABEL_RE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
const ERROR_OUTCOMES: ReadonlySet<string> = new Set(['error', 'timeout']);
/** Distinct bucket bounds kept per histogram (prom-client writes about 15). */
const MAX_BUCKETS = 64;

function labels(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(LABEL_RE)) out.set(m[1]!, m[2]!);
  return out;
}

function leValue(le: string | undefined): number | undefined {
  if (le === undefined) return undefined;
  if (le === '+Inf') return Infinity;
  const v = Number(le);
  return Number.isFinite(v) ? v : undefined;
}

function addBucket(into: Map<number, number>, le: number, v: number): void {
  if (!into.has(le) && into.size >= MAX_BUCKETS) return;
  into.set(le, (into.get(le) ?? 0) + v);
}

/** The router series the panel needs out of Prometheus text, summed over alias and route. Never throws. */
export function parseRouterScrape(text: string, t: number): RouterScrape {
  let requests = 0;
  let errors = 0;
  const firstToken = new Map<number, number>();
  const duration = new Map<number, number>();
  for (const line of text.split('\n')) {
    const m = SERIES_RE.exec(line);
    if (!m) continue;
    const name = m[1]!;
    const v = Number(m[3]);
    if (!Number.isFinite(v) || v < 0) continue;
    if (name === 'svc_router_requests_total') {
      requests += v;
      if (ERROR_OUTCOMES.has(labels(m[2]!).get('outcome') ?? '')) errors += v;
    } else if (name === 'svc_router_time_to_first_token_seconds_bucket') {
      const le = leValue(labels(m[2]!).get('le'));
      if (le !== undefined) addBucket(firstToken, le, v);
    } else if (name === 'svc_router_request_duration_seconds_bucket') {
      const le = leValue(labels(m[2]!).get('le'));
      if (le !== undefined) addBucket(duration, le, v);
    }
  }
  return { t, requests, errors, firstToken, duration };
}

/**
 * How much a counter grew between two scrapes. A value lower than before is a reset (the
 * router restarted): the growth is the new value, as Prometheus' rate() counts it, never
 * negative.
 */
export function counterIncrease(before: number, after: number): number {
  return after >= before ? after - before : after;
}

/**
 * How much each cumulative bucket grew. When any bucket went down (a restart), every bucket
 * counts from zero again: its growth is its new value.
 */
export function bucketIncrease(
  before: ReadonlyMap<number, number>,
  after: ReadonlyMap<number, number>,
): Map<number, number> {
  const reset = [...after].some(([le, v]) => v < (before.get(le) ?? 0));
  const out = new Map<number, number>();
  for (const [le, v] of after) out.set(le, reset ? v : v - (before.get(le) ?? 0));
  return out;
}

/**
 * The q-quantile of cumulative buckets (bound -> count), as Prometheus' histogram_quantile:
 * the bucket holding the rank, linear interpolation inside it (from 0 for the first bucket
 * when its bound is positive); a rank in the +Inf bucket is the highest finite bound. NaN
 * when there are no observations, fewer than two buckets or no +Inf bucket.
 */
export function histogramQuantile(q: number, buckets: ReadonlyMap<number, number>): number {
  if (Number.isNaN(q)) return NaN;
  if (q < 0) return -Infinity;
  if (q > 1) return Infinity;
  const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
  if (sorted.length < 2 || sorted.at(-1)![0] !== Infinity) return NaN;
  // Counts must not go down with the bound (they may, summed over scrapes that disagree): made monotonic.
  for (let i = 1; i < sorted.length; i++)
    if (sorted[i]![1] < sorted[i - 1]![1]) sorted[i] = [sorted[i]![0], sorted[i - 1]![1]];
  const observations = sorted.at(-1)![1];
  if (observations === 0) return NaN;
  const rank = q * observations;
  let b = sorted.findIndex(([, c]) => c >= rank);
  if (b === -1) b = sorted.length - 1;
  if (b === sorted.length - 1) return sorted[sorted.length - 2]![0];
  if (b === 0 && sorted[0]![0] <= 0) return sorted[0]![0];
  const start = b === 0 ? 0 : sorted[b - 1]![0];
  const end = sorted[b]![0];
  const below = b === 0 ? 0 : sorted[b - 1]![1];
  const count = sorted[b]![1] - below;
  if (count === 0) return end;
  return start + (end - start) * ((rank - below) / count);
}

/** Growth between two successive scrapes, and the time it took. */
interface Step {
  readonly t: number;
  readonly dtS: number;
  readonly requests: number;
  readonly errors: number;
  readonly firstToken: Map<number, number>;
  readonly duration: Map<number, number>;
}

const sumBuckets = (steps: readonly Step[], key: 'firstToken' | 'duration'): Map<number, number> => {
  const out = new Map<number, number>();
  for (const s of steps) for (const [le, v] of s[key]) out.set(le, (out.get(le) ?? 0) + v);
  return out;
};

const ms = (seconds: number): number | null =>
  Number.isFinite(seconds) ? Math.round(seconds * 1000 * 1000) / 1000 : null;

/**
 * The sliding window: successive scrapes in, one chart point per scrape out. Each point is
 * the rate and the quantiles over the steps of the last `windowMs` (one minute), as
 * rate(...[1m]) and histogram_quantile(q, sum by (le) (rate(..._bucket[1m]))); the points of
 * the last `keepMs` (15 minutes) are kept. A failed scrape (`gap`) starts the window afresh:
 * growth across an unknown stretch is not spread over it.
 */
export class RouterRates {
  private last: RouterScrape | undefined;
  private steps: Step[] = [];
  private points: RatePoint[] = [];

  constructor(
    private readonly windowMs = 60_000,
    private readonly keepMs = 15 * 60_000,
  ) {}

  /** Adds one scrape; returns the new point, or undefined for the first scrape after a gap. */
  add(s: RouterScrape): RatePoint | undefined {
    const prev = this.last;
    this.last = s;
    if (prev === undefined || s.t <= prev.t) return undefined;
    this.steps.push({
      t: s.t,
      dtS: (s.t - prev.t) / 1000,
      requests: counterIncrease(prev.requests, s.requests),
      errors: counterIncrease(prev.errors, s.errors),
      firstToken: bucketIncrease(prev.firstToken, s.firstToken),
      duration: bucketIncrease(prev.duration, s.duration),
    });
    this.steps = this.steps.filter((x) => x.t > s.t - this.windowMs);
    const dt = this.steps.reduce((n, x) => n + x.dtS, 0);
    const ft = sumBuckets(this.steps, 'firstToken');
    const du = sumBuckets(this.steps, 'duration');
    const point: RatePoint = {
      t: s.t,
      req_per_s: this.steps.reduce((n, x) => n + x.requests, 0) / dt,
      err_per_s: this.steps.reduce((n, x) => n + x.errors, 0) / dt,
      ttft_p50_ms: ms(histogramQuantile(0.5, ft)),
      ttft_p95_ms: ms(histogramQuantile(0.95, ft)),
      dur_p50_ms: ms(histogramQuantile(0.5, du)),
      dur_p95_ms: ms(histogramQuantile(0.95, du)),
    };
    this.points.push(point);
    this.points = this.points.filter((p) => p.t > s.t - this.keepMs);
    return point;
  }

  /** A scrape failed: the next one starts a new window (no rate across the gap). */
  gap(): void {
    this.last = undefined;
    this.steps = [];
  }

  /** The points of the last 15 minutes, oldest first. */
  series(): readonly RatePoint[] {
    return this.points;
  }
}
