import type { Logger } from 'pino';
import {
  GENERATED_ID_RE,
  isGenerationRoute,
  terminalRecordJson,
  type RouteName,
  type TerminalRecord,
} from '../../schema/terminal-record.js';
import type { Truncation } from '../../schema/envelopes.js';
import type { LineageKey } from '../../schema/diagnosis.js';
import { formatTimestamp, parseTimestamp } from '../../schema/primitives.js';
import type { WorkloadRecord } from '../../schema/record.js';
import type { DecisionLog } from './decision-log.js';
import { DEFAULT_READ_BUDGET, scanDecisionFiles, scanDecisionFilesAsync } from './decision-lines.js';
import type { Decision } from './decision-lines.js';
import type { InflightEntry } from './inflight-entry.js';
import { mapActiveRequest, mapTerminalRequest, type RequestPhase } from '../../actors/router-mapping.js';
import { TerminalRing } from './terminal-ring.js';
import type { OwnerReading } from '../../actors/window.js';
import type { RequestTrace } from '../../telemetry/trace-context.js';

/** Terminal work stays in the window this long (the largest `recent_seconds`). */
const WINDOW_MS = 86_400_000;
/** Decision-log bytes read per ring slot when the ring is refilled at start (records are ~0.7 KiB). */
const RESTORE_BYTES_PER_RECORD = 2048;

/** Records per `/v1/requests` query and `router diagnose` (SPEC.md Limits). */
export const MAX_LOOKUP_RECORDS = 50;

/** One request in router memory while it is in flight. Counts only; no content. */
export interface ActiveRequest {
  readonly gid: string;
  readonly requestId: string;
  readonly model: string;
  readonly route: RouteName;
  readonly startedAt: number;
  phase: RequestPhase;
  phaseAt: number;
  lastUpstreamAt: number | null;
  admissionWaitMs: number | null;
  estimatedPromptTokens: number | null;
  estimatedCompletionTokens: number;
  upstreamPromptTokens: number | null;
  upstreamCompletionTokens: number | null;
  readonly sessionId: string | undefined;
  /** Lineage ids (`X-Svc-Workbench-Run-Id`, `X-Svc-Task-Id`), bounded; never sent upstream. */
  readonly workbenchRunId: string | undefined;
  readonly taskId: string | undefined;
  /** When it began waiting in its alias's admission queue (null: it never queued). */
  queuedAt: number | null;
  /** Cuts the request short (the router is stopping); set by the relay. */
  stop: { abort(): void } | undefined;
  /** The W3C trace it continues (sent upstream; its span made at the terminal record when traces are exported). */
  readonly trace?: RequestTrace | undefined;
  /** The routing configuration it began under (its journal line keeps it across a reload). */
  readonly routingConfigHash?: string | undefined;
}

/** The `?active=1` view of one request (docs/api.md). */
export interface ActiveSummary {
  request_id: string;
  model: string;
  route: RouteName;
  phase: RequestPhase;
  started_at: string;
  elapsed_ms: number;
  since_upstream_activity_ms: number | null;
  admission_wait_ms: number | null;
  tokens: {
    prompt_estimated: number | null;
    completion_estimated: number;
    prompt_upstream: number | null;
    completion_upstream: number | null;
  };
  session_id?: string;
}

/**
 * Router memory: requests in flight and a bounded ring of terminal decisions, with the
 * decision log behind it. Every request that begins finishes exactly once; the record is
 * written to the log before it can be looked up.
 */
export class RouterRegistry {
  readonly active = new Map<string, ActiveRequest>();
  /** Terminal records, newest replacing oldest (out of the JavaScript heap: see TerminalRing). */
  readonly ring: TerminalRing;
  /**
   * Change listeners (the router actor's nudge): called on every phase change and terminal
   * record, several times per request, so a plain list and not an RxJS Subject (whose `next`
   * allocates per call, which showed in the router's profile).
   */
  private listeners: readonly (() => void)[] = [];
  finishedTotal = 0;
  /** +1 whenever a request begins or ends (the in-flight journal writes only after a change). */
  activeVersion = 0;
  /**
   * `finished_at` (epoch ms) of the newest terminal record known to exist outside the ring
   * (evicted, or left in the decision log at start): while it is within the last day, the
   * window's count of left-out records is unknown.
   */
  private outsideNewestMs = Number.NEGATIVE_INFINITY;
  /** A terminal record left the ring with no decision log behind it. */
  private recordsLost = false;

