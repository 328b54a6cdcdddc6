import { Pool } from 'undici';
import {
  checkActiveBody,
  diagnoseHistory,
  diagnoseRecent,
  diagnoseLookup,
  type ActiveRequest,
  type InterpretationCode,
  type SessionEntry,
} from '../schema/diagnosis.js';
import type { Truncation } from '../schema/envelopes.js';
import { parseTimestamp } from '../schema/primitives.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE, type TerminalRecord } from '../schema/terminal-record.js';
import { PACKAGE_VERSION } from '../version.js';

/** Terminal records the Requests view keeps (newest first); the router keeps its own buffer. */
export const MAX_FINISHED = 200;
const TIMEOUT_MS = 2_500;
const MAX_BODY_BYTES = 1024 * 1024;
/** Lookups of requests that just left the active list, at most this many per round. */
const MAX_LOOKUPS_PER_ROUND = 16;

export type RouterRead<T> = { readonly ok: true; readonly status: number; readonly body: T } | { readonly ok: false };

/**
 * The dashboard's one client of the router (decision 0076): a Pool bound to the configured
 * origin, no redirects, no proxy environment, 2.5 s per read and 1 MiB bodies, with the
 * credential the dashboard was configured with (never the page's). Bodies are parsed JSON,
 * judged by the shared diagnosis code before anything reaches a page.
 */
export class RouterReader {
  private readonly pool: Pool;

  constructor(
    origin: string,
    private readonly credential: string,
  ) {
    this.pool = new Pool(origin, {
      connections: 4,
      connect: { timeout: TIMEOUT_MS },
      headersTimeout: TIMEOUT_MS,
      bodyTimeout: TIMEOUT_MS,
    });
  }

  async get(path: string): Promise<RouterRead<unknown>> {
    try {
      const res = await this.pool.request({
        path,
        method: 'GET',
        signal: AbortSignal.timeout(TIMEOUT_MS),
        headers: {
          authorization: `Bearer ${this.credential}`,
          accept: 'application/json',
          'user-agent': `svc-serving-dashboard/${PACKAGE_VERSION}`,
        },
      });
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_BODY_BYTES) {
          res.body.destroy();
          return { ok: false };
        }
        chunks.push(chunk);
      }
      if (res.statusCode === 404) return { ok: true, status: 404, body: null };
      if (res.statusCode !== 200) return { ok: false };
      return { ok: true, status: 200, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown };
    } catch {
      return { ok: false };
    }
  }

  async close(): Promise<void> {
    await this.pool.destroy().catch(() => undefined);
  }
}

/** A finished request as the Requests view lists it: the allowlisted evidence and its interpretation. */
export interface FinishedEntry {
  readonly request: TerminalRecord;
  readonly interpretation: InterpretationCode[];
}

/** One round of the watcher, as sent to every page watching: the active list whole, finished ones new since its last. */
export interface RequestsState {
  readonly status: 'ok' | 'unavailable';
  readonly read_at: string;
  readonly active: readonly ActiveRequest[];
  readonly active_truncation: Truncation | null;
}

type Listener = (state: RequestsState, added: readonly FinishedEntry[]) => void;

/**
 * Follows the router's requests for the Requests view (decision 0090). Every `intervalMs`
 * while a page watches, the watcher reads the requests in flight (`?active=1`) and the
 * terminal records the router finished last (`?recent=1`, newest 50): every request that
 * finished since the last round is in that list, however short, unless more than 50 finished
 * in one interval. A request that left the active list and is not in it (such a burst, or a
 * router without `recent`) is still looked up by id. The finished list is kept newest first
 * (at most MAX_FINISHED); a round sends only the records it had not sent before.
 */
export class RequestsWatcher {
  private readonly listeners = new Set<Listener>();
  private finished: FinishedEntry[] = [];
  /** `request_id|finished_at` of every entry in `finished`. */
  private held = new Set<string>();
  private activeIds = new Set<string>();
  private state: RequestsState = { status: 'unavailable', read_at: '', active: [], active_truncation: null };
  private timer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(
    private readonly reader: RouterReader,
    private readonly intervalMs: number,
    private readonly now: () => string,
  ) {}

  /** Adds a watcher; it is sent everything known at once. Returns the unsubscribe. */
  watch(fn: Listener): () => void {
    this.listeners.add(fn);
    if (this.state.read_at !== '') fn(this.state, this.finished);
    if (this.timer === undefined) {
      void this.round();
      this.timer = setInterval(() => void this.round(), this.intervalMs);
    }
    return () => {
      this.listeners.delete(fn);
      if (this.listeners.size === 0 && this.timer !== undefined) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    };
  }

