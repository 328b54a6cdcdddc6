import { Gauge, Histogram, Registry } from 'prom-client';
import { NODE_CONDITIONS } from '../schema/enums.js';
import type { FleetResult } from '../schema/envelopes.js';

/** Seconds: a fleet read waits at most `node_timeout_ms` (up to a minute) for its slowest node. */
export const FLEET_READ_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60] as const;

/** A node's condition label: `ok` when it answered as itself, else its fleet condition. */
export const CONDITION_LABELS = ['ok', ...NODE_CONDITIONS] as const;

/** Scrapes within this long of a condition read share it (several scrapers never multiply the fan-out). */
const CONDITION_READ_REUSE_MS = 1_000;

/**
 * The fleet's Prometheus metrics (CONTRACT.md "Telemetry (revision 2)"):
 * `svc_fleet_node_condition{node,condition}` for the declared nodes only, read by one fan-out
 * at scrape time (a node's condition now, not at the last client read), and
 * `svc_fleet_read_duration_seconds` over the fleet reads clients ask for.
 */
export class FleetMetrics {
  readonly registry = new Registry();
  private readonly duration: Histogram;
  private pending: { at: number; read: Promise<FleetResult | undefined> } | undefined;

  constructor(opts: {
    nodes: readonly { readonly hostId: string }[];
    /** One fleet read of the fewest records (the conditions are what is wanted). */
    readConditions: () => Promise<FleetResult>;
    now?: () => number;
  }) {
    const now = opts.now ?? Date.now;
    const registers = [this.registry];
    this.duration = new Histogram({
      name: 'svc_fleet_read_duration_seconds',
      help: 'Time a fleet_workloads read took, every declared node asked',
      buckets: [...FLEET_READ_BUCKETS],
      registers,
    });
    const conditions = (): Promise<FleetResult | undefined> => {
      const t = now();
      if (!this.pending || t - this.pending.at > CONDITION_READ_REUSE_MS)
        this.pending = { at: t, read: opts.readConditions().catch(() => undefined) };
      return this.pending.read;
    };
    new Gauge({
      name: 'svc_fleet_node_condition',
      help: '1 for the condition each declared node is in now (ok when it answered as itself), 0 for the others',
      labelNames: ['node', 'condition'],
      registers,
      async collect() {
        const result = await conditions();
        const byNode = new Map<string, string>();
        for (const n of result?.nodes ?? []) byNode.set(n.expected_host, n.condition ?? 'ok');
        for (const { hostId } of opts.nodes) {
          // A read that failed as a whole (it does not: each node fails alone) leaves every node unreachable.
          const current = byNode.get(hostId) ?? 'unreachable';
          for (const condition of CONDITION_LABELS)
            this.set({ node: hostId, condition }, condition === current ? 1 : 0);
        }
      },
    });
  }

  /** Times one fleet read. */
  async timed<T>(read: () => Promise<T>): Promise<T> {
    const end = this.duration.startTimer();
    try {
      return await read();
    } finally {
      end();
    }
  }
}
