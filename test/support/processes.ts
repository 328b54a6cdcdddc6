import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

/** The built CLI, exactly as an installed `svc-serving` runs. */
export const CLI = fileURLToPath(new URL('../../../dist/cli/main.js', import.meta.url));

export interface RunningProcess {
  readonly proc: ChildProcess;
  /** The URL from the `listening` log line (empty for processes that do not listen). */
  readonly url: string;
  /** Everything written so far on stdout and stderr. */
  output(): string;
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/**
 * Spawns `node <script> ...args` and, when `waitForListening`, resolves once the process logs
 * `"msg":"listening"` with its URL. Thrown when: it exits first or takes over `timeoutMs`.
 */
export async function spawnNode(
  script: string,
  args: string[],
  opts: { env?: Record<string, string>; waitForListening?: boolean; timeoutMs?: number; cwd?: string } = {},
): Promise<RunningProcess> {
  const proc = spawn(process.execPath, [script, ...args], {
    ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
    env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '/tmp', ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) =>
    proc.once('exit', (code) => {
      live.delete(proc);
      resolve(code);
    }),
  );
  let url = '';
  if (opts.waitForListening ?? true) {
    const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
    for (;;) {
      const m = /"msg":"listening"[^\n]*?"url":"([^"]+)"|"url":"([^"]+)"[^\n]*?"msg":"listening"/.exec(out);
      if (m) {
        url = m[1] ?? m[2]!;
        break;
      }
      if (proc.exitCode !== null || Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`process did not start listening:\n${out.slice(-2000)}`);
      }
      await sleep(25);
    }
  }
  return {
    proc,
    url,
    output: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      proc.kill(signal);
      // Past the servers' own hard stop (10 s): a graceful stop that takes its 5 s grace is not cut.
      const t = setTimeout(() => proc.kill('SIGKILL'), 12_000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes. Thrown when: it never does. */
export async function eventually<T>(
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 5000,
  stepMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await sleep(stepMs);
  }
}
