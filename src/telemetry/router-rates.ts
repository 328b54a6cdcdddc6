/*
 * The Telemetry tab's router panel (issue 27 item 4): request and error rates and p50/p95 of
 * first token and duration over the last 15 minutes, computed from successive scrapes of the
 * router's Prometheus counters and histograms, as Prometheus' rate() and histogram_quantile()
 * would over a one-minute window, for all aliases summed and for each alias (decision 0036).
 * Pure: no clock, no I/O; the telemetry hub feeds it.
 */

/** Counters and cumulative bucket counts (by `le`) of one alias, or of all of them summed. */
export interface ScrapeFigures {
  readonly requests: number;
  /** Requests whose outcome is `error` or `timeout` (docs/operations.md's error-rate alert). */
  readonly errors: number;
  readonly firstToken: ReadonlyMap<number, number>;
  readonly duration: ReadonlyMap<number, number>;
}

/** One scrape: summed over every alias and route, and per alias (summed over its routes). */
export interface RouterScrape extends ScrapeFigures {
  /** When the scrape was read (ms since the epoch). */
  readonly t: number;
  /** Per `alias` label, at most MAX_ALIASES of them (the first in the exposition's order). */
  readonly aliases: ReadonlyMap<string, ScrapeFigures>;
  /** Aliases seen beyond MAX_ALIASES: counted in the sums, without a series of their own. */
  readonly aliasesOmitted: number;
}

/** One alias's figures at a point: rates per second and quantiles in milliseconds (null: no data). */
export interface AliasRates {
  readonly req_per_s: number | null;
  readonly err_per_s: number | null;
  readonly ttft_p50_ms: number | null;
  readonly ttft_p95_ms: number | null;
  readonly dur_p50_ms: number | null;
  readonly dur_p95_ms: number | null;
}

/**
 * One point of the charts: the figures of every alias summed (as `sum by (le)` does), and
 * each alias's own (`by_alias`; an alias without a window yet, as after its first scrape, is
 * not in it). `aliases_omitted`: aliases beyond MAX_ALIASES, counted in the sums only.
 */
export interface RatePoint extends AliasRates {
  readonly t: number;
  readonly by_alias: Readonly<Record<string, AliasRates>>;
  readonly aliases_omitted: number;
}

/** Aliases charted one by one at most (each costs about 2 KB a minute per tab, 33 KB in a tab's first frame). */
export const MAX_ALIASES = 16;
/** Longest alias name kept (the router's alias grammar allows less). */
const MAX_ALIAS_CHARS = 128;

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

interface Tally {
  requests: number;
  errors: number;
  readonly firstToken: Map<number, number>;
  readonly duration: Map<number, number>;
}

/** The series the panel reads, and what each one feeds. */
const SERIES_KIND: ReadonlyMap<string, 'requests' | 'firstToken' | 'duration'> = new Map([
  ['svc_router_requests_total', 'requests'],
  ['svc_router_time_to_first_token_seconds_bucket', 'firstToken'],
  ['svc_router_request_duration_seconds_bucket', 'duration'],
]);

const tally = (): Tally => ({ requests: 0, errors: 0, firstToken: new Map(), duration: new Map() });

/** An `alias` label as shown: unescaped, printable ASCII only, bounded; undefined when none is left. */
function aliasName(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  const name = raw
    .replace(/\\(.)/g, '$1')
    .replace(/[^\x20-\x7e]/g, '')
    .slice(0, MAX_ALIAS_CHARS);
  return name === '' ? undefined : name;
}

/**
 * The router series the panel needs out of Prometheus text: summed over alias and route, and
 * per alias (the first MAX_ALIASES aliases met; the others are counted in the sums and in
 * `aliasesOmitted`). Never throws.
 */
