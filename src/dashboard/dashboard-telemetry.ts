import { formatTimestamp } from '../schema/primitives.js';
import { GpuSampler, type CardSeries, type GpuTelemetry } from '../telemetry/gpu-sampler.js';
import { scrapeRouterMetrics, type RouterFigures } from '../telemetry/router-metrics.js';
import { RouterRates, parseRouterScrape, type RatePoint } from '../telemetry/router-rates.js';
import type { FrameSink } from './dashboard-session.js';

export interface TelemetryHubOptions {
  /** The nvidia-smi binary (`SVC_NVIDIA_SMI` overrides `nvidia-smi` on PATH). */
  readonly nvidiaSmi: string;
  readonly intervalMs: number;
  readonly routerMetricsUrl?: string | undefined;
}

/**
 * Fans telemetry out to the sessions that passed the telemetry gate: after every GPU sample
 * (and router scrape, when a router is wired in) one frame goes to every subscriber. It holds
 * no workload state and cannot reach any, which is how "telemetry never creates or changes
 * workload records" is kept by construction rather than by care.
 */
export class TelemetryHub {
  private readonly sampler: GpuSampler;
  private router: RouterFigures | null = null;
  /** The router panel's charts (rates and quantiles of the last 15 minutes) and the newest point not yet sent. */
  private readonly rates = new RouterRates();
  private newPoints: RatePoint[] = [];
  private readonly sinks = new Set<FrameSink>();
  private frame: string;
  /** Samples taken, and the number of the newest one sent: frames never go out older than one already sent. */
  private samples = 0;
  private sent = 0;
  /** Per card, the history the last frame sent left every subscriber with: its length and newest time. */
  private sentSeries = new Map<string, { len: number; lastT: number }>();

  constructor(private readonly opts: TelemetryHubOptions) {
    this.sampler = new GpuSampler({ binary: opts.nvidiaSmi, intervalMs: opts.intervalMs });
    this.frame = this.render(this.sampler.current);
    this.sampler.subscribe((gpu) => void this.onSample(gpu));
  }

  start(): void {
    this.sampler.start();
  }

  stop(): void {
    this.sampler.stop();
    this.sinks.clear();
  }

  /** Adds a subscriber and sends it the latest frame at once; returns the unsubscribe. */
  subscribe(sink: FrameSink): () => void {
    this.sinks.add(sink);
    sink.send(this.frame);
    return () => this.sinks.delete(sink);
  }

  private async onSample(gpu: GpuTelemetry): Promise<void> {
    const n = ++this.samples;
    if (this.opts.routerMetricsUrl) {
      let text: string | undefined;
      const router = await scrapeRouterMetrics(
        this.opts.routerMetricsUrl,
        () => formatTimestamp(Date.now()),
        (t) => (text = t),
      );
      // A newer sample went out while this scrape ran: this one is older, and is not sent after it.
      if (n < this.sent) return;
      this.router = router;
      const point = text === undefined ? this.rates.gap() : this.rates.add(parseRouterScrape(text, Date.now()));
      this.newPoints = point ? [point] : [];
    }
    this.sent = n;
    this.frame = this.render(gpu);
    const delta = this.renderDelta(gpu);
    for (const s of this.sinks) s.send(delta);
  }

  /**
   * The frame for subscribers that hold the last one sent: the sample's figures, and for each
   * card's history only the points added since (`t`, `memory_used_mib`, `utilization_pct`)
   * and how many old ones aged out (`trim`); cards not listed in `series_keep` are gone.
   * A whole 120-point history per card every 3 s is what a tab would otherwise be sent.
   */
  private renderDelta(gpu: GpuTelemetry): string {
    const seriesDelta = gpu.series.map((s: CardSeries) => {
      const prev = this.sentSeries.get(s.uuid);
      const from = prev === undefined ? 0 : s.t.findIndex((t) => t > prev.lastT);
      const start = from === -1 ? s.t.length : from;
      const added = s.t.length - start;
      return {
        uuid: s.uuid,
        name: s.name,
        index: s.index,
        trim: prev === undefined ? 0 : Math.max(0, prev.len + added - s.t.length),
        t: s.t.slice(start),
        memory_used_mib: s.memory_used_mib.slice(start),
        utilization_pct: s.utilization_pct.slice(start),
      };
    });
    this.sentSeries = new Map(gpu.series.map((s) => [s.uuid, { len: s.t.length, lastT: s.t.at(-1) ?? -Infinity }]));
    const { series: _whole, ...figures } = gpu;
    return JSON.stringify({
      type: 'telemetry',
      gpu: { ...figures, series_delta: seriesDelta, series_keep: gpu.series.map((s) => s.uuid) },
      router: this.router,
      // The router panel's points: only the new one (the page keeps 15 minutes of them).
      ...(this.opts.routerMetricsUrl ? { router_rates_delta: this.newPoints } : {}),
    });
  }

  private render(gpu: GpuTelemetry): string {
    return JSON.stringify({
      type: 'telemetry',
      gpu,
      router: this.router,
      ...(this.opts.routerMetricsUrl ? { router_rates: this.rates.series() } : {}),
    });
  }
}
