import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { natsUsers } from '../support/nats-permissions.js';
import { writeTestPolicy, type TestPolicy } from '../support/policy.js';
import { CLI, spawnNode, type RunningProcess } from '../support/processes.js';
import { rec } from '../support/records.js';

const ACTOR = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));

export interface SmallFleet {
  readonly dir: string;
  readonly policy: TestPolicy;
  readonly fleetUrl: string;
  /** Controller origins by host. */
  readonly controllers: Map<string, string>;
  /** Rewrites the records `host`'s manifest actor publishes (it re-reads them every 100 ms). */
  setRecords(host: string, natives: readonly string[]): void;
  /** Starts `host`'s controller and manifest actor (a host declared down comes up). */
  startHost(host: string): Promise<void>;
  /** Stops `host`'s controller and actor: the fleet finds it unreachable again. */
  stopHost(host: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A real fleet over one nats-server with per-host permissions: a controller per host in
 * `live` (each with a manifest actor publishing `natives` records), `down` hosts declared but
 * never started (unreachable), and `fleet serve` with node_timeout_ms 500.
 */
export async function startSmallFleet(live: readonly string[], down: readonly string[]): Promise<SmallFleet> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-dash-fleet-'));
  const policy = writeTestPolicy(dir);
  const hosts = [...live, ...down];
  const users = natsUsers(hosts);
  const nats: NatsServerHandle = await startNatsServer({ configText: users.configText });
  const procs: RunningProcess[] = [];
  const controllers = new Map<string, string>();
  const start = async (script: string, args: string[], env: Record<string, string>): Promise<RunningProcess> => {
    const p = await spawnNode(script, args, { env: { ...policy.env, ...env } });
    procs.push(p);
    return p;
  };
  const recordsFile = (host: string) => join(dir, `${host}-records.json`);
  const setRecords = (host: string, natives: readonly string[]) =>
    writeFileSync(recordsFile(host), JSON.stringify(natives.map((n) => rec(host, 'manifest', n, { at: Date.now() }))));
  const byHost = new Map<string, RunningProcess[]>();
  const startHost = async (host: string): Promise<void> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[node]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        `state_dir = "state-${host}"`,
      ].join('\n'),
    );
    const c = await start(CLI, ['controller', 'serve', '--config', cfg], {
      NODE_NATS_PASSWORD: users.passwords[host]!,
    });
    controllers.set(host, c.url);
    setRecords(host, [`${host}-model`]);
    const actor = await start(ACTOR, [], {
      NATS_URL: nats.url,
      NATS_USER: host,
      NATS_PASS: users.passwords[host]!,
      HOST_ID: host,
      OWNER: 'manifest',
      RECORDS_FILE: recordsFile(host),
      POLL_MS: '100',
      STALE_MS: '60000',
    });
    byHost.set(host, [c, actor]);
  };
  const stopHost = async (host: string): Promise<void> => {
    await Promise.all((byHost.get(host) ?? []).map((p) => p.stop()));
    byHost.delete(host);
  };
  try {
    for (const host of live) await startHost(host);
    const cfg = join(dir, 'fleet.toml');
    writeFileSync(
      cfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'nats_user = "fleet"',
        'nats_password_env = "FLEET_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 500',
        '',
        ...hosts.flatMap((h) => ['[[nodes]]', `host_id = "${h}"`, '']),
      ].join('\n'),
    );
    const fleet = await start(CLI, ['fleet', 'serve', '--config', cfg], {
      FLEET_NATS_PASSWORD: users.passwords['fleet']!,
    });
    return {
      dir,
      policy,
      fleetUrl: fleet.url,
      controllers,
      setRecords,
      startHost,
      stopHost,
      async stop() {
        await Promise.all(procs.map((p) => p.stop()));
        await nats.stop();
      },
    };
  } catch (err) {
    await Promise.all(procs.map((p) => p.stop()));
    await nats.stop();
    throw err;
  }
}
