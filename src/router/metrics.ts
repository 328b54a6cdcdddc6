import { Counter, Gauge, Registry } from 'prom-client';
import { CounterSeries, HistogramSeries, seriesKey, type CounterCell, type HistogramCell } from './metric-series.js';
import type { RouterRegistry } from './records/router-registry.js';
import {
  FINISH_REASONS,
  REQUEST_OUTCOMES,
  ROUTES,
  USAGE_SOURCES,
  isGenerationRoute,
  type RouteName,
} from '../schema/terminal-record.js';
import { SAMPLED, type TerminalRing } from './records/terminal-ring.js';

/** The `alias` label of a request that named no configured alias (or none at all). */
export const NO_ALIAS = '-';

/** Seconds. First content: 10 ms (a warm prefix cache) to a minute (a long prompt on a busy engine). */
export const FIRST_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60] as const;
/** Seconds. Whole requests: 10 ms (a refusal, an embedding) to 10 minutes (a long generation). */
export const DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600] as const;
/** Seconds per output token: 1 ms (a small model on a large card) to 2 s (a saturated engine). */
export const INTER_TOKEN_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2,
] as const;
/** Seconds in an alias's admission queue: none (most requests) to a minute. */
export const ADMISSION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const;

/** Statuses of a request refused before it was authenticated (no id): a doubled header, no key, a key without the grant. */
export const AUTH_REFUSAL_STATUSES = ['400', '401', '403'] as const;

/** What the metrics read of one terminal record (the record itself; the model may be null for a request that named none). */
export interface FinishedRecord {
  readonly model: string | null;
  readonly route: RouteName;
  readonly outcome: string;
  readonly status_code: number;
  readonly latency_ms: number | null;
  readonly admission_wait_ms: number | null;
  readonly time_to_first_content_ms: number | null;
  readonly usage: {
    readonly prompt_tokens: number | null;
    readonly completion_tokens: number | null;
    readonly prompt_source: string;
    readonly completion_source: string;
  };
}

/** `2xx`..`5xx` (and `1xx`); `none` when nothing was sent (status 0), `other` for a status outside 100-599. */
export function statusClass(code: number): string {
  if (code === 0) return 'none';
  return code >= 100 && code < 600 ? STATUS_CLASSES[Math.floor(code / 100) - 1]! : 'other';
}
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;

/**
 * Seconds per output token of one streamed answer, as vLLM's "time per output token":
 * (duration - first content) / (completion tokens - 1). Undefined when it cannot be known: not
 * streamed (a buffered answer's content arrives all at once), not a success, or fewer than two
 * tokens. docs/decisions/0060-inter-token-latency-per-request.md.
 */
export function interTokenSeconds(r: FinishedRecord, streamed: boolean): number | undefined {
  const n = r.usage.completion_tokens;
  if (!streamed || r.outcome !== 'success' || n === null || n < 2) return undefined;
  if (r.latency_ms === null || r.time_to_first_content_ms === null) return undefined;
  return Math.max(0, r.latency_ms - r.time_to_first_content_ms) / 1000 / (n - 1);
}

type Stat = {
  records: number;
  outcome: Map<string, number>;
  finish: Map<string, number>;
  sources: Map<string, number>;
  tokens: Map<string, number>;
  samples: Map<string, number[]>;
};

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** The series one alias label moves: requests by route, outcome and status class; durations by route; tokens by kind and source. */
interface AliasCells {
  readonly requests: Map<string, Map<string, Map<string, CounterCell>>>;
  readonly duration: Map<string, HistogramCell>;
  firstToken: HistogramCell | undefined;
  interToken: HistogramCell | undefined;
  admissionWait: HistogramCell | undefined;
  readonly promptTokens: Map<string, CounterCell>;
  readonly completionTokens: Map<string, CounterCell>;
}

export interface RouterMetricsOptions {
  /** Requests waiting in an alias's admission queue now. */
  readonly queueDepth?: (alias: string) => number;
}

/**
 * Prometheus metrics of the router (CONTRACT.md "Telemetry (revision 2)"), in base units.
 * Counters and histograms move at each terminal record (`finished`), so that they agree with
 * the records; requests refused before authentication (no id, no record) are counted apart.
 * Labels are bounded: `alias` is a configured alias or `-`, never what the caller wrote.
 * The `svc_router_buffer_*` gauges are computed from the in-memory buffer on each scrape:
 * eviction and restart reduce them.
 */
