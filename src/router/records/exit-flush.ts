/** What is written out at exit: a log with queued records. */
export interface ExitFlushed {
  flushQuietly(force: boolean): void;
}

/** Logs with queued records, written out synchronously if the process exits (a crash included). */
const queued = new Set<ExitFlushed>();
let hookInstalled = false;

/** Puts `log` among those written out at exit (the exit hook is installed once). */
export function flushAtExit(log: ExitFlushed): void {
  queued.add(log);
  if (hookInstalled) return;
  hookInstalled = true;
  process.on('exit', () => {
    // A copy: a log whose write fails again re-enters the set (its retry), which must not loop here.
    for (const l of [...queued]) l.flushQuietly(true);
  });
}

/** Takes `log` off that list (written, or closed). */
export function forgetAtExit(log: ExitFlushed): void {
  queued.delete(log);
}
