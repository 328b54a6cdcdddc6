import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { startFleet, type FleetHandle } from '../../src/fleet/fleet.js';
import { connectNatsBus, type NatsBus } from '../../src/streams/nats-bus.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { serveDashboard } from '../dashboard/support.js';

/** GET with no credential (and a Host of our choosing); status, content type and parsed body. */
function get(url: string, host?: string): Promise<{ status: number; type: string; body: unknown }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, headers: host ? { host } : {} },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            type: String(res.headers['content-type'] ?? ''),
            body: text ? JSON.parse(text) : undefined,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('/healthz and /readyz on the controller and the fleet: no credential; readyz names nats while NATS is down and the store that cannot be read', () => {
  const logger = pino({ level: 'silent' });
  const p = writeTestPolicy();
  let nats: NatsServerHandle;
  let ctlBus: NatsBus;
  let fleetBus: NatsBus;
  let ctl: ControllerHandle;
  let fleet: FleetHandle;
  before(async () => {
    nats = await startNatsServer();
    ctlBus = await connectNatsBus({ servers: nats.url, logger });
    fleetBus = await connectNatsBus({ servers: nats.url, logger });
    ctl = await startController(
      {
        hostId: 'node-a',
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: p.dir,
      },
      { logger, env: p.env, bus: ctlBus },
    );
    fleet = await startFleet(
      {
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        nodeTimeoutMs: 300,
        nodes: [{ hostId: 'node-a', sleeping: false }],
      },
      { logger, env: p.env, bus: fleetBus },
    );
  });
  after(async () => {
    await fleet.close();
    await ctl.close();
    await ctlBus.close();
    await fleetBus.close();
    await nats.stop();
  });

  it('both answer 200 {"status":"ok"} as application/json while everything works', async () => {
    for (const base of [ctl.url, fleet.url]) {
      for (const path of ['/healthz', '/readyz']) {
        const r = await get(base + path);
        assert.equal(r.status, 200, `${base}${path}`);
        assert.match(r.type, /^application\/json/);
        assert.deepEqual(r.body, { status: 'ok' });
      }
    }
  });

  it('NATS down: readyz is 503 naming "nats" on both, healthz stays 200; back to ok once NATS is back', async () => {
    await nats.kill();
    for (const base of [ctl.url, fleet.url]) {
      await eventually(async () => {
        const r = await get(`${base}/readyz`);
        return r.status === 503 && JSON.stringify(r.body) === '{"status":"unready","failing":["nats"]}';
      }, 5000);
      assert.equal((await get(`${base}/healthz`)).status, 200);
    }
    await nats.restart();
    for (const base of [ctl.url, fleet.url])
      await eventually(async () => (await get(`${base}/readyz`)).status === 200, 10_000, 100);
  });

  it('a job store whose file is gone: the controller readyz names it', async () => {
    rmSync(ctl.jobs.paths.benchmark, { force: true });
    const r = await eventually(async () => {
      const x = await get(`${ctl.url}/readyz`);
      return x.status === 503 ? x : undefined;
    }, 3000);
    assert.deepEqual(r.body, { status: 'unready', failing: ['store:benchmark'] });
  });
});

describe('/healthz and /readyz on the dashboard: ready while it serves, no credential, behind its loopback Host guard', () => {
  let dash: RunningProcess;
  before(async () => {
    dash = await serveDashboard([]);
  });
  after(() => dash.stop());

  it('200 ok for both; a Host that does not name the server is refused like on every dashboard route', async () => {
    for (const path of ['/healthz', '/readyz']) {
      const r = await get(dash.url + path);
      assert.equal(r.status, 200);
      assert.match(r.type, /^application\/json/);
      assert.deepEqual(r.body, { status: 'ok' });
      const rebound = await get(dash.url + path, 'evil.example:80');
      assert.notEqual(rebound.status, 200);
    }
  });
});

describe('SIGHUP on a server with nothing to re-read (systemd ExecReload sends it to every unit)', () => {
  it('a controller without TLS keeps serving and says it had nothing to re-read', async () => {
    const p = writeTestPolicy();
    writeFileSync(
      join(p.dir, 'node.toml'),
      '[node]\nhost_id = "node-h"\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\n',
    );
    const ctl = await spawnNode(CLI, ['controller', 'serve', '--config', join(p.dir, 'node.toml')], { env: p.env });
    try {
      ctl.proc.kill('SIGHUP');
      await eventually(() => ctl.output().includes('nothing to re-read'));
      const r = await get(`${ctl.url}/healthz`);
      assert.equal(r.status, 200);
      assert.equal(ctl.proc.exitCode, null, 'still running');
    } finally {
      assert.equal(await ctl.stop(), 0);
    }
  });
});