export class RouterMetrics {
  readonly registry = new Registry();
  /** The configured aliases (a reload replaces them). */
  private aliases: ReadonlySet<string>;
  private readonly reloads: Counter<'result'>;
  // The per-request series are plain numbers read at scrape time, not prom-client's labelled
  // children, which hash the labels on every inc/observe (decision 0091).
  private readonly requests: CounterSeries;
  private readonly duration: HistogramSeries;
  private readonly firstToken: HistogramSeries;
  private readonly interToken: HistogramSeries;
  private readonly admissionWait: HistogramSeries;
  private readonly tokens: CounterSeries;
  private readonly authRefusals: CounterSeries;
  /** Each alias label's series of the per-request metrics (cellsOf). */
  private readonly byAlias = new Map<string, AliasCells>();

  /** `aliases`: the configured model aliases; each has its series from the start, 0 until it serves. */
  constructor(reg: RouterRegistry, aliases: readonly string[] = [], opts: RouterMetricsOptions = {}) {
    this.aliases = new Set(aliases);
    const registers = [this.registry];
    const r = this.registry;
    this.requests = new CounterSeries(
      'svc_router_requests_total',
      'Requests that got an id, counted at their terminal record',
      ['alias', 'route', 'outcome', 'status_class'],
      r,
    );
    this.duration = new HistogramSeries(
      'svc_router_request_duration_seconds',
      'Time from backend entry to the terminal outcome (the record latency)',
      ['alias', 'route'],
      DURATION_BUCKETS,
      r,
    );
    this.firstToken = new HistogramSeries(
      'svc_router_time_to_first_token_seconds',
      'Time from backend entry to the first content fragment of a streamed answer',
      ['alias'],
      FIRST_TOKEN_BUCKETS,
      r,
    );
    this.interToken = new HistogramSeries(
      'svc_router_inter_token_latency_seconds',
      'Time per output token after the first, one observation per successful streamed answer',
      ['alias'],
      INTER_TOKEN_BUCKETS,
      r,
    );
    this.admissionWait = new HistogramSeries(
      'svc_router_admission_wait_seconds',
      'Time a request waited for admission to its alias',
      ['alias'],
      ADMISSION_BUCKETS,
      r,
    );
    this.tokens = new CounterSeries(
      'svc_router_tokens_total',
      'Prompt and completion tokens of terminal records, reported by the engine or estimated (not a billing figure)',
      ['alias', 'kind', 'source'],
      r,
    );
    this.authRefusals = new CounterSeries(
      'svc_router_auth_refusals_total',
      'Inference requests refused before authentication (no id, no record), by status',
      ['status'],
      r,
    );
    for (const status of AUTH_REFUSAL_STATUSES) this.authRefusals.inc([status], 0);
    // Every configured alias has its series from the start: a series that appears only at its
    // first request breaks rate() over a restart.
    this.zeroSeries(aliases);
    this.reloads = new Counter({
      name: 'svc_router_config_reloads_total',
      help: 'Configuration reloads (SIGHUP) by result: applied, or rejected (the running configuration stayed)',
      labelNames: ['result'],
      registers,
    });
    for (const result of ['applied', 'rejected']) this.reloads.inc({ result }, 0);
    this.liveGauges(reg, opts);
    bufferGauges(this.registry, reg.ring, (m) => this.alias(m));
  }

  /** Every configured alias has its series from the start, at 0. */
  private zeroSeries(aliases: Iterable<string>): void {
    for (const alias of aliases) {
      for (const route of ROUTES) this.requests.inc([alias, route, 'success', '2xx'], 0);
      for (const kind of ['prompt', 'completion'])
        for (const source of ['upstream', 'estimated']) this.tokens.inc([alias, kind, source], 0);
    }
  }

  /** A reload's result. */
  reloaded(result: 'applied' | 'rejected'): void {
    this.reloads.inc({ result });
  }

  /** The aliases of a reloaded configuration: each labels its own series from now on (a removed one's series stay, frozen). */
  setAliases(aliases: readonly string[]): void {
    this.aliases = new Set(aliases);
    this.zeroSeries(aliases);
  }

