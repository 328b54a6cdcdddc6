/**
 * Child processes for bench/router.ts: start, wait until listening, read CPU time from
 * /proc, and stop every one of them, also when the bench fails or is interrupted.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Proc {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  url: string;
  /** Last few KiB of stderr and non-JSON stdout, for error messages. */
  tail(): string;
  exited(): boolean;
}

const children = new Set<Proc>();
const tempDirs = new Set<string>();

/** A temporary directory removed at exit, also when the bench is interrupted. */
export function removeAtExit(dir: string): void {
  tempDirs.add(dir);
}

/** Kills whatever is still running and removes the temporary directories (synchronous: safe in an 'exit' handler). */
export function killAllNow(): void {
  for (const p of children) {
    if (!p.exited()) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  children.clear();
  for (const d of tempDirs) {
    try {
      rmSync(d, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
  tempDirs.clear();
}

let hooked = false;
/** Installs exit and signal hooks so no child outlives the bench. */
export function installCleanup(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', killAllNow);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      killAllNow();
      process.exit(0);
    });
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
export async function stop(p: Proc, graceMs = 5_000): Promise<void> {
  if (!p.exited()) {
    const gone = new Promise<void>((resolve) => p.child.once('exit', () => resolve()));
    try {
      process.kill(p.pid, 'SIGTERM');
    } catch {
      // already gone
    }
    const t = setTimeout(() => {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, graceMs);
    await gone;
    clearTimeout(t);
  }
  children.delete(p);
}

export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((p) => stop(p)));
}

export interface SpawnOptions {
  readonly name: string;
  readonly args: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** Wait for a stdout JSON line with `url` and msg "listening" (our CLI, the bare relay). */
  readonly listenLine?: boolean;
  /** Or poll GET this URL until it answers 2xx. */
  readonly pollUrl?: string;
  readonly readyTimeoutMs?: number;
}

/** Starts `node ARGS...` (no shell, so the pid is the node process itself) and waits until it serves. */
export async function spawnNode(o: SpawnOptions): Promise<Proc> {
  const child = spawn(process.execPath, o.args as string[], {
    cwd: o.cwd,
    env: o.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tail = '';
  const keep = (s: string): void => {
    tail = (tail + s).slice(-4096);
  };
  let exitedFlag = false;
  let exitInfo = '';
  child.on('exit', (code, signal) => {
    exitedFlag = true;
    exitInfo = `exit code ${code ?? '-'} signal ${signal ?? '-'}`;
  });
  child.on('error', (err) => keep(`spawn error: ${err.message}\n`));
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', keep);
  if (child.pid === undefined) throw new Error(`${o.name}: could not spawn`);
  const p: Proc = {
    name: o.name,
    child,
    pid: child.pid,
    url: '',
    tail: () => tail,
    exited: () => exitedFlag,
  };
  children.add(p);

  let onUrl: ((url: string) => void) | undefined;
  const rl = createInterface({ input: child.stdout! });
  rl.on('line', (line) => {
    if (onUrl && line.startsWith('{')) {
      try {
        const v = JSON.parse(line) as { url?: unknown; msg?: unknown };
        if (v.msg === 'listening' && typeof v.url === 'string') {
          onUrl(v.url);
          return;
        }
      } catch {
        // not ours
      }
    }
    if (!line.startsWith('{')) keep(line + '\n');
  });

  const timeoutMs = o.readyTimeoutMs ?? 30_000;
  const ready = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${o.name}: not ready after ${timeoutMs} ms\n${tail}`)), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      reject(new Error(`${o.name}: exited before it was ready (${exitInfo})\n${tail}`));
    });
    const done = (url: string): void => {
      clearTimeout(timer);
      resolve(url);
    };
    if (o.listenLine)
      onUrl = (url) => {
        onUrl = undefined;
        done(url);
      };
    else if (o.pollUrl) {
      const target = o.pollUrl;
      const poll = (): void => {
        if (exitedFlag) return;
        httpGetOk(target).then((ok) => (ok ? done(new URL(target).origin) : setTimeout(poll, 100)));
      };
      setTimeout(poll, 200);
    } else done('');
  });
  p.url = await ready;
  return p;
}

function httpGetOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'GET', timeout: 1_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

/** A free loopback TCP port (for servers that cannot listen on port 0 and report it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

let clkTck = 0;
/** Clock ticks per second (`getconf CLK_TCK`, normally 100). */
export function ticksPerSecond(): number {
  if (clkTck === 0) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  return clkTck;
}

/** utime + stime of a whole process (all threads), in milliseconds, from /proc/<pid>/stat. */
export function cpuMs(pid: number): number {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the ")" closing comm start at field 3 (state); utime is 14, stime 15.
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / ticksPerSecond();
  } catch {
    return Number.NaN;
  }
}

/**
 * Runs one benchmark as a report, never a test: child processes are killed on exit, error or
 * signal; a stray rejection is reported, not fatal; `body` gets a fresh temporary directory
 * (removed afterwards); a failure is printed as `<name> failed: ...`; the exit code is 0
 * whatever happened, and nothing left open keeps the process alive after the report.
 */
export async function runBench(name: string, body: (tmp: string) => Promise<void>): Promise<void> {
  installCleanup();
  process.on('unhandledRejection', (err) =>
    process.stderr.write(`unhandled rejection: ${(err as Error)?.message ?? String(err)}\n`),
  );
  let tmp: string | undefined;
  try {
    tmp = mkdtempSync(join(tmpdir(), `svc-bench-${name.replace(/[^a-z0-9]+/gi, '-')}-`));
    removeAtExit(tmp);
    await body(tmp);
  } catch (err) {
    process.stdout.write(`${name} bench failed: ${(err as Error)?.message ?? String(err)}\n`);
  } finally {
    await stopAll().catch(() => undefined);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
    process.exitCode = 0;
  }
  setTimeout(() => process.exit(0), 1_000).unref();
}
