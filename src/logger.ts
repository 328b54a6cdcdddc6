import { pino, type Logger, type LoggerOptions } from 'pino';
import { ConfigError } from './errors.js';

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/**
 * `SVC_LOG_LEVEL` (any case; unset or empty is `info`).
 * Thrown when: it names no level (ConfigError naming the variable and the levels).
 */
export function logLevel(env: NodeJS.ProcessEnv): string {
  const v = (env['SVC_LOG_LEVEL'] ?? '').trim().toLowerCase();
  if (v === '') return 'info';
  if (!LEVELS.includes(v))
    throw new ConfigError(`environment variable SVC_LOG_LEVEL must be one of ${LEVELS.join(', ')}`);
  return v;
}

/**
 * pino's `err` serializer for every logger of ours: the error's `name`, and its `code` when it
 * has one; never its message, stack or cause (they may quote payloads, paths or credentials).
 * A thrown value that is not an object (a string) has neither: `{}`.
 */
export function serializeErr(err: unknown): { name?: unknown; code?: unknown } {
  if (err === null || err === undefined) return {};
  const { name, code } = err as { name?: unknown; code?: unknown };
  return code === undefined ? { name } : { name, code };
}

/**
 * What every pino logger of ours is made with, the root logger and tests' capture loggers
 * alike (child loggers inherit it): `err` goes through serializeErr, replacing pino's own
 * serializer, which writes the message and stack. Log `{ err }` with a message of its own:
 * without one (or with an error as the first argument) pino makes the error's message the line's.
 */
export const LOG_OPTIONS: Readonly<Pick<LoggerOptions, 'serializers'>> = Object.freeze({
  serializers: Object.freeze({ err: serializeErr }),
});

/**
 * The one root logger of a process (JSON lines on stdout). Components take
 * `child({ component })`. Credentials never reach a log call; the redaction below is a second
 * line of defence for headers, not the first.
 */
export function createLogger(name: string, level = logLevel(process.env)): Logger {
  return pino({
    ...LOG_OPTIONS,
    name,
    level,
    base: { pid: process.pid },
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'authorization'],
      censor: '[redacted]',
    },
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
