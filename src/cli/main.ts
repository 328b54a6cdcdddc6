#!/usr/bin/env node
/**
 * The `svc-serving` entry. It loads the program first, so that a program that cannot be
 * loaded (too few file descriptors for its modules, EMFILE; a damaged install) fails with one
 * line on stderr and exit 1, like any other start-up failure, not a stack trace.
 */
// Output nobody can take is no crash with a stack trace. A reader that went away (`| head`)
// is told nothing more, and the command ends as it would have; output that cannot be
// written (a full disk) is one fixed line and exit 1. Servers log through their own
// destination (pino), so this never stops one.
// Once per process (a test may evaluate this module many times in one).
const GUARDED = Symbol.for('svc-serving.output-guard');
const flags = globalThis as { [GUARDED]?: true };
if (!flags[GUARDED]) {
  flags[GUARDED] = true;
  let unwritable = false;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') return;
    if (!unwritable) {
      unwritable = true;
      const code = typeof err.code === 'string' && /^[A-Z][A-Z0-9_]{1,40}$/.test(err.code) ? ` (${err.code})` : '';
      process.stderr.write(`svc-serving: error: cannot write the output${code}\n`);
    }
    process.exitCode = 1;
  });
  process.stderr.on('error', () => {
    // Nowhere left to report anything.
  });
}

let run: ((argv: string[]) => Promise<void>) | undefined;
try {
  ({ main: run } = await import('./program.js'));
} catch (err) {
  const code = (err as { code?: unknown })?.code;
  // Node reports a module it could not open for want of descriptors as not found, too.
  const named = typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,40}$/.test(code) ? ` (${code})` : '';
  const why =
    code === 'EMFILE' || code === 'ENFILE'
      ? 'too many open files (raise the limit: ulimit -n)'
      : `the program could not be loaded${named}: check the open-file limit (ulimit -n) and the installation`;
  process.stderr.write(`svc-serving: error: cannot start: ${why}\n`);
  process.exitCode = 1;
}
if (run) void run(process.argv);
