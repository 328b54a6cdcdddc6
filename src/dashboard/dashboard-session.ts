import type { Logger } from 'pino';
import { formatTimestamp } from '../schema/primitives.js';
import { parseFilterArgs, type FilterArgs } from '../schema/filters.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { withPlainIntegers } from '../schema/json-numbers.js';
import { TOKEN_RE, type TelemetryGate, type WorkloadService } from './dashboard-config.js';
import { unavailableNode, type ControllerReader, type FleetReader } from './dashboard-reader.js';
import { FleetWatch } from './dashboard-fleet.js';
import type { LineBudget } from '../http/line-budget.js';
import type { NodeResult } from '../schema/envelopes.js';
import { diffNode, viewDigest } from './view-delta.js';
import {
  isRequestId,
  isSessionId,
  lookupRequest,
  lookupSession,
  type RequestsWatcher,
  type RouterReader,
} from './dashboard-requests.js';

/** The minimal WebSocket surface a session needs (the `ws` socket, or a fake in tests). */
export interface FrameSink {
  send(frame: string): void;
}

/**
 * The one fixed denial of a disabled workload service: the same bytes for every read, so it
 * says nothing about why (no discovery) and is never an empty inventory.
 */
export const DISABLED_FRAME = JSON.stringify({
  type: 'workloads-denied',
  code: 'disabled',
  status: 503,
  title: 'Workload reads are disabled on this dashboard',
});

type DeniedCode = 'unauthenticated' | 'forbidden' | 'invalid-filter' | 'not-connected';
const DENIED: Readonly<Record<DeniedCode, { status: number; title: string }>> = {
  unauthenticated: { status: 401, title: 'Missing or unknown credential' },
  forbidden: { status: 403, title: 'Credential lacks the workloads:read grant' },
  'invalid-filter': { status: 400, title: 'A filter value is invalid' },
  'not-connected': { status: 401, title: 'Connect with a credential first' },
};

export interface SessionDeps {
  readonly sink: FrameSink;
  readonly gate: TelemetryGate;
  readonly service: WorkloadService;
  readonly reader: ControllerReader | undefined;
  readonly subscribeTelemetry: (sink: FrameSink) => () => void;
  readonly logger: Logger;
  /** Bounds the `workload session refused` lines of all sessions (no credential needed to cause one). */
  readonly refusedLines: LineBudget;
  /** The router the Requests view reads (undefined: none configured). */
  readonly requests?: { readonly reader: RouterReader; readonly watcher: RequestsWatcher } | undefined;
  /** The fleet controller the Fleet view reads (undefined: none configured). */
  readonly fleet?: FleetReader | undefined;
}

/**
 * One browser tab's WebSocket session. Client messages (JSON):
 * `telemetry-auth {credential}`, `connect {gen, credential, filters}`, `read {gen, filters}`,
 * `disconnect {gen}`. Generations are chosen by the page and only move forward: a message of
 * an older generation is ignored, a newer one aborts the read in flight, and a result is sent
 * only while its generation is still current, so late answers of old filters or of a
 * disconnected credential never reach the page. At most one read is in flight per session.
 * The workload credential lives only in this object and is dropped on disconnect or close.
 */
export class DashboardSession {
  private credential: string | undefined;
  private gen = -1;
  private inflight: { gen: number; abort: AbortController } | undefined;
  private unsubscribe: (() => void) | undefined;
  private closed = false;
  /**
   * The last view sent to the page for the current generation (a fresh full read), and its
   * number: the next read of the same generation is sent as a delta against it (decision
   * 0075). Undefined: the next read is sent whole.
   */
  private view: { gen: number; seq: number; result: NodeResult } | undefined;
  private seq = 0;
  /** Whether the connected client may see router requests (`requests:read` or `workloads:read`). */
  private requestsAllowed = false;
  private unwatchRequests: (() => void) | undefined;
  private readonly fleet: FleetWatch | undefined;

  constructor(private readonly d: SessionDeps) {
    this.fleet = d.fleet ? new FleetWatch(d.fleet, (frame) => this.send(frame)) : undefined;
  }

