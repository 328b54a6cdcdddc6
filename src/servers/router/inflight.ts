import { existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { RouterRegistry } from '../../actors/router-registry.js';
import { REQUEST_PHASES } from '../../actors/router-mapping.js';
import { formatTimestamp } from '../../schema/primitives.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE, ROUTES, type RouteName } from '../../schema/terminal-record.js';

/** What the journal keeps of one request in flight: identifiers and timing, no content. */
export interface InflightEntry {
  readonly gateway_request_id: string;
  readonly request_id: string;
  readonly model: string;
  readonly route: RouteName;
  readonly started_at: string;
  readonly phase: string;
  readonly session_id?: string;
}

/** How often the journal is brought up to date while requests come and go. */
export const INFLIGHT_WRITE_MS = 1_000;

/**
 * The router's requests in flight, kept on disk beside the decision log
 * (`<decision_log_path>.inflight`, rewritten whole at most once a second when they changed,
 * by write-and-rename). A router killed with requests in flight cannot write their records;
 * the next start finds them here and records each as an `error` that the router ended (see
 * RouterRegistry.recordInterrupted). A request that began and died within the last second
 * before the kill may be missing from it.
 */
export class InflightJournal {
  private written = -1;
  private timer: NodeJS.Timeout | undefined;
  private failed = false;

  constructor(
    readonly path: string,
    private readonly registry: RouterRegistry,
    private readonly logger: Logger | undefined,
  ) {}

  /** Starts keeping the file up to date. */
  start(): void {
    this.timer ??= setInterval(() => this.write(), INFLIGHT_WRITE_MS);
    this.timer.unref();
  }

  /** Writes the current set when it changed since the last write; a failure is logged once. */
  write(): void {
    const version = this.registry.activeVersion;
    if (version === this.written) return;
    try {
      let text = '';
      for (const a of this.registry.active.values()) {
        const e: InflightEntry = {
          gateway_request_id: a.gid, request_id: a.requestId, model: a.model, route: a.route, started_at: formatTimestamp(a.startedAt), phase: a.phase,
          ...(a.sessionId ? { session_id: a.sessionId } : {}),
        };
        text += JSON.stringify(e) + '\n';
      }
      const tmp = `${this.path}.tmp`;
      writeFileSync(tmp, text, { mode: 0o600 });
      renameSync(tmp, this.path);
      this.written = version;
      this.failed = false;
    } catch (err) {
      if (!this.failed) this.logger?.error({ err: { name: (err as Error)?.name, code: (err as { code?: string })?.code } }, 'in-flight journal write failed');
      this.failed = true;
    }
  }

  /** Stops; after a graceful stop every request has its record, so the file goes. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.registry.active.size === 0) rmSync(this.path, { force: true });
    else this.write();
  }

  /**
   * What a previous process left: its entries (malformed lines skipped) and when the file was
   * last written (the last moment they were known to be in flight). Thrown when: never.
   */
  static read(path: string): { entries: InflightEntry[]; writtenAt: number } {
    if (!existsSync(path)) return { entries: [], writtenAt: 0 };
    try {
      const writtenAt = statSync(path).mtimeMs;
      const entries: InflightEntry[] = [];
      for (const line of readFileSync(path, 'utf8').split('\n')) {
        const e = parseEntry(line);
        if (e) entries.push(e);
      }
      return { entries, writtenAt };
    } catch {
      return { entries: [], writtenAt: 0 };
    }
  }
}

const ROUTE_SET: ReadonlySet<string> = new Set(ROUTES);
const PHASE_SET: ReadonlySet<string> = new Set(REQUEST_PHASES);
const MODEL_RE = /^[A-Za-z0-9._:/-]{1,128}$/;

function parseEntry(line: string): InflightEntry | undefined {
  if (line.length < 2) return undefined;
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object') return undefined;
  const { gateway_request_id: gid, request_id: rid, model, route, started_at: at, phase, session_id: sid } = v;
  if (typeof gid !== 'string' || !GENERATED_ID_RE.test(gid)) return undefined;
  if (typeof rid !== 'string' || !(rid === gid || LEGACY_ID_RE.test(rid))) return undefined;
  if (typeof model !== 'string' || !MODEL_RE.test(model) || typeof route !== 'string' || !ROUTE_SET.has(route)) return undefined;
  if (typeof at !== 'string' || Number.isNaN(Date.parse(at)) || typeof phase !== 'string' || !PHASE_SET.has(phase)) return undefined;
  if (sid !== undefined && (typeof sid !== 'string' || !OPAQUE_ID_RE.test(sid))) return undefined;
  return { gateway_request_id: gid, request_id: rid, model, route: route as RouteName, started_at: at, phase, ...(typeof sid === 'string' ? { session_id: sid } : {}) };
}