  constructor(
    private readonly opts: {
      host: string;
      bufferSize: number;
      log?: DecisionLog | undefined;
      logger?: Logger | undefined;
      /**
       * Called once per terminal record made in this process (metrics), with whether its answer
       * was relayed as a stream; not for records restored from the log (their process counted them).
       */
      onFinish?: (record: TerminalRecord, streamed: boolean, trace?: RequestTrace) => void;
    },
  ) {
    this.ring = new TerminalRing(opts.bufferSize);
  }

  /** Calls `listener` after every change (a request began, changed phase or finished; records restored). Returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.listeners = [...this.listeners, listener];
    return () => {
      // A new array: a notification in progress goes on over the one it started with.
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }

  private changed(): void {
    for (const l of this.listeners) {
      try {
        l();
      } catch (err) {
        // A listener's fault must not break the bookkeeping of the request that changed.
        this.opts.logger?.error({ err }, 'router change listener failed');
      }
    }
  }

  begin(a: ActiveRequest): void {
    this.active.set(a.gid, a);
    this.activeVersion++;
    this.changed();
  }

  setPhase(a: ActiveRequest, phase: RequestPhase, at = Date.now()): void {
    if (!this.active.has(a.gid) || a.phase === phase) return;
    a.phase = phase;
    a.phaseAt = at;
    // Noted for the request's span only when the router makes one (tracing on).
    const t = a.trace;
    if (t?.spanId !== undefined) {
      if (phase === 'admitted') t.admittedAt = at;
      else if (phase === 'dispatched') t.dispatchedAt = at;
    }
    this.changed();
  }

  /**
   * Ends a request with its terminal record: queued for the decision log (written within its
   * flush delay, and always before anything hands it out), then buffered.
   * Idempotent per gid. `finishedMs`: the record's `finished_at` in epoch ms, when the caller
   * already has it.
   */
  finish(a: ActiveRequest, record: TerminalRecord, finishedMs = parseTimestamp(record.finished_at)): void {
    if (!this.active.delete(a.gid)) return;
    this.activeVersion++;
    // Serialized once: the same text goes to the decision log and into the ring.
    const json = terminalRecordJson(record);
    this.opts.log?.appendJson(a.gid, json);
    this.hold(a.gid, record, finishedMs, json);
    this.finishedTotal++;
    this.opts.onFinish?.(record, a.phase === 'streaming', a.trace);
    this.changed();
  }

  /**
   * The terminal record of a request refused before routing (never in flight: no phase, no
   * journal entry): logged and buffered as finish() does, under its generated id.
   */
  refused(
    gid: string,
    record: TerminalRecord,
    finishedMs = parseTimestamp(record.finished_at),
    trace?: RequestTrace,
  ): void {
    const json = terminalRecordJson(record);
    this.opts.log?.appendJson(gid, json);
    this.hold(gid, record, finishedMs, json);
    this.finishedTotal++;
    this.opts.onFinish?.(record, false, trace);
    this.changed();
  }

  /** Puts a terminal record in the ring; the one it replaces is counted as outside. */
  private hold(gid: string, record: TerminalRecord, finishedMs: number, json = terminalRecordJson(record)): void {
    const evicted = this.ring.push(gid, record, json, finishedMs);
    if (evicted) {
      // Without a decision log an evicted record is gone for good.
      if (!this.opts.log) this.recordsLost = true;
      if (evicted.finishedMs > this.outsideNewestMs) this.outsideNewestMs = evicted.finishedMs;
    }
  }

