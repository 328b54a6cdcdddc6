import { isIP } from 'node:net';
import type { Logger } from 'pino';
import { ConfigError, SvcError } from '../errors.js';
import { createLogger, flushLogger } from '../logger.js';

export interface Closable {
  close(): Promise<void>;
}

/** Exit codes of server commands. */
export const EXIT = { ok: 0, failure: 1, usage: 2, snapshot: 4, interrupted: 130 } as const;

/**
 * Runs a long-lived server command: starts it, then on SIGTERM or SIGINT closes its
 * listeners, flushes the log and exits 0. A start-up failure prints one fixed line on stderr
 * (a ConfigError names the key or client, never a secret) and exits non-zero.
 */
export async function runServer(name: string, start: (logger: Logger) => Promise<Closable>): Promise<void> {
  let logger: Logger;
  try {
    logger = createLogger(`svc-serving ${name}`);
  } catch (err) {
    // No logger to say it with: the one fixed line, as for any other start-up failure.
    process.stderr.write(`svc-serving ${name}: ${describeStartError(err).line}\n`);
    process.exit(EXIT.usage);
  }
  // SIGHUP re-reads what the server can re-read (a TLS certificate, the router's [[models]]),
  // whose own listeners act on it; with nothing to re-read it is noted, never the default
  // action (which ends the process: systemd's ExecReload sends it to every unit).
  const onHup = (): void => {
    if (process.listenerCount('SIGHUP') === 1) logger.info('SIGHUP received: nothing to re-read in this server');
  };
  process.on('SIGHUP', onHup);
  let handle: Closable;
  try {
    handle = await start(logger);
  } catch (err) {
    const { line, code } = describeStartError(err);
    logger.error({ err }, 'start failed');
    await flushLogger(logger);
    process.stderr.write(`svc-serving ${name}: ${line}\n`);
    process.exit(code);
  }
  let closing = false;
  const stop = (signal: string): void => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, 'stopping');
    const hardStop = setTimeout(() => process.exit(EXIT.failure), 10_000);
    hardStop.unref();
    handle
      .close()
      .catch((err: unknown) => logger.error({ err }, 'close failed'))
      .then(() => flushLogger(logger))
      .finally(() => process.exit(EXIT.ok));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

function describeStartError(err: unknown): { line: string; code: number } {
  if (err instanceof ConfigError) {
    // The loader names the first member the schema refuses; config check says why, for each.
    const why = /invalid member \S+$/.test(err.message) ? ' (svc-serving config check FILE says why)' : '';
    return { line: `invalid configuration: ${err.message}${why}`, code: EXIT.usage };
  }
  const sysCode = (err as { code?: unknown })?.code;
  // Which address, when the error says (`up` listens on three): the operator's own setting.
  const where = listenAddress(err);
  if (sysCode === 'EADDRINUSE')
    return {
      line: where ? `cannot listen: ${where} is in use` : 'cannot listen: the configured address is in use',
      code: EXIT.failure,
    };
  const syscall = (err as { syscall?: unknown })?.syscall;
  if (sysCode === 'EADDRNOTAVAIL' || (sysCode === 'EACCES' && (syscall === 'listen' || where !== undefined))) {
    return {
      line: where ? `cannot listen on ${where}` : 'cannot listen on the configured address',
      code: EXIT.failure,
    };
  }
  // A file or folder the process cannot use (permissions, a file where a folder belongs): named.
  const path = (err as { path?: unknown })?.path;
  if (
    typeof sysCode === 'string' &&
    typeof path === 'string' &&
    path.length < 4096 &&
    !/[\u0000-\u001f\u007f]/.test(path)
  ) {
    return {
      line: `cannot use ${path} (${sysCode === 'ENOTREG' ? 'not a regular file' : sysCode})`,
      code: EXIT.failure,
    };
  }
  if (err instanceof SvcError) return { line: `cannot start: ${err.message}`, code: EXIT.failure };
  return { line: 'cannot start (see the log)', code: EXIT.failure };
}

/** `HOST:PORT` of a listen error (node sets `address` and `port`), or undefined. */
function listenAddress(err: unknown): string | undefined {
  const { address, port } = (err ?? {}) as { address?: unknown; port?: unknown };
  if (typeof address !== 'string' || !isIP(address) || typeof port !== 'number' || !Number.isInteger(port))
    return undefined;
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}
