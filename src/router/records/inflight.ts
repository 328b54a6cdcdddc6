import { closeSync, constants, existsSync, fstatSync, ftruncateSync, rmSync, statSync, writeSync } from 'node:fs';
import { openRegularFile, readRegularFile, writeNewFile } from '../../config/safe-files.js';
import type { Logger } from 'pino';
import type { ActiveRequest, RouterRegistry } from './router-registry.js';
import { ALIAS_PATTERN } from '../../config/router-config.js';
import { takeProcessLock } from '../../stores/process-lock.js';
import { jsonObjectLine } from './decision-lines.js';
import { DEFAULT_FLUSH_DELAY_MS } from './decision-log.js';
import { REQUEST_PHASES } from '../../actors/router-mapping.js';
import { formatTimestamp, parseTimestamp } from '../../schema/primitives.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE, ROUTES, type RouteName } from '../../schema/terminal-record.js';
import type { InflightEntry } from './inflight-entry.js';

/** The running router's identity, written with every journal entry. */
export interface RouterIdentity {
  readonly routing_config_hash: string;
  readonly package_version: string;
}

/** How often the journal is brought up to date while requests are in flight (their phases, and that they were alive). */
export const INFLIGHT_WRITE_MS = 1_000;
/**
 * A request that began is in the journal within this long: the decision log's own flush
 * delay, so that a `kill -9` loses no more of the requests in flight than of the records.
 */
export const INFLIGHT_SOON_MS = DEFAULT_FLUSH_DELAY_MS;

/**
 * The router's requests in flight, kept on disk beside the decision log
 * (`<decision_log_path>.inflight`, rewritten whole in place within INFLIGHT_SOON_MS of a
 * change, and once a second while requests are in flight: docs/decisions/0039). A router killed with
 * requests in flight cannot write their records; the next start finds them here and records
 * each as an `error` that the router ended (see RouterRegistry.recordInterrupted). A request
 * that began within the last INFLIGHT_SOON_MS before the kill may be missing from it, as a
 * record finished in that time may be missing from the decision log.
 */
export class InflightJournal {
  private written = -1;
  private timer: NodeJS.Timeout | undefined;
  private soonTimer: NodeJS.Timeout | undefined;
  /** Each request's line as last written, while the request lives. */
  private readonly lines = new WeakMap<ActiveRequest, { phase: string; line: string }>();
  private failed = false;
  /** Stopped: nothing writes the file again (a graceful stop removed it). */
  private stopped = false;
  /** The journal file, open for rewriting in place; undefined until the first write or after a failure. */
  private file: { fd: number; ino: number } | undefined;

  constructor(
    readonly path: string,
    private readonly registry: RouterRegistry,
    private readonly logger: Logger | undefined,
    private readonly identity?: RouterIdentity,
    /**
     * Runs before each write: the decision log's queued records go to disk first, so that a
     * request the journal stops naming (it finished) is always in one of the two files.
     */
    private readonly beforeWrite?: () => void,
  ) {}

  /**
   * A request began (or the set changed): the journal is written within INFLIGHT_SOON_MS,
   * once for all the changes in between. Before, a request was named only at the next
   * once-a-second write, and a `kill -9` in that second left it with no record at all,
   * though its client may already have held its id.
   */
  soon(): void {
    if (this.soonTimer !== undefined || this.stopped) return;
    this.soonTimer = setTimeout(() => {
      this.soonTimer = undefined;
      this.write();
    }, INFLIGHT_SOON_MS);
    this.soonTimer.unref();
  }

  /** Starts keeping the file up to date. */
  start(): void {
    this.timer ??= setInterval(() => this.write(), INFLIGHT_WRITE_MS);
    this.timer.unref();
  }

  /**
   * Writes the current set when it changed since the last write, and every time while
   * requests are in flight (the file's time is then the last moment they were known alive,
   * their phases current within a second). A failure is logged once.
   */
  write(force = false): void {
    if (this.stopped) return;
    const version = this.registry.activeVersion;
    if (!force && version === this.written && this.registry.active.size === 0) return;
    try {
      this.beforeWrite?.();
      let text = '';
      for (const a of this.registry.active.values()) text += this.lineOf(a);
      this.rewrite(Buffer.from(text));
      this.written = version;
      this.failed = false;
    } catch (err) {
      this.close();
      if (!this.failed) this.logger?.error({ err }, 'in-flight journal write failed');
      this.failed = true;
    }
  }

  /**
   * Replaces the file's content: written from its start, then cut to its new length, on one
   * open descriptor (a new file and a rename 50 times a second cost about a tenth of the
   * router's CPU). Until the cut, lines of the previous content may follow the new ones:
   * read() keeps a request's first line, and a request they name that has finished has its
   * record in the decision log already (flushed before each write). The file is made anew when
   * the path no longer names it (removed, or replaced by something else). Thrown when: it
   * cannot be made or written.
   */
  private rewrite(bytes: Buffer): void {
    let f = this.file;
    if (f !== undefined && statSync(this.path, { throwIfNoEntry: false })?.ino !== f.ino) {
      this.close();
      f = undefined;
    }
    if (f === undefined) {
      // Whatever is at the path (the last process's journal, a FIFO) is removed, never opened.
      writeNewFile(this.path, '');
      const fd = openJournal(this.path);
      f = this.file = { fd, ino: fstatSync(fd).ino };
    }
    let at = 0;
    while (at < bytes.length) at += writeSync(f.fd, bytes, at, bytes.length - at, at);
    ftruncateSync(f.fd, bytes.length);
  }

