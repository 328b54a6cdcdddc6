import { existsSync, lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type { Logger } from 'pino';
import type { RouterConfig } from '../config/router-config.js';
import type { TerminalRecord } from '../schema/terminal-record.js';
import { pathFailure } from '../errors.js';
import { PACKAGE_VERSION } from '../version.js';
import { RouterMetrics } from './metrics.js';
import { DecisionLog } from './records/decision-log.js';
import { InflightJournal, lockDecisionLog } from './records/inflight.js';
import { RouterRegistry, logWriteError } from './records/router-registry.js';
import type { RequestTrace } from '../telemetry/trace-context.js';

/*
 * The router's records at start: its decision log (locked to this process), the registry
 * restored from it, the metrics over it, and the in-flight journal beside it.
 */

/**
 * `path` with every symbolic link resolved: the file's, when it exists; a link whose target
 * does not exist yet, its target's (the file the log will be made as); else its folder's
 * plus its name.
 */
function canonicalPath(path: string, depth = 0): string {
  try {
    return realpathSync(path);
  } catch {
    // not there (yet), or a dangling link
  }
  try {
    if (depth < 16 && lstatSync(path).isSymbolicLink())
      return canonicalPath(resolve(dirname(path), readlinkSync(path)), depth + 1);
  } catch {
    // no such path at all
  }
  try {
    return join(realpathSync(dirname(path)), basename(path));
  } catch {
    return path;
  }
}

export interface RouterRecords {
  readonly registry: RouterRegistry;
  readonly metrics: RouterMetrics;
  readonly decisionLog: DecisionLog | undefined;
  /** The identity journal lines carry (a reload changes its hash). */
  readonly identity: { routing_config_hash: string; package_version: string };
  /** Stops the journal (a graceful stop leaves none behind). */
  stopJournal(): void;
  /** Stops the journal, closes the log (its last records written), then releases the lock. */
  close(): void;
}

/**
 * Opens the decision log (when configured), restores the registry's window from it, records
 * the requests a killed predecessor left in its journal, and starts this process's journal.
 * Thrown when: the log cannot be locked, opened or written (ConfigError for a path the
 * configuration got wrong).
 */
export function openRouterRecords(
  cfg: RouterConfig,
  log: Logger,
  queueDepth?: (alias: string) => number,
  /** Makes a request's span from its terminal record (only when traces are exported). */
  span?: (record: TerminalRecord, trace: RequestTrace) => void,
): RouterRecords {
  const opened = cfg.decisionLog ? openDecisionLog(cfg.decisionLog, log) : undefined;
  const decisionLog = opened?.decisionLog;
  let metrics: RouterMetrics | undefined;
  const registry = new RouterRegistry({
    host: cfg.hostId,
    bufferSize: cfg.bufferSize,
    log: decisionLog,
    logger: log,
    onFinish: span
      ? (record, streamed, trace) => {
          metrics?.finished(record, streamed);
          if (trace !== undefined) span(record, trace);
        }
      : (record, streamed) => metrics?.finished(record, streamed),
  });
  metrics = new RouterMetrics(
    registry,
    cfg.models.map((m) => m.alias),
    queueDepth ? { queueDepth } : {},
  );
  // A journal left behind: the last router on this log was killed, and its requests of the
  // last moments may have no record at all (known before the window is restored from the log).
  if (decisionLog && existsSync(`${decisionLog.path}.inflight`)) decisionLog.markUnclean();
  // After a restart the window holds what it held before (the decision log's last day), and
  // requests the previous process died with get the one record they never had.
  const restored = registry.restore();
  if (restored > 0) log.info({ records: restored }, 'terminal records restored from the decision log');
  const identity = { routing_config_hash: cfg.routingConfigHash, package_version: PACKAGE_VERSION };
  let stopJournal = decisionLog ? startJournal(decisionLog, registry, identity, log, opened!.unlock) : undefined;
  return {
    registry,
    metrics,
    decisionLog,
    identity,
    stopJournal() {
      // The last queued records may still rotate the log as it closes: the journal is gone by
      // then (a graceful stop leaves none behind), so no rotation rewrites it.
      stopJournal?.();
      stopJournal = undefined;
    },
    close() {
      this.stopJournal();
      decisionLog?.close();
      opened?.unlock();
    },
  };
}

/** Opens and locks the decision log. Thrown when: locked by another router, or not writable. */
function openDecisionLog(
  c: NonNullable<RouterConfig['decisionLog']>,
  log: Logger,
): { decisionLog: DecisionLog; unlock: () => void } {
  // One log, one name: a path that reaches the log through a symbolic link is the log's own
  // path (two routers naming one file two ways must meet at one lock).
  const logPath = canonicalPath(c.path);
  let unlock = lockDecisionLog(logPath);
  const decisionLog = new DecisionLog(logPath, c.maxBytes, c.maxFiles, (err, n) => logWriteError(log, err, n));
  // The log's file or folder was removed under the router and made again: so is its lock, or
  // a second router could start on this log. A lock another live router took meanwhile is
  // reported, not fought over.
  decisionLog.onReopened = () => {
    try {
      const release = lockDecisionLog(logPath);
      const previous = unlock;
      unlock = () => {
        previous();
        release();
      };
    } catch (err) {
      log.error(
        { err },
        'decision log lock could not be taken again after its file was removed; another router process may be using this log',
      );
    }
  };
  try {
    decisionLog.open();
  } catch (err) {
    unlock();
    // A path the configuration got wrong (no permission, not a directory) is a configuration
    // error; a full disk or an I/O error is not (exit 1, not 2).
    throw pathFailure(err, 'router configuration: decision_log_path cannot be opened for writing');
  }
  return { decisionLog, unlock: () => unlock() };
}

/**
 * Records what a killed predecessor's journal names, then keeps this process's journal.
 * Returns its stop. Thrown when: those records cannot be written (the log is closed and
 * unlocked first).
 */
function startJournal(
  decisionLog: DecisionLog,
  registry: RouterRegistry,
  identity: { routing_config_hash: string; package_version: string },
  log: Logger,
  unlock: () => void,
): () => void {
  const journal = new InflightJournal(`${decisionLog.path}.inflight`, registry, log, identity, () =>
    decisionLog.flushQuietly(),
  );
  const left = InflightJournal.read(journal.path);
  let interrupted: number;
  try {
    interrupted = registry.recordInterrupted(left.entries, left.writtenAt);
  } catch (err) {
    decisionLog.close();
    unlock();
    throw pathFailure(err, 'router configuration: decision_log_path cannot be written');
  }
  if (interrupted > 0)
    log.warn({ records: interrupted }, 'requests in flight when the router last stopped recorded as errors');
  journal.write();
  journal.start();
  // Rotation may delete a finished request's record: the journal must not still name that
  // request, or a kill now would record it at the next start as one the router ended.
  decisionLog.onRotated = () => journal.write(true);
  // A request that began is named in the journal within the log's flush delay.
  const stopNudges = registry.onChange(() => journal.soon());
  return () => {
    decisionLog.onRotated = undefined;
    stopNudges();
    journal.stop();
  };
}