  private liveGauges(reg: RouterRegistry, opts: RouterMetricsOptions): void {
    const alias = (m: string | null): string => this.alias(m);
    const aliases = (): ReadonlySet<string> => this.aliases;
    new Gauge({
      name: 'svc_router_in_flight',
      help: 'Requests in router memory that have no terminal record yet (queued ones included)',
      labelNames: ['alias'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const a of aliases()) this.set({ alias: a }, 0);
        for (const a of reg.active.values()) this.inc({ alias: alias(a.model) });
      },
    });
    new Gauge({
      name: 'svc_router_queue_depth',
      help: 'Requests waiting in an alias admission queue',
      labelNames: ['alias'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const a of aliases()) this.set({ alias: a }, opts.queueDepth?.(a) ?? 0);
      },
    });
  }

  /** The `alias` label of a record's model: the configured alias, or `-`. */
  alias(model: string | null | undefined): string {
    return model !== null && model !== undefined && this.aliases.has(model) ? model : NO_ALIAS;
  }

  /** Counts one terminal record. `streamed`: its answer was relayed as an SSE stream. */
  finished(r: FinishedRecord, streamed = false): void {
    const alias = this.alias(r.model);
    const cells = this.cellsOf(alias);
    const sc = statusClass(r.status_code);
    // Series found by the record's own (constant) strings: no key is built per request.
    let byOutcome = cells.requests.get(r.route);
    if (byOutcome === undefined) cells.requests.set(r.route, (byOutcome = new Map()));
    let byClass = byOutcome.get(r.outcome);
    if (byClass === undefined) byOutcome.set(r.outcome, (byClass = new Map()));
    let count = byClass.get(sc);
    if (count === undefined)
      byClass.set(
        sc,
        (count = this.requests.cell(seriesKey(alias, r.route, r.outcome, sc), [alias, r.route, r.outcome, sc])),
      );
    count.value++;
    const text = isGenerationRoute(r.route);
    // Embeddings and rerank keep an unmeasured legacy 0 latency: not a sample.
    if (r.latency_ms !== null && (r.latency_ms > 0 || text || r.route === 'audio.transcriptions')) {
      let d = cells.duration.get(r.route);
      if (d === undefined)
        cells.duration.set(r.route, (d = this.duration.cell(seriesKey(alias, r.route), [alias, r.route])));
      this.duration.observe(d, r.latency_ms / 1000);
    }
    // A buffered answer's first content is its whole answer: not a first-token time.
    if (streamed && r.time_to_first_content_ms !== null) {
      cells.firstToken ??= this.firstToken.cell(alias, [alias]);
      this.firstToken.observe(cells.firstToken, r.time_to_first_content_ms / 1000);
    }
    const itl = interTokenSeconds(r, streamed);
    if (itl !== undefined) {
      cells.interToken ??= this.interToken.cell(alias, [alias]);
      this.interToken.observe(cells.interToken, itl);
    }
    if (r.admission_wait_ms !== null) {
      cells.admissionWait ??= this.admissionWait.cell(alias, [alias]);
      this.admissionWait.observe(cells.admissionWait, r.admission_wait_ms / 1000);
    }
    const u = r.usage;
    if (u.prompt_tokens !== null && u.prompt_tokens > 0 && u.prompt_source !== 'unknown')
      this.tokenCell(cells, alias, 'prompt', u.prompt_source).value += u.prompt_tokens;
    if (u.completion_tokens !== null && u.completion_tokens > 0 && u.completion_source !== 'unknown')
      this.tokenCell(cells, alias, 'completion', u.completion_source).value += u.completion_tokens;
  }

  /** The series an alias label moves, found once and kept (decision 0091). */
  private cellsOf(alias: string): AliasCells {
    let c = this.byAlias.get(alias);
    if (c === undefined) {
      // A histogram's series appears at its first observation, as prom-client's would.
      c = {
        requests: new Map(),
        duration: new Map(),
        firstToken: undefined,
        interToken: undefined,
        admissionWait: undefined,
        promptTokens: new Map(),
        completionTokens: new Map(),
      };
      this.byAlias.set(alias, c);
    }
    return c;
  }

  private tokenCell(cells: AliasCells, alias: string, kind: 'prompt' | 'completion', source: string): CounterCell {
    const bySource = kind === 'prompt' ? cells.promptTokens : cells.completionTokens;
    let t = bySource.get(source);
    if (t === undefined)
      bySource.set(source, (t = this.tokens.cell(seriesKey(alias, kind, source), [alias, kind, source])));
    return t;
  }

  /** Counts one inference request refused before authentication, by the status it was sent. */
  authRefused(status: number): void {
    const s = `${status}`;
    if ((AUTH_REFUSAL_STATUSES as readonly string[]).includes(s)) this.authRefusals.cell(s, [s]).value++;
  }
}