  /** Handles one client message; anything malformed is ignored without echoing it. */
  handle(raw: string): void {
    let msg: Record<string, unknown>;
    try {
      // Integers written `1e2` or `100.0` are refused, as over HTTP, MCP and the CLI.
      const parsed: unknown = withPlainIntegers(raw, JSON.parse(raw));
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return;
      msg = parsed as Record<string, unknown>;
    } catch {
      return;
    }
    if (msg['type'] === 'telemetry-auth') return this.telemetryAuth(msg['credential']);
    if (typeof msg['type'] === 'string' && msg['type'].startsWith('requests-')) return this.requestsMessage(msg);
    if (msg['type'] === 'fleet-read') return this.fleetRead(msg['full'] === true);
    const gen = msg['gen'];
    if (typeof gen !== 'number' || !Number.isSafeInteger(gen) || gen < 0) return;
    // A member named twice (`"limit":5,"limit":6`) is a repeated filter: refused, never the
    // last value (the filters then read as null, which parseFilterArgs refuses).
    const filters = hasDuplicateKey(raw, msg) ? null : msg['filters'];
    if (msg['type'] === 'connect') return this.connect(gen, msg['credential'], filters);
    if (msg['type'] === 'read') {
      // The page lost track of its view (a delta it could not apply): the next one goes whole.
      if (msg['full'] === true) this.view = undefined;
      return this.read(gen, filters);
    }
    if (msg['type'] === 'disconnect') return this.disconnect(gen);
  }

  /** The socket closed: abort, forget the credential, stop telemetry. */
  close(): void {
    this.closed = true;
    this.inflight?.abort.abort();
    this.inflight = undefined;
    this.credential = undefined;
    this.view = undefined;
    this.stopRequests();
    this.fleet?.reset();
    this.unsubscribe?.();
  }

  private telemetryAuth(credential: unknown): void {
    if (!this.d.gate.allows(credential)) {
      this.unsubscribe?.();
      this.unsubscribe = undefined;
      return this.send({ type: 'telemetry-denied', status: 401, title: 'Missing or unknown telemetry credential' });
    }
    this.unsubscribe ??= this.d.subscribeTelemetry(this.d.sink);
  }

  /** Moves to `gen` when it is newer; false when the message belongs to an older generation. */
  private advance(gen: number): boolean {
    if (gen < this.gen) return false;
    if (gen > this.gen) {
      this.inflight?.abort.abort();
      this.inflight = undefined;
      this.gen = gen;
    }
    return true;
  }

  private connect(gen: number, credential: unknown, filters: unknown): void {
    if (!this.advance(gen)) return;
    this.credential = undefined;
    this.fleet?.reset();
    if (!this.d.service.enabled) return this.d.sink.send(DISABLED_FRAME);
    const client =
      typeof credential === 'string' && TOKEN_RE.test(credential)
        ? this.d.service.policy.authenticate(credential)
        : undefined;
    const refused: DeniedCode | undefined = !client
      ? 'unauthenticated'
      : client.grants.has('workloads:read')
        ? undefined
        : 'forbidden';
    if (refused || !client) {
      if (this.d.refusedLines.take(Date.now())) this.d.logger.info({ code: refused }, 'workload session refused');
      return this.deny(gen, refused ?? 'unauthenticated');
    }
    this.credential = credential as string;
    this.requestsAllowed = client.grants.has('requests:read') || client.grants.has('workloads:read');
    this.d.logger.info({ client: client.id }, 'workload session connected');
    this.send({ type: 'connected', gen, client: client.id, expected_node: this.d.service.expectedNode });
    this.read(gen, filters);
  }

  private read(gen: number, filters: unknown): void {
    if (!this.advance(gen)) return;
    if (!this.d.service.enabled) return this.d.sink.send(DISABLED_FRAME);
    const credential = this.credential;
    if (credential === undefined) return this.deny(gen, 'not-connected');
    // A poll while the previous read of this generation is still running is dropped: bounded.
    if (this.inflight) return;
    let args: FilterArgs;
    try {
      // Absent filters are no filters; null ones are refused like any other null filter.
      args = parseFilterArgs(filters === undefined ? {} : filters);
    } catch {
      return this.deny(gen, 'invalid-filter');
    }
    const abort = new AbortController();
    const mine = { gen, abort };
    this.inflight = mine;
    const { expectedNode } = this.d.service;
    void this.d.reader!.read(credential, args, abort.signal).then((r) => {
      if (this.inflight === mine) this.inflight = undefined;
      // Late results of an older generation, or after Disconnect, are dropped here.
      if (r.kind === 'aborted' || this.closed || gen !== this.gen || this.credential === undefined) return;
      const readAt = formatTimestamp(Date.now());
      if (r.kind === 'result') return this.sendView(gen, readAt, r.result);
      this.view = undefined;
      this.send({
        type: 'workloads',
        gen,
        read_at: readAt,
        failure: r.failure,
        result: unavailableNode(expectedNode, r.failure, readAt),
      });
    });
  }

