import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { startNatsServer, type NatsServerHandle } from './nats-server.js';
import { eventually } from './processes.js';

const DEPLOY = fileURLToPath(new URL('../../../deploy/', import.meta.url));

/** A server started from a shipped configuration, with its monitoring endpoint. */
export interface ShippedServer extends NatsServerHandle {
  readonly name: string;
  /** nats-server's monitoring endpoint (connz, routez, leafz), on loopback. */
  readonly monitorUrl: string;
}

/**
 * Random passwords for the given `$VAR` names, as an operator would export them. Each begins
 * with a letter: nats-server parses a variable's value as a configuration value, and one that
 * reads as a number (`2e5...`) stops it (docs/reference/nats.md).
 */
export function passwords(names: readonly string[]): Record<string, string> {
  return Object.fromEntries(names.map((n) => [n, `p${randomBytes(12).toString('hex')}`]));
}

/**
 * A copy of a shipped deploy/ folder in a temporary directory, where only addresses change.
 * Thrown when: a text to replace is not in the file (the shipped file changed: the test
 * would otherwise run a configuration of its own).
 */
export function copyShipped(folder: string): {
  dir: string;
  edit(file: string, from: string, to: string): void;
  remove(): void;
} {
  const dir = mkdtempSync(join(tmpdir(), `svc-${folder}-`));
  cpSync(join(DEPLOY, folder), dir, { recursive: true });
  return {
    dir,
    edit(file, from, to) {
      const path = join(dir, file);
      const text = readFileSync(path, 'utf8');
      if (!text.includes(from)) throw new Error(`deploy/${folder}/${file} no longer has ${JSON.stringify(from)}`);
      writeFileSync(path, text.replace(from, to), { mode: 0o600 });
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Starts one shipped configuration on free loopback ports (client port by flag, which overrides the file). */
export async function startShipped(
  name: string,
  configFile: string,
  env: Record<string, string>,
): Promise<ShippedServer> {
  const monitorPort = await freePort();
  const server = await startNatsServer({ configFile, env, jetstream: false, monitorPort });
  return { ...server, name, monitorUrl: `http://127.0.0.1:${monitorPort}` };
}

/** GET one of nats-server's monitoring endpoints. */
export async function monitor<T>(server: ShippedServer, path: string): Promise<T> {
  const res = await fetch(`${server.monitorUrl}${path}`);
  if (res.status !== 200) throw new Error(`${server.name} monitoring ${path}: ${res.status}`);
  return (await res.json()) as T;
}

/** Whether a connection whose client name is `connName` is on this server now. */
export async function holds(server: ShippedServer, connName: string): Promise<boolean> {
  try {
    const connz = await monitor<{ connections?: { name?: string }[] }>(server, '/connz?limit=1024');
    return (connz.connections ?? []).some((c) => c.name === connName);
  } catch {
    return false; // a dead server holds nothing
  }
}

export interface NatsCluster {
  readonly servers: readonly ShippedServer[];
  /** The passwords nats-server was given, by variable name (NODE_A_NATS_PASSWORD, ...). */
  readonly env: Readonly<Record<string, string>>;
  stop(): Promise<void>;
}

/**
 * deploy/nats-cluster (nats-1/2/3.conf and users.conf) on loopback: client, route and
 * monitoring ports free, the route URLs and passwords in nats-server's environment as the
 * files say. Resolves once every member has routes to the other two.
 */
export async function startShippedCluster(userPasswords: Record<string, string>): Promise<NatsCluster> {
  const copy = copyShipped('nats-cluster');
  const routePorts = [await freePort(), await freePort(), await freePort()];
  const routePassword = `p${randomBytes(12).toString('hex')}`;
  const env: Record<string, string> = { ...userPasswords, NATS_ROUTE_PASSWORD: routePassword };
  routePorts.forEach((p, i) => {
    env[`NATS_ROUTE_${i + 1}`] = `nats-route://route:${routePassword}@127.0.0.1:${p}`;
    copy.edit(`nats-${i + 1}.conf`, 'listen: 0.0.0.0:6222', `listen: 127.0.0.1:${p}`);
  });
  const servers: ShippedServer[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(servers.map((s) => s.stop()));
    copy.remove();
  };
  try {
    for (let i = 1; i <= 3; i++) servers.push(await startShipped(`nats-${i}`, join(copy.dir, `nats-${i}.conf`), env));
    await eventually(
      async () => {
        const routes = await Promise.all(servers.map((s) => monitor<{ num_routes: number }>(s, '/routez')));
        return routes.every((r) => r.num_routes === 2);
      },
      10_000,
      100,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { servers, env, stop };
}
