import { Counter, Gauge, Registry } from 'prom-client';
import type { RouterRegistry } from './records/router-registry.js';
import { FINISH_REASONS, REQUEST_OUTCOMES, USAGE_SOURCES } from '../schema/terminal-record.js';
import { SAMPLED, type TerminalRing } from './records/terminal-ring.js';

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

/**
 * Prometheus metrics of the router, labelled by model alias only (never a request id).
 * Buffer figures are computed from the current in-memory buffer on each scrape: eviction
 * and restart reduce them. Token totals add upstream-reported and estimated counts
 * separately and leave out unobserved work.
 */
export class RouterMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'model'>;
  private readonly byModel = new Map<string, { inc(): void }>();
  private readonly reloads: Counter<'result'>;
  /** The configured aliases (a reload replaces them). */
  private aliases: readonly string[];

  /** `aliases`: the configured model aliases; each has an in-flight series, 0 when idle (a readable zero, not an absent figure). */
  constructor(reg: RouterRegistry, aliases: readonly string[] = []) {
    this.aliases = aliases;
    const configured = (): readonly string[] => this.aliases;
    this.requests = new Counter({
      name: 'svc_router_requests_total',
      help: 'Requests that reached a terminal record, by model alias',
      labelNames: ['model'],
      registers: [this.registry],
    });
    // Every configured alias has its series from the start: 0 until it serves (a counter that
    // appears only after its first request breaks rate() over a restart).
    for (const model of aliases) this.byModel.set(model, this.requests.labels({ model }));
    for (const model of aliases) this.requests.inc({ model }, 0);
    new Gauge({
      name: 'svc_router_active_requests',
      help: 'Requests in flight in router memory',
      labelNames: ['model'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const model of configured()) this.set({ model }, 0);
        for (const a of reg.active.values()) this.inc({ model: a.model });
      },
    });
    this.reloads = new Counter({
      name: 'svc_router_config_reloads_total',
      help: 'Configuration reloads (SIGHUP) by result: applied, or rejected (the running configuration stayed)',
      labelNames: ['result'],
      registers: [this.registry],
    });
    for (const result of ['applied', 'rejected']) this.reloads.inc({ result }, 0);
    // Dozens of gauges read the same figures on one scrape: compute them once per scrape.
    let memo: { at: number; v: Map<string, Stat> } | undefined;
    const stats = (): Map<string, Stat> => {
      const now = Date.now();
      if (!memo || now - memo.at > 250) memo = { at: now, v: bufferStats(reg.ring) };
      return memo.v;
    };
    const gauge = (name: string, help: string, pick: (s: Stat) => number): void => {
      new Gauge({
        name,
        help,
        labelNames: ['model'],
        registers: [this.registry],
        collect() {
          this.reset();
          for (const [model, s] of stats()) this.set({ model }, pick(s));
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
      for (const [q, label] of [
        [0.5, 'p50'],
        [0.95, 'p95'],
      ] as const) {
        gauge(`svc_router_buffer_${k}_${label}`, `${label} of measured ${k} samples in the buffer`, (s) =>
          quantile(s.samples.get(k) ?? [], q),
        );
      }
    }
  }

  /** A reload's result. */
  reloaded(result: 'applied' | 'rejected'): void {
    this.reloads.inc({ result });
  }

  /** The aliases of a reloaded configuration: each has its series from now on. */
  setAliases(aliases: readonly string[]): void {
    this.aliases = aliases;
    for (const model of aliases) if (!this.byModel.has(model)) this.byModel.set(model, this.requests.labels({ model }));
    for (const model of aliases) this.requests.inc({ model }, 0);
  }

  finished(model: string): void {
    // One labelled child per alias (the configured aliases only), not a label lookup per request.
    let c = this.byModel.get(model);
    if (!c) this.byModel.set(model, (c = this.requests.labels({ model })));
    c.inc();
  }
}

function bufferStats(ring: TerminalRing): Map<string, Stat> {
  const out = new Map<string, Stat>();
  ring.forEachSummary((r) => {
    let s = out.get(r.model);
    if (!s)
      out.set(
        r.model,
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