  /**
   * At start: refills the ring from the decision log with the newest terminal records of the
   * last day (at most the buffer size, read within a bounded budget), so that the router's
   * window after a restart holds what it held before. Records of that day it cannot hold, or
   * could not read, make the window's left-out count unknown. Returns how many it restored.
   */
  restore(now = Date.now()): number {
    const log = this.opts.log;
    if (!log) return 0;
    const horizon = now - WINDOW_MS;
    const cap = this.ring.capacity;
    const found: Decision[] = [];
    const seen = new Set<string>();
    let oldestFound = Number.POSITIVE_INFINITY;
    // A retained record older than the window: records rotation deleted are older still.
    let reachedOlder = false;
    const outside = (ms: number): void => {
      if (ms > this.outsideNewestMs) this.outsideNewestMs = ms;
    };
    let result: { truncated: boolean };
    try {
      result = scanDecisionFiles(
        log.retainedFiles(),
        (d) => {
          const ms = parseTimestamp(d.record.finished_at);
          if (!(ms >= horizon)) {
            reachedOlder = true;
            return true; // newest first: the rest is older than the window
          }
          if (found.length >= cap) {
            outside(ms);
            return true;
          }
          // A record without a generated id (an older version's) or seen twice has no slot of its own.
          if (d.gid === undefined || seen.has(d.gid)) {
            if (d.gid === undefined) outside(ms);
            return false;
          }
          seen.add(d.gid);
          found.push(d);
          if (ms < oldestFound) oldestFound = ms;
          return false;
        },
        { budget: Math.min(cap * RESTORE_BYTES_PER_RECORD, DEFAULT_READ_BUDGET) },
      );
    } catch (err) {
      // Unreadable: nothing is restored and the day's records are of unknown number.
      logWriteError(this.opts.logger, err);
      outside(now);
      return 0;
    }
    // The budget stopped the scan: older records of the day may be there, uncounted. Or
    // rotation deleted records (this log's or a previous process's), and nothing retained
    // says they were older than the day: they may have been of it.
    if (result.truncated || (log.recordsDeleted && !reachedOlder))
      outside(Number.isFinite(oldestFound) ? oldestFound : now);
    // A router on this log stopped without writing every record (killed, a write that failed,
    // the file removed): the day's records up to then may be fewer than were made.
    if (log.uncleanAtMs !== undefined) outside(Math.min(log.uncleanAtMs, now));
    for (let i = found.length - 1; i >= 0; i--) {
      const d = found[i]!;
      this.hold(d.gid!, d.record, parseTimestamp(d.record.finished_at));
    }
    if (found.length > 0) this.changed();
    return found.length;
  }

  /**
   * At start: requests a previous process had in flight when it died (its in-flight journal)
   * and that have no record: each gets one now, outcome `error` with status 0 (what was sent
   * is not known: it may have finished just before the kill, its own record not yet on disk),
   * finish reason `unknown` when the engine had been reached, every measurement
   * null and usage unknown, `finished_at` the last moment it was known in flight; the routing
   * hash and package version of the process that ran it, when its journal recorded them.
   * Returns how many it recorded.
   * Thrown when: the decision log cannot be written (the journal must then be kept).
   */
  recordInterrupted(entries: readonly InflightEntry[], lastSeenMs: number): number {
    const pending = new Map(
      entries.filter((e) => this.ring.slotOf(e.gateway_request_id) === undefined).map((e) => [e.gateway_request_id, e]),
    );
    if (pending.size === 0) return 0;
    // One bounded pass over the retained files for all of them (a record may exist there).
    if (this.opts.log)
      scanDecisionFiles(this.opts.log.retainedFiles(), (d) => {
        if (d.gid !== undefined) pending.delete(d.gid);
        return pending.size === 0;
      });
    for (const e of pending.values()) {
      const started = parseTimestamp(e.started_at);
      const finishedMs = Math.max(started, Math.floor(lastSeenMs));
      const text = isGenerationRoute(e.route);
      const reached = e.phase === 'dispatched' || e.phase === 'streaming';
      const record: TerminalRecord = {
        request_id: e.request_id,
        model: e.model,
        route: e.route,
        outcome: 'error',
        status_code: 0,
        started_at: e.started_at,
        finished_at: formatTimestamp(finishedMs),
        latency_ms: null,
        readiness_check_ms: null,
        admission_wait_ms: null,
        upstream_duration_ms: null,
        time_to_first_content_ms: null,
        finish_reason: text && reached ? 'unknown' : null,
        usage: { prompt_tokens: null, completion_tokens: null, prompt_source: 'unknown', completion_source: 'unknown' },
        output_limit: null,
      };
      if (e.session_id) record.session_id = e.session_id;
      if (e.workbench_run_id) record.workbench_run_id = e.workbench_run_id;
      if (e.task_id) record.task_id = e.task_id;
      // The process that ran it wrote its identity into the journal.
      if (e.routing_config_hash) record.routing_config_hash = e.routing_config_hash;
      if (e.package_version) record.package_version = e.package_version;
      this.opts.log?.append(e.gateway_request_id, record);
      this.hold(e.gateway_request_id, record, finishedMs);
      // Its process died before counting it: counted here, so that metrics and records agree.
      this.opts.onFinish?.(record, false);
    }
    // Written now, or the start fails: the journal is the only other trace of these requests.
    this.opts.log?.flush();
    // Each one an operator can find by its id, once written (the first 100; the rest counted).
    let lines = 0;
    for (const e of pending.values()) {
      if (lines++ >= 100) break;
      this.opts.logger?.info(
        { gateway_request_id: e.gateway_request_id, model: e.model, outcome: 'error', status: 0 },
        'request finished',
      );
    }
    if (pending.size > 100)
      this.opts.logger?.info(
        { skipped: pending.size - 100 },
        'request lines left out (rate bound); every routed request has its terminal record',
      );
    this.changed();
    return pending.size;
  }

