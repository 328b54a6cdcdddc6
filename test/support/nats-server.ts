import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './free-port.js';

/** A running disposable nats-server bound to 127.0.0.1. */
export interface NatsServerHandle {
  readonly url: string;
  readonly port: number;
  /** The server's process ID (benchmarks read its CPU time and memory from /proc). */
  readonly pid: number | undefined;
  /** SIGTERM, SIGKILL after 3 s, then removes the store directory. */
  stop(): Promise<void>;
  /** Stops the process and starts it again on the same port and store directory. */
  restart(): Promise<void>;
  /** SIGKILL, as a crash or a lost machine: no goodbye to clients or routes (restart() brings it back). */
  kill(): Promise<void>;
}

export interface NatsServerOptions {
  /** nats-server configuration text, passed with `-c`; address and port still come from flags. */
  readonly configText?: string;
  readonly port?: number;
  /** A configuration file used where it lies (its `include`s are relative to it); instead of configText. */
  readonly configFile?: string;
  /** nats-server's environment: the `$VAR`s (passwords, route and leaf URLs) its configuration names. */
  readonly env?: Record<string, string>;
  /** JetStream with a store directory (default true). */
  readonly jetstream?: boolean;
  /** Also serve nats-server's monitoring endpoints (connz, routez, leafz) on this loopback port. */
  readonly monitorPort?: number;
}

const READY_TIMEOUT_MS = 5_000;
const KILL_AFTER_MS = 3_000;
const OUTPUT_TAIL = 4_096;

// A test that crashes before stop() must not leave servers behind.
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Starts a nats-server with JetStream on a free (or the given) port. Thrown when: nats-server is not installed, or it exits or is not listening within 5 s. */
export async function startNatsServer(opts: NatsServerOptions = {}): Promise<NatsServerHandle> {
  const bin = await findNatsServer();
  const port = opts.port ?? (await freePort());
  const storeDir = await mkdtemp(join(tmpdir(), 'svc-nats-'));
  const args = ['-a', '127.0.0.1', '-p', String(port), ...(opts.jetstream === false ? [] : ['-js', '-sd', storeDir])];
  if (opts.monitorPort !== undefined) args.push('-m', String(opts.monitorPort));
  if (opts.configFile !== undefined) {
    args.unshift('-c', opts.configFile);
  } else if (opts.configText !== undefined) {
    const file = join(storeDir, 'nats.conf');
    await writeFile(file, opts.configText, { mode: 0o600 });
    // Command-line flags override the file, so address, port and store stay ours.
    args.unshift('-c', file);
  }
  let child: ChildProcess;
  try {
    child = await launch(bin, args, port, opts.env);
  } catch (err) {
    await rm(storeDir, { recursive: true, force: true });
    throw err;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    get pid() {
      return child.pid;
    },
    async stop() {
      await terminate(child);
      await rm(storeDir, { recursive: true, force: true });
    },
    async restart() {
      await terminate(child);
      child = await launch(bin, args, port, opts.env);
    },
    async kill() {
      if (exited(child)) return;
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGKILL');
      await gone;
    },
  };
}

/** Thrown when: no executable nats-server on PATH or in /usr/sbin (the message says how to install it). */
async function findNatsServer(): Promise<string> {
  const dirs = (process.env['PATH'] ?? '').split(delimiter).filter((d) => d.length > 0);
  for (const dir of [...dirs, '/usr/sbin', '/usr/local/sbin', '/usr/local/bin']) {
    const candidate = join(dir, 'nats-server');
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here; keep looking
    }
  }
  throw new Error(
    'nats-server not found on PATH or in /usr/sbin: run `apt-get install -y nats-server` (integration tests need it and are never skipped)',
  );
}

/** Spawns and waits for the TCP port; a server that lost a race for the port is retried once. */
async function launch(bin: string, args: string[], port: number, env?: Record<string, string>): Promise<ChildProcess> {
  try {
    return await launchOnce(bin, args, port, env);
  } catch (err) {
    await sleep(200);
    try {
      return await launchOnce(bin, args, port, env);
    } catch {
      throw err;
    }
  }
}

async function launchOnce(
  bin: string,
  args: string[],
  port: number,
  env?: Record<string, string>,
): Promise<ChildProcess> {
  // Secrets reach nats-server by its environment only (its configuration names `$VAR`s).
  const child = spawn(bin, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(env ? { env: { PATH: process.env['PATH'] ?? '', ...env } } : {}),
  });
  live.add(child);
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString('utf8')).slice(-OUTPUT_TAIL);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let spawnError: Error | undefined;
  child.once('error', (err) => {
    spawnError = err;
  });
  child.once('exit', () => live.delete(child));
  // The test's own handles decide when the process may exit, not the server's pipes.
  child.unref();
  (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
  (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (spawnError !== undefined || exited(child)) {
      throw new Error(`nats-server exited before listening on ${port} (code ${child.exitCode}):\n${output}`, {
        cause: spawnError,
      });
    }
    if (await accepts(port)) return child;
    if (Date.now() > deadline) {
      await terminate(child);
      throw new Error(`nats-server not listening on ${port} after ${READY_TIMEOUT_MS} ms:\n${output}`);
    }
    await sleep(50);
  }
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

async function terminate(child: ChildProcess): Promise<void> {
  if (exited(child)) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), KILL_AFTER_MS);
  });
  const outcome = await Promise.race([gone.then(() => 'gone' as const), late]);
  clearTimeout(timer);
  if (outcome === 'late') {
    child.kill('SIGKILL');
    await gone;
  }
  live.delete(child);
}
