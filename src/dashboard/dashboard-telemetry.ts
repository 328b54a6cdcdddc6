import { formatTimestamp } from '../schema/primitives.js';
import { GpuSampler, type GpuTelemetry } from '../telemetry/gpu-sampler.js';
import { scrapeRouterMetrics, type RouterFigures } from '../telemetry/router-metrics.js';
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
  private readonly sinks = new Set<FrameSink>();
  private frame: string;
  /** Samples taken, and the number of the newest one sent: frames never go out older than one already sent. */
  private samples = 0;
  private sent = 0;

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
      const router = await scrapeRouterMetrics(this.opts.routerMetricsUrl, () => formatTimestamp(Date.now()));
      // A newer sample went out while this scrape ran: this one is older, and is not sent after it.
      if (n < this.sent) return;
      this.router = router;
    }
    this.sent = n;
    this.frame = this.render(gpu);
    for (const s of this.sinks) s.send(this.frame);
  }

  private render(gpu: GpuTelemetry): string {
    return JSON.stringify({ type: 'telemetry', gpu, router: this.router });
  }
}