/**
 * SPEC.md's buffer gauges (Derived Metrics rule 4), in base units: records, outcomes, finish
 * reasons, usage provenance, token sums and the p50/p95 of measured phases in seconds.
 */
function bufferGauges(registry: Registry, ring: TerminalRing, alias: (m: string | null) => string): void {
  // Dozens of gauges read the same figures on one scrape: compute them once per scrape.
  let memo: { at: number; v: Map<string, Stat> } | undefined;
  const stats = (): Map<string, Stat> => {
    const now = Date.now();
    if (!memo || now - memo.at > 250) memo = { at: now, v: bufferStats(ring, alias) };
    return memo.v;
  };
  const gauge = (name: string, help: string, pick: (s: Stat) => number): void => {
    new Gauge({
      name,
      help,
      labelNames: ['alias'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [a, s] of stats()) this.set({ alias: a }, pick(s));
      },
    });
  };
  gauge('svc_router_buffer_records', 'Terminal records in the current buffer', (s) => s.records);
  for (const o of REQUEST_OUTCOMES)
    gauge(`svc_router_buffer_outcome_${o}`, `Buffered records with outcome ${o}`, (s) => s.outcome.get(o) ?? 0);
  for (const f of FINISH_REASONS)
    gauge(
      `svc_router_buffer_finish_${f}`,
      `Buffered records with normalized finish reason ${f}`,
      (s) => s.finish.get(f) ?? 0,
    );
  for (const side of ['prompt', 'completion'] as const) {
    for (const src of USAGE_SOURCES) {
      gauge(
        `svc_router_buffer_usage_${side}_${src}_records`,
        `Buffered records whose ${side} count is ${src}`,
        (s) => s.sources.get(`${side}:${src}`) ?? 0,
      );
      if (src !== 'unknown')
        gauge(
          `svc_router_buffer_${side}_tokens_${src}`,
          `Sum of ${src} ${side} tokens in the buffer (not a billing figure)`,
          (s) => s.tokens.get(`${side}:${src}`) ?? 0,
        );
    }
  }
  for (const k of SAMPLED) {
    const base = k.replace(/_ms$/, '_seconds');
    for (const [q, label] of [
      [0.5, 'p50'],
      [0.95, 'p95'],
    ] as const) {
      gauge(
        `svc_router_buffer_${base}_${label}`,
        `${label} of measured ${base} samples in the buffer`,
        (s) => quantile(s.samples.get(k) ?? [], q) / 1000,
      );
    }
  }
}

function bufferStats(ring: TerminalRing, alias: (m: string | null) => string): Map<string, Stat> {
  const out = new Map<string, Stat>();
  ring.forEachSummary((r) => {
    const a = alias(r.model);
    let s = out.get(a);
    if (!s)
      out.set(
        a,
        (s = {
          records: 0,
          outcome: new Map(),
          finish: new Map(),
          sources: new Map(),
          tokens: new Map(),
          samples: new Map(),
        }),
      );
    s.records++;
    bump(s.outcome, r.outcome);
    if (r.finish) bump(s.finish, r.finish);
    bump(s.sources, `prompt:${r.promptSource}`);
    bump(s.sources, `completion:${r.completionSource}`);
    if (r.promptTokens !== null && r.promptSource !== 'unknown')
      bump(s.tokens, `prompt:${r.promptSource}`, r.promptTokens);
    if (r.completionTokens !== null && r.completionSource !== 'unknown')
      bump(s.tokens, `completion:${r.completionSource}`, r.completionTokens);
    for (let k = 0; k < SAMPLED.length; k++) {
      const v = r.samples[k]!;
      const name = SAMPLED[k]!;
      // Embeddings and rerank keep an unmeasured legacy 0 latency: not a sample.
      if (v === null || (name === 'latency_ms' && (r.route === 'embeddings' || r.route === 'rerank'))) continue;
      let arr = s.samples.get(name);
      if (!arr) s.samples.set(name, (arr = []));
      arr.push(v);
    }
  });
  for (const s of out.values()) for (const arr of s.samples.values()) arr.sort((a, b) => a - b);
  return out;
}

function bump(m: Map<string, number>, k: string, by = 1): void {
  m.set(k, (m.get(k) ?? 0) + by);
}
