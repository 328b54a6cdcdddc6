import { pino, type Logger } from 'pino';
import { ConfigError } from './errors.js';

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/**
 * `SVC_LOG_LEVEL` (any case; unset or empty is `info`).
 * Thrown when: it names no level (ConfigError naming the variable and the levels).
 */
export function logLevel(env: NodeJS.ProcessEnv): string {
  const v = (env['SVC_LOG_LEVEL'] ?? '').trim().toLowerCase();
  if (v === '') return 'info';
  if (!LEVELS.includes(v)) throw new ConfigError(`environment variable SVC_LOG_LEVEL must be one of ${LEVELS.join(', ')}`);
  return v;
}

/**
 * The one root logger of a process (JSON lines on stdout). Components take
 * `child({ component })`. Credentials never reach a log call; the redaction below is a second
 * line of defence for headers, not the first.
 */
export function createLogger(name: string, level = logLevel(process.env)): Logger {
  return pino({
    name,
    level,
    base: { pid: process.pid },
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'authorization'], censor: '[redacted]' },
  });
}

/** Flushes a logger before exit (pino's stdout destination may buffer). */
export function flushLogger(logger: Logger): Promise<void> {
  return new Promise((resolve) => {
    try {
      logger.flush(() => resolve());
    } catch {
      resolve();
    }
  });
}
