import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI } from '../support/processes.js';
import type { DriverCase, DriverResult } from './in-process-driver.js';

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** Wall-clock milliseconds from spawn to exit. */
  readonly ms: number;
}

const DRIVER = fileURLToPath(new URL('./in-process-driver.js', import.meta.url));

// A fresh, empty home for the test processes, so no real ~/.svc-serving settings can leak in.
// Made on first use: the test runner also loads this file on its own.
let emptyHome: string | undefined;

/**
 * Runs the built CLI (dist/cli/main.js) as its own process with exactly `env` plus PATH, an
 * empty HOME and an empty SVC_SERVING_HOME (either may be overridden). Nothing else from the
 * test runner's environment is inherited: no proxy variables, no tokens.
 */
export function runCli(
  args: readonly string[],
  env: Record<string, string> = {},
  opts: { cwd?: string; timeoutMs?: number } = {},
): Promise<CliResult> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [CLI, ...args], {
    env: baseEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 40_000);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

/** The HOME every test CLI process gets (SVC_SERVING_HOME is `<home>/svc`). */
export function cliHome(): string {
  emptyHome ??= mkdtempSync(join(tmpdir(), 'svc-cli-home-'));
  return emptyHome;
}

function baseEnv(env: Record<string, string>): Record<string, string> {
  return { PATH: process.env['PATH'] ?? '', HOME: cliHome(), SVC_SERVING_HOME: join(cliHome(), 'svc'), ...env };
}

/**
 * Runs many command lines through the built main.js in ONE separate process (fuzz-driver.ts),
 * each with `env` plus its own variables. For matrices of usage and failure cases: a CLI
 * process costs about a CPU-second of module loading, a run in the driver a few ms. Exit
 * codes are the ones main() and the actions set; uncaught errors come back in `uncaught`.
 */
export function runCliBatch(cases: readonly DriverCase[], env: Record<string, string> = {}): Promise<DriverResult[]> {
  const child = spawn(process.execPath, [DRIVER], {
    env: { ...baseEnv(env), SVC_FUZZ_DRIVER: '1' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  child.stdin.end(JSON.stringify(cases));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) return reject(new Error(`driver exit ${code}: ${err.slice(0, 2000)}`));
      const results = JSON.parse(out) as DriverResult[];
      if (results.length !== cases.length) return reject(new Error('driver lost cases'));
      resolve(results);
    });
  });
}

/** True when the output looks like a stack trace or an uncaught error dump. */
export function looksLikeStackTrace(text: string): boolean {
  return /\n\s+at .+\(|^\s+at |Error:.*\n\s+at |node:internal|\.js:\d+:\d+/m.test(text);
}