  stop(): void {
    this.listeners.clear();
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async round(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const [r, recent] = await Promise.all([
        this.reader.get('/v1/requests?active=1'),
        this.reader.get('/v1/requests?recent=1'),
      ]);
      if (!r.ok || r.status !== 200 || !checkActiveBody.Check(r.body)) {
        this.state = { status: 'unavailable', read_at: this.now(), active: [], active_truncation: null };
        return this.emit([]);
      }
      const body = r.body;
      const found: FinishedEntry[] = [];
      const d = recent.ok && recent.status === 200 ? diagnoseRecent(recent.body) : 'malformed';
      if (d !== 'malformed') found.push(...d.requests);
      const listed = new Set(found.map((e) => e.request.request_id));
      const now = new Set(body.requests.map((a) => a.request_id));
      const left = [...this.activeIds].filter((id) => !now.has(id) && !listed.has(id)).slice(0, MAX_LOOKUPS_PER_ROUND);
      this.activeIds = now;
      for (const id of left) {
        const one = await lookupRequest(this.reader, id);
        if (one.kind === 'found') found.push({ request: one.request, interpretation: one.interpretation });
      }
      const added = this.keep(found);
      this.state = { status: 'ok', read_at: this.now(), active: body.requests, active_truncation: body.truncation };
      this.emit(added);
    } finally {
      this.running = false;
    }
  }

  /** Merges `found` into the finished list (newest first, bounded); returns the entries it newly holds. */
  private keep(found: readonly FinishedEntry[]): FinishedEntry[] {
    const fresh = found.filter((e) => !this.held.has(entryKey(e)));
    if (fresh.length === 0) return [];
    this.finished = [...fresh, ...this.finished]
      .sort((a, b) => parseTimestamp(b.request.finished_at) - parseTimestamp(a.request.finished_at))
      .slice(0, MAX_FINISHED);
    const before = this.held;
    this.held = new Set(this.finished.map(entryKey));
    return this.finished.filter((e) => !before.has(entryKey(e)));
  }

  private emit(added: readonly FinishedEntry[]): void {
    for (const fn of this.listeners) fn(this.state, added);
  }
}

/** One terminal record: its request id and when it finished (a caller's id may be reused). */
function entryKey(e: FinishedEntry): string {
  return `${e.request.request_id}|${e.request.finished_at}`;
}

export type LookupResult =
  | { readonly kind: 'found'; readonly request: TerminalRecord; readonly interpretation: InterpretationCode[] }
  | { readonly kind: 'not-found' | 'unavailable' | 'malformed' };

/** `GET /v1/requests/{id}`, diagnosed with `router diagnose`'s own pure code. */
export async function lookupRequest(reader: RouterReader, id: string): Promise<LookupResult> {
  const r = await reader.get(`/v1/requests/${encodeURIComponent(id)}`);
  if (!r.ok) return { kind: 'unavailable' };
  if (r.status === 404) return { kind: 'not-found' };
  const d = diagnoseLookup(id, r.body);
  if (typeof d === 'string') return { kind: 'malformed' };
  return { kind: 'found', ...d };
}

export type HistoryResult =
  | { readonly kind: 'found'; readonly requests: SessionEntry[]; readonly truncation: Truncation }
  | { readonly kind: 'unavailable' | 'malformed' };

/** `GET /v1/requests?session_id=S&history=1`, diagnosed with `router diagnose --session-id`'s code. */
export async function lookupSession(reader: RouterReader, session: string): Promise<HistoryResult> {
  const r = await reader.get(`/v1/requests?session_id=${encodeURIComponent(session)}&history=1`);
  if (!r.ok || r.status !== 200) return { kind: 'unavailable' };
  const d = diagnoseHistory('session_id', session, r.body);
  if (typeof d === 'string') return { kind: 'malformed' };
  return { kind: 'found', ...d };
}

/** A request id the router could hold (generated or a caller's legacy id). */
export function isRequestId(v: unknown): v is string {
  return typeof v === 'string' && (GENERATED_ID_RE.test(v) || LEGACY_ID_RE.test(v));
}

export function isSessionId(v: unknown): v is string {
  return typeof v === 'string' && OPAQUE_ID_RE.test(v);
}
