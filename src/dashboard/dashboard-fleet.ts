import { formatTimestamp } from '../schema/primitives.js';
import type { FleetResult } from '../schema/envelopes.js';
import type { FleetReader } from './dashboard-reader.js';
import { diffFleet, fleetDigest } from './view-delta.js';

/**
 * One socket's Fleet view (decision 0078): at most one `fleet_workloads` read in flight (a
 * poll during one is dropped), the first answer whole (`fleet`), later ones as what changed
 * (`fleet-delta`, with `seq`, `base` and the digest of the fresh read, as for a node), and a
 * fleet that cannot be read as a `fleet` frame with a fixed `failure` code and no result:
 * never an empty fleet. `reset` (Connect, Disconnect, close) aborts the read in flight, drops
 * its late answer and forgets the view.
 */
export class FleetWatch {
  private inflight: AbortController | undefined;
  private epoch = 0;
  private view: { seq: number; result: FleetResult } | undefined;
  private seq = 0;

  constructor(
    private readonly reader: FleetReader,
    private readonly send: (frame: object) => void,
  ) {}

  /** Reads the fleet with `credential` (already checked against the local policy). */
  read(credential: string, full: boolean): void {
    if (full) this.view = undefined;
    if (this.inflight) return;
    const abort = new AbortController();
    this.inflight = abort;
    const epoch = this.epoch;
    void this.reader.read(credential, {}, abort.signal).then((r) => {
      if (this.inflight === abort) this.inflight = undefined;
      if (r.kind === 'aborted' || epoch !== this.epoch) return;
      const readAt = formatTimestamp(Date.now());
      if (r.kind === 'failure') {
        this.view = undefined;
        return this.send({ type: 'fleet', read_at: readAt, failure: r.failure, result: null });
      }
      const prev = this.view;
      const seq = ++this.seq;
      this.view = { seq, result: r.result };
      const digest = fleetDigest(r.result);
      if (prev)
        return this.send({
          type: 'fleet-delta',
          seq,
          base: prev.seq,
          read_at: readAt,
          digest,
          delta: diffFleet(prev.result, r.result),
        });
      this.send({ type: 'fleet', seq, read_at: readAt, digest, result: r.result });
    });
  }

  reset(): void {
    this.epoch++;
    this.inflight?.abort();
    this.inflight = undefined;
    this.view = undefined;
  }
}
