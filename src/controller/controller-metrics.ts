import { Counter, Gauge, Registry } from 'prom-client';
import { RESULT_STATUSES, type Owner } from '../schema/enums.js';
import { DROP_REASONS, type FoldOutcome, type NodeSnapshot } from '../streams/node-snapshot.js';
import { sourceHealth } from '../streams/query-node.js';
import { READ_OUTCOMES, type ReadOutcome } from '../http/metrics-endpoint.js';

/** How a read reached the controller: `POST /tools/call`, MCP, or NATS request/reply. */
export const READ_VIAS = ['http', 'mcp', 'nats'] as const;
export type ReadVia = (typeof READ_VIAS)[number];

/**
 * The controller's Prometheus metrics (CONTRACT.md "Telemetry (revision 2)"): batches per
 * owner by fate, each source's status and age, reads by way and outcome. Labels are bounded:
 * `owner` is one of the six owners (or `unknown` for a batch that could not be read),
 * `result` `folded` or a drop reason, `status` a result status.
 */
export class ControllerMetrics {
  readonly registry = new Registry();
  private readonly batches: Counter<'owner' | 'result'>;
  private readonly reads: Counter<'via' | 'outcome'>;

  constructor(opts: {
    owners: readonly Owner[];
    staleAfterMs: number;
    /** The node's snapshot now (read at each scrape). */
    snapshot: () => NodeSnapshot;
    now?: () => number;
  }) {
    const now = opts.now ?? Date.now;
    const registers = [this.registry];
    this.batches = new Counter({
      name: 'svc_node_batches_total',
      help: 'Observation batches by owner: folded, or dropped and why',
      labelNames: ['owner', 'result'],
      registers,
    });
    for (const owner of opts.owners) {
      this.batches.inc({ owner, result: 'folded' }, 0);
      for (const result of DROP_REASONS) this.batches.inc({ owner, result }, 0);
    }
    this.reads = new Counter({
      name: 'svc_node_reads_total',
      help: 'Reads served by this controller (tools/call, MCP, NATS node_workloads), by how they ended',
      labelNames: ['via', 'outcome'],
      registers,
    });
    for (const via of READ_VIAS) for (const outcome of READ_OUTCOMES) this.reads.inc({ via, outcome }, 0);
    new Gauge({
      name: 'svc_node_source_status',
      help: '1 for the current status of each owner source, 0 for the others',
      labelNames: ['owner', 'status'],
      registers,
      collect() {
        const t = now();
        const snap = opts.snapshot();
        for (const owner of opts.owners) {
          const current = sourceHealth(snap.sources[owner], t, opts.staleAfterMs).status;
          for (const status of RESULT_STATUSES) this.set({ owner, status }, status === current ? 1 : 0);
        }
      },
    });
    new Gauge({
      name: 'svc_node_source_age_seconds',
      help: 'Age of the newest observation folded for each owner source (absent before the first)',
      labelNames: ['owner'],
      registers,
      collect() {
        this.reset();
        const t = now();
        const snap = opts.snapshot();
        for (const owner of opts.owners) {
          const m = snap.sources[owner];
          if (m.heard && Number.isFinite(m.freshMs)) this.set({ owner }, Math.max(0, t - m.freshMs) / 1000);
        }
      },
    });
  }

  /** Counts the fate of one batch (NodeView's `onFold`). */
  readonly folded = (o: FoldOutcome): void => {
    this.batches.inc({ owner: o.owner, result: o.result });
  };

  /** Counts one read. */
  read(via: ReadVia, outcome: ReadOutcome): void {
    this.reads.inc({ via, outcome });
  }
}