  /** Writes the decisions queued for the log; called before anything hands a record out. */
  private persist(): void {
    // A failure is reported by the log itself (rate-bounded) and retried; the records stay in memory.
    this.opts.log?.flushQuietly();
  }

  /**
   * The terminal record for an id: a generated `req_` id matches only generated ids (the
   * namespace is reserved, even after eviction); any other id matches the newest record
   * whose `request_id` carries it. Memory first, then the retained files.
   */
  async lookup(id: string): Promise<TerminalRecord | undefined> {
    this.persist();
    const reserved = GENERATED_ID_RE.test(id);
    if (reserved) {
      const slot = this.ring.slotOf(id);
      if (slot !== undefined) return this.ring.record(slot);
    } else {
      for (const slot of this.ring.newestFirst())
        if (this.ring.requestId(slot) === id && this.ring.gid(slot) !== id) return this.ring.record(slot);
    }
    let found: TerminalRecord | undefined;
    // Only the lines naming the id are read (ids are written literally).
    if (this.opts.log)
      await scanDecisionFilesAsync(
        this.opts.log.retainedFiles(),
        (d) => {
          if (reserved ? d.gid === id : d.record.request_id === id && d.gid !== id) {
            found = d.record;
            return true;
          }
          return false;
        },
        { needle: id },
      );
    return found;
  }

  /** Retained terminal records of a session, newest first, at most 50, with truncation. */
  session(sessionId: string): Promise<{ requests: TerminalRecord[]; truncation: Truncation }> {
    return this.history('session_id', sessionId);
  }

  /**
   * Retained terminal records whose lineage member `key` (session, task or workbench run) is
   * `value`, newest first, at most 50, with truncation.
   */
  async history(key: LineageKey, value: string): Promise<{ requests: TerminalRecord[]; truncation: Truncation }> {
    this.persist();
    const seen = new Set<string>();
    const out: TerminalRecord[] = [];
    let matched = 0;
    const visit = (d: Decision): void => {
      if (d.record[key] !== value) return;
      const k = `${d.gid ?? ''}|${d.record.request_id}|${d.record.finished_at}`;
      if (seen.has(k)) return;
      seen.add(k);
      matched++;
      out.push(d.record);
      // Only the newest 50 are answered: the list is cut back now and then, so that a
      // session of many thousand records does not hold them all while the scan runs.
      if (out.length >= 4 * MAX_LOOKUP_RECORDS) newestFirst(out).length = MAX_LOOKUP_RECORDS;
    };
    // Records are written with their members in one order and opaque ids literally, so the
    // member as the writer spells it finds every candidate line or slot.
    const needle = `"${key}":"${value}"`;
    const bytes = Buffer.from(needle, 'utf8');
    for (const slot of this.ring.newestFirst()) {
      // Only the matching records are parsed (sessions by their column, the others by their text).
      const candidate =
        key === 'session_id' ? this.ring.sessionId(slot) === value : this.ring.textIncludes(slot, bytes);
      if (candidate) visit({ gid: this.ring.gid(slot), record: this.ring.record(slot) });
    }
    const { truncated } = this.opts.log
      ? await scanDecisionFilesAsync(this.opts.log.retainedFiles(), (d) => void visit(d), { needle })
      : { truncated: false };
    const requests = newestFirst(out).slice(0, MAX_LOOKUP_RECORDS);
    // Records that are gone (evicted without a log, rotated out of it) may have been this
    // session's: then how many were left out is unknown, not the count of those still here.
    const unknown =
      truncated ||
      this.recordsLost ||
      this.opts.log?.recordsDeleted === true ||
      this.opts.log?.recordsMayBeMissing === true;
    return { requests, truncation: { returned: requests.length, omitted: unknown ? null : matched - requests.length } };
  }