export function parseRouterScrape(text: string, t: number): RouterScrape {
  const all = tally();
  const aliases = new Map<string, Tally>();
  const omitted = new Set<string>();
  for (const line of text.split('\n')) {
    const m = SERIES_RE.exec(line);
    if (!m) continue;
    const kind = SERIES_KIND.get(m[1]!);
    if (kind === undefined) continue;
    const v = Number(m[3]);
    if (!Number.isFinite(v) || v < 0) continue;
    const l = labels(m[2]!);
    const alias = aliasName(l.get('alias'));
    let own: Tally | undefined;
    if (alias !== undefined) {
      own = aliases.get(alias);
      if (own === undefined && aliases.size < MAX_ALIASES) aliases.set(alias, (own = tally()));
      else if (own === undefined) omitted.add(alias);
    }
    const into = own === undefined ? [all] : [all, own];
    if (kind === 'requests') {
      const error = ERROR_OUTCOMES.has(l.get('outcome') ?? '');
      for (const x of into) {
        x.requests += v;
        if (error) x.errors += v;
      }
      continue;
    }
    const le = leValue(l.get('le'));
    if (le !== undefined) for (const x of into) addBucket(x[kind], le, v);
  }
  return { t, ...all, aliases, aliasesOmitted: omitted.size };
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

/** A rate to 1/10,000 per second (one request in about three hours): shorter on the wire than 0.48333333333333334. */
const perSecond = (n: number): number => Math.round(n * 10_000) / 10_000;

/**
 * One series' sliding window (all aliases summed, or one alias): the steps of the last
 * `windowMs` and the scrape before them.
 */
class RateWindow {
  private last: (ScrapeFigures & { readonly t: number }) | undefined;
  private steps: Step[] = [];

  constructor(private readonly windowMs: number) {}

  /** Adds one scrape; returns its figures, or undefined for the first scrape after a gap. */
  add(t: number, s: ScrapeFigures): AliasRates | undefined {
    const prev = this.last;
    this.last = { t, ...s };
    if (prev === undefined || t <= prev.t) return undefined;
    this.steps.push({
      t,
      dtS: (t - prev.t) / 1000,
      requests: counterIncrease(prev.requests, s.requests),
      errors: counterIncrease(prev.errors, s.errors),
      firstToken: bucketIncrease(prev.firstToken, s.firstToken),
      duration: bucketIncrease(prev.duration, s.duration),
    });
    this.steps = this.steps.filter((x) => x.t > t - this.windowMs);
    const dt = this.steps.reduce((n, x) => n + x.dtS, 0);
    const ft = sumBuckets(this.steps, 'firstToken');
    const du = sumBuckets(this.steps, 'duration');
    return {
      req_per_s: perSecond(this.steps.reduce((n, x) => n + x.requests, 0) / dt),
      err_per_s: perSecond(this.steps.reduce((n, x) => n + x.errors, 0) / dt),
      ttft_p50_ms: ms(histogramQuantile(0.5, ft)),
      ttft_p95_ms: ms(histogramQuantile(0.95, ft)),
      dur_p50_ms: ms(histogramQuantile(0.5, du)),
      dur_p95_ms: ms(histogramQuantile(0.95, du)),
    };
  }
}

/**
 * The sliding windows: successive scrapes in, one chart point per scrape out. Each point is
 * the rate and the quantiles over the steps of the last `windowMs` (one minute), as
 * rate(...[1m]) and histogram_quantile(q, sum by (le) (rate(..._bucket[1m]))), for all
 * aliases summed and for each alias on its own; the points of the last `keepMs` (15
 * minutes) are kept. A failed scrape (`gap`) starts every window afresh: growth across an
 * unknown stretch is not spread over it. An alias missing from a scrape loses its window
 * (it starts afresh if it comes back, as after a gap).
 */
export class RouterRates {
  private total: RateWindow;
  private aliases = new Map<string, RateWindow>();
  private points: RatePoint[] = [];

  constructor(
    private readonly windowMs = 60_000,
    private readonly keepMs = 15 * 60_000,
  ) {
    this.total = new RateWindow(windowMs);
  }

  /** Adds one scrape; returns the new point, or undefined for the first scrape after a gap. */
  add(s: RouterScrape): RatePoint | undefined {
    const sum = this.total.add(s.t, s);
    const byAlias: [string, AliasRates][] = [];
    const windows = new Map<string, RateWindow>();
    for (const [alias, figures] of s.aliases) {
      const w = this.aliases.get(alias) ?? new RateWindow(this.windowMs);
      windows.set(alias, w);
      const r = w.add(s.t, figures);
      if (r !== undefined) byAlias.push([alias, r]);
    }
    this.aliases = windows;
    if (sum === undefined) return undefined;
    // fromEntries defines own members: an alias named `__proto__` is a member like any other.
    const point: RatePoint = {
      t: s.t,
      ...sum,
      by_alias: Object.fromEntries(byAlias),
      aliases_omitted: s.aliasesOmitted,
    };
    this.points.push(point);
    this.points = this.points.filter((p) => p.t > s.t - this.keepMs);
    return point;
  }

  /** A scrape failed: the next one starts a new window (no rate across the gap). */
  gap(): void {
    this.total = new RateWindow(this.windowMs);
    this.aliases = new Map();
  }

  /** The points of the last 15 minutes, oldest first. */
  series(): readonly RatePoint[] {
    return this.points;
  }
}