  /**
   * A fresh full read, sent as what changed since the view the page holds (same generation),
   * or whole. Every frame carries its number (`seq`), a delta the number it applies to
   * (`base`), and both the digest of the full read, so the page can prove its view equals it.
   */
  private sendView(gen: number, readAt: string, result: NodeResult): void {
    const prev = this.view?.gen === gen ? this.view : undefined;
    const delta = prev ? diffNode(prev.result, result) : undefined;
    const seq = ++this.seq;
    this.view = { gen, seq, result };
    const digest = viewDigest(result);
    if (prev && delta)
      return this.send({ type: 'workloads-delta', gen, seq, base: prev.seq, read_at: readAt, digest, delta });
    this.send({ type: 'workloads', gen, seq, read_at: readAt, digest, result });
  }

  private disconnect(gen: number): void {
    if (!this.advance(gen)) return;
    this.inflight?.abort.abort();
    this.inflight = undefined;
    this.credential = undefined;
    this.view = undefined;
    this.stopRequests();
    this.fleet?.reset();
    this.send({ type: 'disconnected', gen });
  }

  private stopRequests(): void {
    this.requestsAllowed = false;
    this.unwatchRequests?.();
    this.unwatchRequests = undefined;
  }

  /**
   * The Requests view (decision 0076): `requests-watch`, `requests-unwatch`,
   * `requests-lookup {n, id}` and `requests-session {n, session}`. Only for a connected
   * client the local policy grants `requests:read` or `workloads:read`; the router is read
   * with the dashboard's own router credential, which never reaches the page.
   */
  private requestsMessage(msg: Record<string, unknown>): void {
    const type = msg['type'];
    if (type === 'requests-unwatch') {
      this.unwatchRequests?.();
      this.unwatchRequests = undefined;
      return;
    }
    const n = msg['n'];
    const tag = typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : 0;
    const r = this.d.requests;
    const refused = !r
      ? 'not-configured'
      : this.credential === undefined
        ? 'not-connected'
        : !this.requestsAllowed
          ? 'forbidden'
          : undefined;
    if (refused || !r) return this.send({ type: 'requests-denied', n: tag, code: refused });
    if (type === 'requests-watch') {
      let first = true;
      this.unwatchRequests ??= r.watcher.watch((state, added) => {
        this.send({ type: 'requests', reset: first, ...state, added });
        first = false;
      });
      return;
    }
    if (type === 'requests-lookup') {
      const id = msg['id'];
      if (!isRequestId(id)) return this.send({ type: 'requests-denied', n: tag, code: 'invalid-id' });
      void lookupRequest(r.reader, id).then(async (found) => {
        const session = found.kind === 'found' ? found.request.session_id : undefined;
        const history = session === undefined ? undefined : await lookupSession(r.reader, session);
        if (this.requestsAllowed) this.send({ type: 'requests-diagnosis', n: tag, id, found, history });
      });
      return;
    }
    if (type === 'requests-session') {
      const session = msg['session'];
      if (!isSessionId(session)) return this.send({ type: 'requests-denied', n: tag, code: 'invalid-session' });
      void lookupSession(r.reader, session).then((history) => {
        if (this.requestsAllowed) this.send({ type: 'requests-history', n: tag, session, history });
      });
    }
  }

  /**
   * `fleet-read {full?}` (decision 0078): the declared fleet read with the connected
   * client's credential, which the local policy granted `workloads:read` at Connect.
   */
  private fleetRead(full: boolean): void {
    const code = !this.fleet ? 'not-configured' : this.credential === undefined ? 'not-connected' : undefined;
    if (code || !this.fleet || this.credential === undefined) return this.send({ type: 'fleet-denied', code });
    this.fleet.read(this.credential, full);
  }

  private deny(gen: number, code: DeniedCode): void {
    this.send({ type: 'workloads-denied', gen, code, ...DENIED[code] });
  }

  private send(frame: object): void {
    if (!this.closed) this.d.sink.send(JSON.stringify(frame));
  }
}