  /**
   * The terminal records that finished last, from memory only: the newest `finished_at`
   * first, at most 50; `omitted` counts the buffered others (exact: the buffer is in memory).
   * Records only the decision log still holds are not recent; a lookup by id or lineage finds them.
   */
  recent(): { requests: TerminalRecord[]; truncation: Truncation } {
    this.persist();
    const requests = this.ring.latestFinished(MAX_LOOKUP_RECORDS).map((slot) => this.ring.record(slot));
    return { requests, truncation: { returned: requests.length, omitted: this.ring.size - requests.length } };
  }

  /** Requests in flight (oldest first), at most 50, with truncation. */
  activeSummaries(now = Date.now()): { requests: ActiveSummary[]; truncation: Truncation } {
    const all = [...this.active.values()];
    const requests = all.slice(0, MAX_LOOKUP_RECORDS).map((a) => summarize(a, now));
    return { requests, truncation: { returned: requests.length, omitted: all.length - requests.length } };
  }

  /**
   * The router owner's window for its actor: active requests and the newest buffered
   * terminal ones up to `cap`; `omitted` counts buffered terminal records of the last day
   * left out (an exact count: the buffer is in memory).
   */
  workloadRecords(now: number, cap: number): { records: WorkloadRecord[]; omitted: number | null } {
    this.persist();
    const records: WorkloadRecord[] = [];
    for (const a of this.active.values()) records.push(mapActiveRequest(this.opts.host, a, now));
    let omitted = 0;
    const horizon = now - WINDOW_MS;
    // Newest first; a slot's workload record is built once (a finished request never changes).
    const ring = this.ring;
    const map = (gid: string, r: TerminalRecord): WorkloadRecord => mapTerminalRequest(this.opts.host, gid, r);
    for (const slot of ring.newestFirst()) {
      if (ring.finishedMs(slot) < horizon) break;
      if (records.length < cap) records.push(ring.workload(slot, map));
      else omitted++;
    }
    // Terminal records of the day that the ring no longer holds: their number is not kept.
    return { records, omitted: this.outsideNewestMs >= horizon ? null : omitted };
  }
}

/** The router owner's reading for its actor: the registry's window, bounded as published. */
export function routerReading(registry: RouterRegistry, now: number, cap: number): OwnerReading {
  const { records, omitted } = registry.workloadRecords(now, cap);
  return { status: 'complete', records, omittedBefore: omitted ?? 0, countUnknown: omitted === null, bounded: true };
}

/** The one log line about a failed decision-log write: the error's name and code, nothing of the records. */
export function logWriteError(logger: Logger | undefined, err: unknown, records?: number): void {
  logger?.error(
    { err, ...(records !== undefined ? { records } : {}) },
    'decision log write failed; the records stay in memory and are written once the log can be written again',
  );
}

/** `records` sorted in place, newest finish first; returned. */
function newestFirst(records: TerminalRecord[]): TerminalRecord[] {
  return records.sort((a, b) => parseTimestamp(b.finished_at) - parseTimestamp(a.finished_at));
}

function summarize(a: ActiveRequest, now: number): ActiveSummary {
  const s: ActiveSummary = {
    request_id: a.requestId,
    model: a.model,
    route: a.route,
    phase: a.phase,
    started_at: new Date(a.startedAt).toISOString(),
    elapsed_ms: Math.max(0, now - a.startedAt),
    since_upstream_activity_ms: a.lastUpstreamAt === null ? null : Math.max(0, now - a.lastUpstreamAt),
    // Still queued: the wait so far.
    admission_wait_ms: a.admissionWaitMs ?? (a.queuedAt !== null ? Math.max(0, now - a.queuedAt) : null),
    tokens: {
      prompt_estimated: a.estimatedPromptTokens,
      completion_estimated: a.estimatedCompletionTokens,
      prompt_upstream: a.upstreamPromptTokens,
      completion_upstream: a.upstreamCompletionTokens,
    },
  };
  if (a.sessionId) s.session_id = a.sessionId;
  return s;
}