  private close(): void {
    const f = this.file;
    this.file = undefined;
    if (f === undefined) return;
    try {
      closeSync(f.fd);
    } catch {
      // closed already
    }
  }

  /** A request's journal line, made again only when its phase changed (the rest never does). */
  private lineOf(a: ActiveRequest): string {
    const cached = this.lines.get(a);
    if (cached !== undefined && cached.phase === a.phase) return cached.line;
    const e: InflightEntry = {
      gateway_request_id: a.gid,
      request_id: a.requestId,
      model: a.model,
      route: a.route,
      started_at: formatTimestamp(a.startedAt),
      phase: a.phase,
      ...(a.sessionId ? { session_id: a.sessionId } : {}),
      ...(a.workbenchRunId ? { workbench_run_id: a.workbenchRunId } : {}),
      ...(a.taskId ? { task_id: a.taskId } : {}),
      ...(this.identity ?? {}),
      // Begun before a reload: the configuration it runs on, not the one loaded since.
      ...(a.routingConfigHash !== undefined && this.identity ? { routing_config_hash: a.routingConfigHash } : {}),
    };
    const line = JSON.stringify(e) + '\n';
    this.lines.set(a, { phase: a.phase, line });
    return line;
  }

  /** Stops; after a graceful stop every request has its record, so the file goes. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    clearTimeout(this.soonTimer);
    this.soonTimer = undefined;
    if (this.registry.active.size === 0) rmSync(this.path, { force: true });
    else this.write();
    this.stopped = true;
    this.close();
    // Where an older version made each journal before renaming it.
    rmSync(`${this.path}.tmp`, { force: true });
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
      // A request named twice: the later line is what an interrupted rewrite left of the
      // content before it (InflightJournal.rewrite), the first one is current.
      const seen = new Set<string>();
      for (const line of readRegularFile(path).split('\n')) {
        const e = parseEntry(line);
        if (e && !seen.has(e.gateway_request_id)) {
          seen.add(e.gateway_request_id);
          entries.push(e);
        }
      }
      return { entries, writtenAt };
    } catch {
      return { entries: [], writtenAt: 0 };
    }
  }
}

/** Opens the journal just made at `path` for rewriting (a regular file, never waited on). */
function openJournal(path: string): number {
  return openRegularFile(path, constants.O_WRONLY);
}

const ROUTE_SET: ReadonlySet<string> = new Set(ROUTES);
const PHASE_SET: ReadonlySet<string> = new Set(REQUEST_PHASES);
// The alias grammar of the router configuration (and of the record's `model`).
const MODEL_RE = new RegExp(ALIAS_PATTERN);

function parseEntry(line: string): InflightEntry | undefined {
  const v = jsonObjectLine(line);
  if (!v) return undefined;
  const {
    gateway_request_id: gid,
    request_id: rid,
    model,
    route,
    started_at: at,
    phase,
    session_id: sid,
    workbench_run_id: run,
    task_id: task,
  } = v;
  const hash = v['routing_config_hash'];
  const version = v['package_version'];
  if (typeof gid !== 'string' || !GENERATED_ID_RE.test(gid)) return undefined;
  if (typeof rid !== 'string' || !(rid === gid || LEGACY_ID_RE.test(rid))) return undefined;
  if (typeof model !== 'string' || !MODEL_RE.test(model) || typeof route !== 'string' || !ROUTE_SET.has(route))
    return undefined;
  if (typeof at !== 'string' || Number.isNaN(parseTimestamp(at)) || typeof phase !== 'string' || !PHASE_SET.has(phase))
    return undefined;
  for (const opt of [sid, run, task])
    if (opt !== undefined && (typeof opt !== 'string' || !OPAQUE_ID_RE.test(opt))) return undefined;
  return {
    gateway_request_id: gid,
    request_id: rid,
    model,
    route: route as RouteName,
    started_at: at,
    phase,
    ...(typeof sid === 'string' ? { session_id: sid } : {}),
    ...(typeof run === 'string' ? { workbench_run_id: run } : {}),
    ...(typeof task === 'string' ? { task_id: task } : {}),
    // The identity is kept only when well formed; without it the record says "not recorded".
    ...(typeof hash === 'string' && HASH_RE.test(hash) ? { routing_config_hash: hash } : {}),
    ...(typeof version === 'string' && VERSION_RE.test(version) ? { package_version: version } : {}),
  };
}

const HASH_RE = /^[0-9a-f]{64}$/;
const VERSION_RE = /^[0-9A-Za-z.+-]{1,64}$/;

/**
 * One router process per decision log: `<decision_log_path>.lock` holds the owner's pid and
 * start time, created exclusively. A lock whose process is gone (a kill -9), or whose pid now
 * names another process (after a reboot or in a new container), is taken over. Without it a
 * second `router serve` on the same configuration (a mistaken start, or one started while
 * the old process is still in its graceful stop) would record the first one's live requests
 * as interrupted and rewrite its journal. Thrown when: another live process holds it
 * (ConfigError, naming the setting, not the path).
 */
export function lockDecisionLog(logPath: string): () => void {
  return takeProcessLock(`${logPath}.lock`, {
    busy: 'router configuration: decision_log_path is in use by another running router process',
    failed: 'router configuration: decision_log_path cannot be locked for writing',
    folder: 'router configuration: decision_log_path cannot be opened for writing',
  });
}
