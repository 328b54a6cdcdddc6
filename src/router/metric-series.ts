import type { Metric, Registry } from 'prom-client';

/**
 * Counters and histograms whose series are plain numbers the router owns, handed to a
 * prom-client Registry only when it is scraped (docs/decisions/0091-router-metrics-bookkeeping.md).
 * prom-client's own metrics hash the label object on every `inc`/`observe`, even through a
 * labelled child; these look a series up once by a key the caller builds and then add to numbers.
 * The exposition is prom-client's: the Registry formats what `getForPromString` returns, as it
 * does for its own Counter and Histogram (same value objects, same order, same `le` labels).
 */

/** One exposed value, as prom-client's Registry reads it. */
interface ExportValue {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
}

interface Exported {
  name: string;
  help: string;
  type: 'counter' | 'histogram';
  aggregator: 'sum';
  values: ExportValue[];
}

/** The labels of one series, in the metric's label-name order (the order they are written in). */
function labelsOf(names: readonly string[], values: readonly string[]): Record<string, string> {
  if (values.length !== names.length) throw new Error(`expected ${names.length} label values, got ${values.length}`);
  const labels: Record<string, string> = {};
  for (let i = 0; i < names.length; i++) labels[names[i]!] = values[i]!;
  return labels;
}

/** The series key of label values: they never contain NUL (aliases, routes and statuses are configured or fixed). */
export function seriesKey(...values: string[]): string {
  return values.join('\u0000');
}

/** One counter series: add to `value`. */
export interface CounterCell {
  readonly labels: Record<string, string>;
  value: number;
}

/** A counter (type `counter`) whose series are created on first use, at 0, and kept in creation order. */
export class CounterSeries {
  readonly type = 'counter';
  readonly aggregator = 'sum';
  private cells = new Map<string, CounterCell>();

  constructor(
    public name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values (label-name order), created at 0; `key` is `seriesKey(...values)`. */
  cell(key: string, values: readonly string[]): CounterCell {
    let c = this.cells.get(key);
    if (c === undefined) this.cells.set(key, (c = { labels: labelsOf(this.labelNames, values), value: 0 }));
    return c;
  }

  /** Adds `by` (finite, not negative: a counter never decreases) to the series of `values`. */
  inc(values: readonly string[], by = 1): void {
    if (!(by >= 0 && Number.isFinite(by))) return;
    this.cell(seriesKey(...values), values).value += by;
  }

  async getForPromString(): Promise<Exported> {
    const values: ExportValue[] = [];
    for (const c of this.cells.values()) values.push({ labels: { ...c.labels }, value: c.value });
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  get(): Promise<Exported> {
    return this.getForPromString();
  }

  reset(): void {
    this.cells = new Map();
  }
}

/** One histogram series: per-bucket counts (not cumulative; the last slot is above every bound), sum and count. */
export interface HistogramCell {
  readonly labels: Record<string, string>;
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/**
 * A histogram (type `histogram`) over fixed upper bounds, exposed as prom-client's: for each series
 * `_bucket{le=...}` cumulative per bound, `le="+Inf"`, then `_sum` and `_count`.
 */
export class HistogramSeries {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private cells = new Map<string, HistogramCell>();
  private readonly bounds: Float64Array;

  constructor(
    public name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    bounds: readonly number[],
    registry: Registry,
  ) {
    this.bounds = Float64Array.from([...bounds].sort((a, b) => a - b));
    registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values (label-name order), created empty; `key` is `seriesKey(...values)`. */
  cell(key: string, values: readonly string[]): HistogramCell {
    let c = this.cells.get(key);
    if (c === undefined)
      this.cells.set(
        key,
        (c = {
          labels: labelsOf(this.labelNames, values),
          counts: new Float64Array(this.bounds.length + 1),
          sum: 0,
          count: 0,
        }),
      );
    return c;
  }

  /** Observes `v` in a series; a value that is not a finite number is not an observation. */
  observe(c: HistogramCell, v: number): void {
    if (!Number.isFinite(v)) return;
    const b = this.bounds;
    // Binary search for the first bound >= v (a value equal to a bound is in that bound's bucket).
    let lo = 0;
    let hi = b.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (v <= b[mid]!) hi = mid;
      else lo = mid + 1;
    }
    c.counts[lo]!++;
    c.sum += v;
    c.count++;
  }

  async getForPromString(): Promise<Exported> {
    const values: ExportValue[] = [];
    const bucket = `${this.name}_bucket`;
    for (const c of this.cells.values()) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += c.counts[i]!;
        values.push({ labels: { le: this.bounds[i]! }, sharedLabels: c.labels, value: acc, metricName: bucket });
      }
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: c.labels, value: c.count, metricName: bucket },
        { labels: {}, sharedLabels: c.labels, value: c.sum, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: c.labels, value: c.count, metricName: `${this.name}_count` },
      );
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** As prom-client's Histogram.get: each value's labels with the series labels merged in. */
  async get(): Promise<Exported> {
    const data = await this.getForPromString();
    data.values = data.values.map(({ sharedLabels, labels, ...rest }) => ({
      ...rest,
      labels: { ...labels, ...sharedLabels },
    }));
    return data;
  }

  reset(): void {
    this.cells = new Map();
  }
}
