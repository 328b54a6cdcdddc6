import { pino, type Logger } from 'pino';

/**
 * The one root logger of a process (JSON lines on stdout). Components take
 * `child({ component })`. Credentials never reach a log call; the redaction below is a second
 * line of defence for headers, not the first.
 */
export function createLogger(name: string, level = process.env['SVC_LOG_LEVEL'] ?? 'info'): Logger {
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
